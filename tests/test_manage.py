"""The operator CLI creates an account whose admin token works against the API."""

from __future__ import annotations

import pytest

import manage
from tests.conftest import Admin


def test_create_account_prints_a_working_admin_token(client, capsys: pytest.CaptureFixture[str]) -> None:
    # WHEN an operator creates an account
    assert manage.main(["--stage", "test", "create-account", "Initech"]) == 0
    token = capsys.readouterr().out.split("admin token")[1].split()[0]
    # THEN the printed token is an admin token of a new, empty account
    admin = Admin(client, token)
    assert admin.call("GET", "/v1/agents").status_code == 200
    assert admin.create_agent("first")["name"] == "first"


def test_a_short_chosen_token_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert manage.main(["--stage", "test", "create-account", "Initech", "--token", "short"]) == 1
    assert "at least" in capsys.readouterr().err
