"""Refreshing an authorization-code connection's tokens, attacked: calls racing at expiry, a vendor
that rotates refresh tokens and answers late, token endpoints that fail for now or answer
garbage, a holder that crashed, a revocation or a person's reconnect racing a refresh. What must
hold: one refresh for many calls, the winner's tokens kept, `needs_reconnect` only when the
vendor definitively refuses the refresh token still current, and no token in any answer or log
(`chalicelib/access/token_refresh.py` draws the guard)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from chalicelib.access import token_refresh
from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.store import connections as connection_store
from chalicelib.store.records import Connection
from tests.conftest import Admin, Mcp
from tests.test_console import Console
from tests.test_vendor_auth import (  # noqa: F401 - the fixtures `api` and `tokens`
    CLIENT_SECRET,
    Api,
    TokenEndpoint,
    _account,
    _callback,
    _connected,
    _error,
    _later,
    _publish,
    _run,
    _start,
    api_fixture,
    tokens_fixture,
)

AT1, RT1 = f"at-1-{'x' * 12}", f"rt-1-{'y' * 12}"  # what the person's connect gave
AT2, RT2 = f"at-2-{'x' * 12}", f"rt-2-{'y' * 12}"  # what the first refresh gives
EXPIRED = timedelta(hours=2)  # the access token lives an hour


def _stored(admin: Admin, connection_id: str) -> tuple[Connection, dict[str, str | None]]:
    """The connection as stored, and its tokens decrypted."""
    connection = connection_store.get(_account(admin), connection_id, consistent=True)
    assert connection is not None
    if not connection.token_ciphertext:
        return connection, {}
    held = token_refresh.stored_tokens(connection)
    return connection, {"access": held.access_token, "refresh": held.refresh_token}


def _in_thread(work: Callable[[], Any], results: dict[str, Any], name: str) -> threading.Thread:
    def run() -> None:
        results[name] = work()

    return threading.Thread(target=run, daemon=True)


def _watch_waiting(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set when a call starts waiting for another call's refresh."""
    waiting, pause = threading.Event(), token_refresh._pause

    def noted(seconds: float) -> None:
        waiting.set()
        pause(seconds)

    monkeypatch.setattr(token_refresh, "_pause", noted)
    return waiting


def _no_token_shown(capsys: pytest.CaptureFixture[str], logged: pytest.LogCaptureFixture, *texts: Any) -> None:
    shown = [json.dumps(text) for text in texts] + [logged.text, *capsys.readouterr()]
    for secret in (AT1, RT1, AT2, RT2, CLIENT_SECRET):
        assert not any(secret in text for text in shown), secret


# --- the break: two calls at expiry -----------------------------------------------------------------


def test_two_calls_at_expiry_send_one_refresh_and_keep_the_winners_tokens(
        admin: Admin, console: Console, mcp: Mcp, api: Api, tokens: TokenEndpoint, monkeypatch: pytest.MonkeyPatch,
        logged: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN an expired access token, a vendor that rotates refresh tokens (the old one then answers
    # invalid_grant) and answers the first refresh late
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    _later(monkeypatch, EXPIRED)
    tokens.hold = "refresh_token"
    waiting = _watch_waiting(monkeypatch)
    results: dict[str, Any] = {}
    first = _in_thread(lambda: _run(Mcp(mcp.client, mcp.key)), results, "first")
    second = _in_thread(lambda: _run(Mcp(mcp.client, mcp.key)), results, "second")
    # WHEN a call refreshes, and a second call comes while the vendor has not answered
    first.start()
    assert tokens.arrived.wait(10)
    held, _ = _stored(admin, connection["id"])
    now = utcnow() + EXPIRED
    bound = now + timedelta(seconds=settings().vendor_timeout_seconds) + token_refresh.LEASE_SLACK
    assert held.refresh_until is not None and now < held.refresh_until <= bound  # a lease, bounded
    second.start()
    assert waiting.wait(10)
    tokens.release.set()
    first.join(10)
    second.join(10)
    assert not first.is_alive() and not second.is_alive()
    # THEN one refresh reached the vendor, and both calls carried its new token
    assert tokens.grants() == ["authorization_code", "refresh_token"]
    assert results["first"]["isError"] is False, results["first"]
    assert results["second"]["isError"] is False, results["second"]
    assert [request["authorization"] for request in api.received] == [f"Bearer {AT2}"] * 2
    # AND the connection is active with the new tokens, its lease given back
    stored, held_tokens = _stored(admin, connection["id"])
    assert stored.status == "active" and held_tokens == {"access": AT2, "refresh": RT2}
    assert stored.refresh_until is None
    # AND a third call uses them with no refresh
    assert _run(mcp)["isError"] is False
    assert tokens.grants() == ["authorization_code", "refresh_token"]
    assert api.received[-1]["authorization"] == f"Bearer {AT2}"
    _no_token_shown(capsys, logged, results)


def test_two_calls_that_read_the_expired_tokens_before_either_took_the_lease_send_one_refresh(
        admin: Admin, console: Console, tokens: TokenEndpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN two calls that read the expired tokens, both seeing no lease
    connection = _connected(admin, console, tokens)
    _later(monkeypatch, EXPIRED)
    read, _ = _stored(admin, connection["id"])
    assert read.refresh_until is None
    tokens.hold = "refresh_token"
    waiting = _watch_waiting(monkeypatch)
    results: dict[str, Any] = {}
    first = _in_thread(lambda: token_refresh.refresh(read, timeout=10), results, "first")
    second = _in_thread(lambda: token_refresh.refresh(read, timeout=10), results, "second")
    # WHEN the first takes the lease and asks the vendor, and the second tries to, from its read
    first.start()
    assert tokens.arrived.wait(10)
    second.start()
    assert waiting.wait(10)
    tokens.release.set()
    first.join(10)
    second.join(10)
    # THEN the store refused the second its lease: one refresh, and both carry its token
    assert tokens.grants() == ["authorization_code", "refresh_token"]
    assert results["first"].token == results["second"].token == AT2
    stored, held = _stored(admin, connection["id"])
    assert stored.status == "active" and held == {"access": AT2, "refresh": RT2}


def test_calls_waiting_on_a_refresh_that_fails_for_now_send_none_of_their_own(
        admin: Admin, console: Console, mcp: Mcp, api: Api, tokens: TokenEndpoint,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a refresh under way that the token endpoint will answer with a 503
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    _later(monkeypatch, EXPIRED)
    tokens.scripted.append((503, b'{"error": "temporarily_unavailable"}', "application/json"))
    tokens.hold = "refresh_token"
    waiting = _watch_waiting(monkeypatch)
    results: dict[str, Any] = {}
    first = _in_thread(lambda: _run(Mcp(mcp.client, mcp.key)), results, "first")
    second = _in_thread(lambda: _run(Mcp(mcp.client, mcp.key)), results, "second")
    first.start()
    assert tokens.arrived.wait(10)
    second.start()
    assert waiting.wait(10)
    # WHEN the endpoint fails
    tokens.release.set()
    first.join(10)
    second.join(10)
    # THEN both calls fail for now (retry later), one request reached the endpoint, the vendor none
    assert [_error(results[name])["code"] for name in ("first", "second")] == ["token_unavailable"] * 2
    assert tokens.grants() == ["authorization_code", "refresh_token"] and api.received == []
    # AND the connection keeps its refresh token, active, and the next call refreshes with it
    stored, held = _stored(admin, connection["id"])
    assert stored.status == "active" and held["refresh"] == RT1 and stored.refresh_until is None
    assert _run(mcp)["isError"] is False
    assert tokens.received[-1]["form"]["refresh_token"] == RT1


# --- failing for now is not a reason to need a person ---------------------------------------------------

FOR_NOW = {
    "500 echoing the token": (500, json.dumps({"error": "server_error", "error_description": RT1}).encode(),
                              "application/json"),
    "503 page": (503, b"<html><body>Down for maintenance</body></html>", "text/html"),
    "bare 401": (401, b"", "text/plain"),
    "400 invalid_request": (400, b'{"error": "invalid_request"}', "application/json"),
    "html": (200, b"<html><body>Sign in</body></html>", "text/html"),
    "not json": (200, b"\xff\xfe\x00garbage", "application/octet-stream"),
    "huge": (200, b'{"access_token": "' + b"a" * 200_000 + b'", "token_type": "Bearer"}', "application/json"),
    "no access token": (200, b'{"token_type": "bearer", "refresh_token": "rt-new"}', "application/json"),
    "CR/LF in the access token": (200, b'{"access_token": "abc\\r\\nX-Evil: 1", "token_type": "Bearer"}',
                                  "application/json"),
    "redirect": (302, b"", "text/plain"),
}


@pytest.mark.parametrize("answer", FOR_NOW.values(), ids=FOR_NOW.keys())
def test_a_refresh_failing_for_now_keeps_the_connection_and_its_refresh_token(
        admin: Admin, console: Console, mcp: Mcp, api: Api, tokens: TokenEndpoint, monkeypatch: pytest.MonkeyPatch,
        logged: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str], answer: tuple[int, bytes, str]) -> None:
    # GIVEN an expired access token and a token endpoint answering something that is not a token
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    _later(monkeypatch, EXPIRED)
    tokens.scripted.append(answer)
    tokens.location = f"{api.url}/stolen"  # where a redirect would lead
    # WHEN the tool is called
    result = _run(mcp)
    # THEN it fails for now (the code client credentials answer), the vendor untouched, nothing followed
    error = _error(result)
    assert error["code"] == "token_unavailable" and error["vendor_acted"] is False
    assert api.received == [] and len(tokens.received) == 2
    # AND the connection stays active with the refresh token it had, the lease given back
    stored, held = _stored(admin, connection["id"])
    assert stored.status == "active" and held == {"access": AT1, "refresh": RT1} and stored.refresh_until is None
    assert "Down for" not in json.dumps(result) and "X-Evil" not in json.dumps(result)
    _no_token_shown(capsys, logged, result)
    # AND the next call refreshes with that refresh token and works
    assert _run(mcp)["isError"] is False
    assert tokens.received[-1]["form"]["refresh_token"] == RT1
    assert [request["authorization"] for request in api.received] == [f"Bearer {AT2}"]


def test_a_refresh_timing_out_keeps_the_connection(admin: Admin, console: Console, mcp: Mcp, api: Api,
                                                   tokens: TokenEndpoint, monkeypatch: pytest.MonkeyPatch,
                                                   settings_env: Any) -> None:
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    _later(monkeypatch, EXPIRED)
    settings_env(WORKSET_VENDOR_TIMEOUT_SECONDS="1")
    tokens.scripted.append((200, json.dumps({"access_token": "late", "token_type": "Bearer"}).encode(),
                            "application/json"))
    tokens.delay = 30
    error = _error(_run(mcp))
    assert error["code"] == "token_unavailable" and "did not answer" in error["message"]
    tokens.delay = 0
    tokens.release.set()
    stored, held = _stored(admin, connection["id"])
    assert stored.status == "active" and held["refresh"] == RT1 and stored.refresh_until is None
    settings_env(WORKSET_VENDOR_TIMEOUT_SECONDS="10")
    assert _run(mcp)["isError"] is False


# --- a definitive refusal of the current refresh token still needs a person -----------------------------

REFUSED = {
    "400 invalid_grant": (400, b'{"error": "invalid_grant"}', "application/json"),
    "401 invalid_client": (401, b'{"error": "invalid_client"}', "application/json"),
    "400 unauthorized_client": (400, b'{"error": "unauthorized_client"}', "application/json"),
}


@pytest.mark.parametrize("answer", REFUSED.values(), ids=REFUSED.keys())
def test_a_definitive_refusal_of_the_current_refresh_token_needs_a_reconnect(
        admin: Admin, console: Console, mcp: Mcp, api: Api, tokens: TokenEndpoint, monkeypatch: pytest.MonkeyPatch,
        answer: tuple[int, bytes, str]) -> None:
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    _later(monkeypatch, EXPIRED)
    tokens.scripted.append(answer)
    assert _error(_run(mcp))["code"] == "connection_needs_reconnect"
    stored, _ = _stored(admin, connection["id"])
    assert stored.status == "needs_reconnect" and stored.refresh_until is None and api.received == []


def test_a_refusal_of_a_refresh_token_rotated_away_marks_nothing(admin: Admin, console: Console,
                                                                 tokens: TokenEndpoint,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.access import credentials

    # GIVEN a call holding a lease over version v whose tokens another call then refreshed (v + 1)
    connection = _connected(admin, console, tokens)
    _later(monkeypatch, EXPIRED)
    stale, _ = _stored(admin, connection["id"])
    credentials.credential(stale.account_id, stale.connection_id, "https://api.acme.test/x", timeout=5)
    # WHEN it sends the rotated-away refresh token and the vendor answers invalid_grant
    sent = token_refresh._as_holder(stale, "slow-holder", deadline=time.monotonic() + 5)
    # THEN it marks nothing and uses the newer tokens
    assert tokens.grants() == ["authorization_code", "refresh_token", "refresh_token"]
    assert sent.token == AT2
    stored, held = _stored(admin, connection["id"])
    assert stored.status == "active" and held == {"access": AT2, "refresh": RT2}


def test_a_winner_saving_after_its_lease_lapsed_heals_the_mark_of_the_call_that_took_over(
        admin: Admin, console: Console, mcp: Mcp, api: Api, tokens: TokenEndpoint,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a refresh the vendor took (rotating rt1) but has not answered, past its holder's lease
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    _later(monkeypatch, EXPIRED)
    tokens.hold = "refresh_token"
    results: dict[str, Any] = {}
    first = _in_thread(lambda: _run(Mcp(mcp.client, mcp.key)), results, "first")
    first.start()
    assert tokens.arrived.wait(10)
    _later(monkeypatch, EXPIRED + timedelta(minutes=5))
    # WHEN a second call takes the lapsed lease over, sends rt1 and is told invalid_grant
    assert _error(_run(mcp))["code"] == "connection_needs_reconnect"
    # AND the first call's answer comes
    tokens.release.set()
    first.join(10)
    # THEN its save still lands: the vendor took rt1 from it, so the grant stands
    assert results["first"]["isError"] is False
    stored, held = _stored(admin, connection["id"])
    assert stored.status == "active" and held == {"access": AT2, "refresh": RT2}
    assert _run(mcp)["isError"] is False and api.received[-1]["authorization"] == f"Bearer {AT2}"


# --- a crashed holder ---------------------------------------------------------------------------------


def test_a_lease_left_by_a_crashed_call_lapses_and_the_next_call_refreshes(
        admin: Admin, console: Console, mcp: Mcp, api: Api, tokens: TokenEndpoint, monkeypatch: pytest.MonkeyPatch,
        settings_env: Any) -> None:
    # GIVEN a call that took the refresh lease and died (bounded as a live holder's would be)
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    _later(monkeypatch, EXPIRED)
    stored, _ = _stored(admin, connection["id"])
    taken = utcnow() + EXPIRED
    until = taken + timedelta(seconds=settings().vendor_timeout_seconds) + token_refresh.LEASE_SLACK
    assert connection_store.take_refresh(stored.account_id, stored.connection_id, read_version=stored.token_version,
                                         owner="crashed", now=taken, until=until)
    # WHEN a call comes while the lease stands THEN it waits within its deadline, then fails for now
    settings_env(WORKSET_VENDOR_TIMEOUT_SECONDS="1")
    assert _error(_run(mcp))["code"] in ("token_unavailable", "vendor_timeout")  # both: try again later
    assert tokens.grants() == ["authorization_code"]
    # WHEN a call comes once the lease lapsed THEN it refreshes, once, and the connection is active
    _later(monkeypatch, EXPIRED + timedelta(minutes=1))
    settings_env(WORKSET_VENDOR_TIMEOUT_SECONDS="10")
    assert _run(mcp)["isError"] is False
    assert tokens.grants() == ["authorization_code", "refresh_token"]
    stored, held = _stored(admin, connection["id"])
    assert stored.status == "active" and held["refresh"] == RT2 and stored.refresh_until is None


# --- a person racing a refresh ------------------------------------------------------------------------


def test_a_revocation_racing_a_refresh_wins(admin: Admin, console: Console, mcp: Mcp, api: Api,
                                            tokens: TokenEndpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a refresh the vendor has not answered yet
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    _later(monkeypatch, EXPIRED)
    tokens.hold = "refresh_token"
    results: dict[str, Any] = {}
    call = _in_thread(lambda: _run(Mcp(mcp.client, mcp.key)), results, "call")
    call.start()
    assert tokens.arrived.wait(10)
    # WHEN a person revokes the connection, and then the vendor answers
    assert admin.call("POST", f"/v1/connections/{connection['id']}/revoke").status_code == 200
    tokens.release.set()
    call.join(10)
    # THEN the refresh's tokens did not bring it back: revoked, holding no token, the vendor untouched
    assert _error(results["call"])["code"] == "connection_revoked"
    stored, held = _stored(admin, connection["id"])
    assert stored.status == "revoked" and held == {} and stored.refresh_until is None
    assert _error(_run(mcp))["code"] == "connection_revoked"
    assert api.received == [] and tokens.grants() == ["authorization_code", "refresh_token"]


def test_a_persons_reconnect_racing_a_refresh_keeps_the_persons_tokens(
        admin: Admin, console: Console, mcp: Mcp, api: Api, tokens: TokenEndpoint,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a refresh the vendor has not answered yet (it issued at-2 / rt-2)
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    _later(monkeypatch, EXPIRED)
    tokens.hold = "refresh_token"
    results: dict[str, Any] = {}
    call = _in_thread(lambda: _run(Mcp(mcp.client, mcp.key)), results, "call")
    call.start()
    assert tokens.arrived.wait(10)
    # WHEN a person connects again (at-3 / rt-3), and then the vendor answers the refresh
    state = _start(console, connection["id"])["state"]
    assert _callback(console, f"code=good-code&state={state}").status_code == 303
    tokens.release.set()
    call.join(10)
    # THEN the person's tokens stand, and the call used them
    at3, rt3 = f"at-3-{'x' * 12}", f"rt-3-{'y' * 12}"
    stored, held = _stored(admin, connection["id"])
    assert stored.status == "active" and held == {"access": at3, "refresh": rt3}
    assert results["call"]["isError"] is False and api.received[-1]["authorization"] == f"Bearer {at3}"


# --- what a token answer may say -------------------------------------------------------------------------

EXPIRES_IN = {
    "negative": b"-5",
    "1e309": b"1e309",
    "-1e309": b"-1e309",
    "NaN": b"NaN",
    "a word": b'"soon"',
    "a 5000-digit string": b'"' + b"9" * 5000 + b'"',
    "a 5000-digit number": b"9" * 5000,
    "an object": b'{"seconds": 60}',
}


@pytest.mark.parametrize("expires_in", EXPIRES_IN.values(), ids=EXPIRES_IN.keys())
def test_an_absurd_expires_in_keeps_the_rotated_tokens(admin: Admin, console: Console, mcp: Mcp, api: Api,
                                                       tokens: TokenEndpoint, monkeypatch: pytest.MonkeyPatch,
                                                       expires_in: bytes) -> None:
    # GIVEN a refresh answered with new tokens and an absurd expires_in
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    _later(monkeypatch, EXPIRED)
    body = b'{"access_token": "at-new", "token_type": "Bearer", "refresh_token": "rt-new", "expires_in": '
    tokens.scripted.append((200, body + expires_in + b"}", "application/json"))
    # WHEN the tool is called THEN the tokens are used and kept (a rotated answer thrown away loses the grant)
    assert _run(mcp)["isError"] is False and api.received[-1]["authorization"] == "Bearer at-new"
    stored, held = _stored(admin, connection["id"])
    assert stored.status == "active" and held == {"access": "at-new", "refresh": "rt-new"}
    # AND their expiry is never past a day from now, and the next call needs no refresh
    limit = utcnow() + EXPIRED + timedelta(days=1, minutes=1)
    assert stored.token_expires_at is None or stored.token_expires_at <= limit
    assert _run(mcp)["isError"] is False and len(tokens.received) == 2
