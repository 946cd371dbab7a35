"""What lets `./dev test` run the suite in parallel workers (tests/isolation.py, issue 29 goal 4)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from local.process import ROOT
from tests.isolation import lock_path, one_at_a_time

# Another process (a second test worker) trying the lock without waiting: prints "taken" or "free".
TRY = """
import fcntl, sys
with open(sys.argv[1], "a") as handle:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("taken")
    else:
        print("free")
"""


def other_worker_finds(path: Path) -> str:
    return subprocess.run([sys.executable, "-c", TRY, str(path)], capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


@pytest.fixture
def name(tmp_path: Path) -> Iterator[str]:
    """A lock name of this test's own (its file is removed afterwards)."""
    chosen = f"test-{tmp_path.name}"
    yield chosen
    lock_path(chosen).unlink(missing_ok=True)


def test_a_second_worker_waits_while_one_holds_the_lock(name: str) -> None:
    # GIVEN a worker holding the lock
    with one_at_a_time(name):
        # WHEN another process tries it, THEN it is taken
        assert other_worker_finds(lock_path(name)) == "taken"
    # and once let go, it is free again
    assert other_worker_finds(lock_path(name)) == "free"


def test_the_lock_lets_go_when_the_block_fails(name: str) -> None:
    with pytest.raises(RuntimeError), one_at_a_time(name):
        raise RuntimeError("a failed build")
    assert other_worker_finds(lock_path(name)) == "free"


def test_each_checkout_has_its_own_lock_outside_the_repo(tmp_path: Path) -> None:
    mine, other = lock_path("packaging"), lock_path("packaging", tmp_path)
    assert mine != other
    assert ROOT.resolve() not in mine.resolve().parents


def test_dev_test_runs_each_file_whole_in_one_worker() -> None:
    # a module's fixtures (a stack, the README's ordered session) rely on it: see tests/isolation.py
    script = (ROOT / "dev").read_text()
    test = script[script.index("  test)"):script.index(";;", script.index("  test)"))]
    assert '-n "${TEST_WORKERS:-auto}" --dist loadfile "$@"' in test
