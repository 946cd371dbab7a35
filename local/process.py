"""Running the local stack as a child process (end-to-end tests and benchmarks use this)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
    data_dir: Path | None = None
    log: Path | None = None  # every line it prints (JSON log lines too) is appended there when set
    output: list[str] = field(default_factory=list)  # the plain lines printed since READY
    printed: threading.Condition = field(default_factory=threading.Condition)
    closed: threading.Event = field(default_factory=threading.Event)  # its output ended (the process did)

    def wait_for(self, line: str, timeout: float = 30) -> None:
        """Wait until the stack has printed `line` (raises TimeoutError if it does not)."""
        with self.printed:
            if not self.printed.wait_for(lambda: line in self.output, timeout):
                raise TimeoutError(f"the local stack did not print {line!r} within {timeout} s")

    def _read(self, pipe: IO[str]) -> None:
        """Keep the pipe drained, and its plain lines at hand for `wait_for` (not the JSON log
        lines: a long benchmark writes one per request); every line, those too, goes to `log`."""
        with _appending(self.log) as kept:
            for line in pipe:
                if kept is not None:
                    kept.write(line)
                    kept.flush()  # a failing test reads it while the stack still runs
                if line.startswith("{"):
                    continue
                with self.printed:
                    self.output.append(line.rstrip("\n"))
                    self.printed.notify_all()
        self.closed.set()

    def emulator_pid(self) -> int:
        """The process id of its embedded AWS emulator (`python -m local.aws`)."""
        found = [pid for pid in children(self.process.pid) if b"local.aws" in _command_line(pid)]
        assert len(found) == 1, f"the stack runs {len(found)} emulators"
        return found[0]

    def stop(self) -> None:
        """Stop it the way a person's Ctrl-C or a service manager would (it compacts its journal)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


@contextmanager
def _appending(path: Path | None) -> Iterator[IO[str] | None]:
    """`path` opened for appending (its folder made), or None when there is no path."""
    if path is None:
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8", errors="replace") as handle:
        yield handle


def children(pid: int) -> list[int]:
    """The process ids `pid` started that are still its children (Linux's /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue  # the thread ended meanwhile
    return found


def ended(pid: int) -> bool:
    """Whether process `pid` has ended (gone, or a zombie nobody has reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def clean_environment() -> dict[str, str]:
    """This process's environment without its AWS and Workset settings: a child stack starts from
    its own."""
    return {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "WORKSET_"))}


def command(data_dir: Path, *args: str) -> list[str]:
    """The command line of a local stack on `data_dir`."""
    return [sys.executable, "-m", "local", "--data", str(data_dir), *args]


def environment(token: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """A child stack's environment: its own settings, `token` as its admin token, and `env`."""
    return {**clean_environment(), "WORKSET_ADMIN_TOKEN": token, "PYTHONUNBUFFERED": "1", **(env or {})}


def start(data_dir: Path, token: str, env: dict[str, str] | None = None, *args: str,
          new_session: bool = False, log: Path | None = None) -> RunningStack:
    """Start the stack on a free port with `token` as its admin token; wait until it is READY.
    `new_session`: it leads a process group of its own, as a shell's job does (a signal to the
    group reaches the stack and not its starter). `log`: a file that keeps all it prints (the
    app's log lines, a traceback), from its first line on."""
    process = subprocess.Popen(command(data_dir, "--port", "0", "--no-demo", *args), cwd=ROOT,
                               env=environment(token, env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=new_session)
    assert process.stdout is not None
    deadline = time.monotonic() + START_SECONDS
    seen = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("READY "):
            if log is not None:
                with _appending(log) as kept:
                    assert kept is not None
                    kept.writelines(seen)
            running = RunningStack(url=line.split()[1], token=token, process=process, data_dir=data_dir, log=log)
            threading.Thread(target=running._read, args=(process.stdout,), daemon=True).start()
            return running
    process.kill()
    with _appending(log) as kept:
        if kept is not None:
            kept.writelines(seen)
    raise RuntimeError("the local stack did not start:\n" + "".join(seen))
