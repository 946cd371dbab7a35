"""The local stack stops however it was started, and refuses what would break a running one.

SIGTERM, SIGINT and SIGHUP stop the app and its emulator together, with every acknowledged write
kept: from a terminal (Ctrl-C reaches the whole process group), in the background of a script
(SIGINT ignored, as a shell starts `cmd &`), under a supervisor (SIGTERM to the main pid only),
during startup, and under a burst of signals. A dead emulator stops the app with one clear
message; a dead app takes its emulator along. A second stack on the same folder, or a stack on a
taken port, refuses before it starts an emulator. The exit waits are hang guards only.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from local import process
from local.process import clean_environment
from tests.e2e.conftest import ADMIN_TOKEN, ROOT, Stack, start_stack, stop_stack

GUARD_SECONDS = 30  # hang guard only: no claim about how long stopping takes

# how it was started (its own process group?, SIGINT ignored?), and who is sent the signal
STARTS = {
    "supervisor-SIGTERM-to-pid": (False, False, signal.SIGTERM, "pid"),
    "terminal-Ctrl-C-to-group": (True, False, signal.SIGINT, "group"),
    "background-SIGTERM-to-pid": (False, True, signal.SIGTERM, "pid"),
    "background-Ctrl-C-to-group": (True, True, signal.SIGINT, "group"),
    "terminal-closed-SIGHUP-to-group": (True, False, signal.SIGHUP, "group"),
}


@pytest.mark.parametrize(("own_group", "sigint_ignored", "stop_signal", "to"), STARTS.values(), ids=STARTS.keys())
def test_a_stop_signal_stops_the_whole_stack_with_every_acknowledged_write(
        tmp_path: Path, own_group: bool, sigint_ignored: bool, stop_signal: int, to: str) -> None:
    # GIVEN a stack started this way, which acknowledged an agent, a tool and a promotion
    with _sigint_ignored(sigint_ignored):
        first = start_stack(tmp_path, new_session=own_group)
    with _killed_on_failure(first):
        emulator = first.running.emulator_pid()
        agent = first.new_agent()
        first.publish({"vendor": "keep", "name": "me", "description": "A tool.", "input_schema": {"type": "object"},
                       "annotations": {"readOnlyHint": True},
                       "request": {"method": "GET", "url": "http://127.0.0.1:9/x"}})
        status, _ = first.admin("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": "keep", "name": "me"})
        assert status == 201
    # WHEN the signal is sent to the stack's pid, or to its whole process group
    pid = first.running.process.pid
    code = _stopped_by(first.running.process, lambda number: os.killpg(pid, number) if to == "group"
                       else os.kill(pid, number), stop_signal)
    # THEN the stack ended by itself, cleanly, and its emulator with it
    assert code == 0
    assert process.ended(emulator)
    # AND a restart has every write it acknowledged
    second = start_stack(tmp_path)
    try:
        size, names, net = second.books(agent["id"])
        assert names == ["me"]
        assert size == net == 1
    finally:
        stop_stack(second)


def test_stop_signals_to_every_process_during_the_stop_change_nothing(tmp_path: Path) -> None:
    # GIVEN a stack that acknowledged an agent
    stack = start_stack(tmp_path)
    with _killed_on_failure(stack):
        emulator = stack.running.emulator_pid()
        agent = stack.new_agent()
    # WHEN, as a supervisor signalling every process of the stack does (a container's stop,
    # systemd's control group), its emulator is sent SIGTERM first, then the stack; and then
    # SIGTERM, Ctrl-C and SIGHUP arrive over and over while it stops
    os.kill(emulator, signal.SIGTERM)
    code = _stopped_by(stack.running.process, stack.running.process.send_signal,
                       *[signal.SIGTERM, signal.SIGINT, signal.SIGHUP] * 300)
    # THEN it still ended cleanly, with its emulator, and the agent is on disk
    assert code == 0
    assert process.ended(emulator)
    assert agent["id"] in _saved(tmp_path)


def test_writes_in_flight_at_the_stop_are_kept_whenever_they_were_acknowledged(tmp_path: Path) -> None:
    # GIVEN a stack taking writes from four clients at once, without pause
    stack = start_stack(tmp_path)
    acknowledged: list[str] = []
    enough = threading.Event()

    def write() -> None:
        while True:
            try:
                status, agent = stack.admin("POST", "/v1/agents", {"name": f"flight-{uuid.uuid4().hex[:8]}"})
            except OSError:
                return  # the stack is gone
            if status == 201:
                acknowledged.append(agent["id"])
                if len(acknowledged) >= 20:
                    enough.set()

    writers = [threading.Thread(target=write, daemon=True) for _ in range(4)]
    for writer in writers:
        writer.start()
    with _killed_on_failure(stack):
        assert enough.wait(GUARD_SECONDS), "the stack acknowledged too few writes"
    # WHEN it is sent SIGTERM while they write
    code = _stopped_by(stack.running.process, stack.running.process.send_signal, signal.SIGTERM)
    for writer in writers:
        writer.join(GUARD_SECONDS)
    assert code == 0
    # THEN after a restart, every write it acknowledged is there (the ones refused, or cut off
    # unanswered, may or may not be)
    second = start_stack(tmp_path)
    try:
        missing = [agent for agent in acknowledged if second.admin("GET", f"/v1/agents/{agent}")[0] != 200]
        assert missing == [], f"{len(missing)} of {len(acknowledged)} acknowledged writes lost"
    finally:
        stop_stack(second)


@pytest.mark.parametrize("moment", ["folder-held", "emulator-starting"])
def test_a_stop_signal_during_startup_stops_everything(tmp_path: Path, moment: str) -> None:
    # GIVEN a stack starting up: holding its folder (the stop signals are its own from then on), or
    # with its emulator started, and not yet READY
    child = subprocess.Popen(process.command(tmp_path, "--port", "0", "--no-demo"), cwd=ROOT,
                             env=process.environment(ADMIN_TOKEN), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    reached: Callable[[], list[int]] = {
        "folder-held": lambda: [1] if _read(tmp_path / "stack.lock") == str(child.pid) else [],
        "emulator-starting": lambda: process.children(child.pid),
    }[moment]
    deadline = time.monotonic() + GUARD_SECONDS
    while not (seen := reached()) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # polled; the deadline is a hang guard
    assert seen, f"the stack never reached {moment}"
    emulators = process.children(child.pid)
    # WHEN it is sent SIGTERM
    code = _stopped_by(child, child.send_signal, signal.SIGTERM)
    assert child.stdout is not None
    output = child.stdout.read()
    # THEN it ended cleanly before READY, left no emulator behind, and the folder is free again
    assert code == 0, output
    assert "READY" not in output
    assert all(process.ended(pid) for pid in emulators)
    for name in ("stack.lock", "emulator.lock"):
        if (tmp_path / name).exists():
            with (tmp_path / name).open() as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if anything still holds it


def test_a_dead_emulator_stops_the_stack_with_one_clear_message(tmp_path: Path) -> None:
    # GIVEN a serving stack
    stack = start_stack(tmp_path)
    with _killed_on_failure(stack):
        emulator = stack.running.emulator_pid()
        stack.new_agent()
    # WHEN its emulator is killed (kill -9: it says nothing)
    os.kill(emulator, signal.SIGKILL)
    code = _stopped_by(stack.running.process, stack.running.process.send_signal)
    assert stack.running.closed.wait(GUARD_SECONDS)
    # THEN the app ended by itself with a failure, saying once what ended, how, and what to do
    assert code not in (0, -signal.SIGKILL)
    said = [line for line in stack.running.output if "emulator" in line]
    assert len(said) == 1, stack.running.output
    assert f"pid {emulator}" in said[0] and "SIGKILL" in said[0] and "./dev up" in said[0]
    # AND it did not go on retrying an emulator that is gone
    assert not [line for line in stack.running.output if "Could not connect" in line]


def test_an_emulator_that_cannot_start_stops_the_stack_with_one_clear_message(tmp_path: Path) -> None:
    # GIVEN a data folder whose snapshot is not JSON (a hand edit gone wrong)
    (tmp_path / "snapshot.json").write_text("{not json")
    # WHEN a stack is started on it
    failed = _run(tmp_path, "0")
    # THEN it ends with a failure, passing on the emulator's own complaint, and saying once what to do
    assert failed.returncode == 1
    assert "JSONDecodeError" in failed.stderr
    said = [line for line in failed.stderr.splitlines() if line.startswith("workset: ")]
    assert len(said) == 1 and "did not start (exit code 1)" in said[0] and "./dev up" in said[0], failed.stderr
    assert "READY" not in failed.stdout
    # AND the broken snapshot is left as it was, for a person to mend
    assert (tmp_path / "snapshot.json").read_text() == "{not json"


def test_a_second_stack_on_the_same_folder_refuses_and_leaves_the_first_untouched(stack: Stack) -> None:
    # GIVEN a serving stack that acknowledged an agent
    before = stack.new_agent()
    assert stack.running.data_dir is not None
    # WHEN a second stack is started on its data folder
    second = _run(stack.running.data_dir, "0")
    # THEN the second refuses, naming the folder and the stack that holds it
    assert second.returncode != 0
    assert str(stack.running.data_dir) in second.stderr and f"pid {stack.running.process.pid}" in second.stderr
    assert "READY" not in second.stdout
    # AND the first still serves, with its writes, and takes new ones
    status, fetched = stack.admin("GET", f"/v1/agents/{before['id']}")
    assert (status, fetched["name"]) == (200, before["name"])
    stack.new_agent()


def test_a_taken_port_is_refused_before_an_emulator_starts(tmp_path: Path) -> None:
    # GIVEN the stack's port taken by another process's server
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # WHEN a stack is started on that port
        refused = _run(tmp_path, str(port))
    # THEN it refuses, naming the port and the way out, and never started an emulator (no tables
    # were restored into the folder)
    assert refused.returncode != 0
    assert f"127.0.0.1:{port}" in refused.stderr and "--port" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "snapshot.json").exists()


def test_the_emulator_ends_cleanly_under_a_burst_of_stop_signals(tmp_path: Path) -> None:
    # GIVEN the emulator alone, serving
    emulator = subprocess.Popen([sys.executable, "-m", "local.aws", str(tmp_path)], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, env={**clean_environment(), "PYTHONUNBUFFERED": "1"})
    try:
        assert emulator.stdout is not None and emulator.stdout.readline().startswith("AWS ")
    except BaseException:
        _stopped_by(emulator, emulator.send_signal, signal.SIGKILL)
        raise
    # WHEN Ctrl-C, SIGTERM and SIGHUP arrive together, over and over
    code = _stopped_by(emulator, emulator.send_signal, *[signal.SIGINT, signal.SIGTERM, signal.SIGHUP] * 1_000)
    # THEN it ended by itself, cleanly
    assert code == 0


def test_an_emulator_waiting_for_the_folder_lock_still_stops_at_sigterm(tmp_path: Path) -> None:
    # GIVEN the data folder's lock held (an older emulator still closing its journal), and an
    # emulator started the way the local stack starts it, with the stop signals blocked
    with (tmp_path / "emulator.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        try:
            emulator = subprocess.Popen([sys.executable, "-m", "local.aws", str(tmp_path)], cwd=ROOT,
                                        stdout=subprocess.DEVNULL, env=clean_environment())
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        # WHEN it is sent SIGTERM (before or while it waits: blocked, the signal stays pending)
        code = _stopped_by(emulator, emulator.send_signal, signal.SIGTERM)
    # THEN it ended at the signal, not by the hang guard's kill
    assert code == -signal.SIGTERM


@contextmanager
def _sigint_ignored(ignored: bool) -> Iterator[None]:
    """Start children with SIGINT ignored, as a non-interactive shell starts `cmd &` (the
    disposition is inherited across fork and exec)."""
    if not ignored:
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def _killed_on_failure(stack: Stack) -> Iterator[None]:
    """Kill the stack (and so its emulator) if the block fails: a test's failure leaves nothing running."""
    try:
        yield
    except BaseException:
        _stopped_by(stack.running.process, stack.running.process.send_signal, signal.SIGKILL)
        raise


def _stopped_by(child: subprocess.Popen, send: Callable[[int], None], *signals: int) -> int:
    """Send `signals` in turn with `send` and answer the exit code; a process still running
    GUARD_SECONDS later is killed, and answers that."""
    for number in signals:
        send(number)
    try:
        return child.wait(timeout=GUARD_SECONDS)
    except subprocess.TimeoutExpired:
        if os.getpgid(child.pid) == child.pid:
            os.killpg(child.pid, signal.SIGKILL)  # its emulator too, if it shares the group
        else:
            child.kill()
        return child.wait(timeout=GUARD_SECONDS)


def _run(data_dir: Path, port: str) -> subprocess.CompletedProcess[str]:
    """Run a stack on `data_dir` and `port` to its end (one expected to refuse), its output captured."""
    return subprocess.run(process.command(data_dir, "--port", port, "--no-demo"), cwd=ROOT, check=False,
                          env=process.environment(ADMIN_TOKEN), capture_output=True, text=True,
                          timeout=GUARD_SECONDS)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _saved(folder: Path) -> str:
    """Everything the emulator wrote to the folder: its snapshot and its journals."""
    return "".join(path.read_text() for path in [folder / "snapshot.json", *folder.glob("journal-*.jsonl")]
                   if path.exists())
