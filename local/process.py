"""Running the local stack as a child process (end-to-end tests and benchmarks use this)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
START_SECONDS = 60


@dataclass
class RunningStack:
    """A `python -m local` child: its base URL, admin token and process, and what it printed."""

    url: str
    token: str
    process: subprocess.Popen
    output: list[str] = field(default_factory=list)  # the plain lines printed since READY
    printed: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, line: str, timeout: float = 30) -> None:
        """Wait until the stack has printed `line` (raises TimeoutError if it does not)."""
        with self.printed:
            if not self.printed.wait_for(lambda: line in self.output, timeout):
                raise TimeoutError(f"the local stack did not print {line!r} within {timeout} s")

    def _read(self, pipe: IO[str]) -> None:
        """Keep the pipe drained, and its plain lines at hand for `wait_for` (not the JSON log
        lines: a long benchmark writes one per request)."""
        for line in pipe:
            if line.startswith("{"):
                continue
            with self.printed:
                self.output.append(line.rstrip("\n"))
                self.printed.notify_all()

    def stop(self) -> None:
        """Stop it the way a person's Ctrl-C or a service manager would (it compacts its journal)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


def clean_environment() -> dict[str, str]:
    """This process's environment without its AWS and Workset settings: a child stack starts from
    its own."""
    return {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "WORKSET_"))}


def start(data_dir: Path, token: str, env: dict[str, str] | None = None, *args: str) -> RunningStack:
    """Start the stack on a free port with `token` as its admin token; wait until it is READY."""
    environment = clean_environment()
    environment.update(WORKSET_ADMIN_TOKEN=token, PYTHONUNBUFFERED="1", **(env or {}))
    process = subprocess.Popen(
        [sys.executable, "-m", "local", "--port", "0", "--no-demo", "--data", str(data_dir), *args],
        cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + START_SECONDS
    seen = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("READY "):
            running = RunningStack(url=line.split()[1], token=token, process=process)
            threading.Thread(target=running._read, args=(process.stdout,), daemon=True).start()
            return running
    process.kill()
    raise RuntimeError("the local stack did not start:\n" + "".join(seen))
