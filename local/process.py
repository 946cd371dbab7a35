"""Running the local stack as a child process (end-to-end tests and benchmarks use this)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START_SECONDS = 60


@dataclass
class RunningStack:
    """A `python -m local` child: its base URL, admin token and process."""

    url: str
    token: str
    process: subprocess.Popen

    def stop(self) -> None:
        """Stop it the way a person's Ctrl-C or a service manager would (it compacts its journal)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start(data_dir: Path, token: str, env: dict[str, str] | None = None, *args: str) -> RunningStack:
    """Start the stack on a free port with `token` as its admin token; wait until it is READY."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "WORKSET_"))}
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
            threading.Thread(target=process.stdout.read, daemon=True).start()  # keep the pipe drained
            return RunningStack(url=line.split()[1], token=token, process=process)
    process.kill()
    raise RuntimeError("the local stack did not start:\n" + "".join(seen))
