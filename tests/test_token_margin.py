"""How close to its expiry a vendor's OAuth token is still sent (`vendor_tokens.fresh`): a minute
before, or a quarter of its lifetime for a token that lives less than four minutes. A vendor whose
tokens live 60 s or less used to get a token request (and, for a stored token, a refresh and a
DynamoDB write) on every call; now a 30 s token serves the calls of its first 22.5 s. The clock
is frozen and moved by hand (`_at`): nothing here waits."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from chalicelib.access import vendor_tokens
from chalicelib.base.clock import utcnow
from chalicelib.store.models import ConnectionItem
from tests.conftest import Admin, Mcp
from tests.test_console import Console
from tests.test_vendor_auth import (  # noqa: F401 - the fixtures `api` and `tokens`
    Api,
    TokenEndpoint,
    _account,
    _client_credentials,
    _connected,
    _publish,
    _run,
    api_fixture,
    tokens_fixture,
)

START = utcnow().replace(microsecond=0)


def _at(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Stop the connections' clock (what fetches, stores and judges tokens) `seconds` after START."""
    moment = START + timedelta(seconds=seconds)
    monkeypatch.setattr("chalicelib.access.credentials.utcnow", lambda: moment)
    monkeypatch.setattr("chalicelib.access.token_refresh.utcnow", lambda: moment)


@pytest.mark.parametrize(("lifetime", "elapsed", "fresh"), [
    (30, 22, True), (30, 23, False),  # a quarter of 30 s: sent until 7.5 s before its end
    (60, 44, True), (60, 46, False),
    (1, 0.7, True), (1, 0.8, False),
    (240, 179, True), (240, 181, False),  # four minutes: a quarter is the minute
    (3600, 3539, True), (3600, 3541, False),  # an hour: the minute, as before
    (86400, 86339, True), (86400, 86341, False),
])
def test_a_token_is_sent_until_a_minute_or_a_quarter_of_its_life_before_it_expires(
        lifetime: float, elapsed: float, fresh: bool) -> None:
    issued = datetime(2026, 12, 3, 12, 0, 0, tzinfo=START.tzinfo)
    tokens = vendor_tokens.Tokens("at", None, issued + timedelta(seconds=lifetime), issued_at=issued)
    assert tokens.fresh(issued + timedelta(seconds=elapsed)) is fresh


def test_an_unknown_issue_time_keeps_the_minute_and_an_unknown_expiry_never_expires() -> None:
    expires = START + timedelta(seconds=120)
    # stored before the issue time was kept: the minute, whatever its lifetime was
    assert vendor_tokens.fresh(expires, None, START + timedelta(seconds=59))
    assert not vendor_tokens.fresh(expires, None, START + timedelta(seconds=61))
    assert vendor_tokens.fresh(None, None, START)
    # an issue time after the expiry (a clock that jumped) gives no margin, never a negative one
    assert not vendor_tokens.fresh(expires, expires + timedelta(seconds=10), expires)


@pytest.mark.parametrize(("lifetime", "reused_until", "fetched_at"), [(30, 22, 23), (3600, 3539, 3541)])
def test_a_client_credentials_token_is_reused_within_its_life_and_fetched_again_near_its_end(
        admin: Admin, mcp: Mcp, api: Api, tokens: TokenEndpoint, monkeypatch: pytest.MonkeyPatch,
        lifetime: int, reused_until: int, fetched_at: int) -> None:
    # GIVEN a vendor whose client-credentials tokens live `lifetime` seconds
    tokens.expires_in = lifetime
    connection = _client_credentials(admin, tokens)
    _publish(admin, api.url, connection["id"])
    # WHEN calls come at once, later, and just inside the margin
    for seconds in (0, 1, lifetime // 3, reused_until):
        _at(monkeypatch, seconds)
        assert _run(mcp)["isError"] is False
    # THEN one token served them all
    assert tokens.grants() == ["client_credentials"]
    # AND WHEN a call comes inside the margin THEN a new token is fetched and sent
    _at(monkeypatch, fetched_at)
    assert _run(mcp)["isError"] is False
    assert tokens.grants() == ["client_credentials", "client_credentials"]
    assert [request["authorization"][7:11] for request in api.received] == ["at-1"] * 4 + ["at-2"]


@pytest.mark.parametrize(("lifetime", "reused_until", "refreshed_at"), [(30, 22, 23), (3600, 3539, 3541)])
def test_a_stored_token_is_used_within_its_life_and_refreshed_near_its_end(
        admin: Admin, console: Console, mcp: Mcp, api: Api, tokens: TokenEndpoint,
        monkeypatch: pytest.MonkeyPatch, lifetime: int, reused_until: int, refreshed_at: int) -> None:
    from chalicelib.store import connections as connection_store

    # GIVEN an authorization-code connection whose vendor's access tokens live `lifetime` seconds
    tokens.expires_in = lifetime
    _at(monkeypatch, 0)
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    stored = connection_store.get(_account(admin), connection["id"])
    assert stored is not None and stored.token_issued_at == START
    # WHEN calls come at once, later, and just inside the margin
    for seconds in (0, 1, lifetime // 3, reused_until):
        _at(monkeypatch, seconds)
        assert _run(mcp)["isError"] is False
    # THEN they sent the stored token, with no refresh (nor its write)
    assert tokens.grants() == ["authorization_code"]
    version = connection_store.get(_account(admin), connection["id"]).token_version  # type: ignore[union-attr]
    # AND WHEN a call comes inside the margin THEN the token is refreshed once, and the new one is
    # used by the calls of its own life
    _at(monkeypatch, refreshed_at)
    assert _run(mcp)["isError"] is False
    _at(monkeypatch, refreshed_at + 1)
    assert _run(mcp)["isError"] is False
    assert tokens.grants() == ["authorization_code", "refresh_token"]
    after = connection_store.get(_account(admin), connection["id"])
    assert after is not None and after.token_version == version + 1
    assert after.token_issued_at == START + timedelta(seconds=refreshed_at)
    assert [request["authorization"][7:11] for request in api.received] == ["at-1"] * 4 + ["at-2"] * 2


def test_a_short_token_stored_without_its_issue_time_is_refreshed_once_then_reused(
        admin: Admin, console: Console, mcp: Mcp, api: Api, tokens: TokenEndpoint,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a 30 s token stored before Workset kept when a token was issued
    tokens.expires_in = 30
    _at(monkeypatch, 0)
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    ConnectionItem(account_id=_account(admin), connection_id=connection["id"]).update(
        actions=[ConnectionItem.token_issued_at.remove()])
    # WHEN calls come THEN the first refreshes it (the minute's margin is all that is known), and the
    # refreshed token, whose issue time is kept, serves the next
    for seconds in (1, 2, 10):
        _at(monkeypatch, seconds)
        assert _run(mcp)["isError"] is False
    assert tokens.grants() == ["authorization_code", "refresh_token"]


@pytest.mark.parametrize("issued_after_expiry", [timedelta(0), timedelta(seconds=1), timedelta(days=400)])
def test_an_issue_time_at_or_after_the_expiry_never_keeps_a_token_past_it(issued_after_expiry: timedelta) -> None:
    # a stored issue time from a clock ahead of the one that judges it (or a corrupt item)
    expires = START + timedelta(seconds=30)
    issued = expires + issued_after_expiry
    assert vendor_tokens.fresh(expires, issued, expires - timedelta(microseconds=1))
    assert not vendor_tokens.fresh(expires, issued, expires)
    assert not vendor_tokens.fresh(expires, issued, expires + timedelta(days=1))
