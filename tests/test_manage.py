"""The operator CLI creates an account whose admin token works against the API, and never puts
the token on stdout (CI logs keep it) unless asked: it goes to a new 0600 file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

import manage
from tests.conftest import Admin


def test_create_account_writes_a_working_admin_token_to_a_private_file(
        client, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # WHEN an operator creates an account
    monkeypatch.chdir(tmp_path)
    assert manage.main(["--stage", "test", "create-account", "Initech"]) == 0
    # THEN the token is in ./workset-test-admin-token, readable by the owner alone, and not on stdout
    path = tmp_path / "workset-test-admin-token"
    token = path.read_text().strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    out = capsys.readouterr()
    assert token not in out.out and token not in out.err
    assert "workset-test-admin-token" in out.out
    # AND it is an admin token of a new, empty account
    admin = Admin(client, token)
    assert admin.call("GET", "/v1/agents").status_code == 200
    assert admin.create_agent("first")["name"] == "first"


def test_an_existing_token_file_is_never_overwritten(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    kept = tmp_path / "token"
    kept.write_text("someone else's\n")
    assert manage.main(["--stage", "test", "create-account", "Initech", "--token-file", str(kept)]) == 1
    assert kept.read_text() == "someone else's\n"
    assert "exists" in capsys.readouterr().err


def test_the_token_goes_to_stdout_only_when_asked(client, capsys: pytest.CaptureFixture[str]) -> None:
    assert manage.main(["--stage", "test", "create-account", "Initech", "--print-token"]) == 0
    token = capsys.readouterr().out.split("admin token")[1].split()[0]
    assert Admin(client, token).call("GET", "/v1/agents").status_code == 200


def test_a_short_chosen_token_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    chosen = tmp_path / "chosen"
    chosen.write_text("short\n")
    assert manage.main(["--stage", "test", "create-account", "Initech", "--token-from", str(chosen),
                        "--token-file", str(tmp_path / "out")]) == 1
    assert "at least" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
