"""How the local stack holds its folder, starts its emulator and stops, however it was started.

A stop signal (SIGTERM from a service manager, SIGINT from Ctrl-C, SIGHUP from a closed
terminal) is blocked in every thread and taken by one thread's `sigwait`, which stops the stack
itself: it ends the emulator and then the process. It never asks the main thread to do it.
`_thread.interrupt_main()` raises KeyboardInterrupt only where SIGINT's handler is Python's own:
a script's `./dev up &` starts the stack with SIGINT ignored, and then it does nothing (the stack
ignored SIGTERM); and a main thread blocked in a read (waiting for the emulator's first line)
would not see it until the read returned. Stopping from that thread is safe because the app keeps
nothing of its own: the emulator journals every write before it answers (local/journal.py), so a
write the app acknowledged is on disk, and the emulator closes its journal under the lock every
write takes, so no write lands after. A second signal finds the stop under way and changes
nothing.

The emulator runs in a process group of its own, with its output read through this process: a
terminal's Ctrl-C or SIGHUP reaches the app alone, which stops the emulator in its turn (a
group-wide Ctrl-C used to end only the emulator and leave the app retrying it), and the emulator
never writes to a terminal it no longer belongs to. The emulator dies with the app (local/aws.py's
parent-death signal); the app stops, with one message, when the emulator ends: cleanly (exit 0)
when it was told to stop (a supervisor may signal every process of the stack at once), with a
failure when it died.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, NoReturn

ROOT = Path(__file__).resolve().parent.parent
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
STACK_LOCK = "stack.lock"
EMULATOR_STOP_SECONDS = 10.0  # then it is killed: every write it acknowledged is in the journal already


class Lifecycle:
    """The stack's one owner of its emulator process and of its stop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping = False
        self._emulator: subprocess.Popen | None = None
        self._folder: IO[str] | None = None
        self.on_stop: list[Callable[[], None]] = []  # quiet the workers before the emulator goes

    def take_signals(self) -> None:
        """Block the stop signals in this thread (every thread started later inherits the mask)
        and take them in one thread of their own; call before starting any other thread."""
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        threading.Thread(target=self._stop_on_signal, daemon=True, name="stop signals").start()

    def hold(self, data_dir: Path) -> None:
        """Hold the data folder for this stack's life; exit with a message if another stack holds it."""
        folder = (data_dir / STACK_LOCK).open("a+")
        try:
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            folder.seek(0)
            holder = folder.read().strip() or "unknown"
            folder.close()
            raise SystemExit(f"workset: another local stack (pid {holder}) is running on {data_dir}; stop it first, "
                             "or give this one a folder of its own with --data") from None
        folder.truncate(0)
        folder.write(str(os.getpid()))
        folder.flush()
        self._folder = folder  # kept open: the lock lasts as long as this process

    def start_emulator(self, data_dir: Path) -> str:
        """Start the embedded AWS emulator (local/aws.py) and answer its endpoint once it has
        restored the tables; from then on, its end stops the stack."""
        with self._lock:
            if self._stopping:
                _sleep_forever()  # the stop under way ends this process
            child = subprocess.Popen([sys.executable, "-m", "local.aws", str(data_dir), str(os.getpid())], cwd=ROOT,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, process_group=0)
            self._emulator = child
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("AWS "):
                threading.Thread(target=self._watch, args=(child, data_dir), daemon=True, name="emulator").start()
                return line.split()[1]
            _say(line)  # its own complaints (a traceback) before the end
        self._ended(child, data_dir, "did not start")

    def stop(self, code: int, message: str | None = None) -> NoReturn:
        """Stop the stack: say `message` on stderr, end the emulator (it closes its journal), exit
        with `code`. A second caller waits for the first one's exit."""
        with self._lock:
            if self._stopping:
                _sleep_forever()
            self._stopping = True
            emulator = self._emulator
        if message:
            print(message, file=sys.stderr, flush=True)
        for quiet in self.on_stop:
            quiet()
        if emulator is not None and emulator.poll() is None:
            emulator.terminate()
            try:
                emulator.wait(timeout=EMULATOR_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                emulator.kill()
                emulator.wait()
        sys.stdout.flush()
        sys.stderr.flush()
        # No interpreter teardown: the other threads may hold anything, and a large heap's teardown
        # takes seconds for nothing.
        os._exit(code)

    def _stop_on_signal(self) -> None:
        signal.sigwait(STOP_SIGNALS)
        self.stop(0)

    def _watch(self, child: subprocess.Popen, data_dir: Path) -> None:
        """Pass on what the emulator says, until its output ends: then it has ended, and unless
        this stack is stopping it, the stack cannot go on (every request would fail)."""
        assert child.stdout is not None
        for line in child.stdout:
            _say(line)
        self._ended(child, data_dir, "ended unexpectedly")

    def _ended(self, child: subprocess.Popen, data_dir: Path, what: str) -> NoReturn:
        """The emulator ended while this stack was not stopping it: stop, saying why."""
        code = child.wait()
        with self._lock:
            stopping = self._stopping
        if stopping:
            _sleep_forever()  # the stop under way ends this process
        if code == 0 or -code in STOP_SIGNALS:
            # told to stop, by a signal sent to it directly: a supervisor signalling every process
            # of the stack at once (a container's stop, systemd's control group), or a person
            self.stop(0, f"workset: the AWS emulator (pid {child.pid}) was stopped ({_how(code)}); "
                         "the stack stops too")
        self.stop(1, f"workset: the AWS emulator (python -m local.aws, pid {child.pid}) {what} ({_how(code)}), "
                     "so the stack stops: nothing could be stored. Every write it acknowledged is saved in "
                     f"{data_dir}; {'see its output above, then ' if code > 0 else ''}start the stack again "
                     "with ./dev up.")


def _how(code: int) -> str:
    """An exit code in words: `exit code 3`, or `killed by signal 9, SIGKILL`."""
    if code == 0:
        return "it closed its journal and exited"
    if code > 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"killed by signal {-code}"
    return f"killed by signal {-code}, {name}"


def _say(line: str) -> None:
    """Pass on a line of the emulator's on stderr."""
    try:
        sys.stderr.write(line)
    except (OSError, ValueError):
        pass  # nobody reads our stderr any more: keep draining, or the emulator would block writing


def _sleep_forever() -> NoReturn:
    threading.Event().wait()
    raise AssertionError("unreachable")
