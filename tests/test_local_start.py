"""What `./dev up` installs and prints: only what running needs (the test tools come with
`./dev test`), and one clear ready block once the stack serves (issue 28, goal 2)."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from local.__main__ import ready_block
from local.progress import Progress

ROOT = Path(__file__).resolve().parent.parent


def _requirements(name: str) -> set[str]:
    """The distributions a requirements file names itself (not those it includes with -r)."""
    names = set()
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(re.split(r"[\[=<>~! ]", line, maxsplit=1)[0].lower())
    return names


def test_the_ready_block_says_where_how_to_sign_in_and_how_to_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a stack whose admin token was made and saved in its data folder
    monkeypatch.delenv("WORKSET_ADMIN_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    # WHEN it prints its ready block
    block = ready_block("http://127.0.0.1:8123", "wsa_abc", tmp_path / ".workset", emulator=True)
    # THEN the block names the URL, the console, the token and its file, and how to stop
    lines = block.splitlines()
    assert "Workset is ready on http://127.0.0.1:8123" in lines
    assert "  Console        http://127.0.0.1:8123/console   (sign in with the admin token)" in lines
    assert "  MCP endpoint   http://127.0.0.1:8123/mcp" in lines
    assert "  Admin token    wsa_abc   (saved in .workset/admin-token)" in lines
    assert f"  Stop           Ctrl-C here, or kill {os.getpid()}; every acknowledged write is kept" in lines


def test_a_token_from_the_environment_is_said_to_come_from_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKSET_ADMIN_TOKEN", "wsa_env")
    block = ready_block("http://127.0.0.1:8123", "wsa_env", tmp_path, emulator=True)
    assert "  Admin token    wsa_env   (from WORKSET_ADMIN_TOKEN)" in block.splitlines()


def test_up_installs_no_test_tool() -> None:
    # GIVEN the requirement files ./dev up installs and those only ./dev test adds
    running = _requirements("requirements.txt") | _requirements("requirements-local.txt")
    testing = _requirements("requirements-dev.txt")
    # THEN the local stack's file brings the runtime, Chalice's server and the emulator, and no
    # test tool; the test tools' file includes it rather than repeating it
    assert "-r requirements.txt" in (ROOT / "requirements-local.txt").read_text().splitlines()
    assert "-r requirements-local.txt" in (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert {"chalice", "moto", "pynamodb"} <= running
    assert running & testing <= {"moto"}  # the tests' moto adds every service's extras
    assert {"pytest", "playwright", "mypy", "ruff", "hypothesis", "mcp"} <= testing


def test_dev_installs_local_for_up_and_dev_for_test() -> None:
    # the shell script's two commands, read from the script (bash -n checks it parses)
    script = (ROOT / "dev").read_text()
    subprocess.run(["bash", "-n", str(ROOT / "dev")], check=True)
    up = script[script.index("  up)"):script.index(";;", script.index("  up)"))]
    test = script[script.index("  test)"):script.index(";;", script.index("  test)"))]
    assert "install local" in up and "install dev" not in up
    assert "install dev" in test


def test_a_long_step_is_told_again_until_the_start_is_done() -> None:
    # GIVEN a start whose step lasts longer than the interval between lines
    said: list[str] = []
    ticked = threading.Event()

    def say(line: str) -> None:
        said.append(line)
        if line.startswith("  ... still"):
            ticked.set()

    progress = Progress(say, every=0.05)
    # WHEN the step begins and lasts
    progress.step("loading Workset")
    assert ticked.wait(10)
    progress.done()
    told = len(said)
    time.sleep(0.2)
    # THEN the step was said, then said again while it lasted, and nothing after done()
    assert said[0] == "  loading Workset"
    assert said[1].startswith("  ... still loading Workset (")
    assert len(said) == told


def test_dev_up_says_what_it_installs_while_it_lasts_and_stops_on_a_failure(tmp_path: Path) -> None:
    # GIVEN a Python whose `-m venv` takes over 9 s and then fails (as a broken install would)
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo "Python 3.11.0"; exit 0; fi\nsleep 10\nexit 3\n')
    python.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "PYTHON": str(python), "VENV": str(tmp_path / "venv")}
    # WHEN ./dev up runs with it (in a folder of its own: the shared .venv is never touched)
    done = subprocess.run([str(ROOT / "dev"), "up"], check=False, env=env, capture_output=True, text=True, timeout=60)
    # THEN it said the step, said it again while it lasted, then said it failed and stopped there
    lines = done.stdout.splitlines()
    assert lines[0] == f"  creating {tmp_path / 'venv'} with Python 3.11.0"
    assert any(line.startswith(f"  ... still creating {tmp_path / 'venv'}") for line in lines[1:])
    assert "failed (see the message above)" in done.stderr
    assert done.returncode == 1 and "Starting Workset" not in done.stdout


def test_the_admin_token_file_is_private_from_the_moment_it_is_made(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Written first and made 0600 after, the token would sit readable by every local user (umask
    022) until the chmod: one who opens it meanwhile keeps the descriptor and reads the token."""
    from local import __main__ as local_main

    # GIVEN no token yet, the usual umask, and a chmod that comes too late to matter
    monkeypatch.delenv("WORKSET_ADMIN_TOKEN", raising=False)
    monkeypatch.setattr(Path, "chmod", lambda self, mode: None)
    previous = os.umask(0o022)
    try:
        # WHEN the stack makes its admin token
        token = local_main._admin_token(tmp_path)
    finally:
        os.umask(previous)
    # THEN the file holds it and only its owner could ever read it
    saved = tmp_path / "admin-token"
    assert saved.read_text() == token and token.startswith("wsa_")
    assert saved.stat().st_mode & 0o777 == 0o600
    assert list(tmp_path.iterdir()) == [saved]


@pytest.mark.parametrize("existing", [False, True])
def test_the_data_folder_is_private(tmp_path: Path, existing: bool) -> None:
    """It holds the tables' journal (connection secrets, encrypted) beside the emulator's KMS key
    material and the admin token: a folder other local users can list and read opens all three."""
    from local import environment

    # GIVEN no data folder yet, or one an older start made readable by all (umask 022)
    folder = tmp_path / ".workset"
    if existing:
        folder.mkdir(mode=0o755)
        folder.chmod(0o755)
    previous = os.umask(0o022)
    try:
        # WHEN the stack takes it
        environment.private_folder(folder)
    finally:
        os.umask(previous)
    # THEN only its owner may enter it
    assert folder.is_dir() and folder.stat().st_mode & 0o777 == 0o700


def test_the_emulator_s_key_file_is_private_from_the_moment_it_is_made(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from local.keys import KmsKeys

    # GIVEN the emulator's keys, saved with the usual umask and a chmod that comes too late to matter
    keys = KmsKeys.__new__(KmsKeys)
    keys.path = tmp_path / "kms-keys.json"
    keys.backend = type("Backend", (), {"keys": {"k1": type("Key", (), {"key_material": b"\x01" * 32})()}})()
    monkeypatch.setattr(Path, "chmod", lambda self, mode: None)
    previous = os.umask(0o022)
    try:
        keys.save()
    finally:
        os.umask(previous)
    # THEN the file holds the material and only its owner could ever read it
    assert "k1" in keys.path.read_text() and keys.path.stat().st_mode & 0o777 == 0o600


def _seeding(monkeypatch: pytest.MonkeyPatch, failures: int) -> tuple[str, list[float], list[int]]:
    """An empty account, and the demo import failing its first `failures` attempts (a store
    hiccup at start); answers the account, the backoff slept, and the attempts made."""
    from chalicelib.base.clock import utcnow
    from chalicelib.base.errors import Busy
    from chalicelib.catalog import imports
    from chalicelib.identity import accounts

    account_id = accounts.create_account("local", utcnow())[0].account_id
    real = imports.import_openapi
    attempts: list[int] = []

    def flaky(*args: object, **kwargs: object) -> imports.Report:
        attempts.append(1)
        if len(attempts) <= failures:
            raise Busy("the store is busy; try again shortly")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(imports, "import_openapi", flaky)
    slept: list[float] = []
    return account_id, slept, attempts


def _demo_api_tools(account_id: str) -> int:
    from chalicelib.catalog import toolbox
    from local.demo import DEMO_API_VENDOR

    return sum(1 for head in toolbox.page(account_id, limit=1000, cursor=None).items if head.vendor == DEMO_API_VENDOR)


def test_a_demo_import_that_fails_at_first_is_tried_again(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from local import __main__ as local_main

    # GIVEN a first start whose demo import fails once (the store busy)
    account_id, slept, attempts = _seeding(monkeypatch, failures=1)
    # WHEN the stack seeds its demo toolbox
    local_main._seed_demo(account_id, "http://127.0.0.1:9", sleep=slept.append)
    # THEN it tried again after a short wait, and the toolbox holds the demo API's operations
    assert len(attempts) == 2 and slept == [local_main.SEED_BACKOFF_SECONDS]
    assert _demo_api_tools(account_id) > 0
    assert "Seeded a demo toolbox" in capsys.readouterr().out


def test_a_demo_import_that_keeps_failing_is_said_and_the_stack_goes_on(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from local import __main__ as local_main

    # GIVEN a first start whose demo import fails every time
    account_id, slept, attempts = _seeding(monkeypatch, failures=100)
    # WHEN the stack seeds its demo toolbox
    local_main._seed_demo(account_id, "http://127.0.0.1:9", sleep=slept.append)
    # THEN it tried a bounded number of times with a growing wait, raised nothing (the stack
    # starts), and said on stderr what failed and what the toolbox lacks
    assert len(attempts) == local_main.SEED_ATTEMPTS >= 2
    assert slept == [local_main.SEED_BACKOFF_SECONDS * 2 ** n for n in range(local_main.SEED_ATTEMPTS - 1)]
    said = capsys.readouterr()
    assert "Seeded a demo toolbox" not in said.out
    assert "failed 3 times (the store is busy; try again shortly)" in said.err
    assert _demo_api_tools(account_id) == 0
