"""An authorization-code connection's tokens, refreshed by one call at a time.

Vendors rotate refresh tokens: once one is used, the old one answers `invalid_grant`. Two calls
that each refresh the same tokens would break the grant, so a call that finds the access token
expired (or refused by the vendor) first takes the connection's refresh lease, one conditional
write over the token version it read; every other call waits for the holder's outcome by
re-reading, within its own deadline. The guard, as a timeline (the conditions are evaluated by
DynamoDB; `store/connections.py`):

    call A reads v3 (expired)
    A: take_refresh  IF v3 AND active AND (no lease OR lapsed OR A's)
        -> A holds the lease until now + A's time left + LEASE_SLACK
        |                                   call B reads v3 (expired)
        |                                   B: take_refresh IF v3 ... -> refused: A holds it
        |  A ──rt3──> token endpoint        B waits: reads v3 (consistent) at once, then every
        |     (answers late: at4, rt4;       50 ms .. 0.5 s while the lease is held, until B's deadline
        |      rt3 now answers invalid_grant)
        v
    A: save_tokens  IF v3 AND (active OR needs_reconnect)  -> v4, active, lease gone
                                            B re-reads: v4 -> B sends at4, no refresh of its own

The other endings:
- A's refresh fails for now (a 5xx, a timeout, an answer that is not a token): A gives the lease
  back and fails `token_unavailable`; B sees v3 with no lease and fails the same way, sending no
  second request to a failing endpoint. v3 and rt3 stay; the connection stays active.
- A's refresh is rejected definitively (`invalid_grant`, `invalid_client`, `unauthorized_client`
  ..., HTTP 400/401): mark_needs_reconnect IF v3 AND active. Only a refresh token that is still
  the current one can be judged: a call whose read version moved on (a rotation by another call,
  a person's connect) marks nothing; it re-reads and uses the newer tokens.
- A crashes holding the lease: the lease lapses (at most the vendor timeout plus LEASE_SLACK after
  it was taken) and the next call takes it over.
- A revocation, a new secret or a person's connect moves the version on and drops the lease: A's
  save is refused, so a revoked connection stays revoked and a person's tokens are never
  overwritten by an older refresh; A answers with what is there now.
- A's save comes after its lease lapsed and C, taking over with rt3, got `invalid_grant` (A's
  request had rotated it) and marked v3 needs_reconnect: A's save still lands (IF v3 AND
  needs_reconnect) and makes it active again, since the vendor took rt3 from A.
"""

from __future__ import annotations

import json
import secrets
import time
from datetime import datetime, timedelta

from chalicelib.access import connections, vendor_tokens
from chalicelib.access.connection_auth import Credential, bearer_token
from chalicelib.access.vendor_tokens import TokenRefused, Tokens
from chalicelib.base import log
from chalicelib.base.clock import utcnow
from chalicelib.store import connections as connection_store
from chalicelib.store import vault
from chalicelib.store.records import Connection

LEASE_SLACK = timedelta(seconds=5)  # the holder's save after its answer: a live holder's lease never lapses
FIRST_PAUSE, MAX_PAUSE = 0.05, 0.5  # seconds between a waiting call's reads, doubling
_pause = time.sleep  # tests replace it to see a call waiting


def refresh(connection: Connection, timeout: float) -> Credential:
    """The connection's new access token: refreshed by this call when it takes the lease over the
    tokens it read, else the one the holder saves, waited for within `timeout` seconds. Raises
    ConnectionNeedsReconnect only when the vendor definitively refused the current refresh token;
    TokenRefused (`token_unavailable`, retry later) when no token came in time."""
    deadline = time.monotonic() + timeout
    owner, seen, pause = secrets.token_hex(8), connection, FIRST_PAUSE
    while (left := deadline - time.monotonic()) > 0:
        now = utcnow()
        if not _held(seen, now) and connection_store.take_refresh(
                seen.account_id, seen.connection_id, read_version=seen.token_version, owner=owner, now=now,
                until=now + timedelta(seconds=left) + LEASE_SLACK):
            return _as_holder(seen, owner, deadline)
        current = connections.usable(seen.account_id, seen.connection_id, None, consistent=True)
        if current.token_version != seen.token_version:
            if _unexpired(current):
                return bearer_token(stored_tokens(current).access_token)
        elif current.refresh_until is None:  # given back with nothing new: its refresh failed just now
            raise TokenRefused("another call's refresh of the token failed just now")
        seen = current  # held (waited for), lapsed (taken over), or newer tokens already expired (refreshed)
        if _held(seen, utcnow()):
            _pause(min(pause, max(deadline - time.monotonic(), 0)))
            pause = min(pause * 2, MAX_PAUSE)
    raise TokenRefused("another call was refreshing the token and did not finish in time")


def stored_tokens(connection: Connection) -> Tokens:
    """The connection's tokens, decrypted (ConnectionNeedsReconnect when a person never connected it)."""
    if not connection.token_ciphertext:
        raise connections.needs_reconnect(connection.connection_id, "no person has connected it yet")
    held = json.loads(connections.decrypt(connection, connection.token_ciphertext, purpose="tokens"))
    return Tokens(held["access_token"], held.get("refresh_token"), connection.token_expires_at,
                  connection.token_issued_at)


def seal(connection: Connection, tokens: Tokens) -> bytes:
    """Tokens as the connection stores them: one KMS ciphertext bound to it."""
    plain = json.dumps({"access_token": tokens.access_token, "refresh_token": tokens.refresh_token})
    return vault.encrypt(plain, account_id=connection.account_id, connection_id=connection.connection_id,
                         purpose="tokens")


def _as_holder(seen: Connection, owner: str, deadline: float) -> Credential:
    """Refresh the tokens of `seen` while holding the lease, and keep what came back."""
    assert seen.oauth is not None
    account_id, connection_id = seen.account_id, seen.connection_id
    try:
        tokens = stored_tokens(seen)
        if not tokens.refresh_token:
            raise TokenRefused("the access token expired and the vendor gave no refresh token", definitive=True)
        fresh = vendor_tokens.refresh(seen.oauth, connections.secret(seen), tokens.refresh_token,
                                      timeout=deadline - time.monotonic(), now=utcnow())
    except TokenRefused as refused:
        if not refused.definitive:
            _release(seen, owner)
            raise
        # only a rejection of the refresh token still current in the store says the grant is gone
        if connection_store.mark_needs_reconnect(account_id, connection_id, reason=refused.reason,
                                                 read_version=seen.token_version):
            raise connections.needs_reconnect(connection_id, refused.reason) from None
        return _now_stored(seen)  # the version moved on (and the lease went with it)
    except BaseException:
        _release(seen, owner)  # KMS failing, a refused destination: nothing said about the grant
        raise
    if connection_store.save_tokens(account_id, connection_id, token_ciphertext=seal(seen, fresh),
                                    expires_at=fresh.expires_at, issued_at=fresh.issued_at,
                                    read_version=seen.token_version):
        return bearer_token(fresh.access_token)
    return _now_stored(seen)


def _now_stored(read: Connection) -> Credential:
    """A refresh of `read`'s tokens was overtaken (a revocation, a person's connect, a slower
    call's save): what the connection holds now, if a call may use it."""
    connection = connections.usable(read.account_id, read.connection_id, None, consistent=True)
    if connection.token_version != read.token_version and _unexpired(connection):
        return bearer_token(stored_tokens(connection).access_token)
    raise TokenRefused("its token could not be refreshed now")


def _held(connection: Connection, now: datetime) -> bool:
    return connection.refresh_until is not None and connection.refresh_until >= now


def _unexpired(connection: Connection) -> bool:
    return connection.token_expires_at is None or connection.token_expires_at > utcnow()


def _release(seen: Connection, owner: str) -> None:
    try:
        connection_store.release_refresh(seen.account_id, seen.connection_id, owner=owner)
    except Exception as error:  # noqa: BLE001 - the lease lapses on its own; the call's own error matters more
        log.failure("connection.refresh_release_failed", error, connection_id=seen.connection_id)
