"""Tests that call the app from several threads at once (tests/test_decision_history.py's racing
approvals) each read their own request. Chalice keeps the request being served in one attribute
of the app (aws/chalice#759): Lambda serves one request at a time per instance, and the local
stack serves through LocalChalice, whose request is per thread; the test client did neither, so a
request could read the one another thread started meanwhile (its token: a 401 under load)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from chalicelib.base import log
from tests.conftest import Admin, Mcp

HANG_GUARD = 10.0  # seconds; a hang guard, not a speed claim


def test_a_request_reads_its_own_headers_while_another_thread_is_served(
        admin: Admin, mcp: Mcp, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an admin request held just after it began, until an agent's request was served whole
    # meanwhile (the interleaving a loaded machine makes, forced)
    real = log.request_id
    held, other_done = threading.Event(), threading.Event()

    def request_id(context: Any) -> str:
        if not held.is_set() and threading.current_thread() is not threading.main_thread():
            held.set()
            other_done.wait(HANG_GUARD)
        return real(context)

    monkeypatch.setattr(log, "request_id", request_id)
    answers: list[Any] = []
    first = threading.Thread(target=lambda: answers.append(admin.call("GET", "/v1/agents")))
    first.start()
    assert held.wait(HANG_GUARD)
    # WHEN the agent's request is served in between
    assert mcp.post("tools/list").status_code == 200
    other_done.set()
    first.join(HANG_GUARD)
    # THEN the admin request was answered for its own token, not refused for the agent's key
    assert [answer.status_code for answer in answers] == [200], [answer.json_body for answer in answers]
