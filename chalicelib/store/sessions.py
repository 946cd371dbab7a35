"""Console sessions as stored: one item per signed-in browser in the admin-tokens table, keyed by
a hash of its session id, and the account's `console_epoch` that ends them all at once.

A stored session counts only while its `epoch` equals the account's current `console_epoch`:
"sign out everywhere" is one UpdateItem (ADD 1) however many sessions the account has, and no
index over the sessions is needed. Reads are strongly consistent, so a sign-out or an epoch bump
holds on the very next request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pynamodb.exceptions import DoesNotExist

from chalicelib.base.errors import NotFound
from chalicelib.store.base import update_if
from chalicelib.store.models import SESSION_PREFIX, AccountItem, ConsoleSessionItem


@dataclass(frozen=True)
class StoredSession:
    """A stored console session and the epoch its account is at now (None: no such account)."""

    account_id: str
    created_at: datetime
    expires_at: datetime
    epoch: int
    account_epoch: int | None
    actor: str | None = None


def create_session(session_hash: str, account_id: str, now: datetime, expires_at: datetime, *,
                   actor: str | None = None) -> None:
    """Store a new session at the account's current epoch (2 calls: GetItem, PutItem). An epoch
    bump between the two leaves the new session at the old epoch, so it never counts: the race
    fails closed."""
    epoch = console_epoch(account_id) or 0
    ConsoleSessionItem(token_hash=_key(session_hash), account_id=account_id, created_at=now,
                       expires_at=expires_at, epoch=epoch, ttl=expires_at, actor=actor).save(
        condition=ConsoleSessionItem.token_hash.does_not_exist())


def load_session(session_hash: str) -> StoredSession | None:
    """The stored session with its account's current epoch, or None (1 call when there is no
    such session, 2 when there is)."""
    try:
        item = ConsoleSessionItem.get(_key(session_hash), consistent_read=True)
    except DoesNotExist:
        return None
    return StoredSession(account_id=item.account_id, created_at=item.created_at, expires_at=item.expires_at,
                         epoch=int(item.epoch or 0), account_epoch=console_epoch(item.account_id), actor=item.actor)


def delete_session(session_hash: str) -> None:
    """Forget one session (signing out); deleting one already gone is not an error."""
    ConsoleSessionItem(token_hash=_key(session_hash)).delete()


def end_all_sessions(account_id: str) -> None:
    """Move the account's epoch on, so every session stored before now stops counting."""
    if not update_if(AccountItem(account_id=account_id), [AccountItem.console_epoch.add(1)],
                     AccountItem.account_id.exists()):
        raise NotFound(f"no account {account_id}")


def console_epoch(account_id: str) -> int | None:
    """The account's current console epoch, or None when there is no such account."""
    try:
        # account_id is projected too: an account from before epochs has no console_epoch, and an
        # empty projection would read as no account at all
        item = AccountItem.get(account_id, consistent_read=True, attributes_to_get=["account_id", "console_epoch"])
    except DoesNotExist:
        return None
    return int(item.console_epoch or 0)


def _key(session_hash: str) -> str:
    # The prefix keeps session items apart from admin-token hashes in the shared table.
    return f"{SESSION_PREFIX}{session_hash}"
