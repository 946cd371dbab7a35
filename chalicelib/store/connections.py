"""Connections: vendor credentials, stored as KMS ciphertext bound to their account and id."""

from __future__ import annotations

from datetime import datetime

from pynamodb.exceptions import DoesNotExist

from chalicelib.store.base import key_ok, page, update_if
from chalicelib.store.models import ConnectionItem
from chalicelib.store.records import Connection, Page

ACTIVE = "active"
REVOKED = "revoked"


def put(connection: Connection) -> None:
    """Store a new connection (its ciphertext already made by the vault)."""
    ConnectionItem(
        account_id=connection.account_id, connection_id=connection.connection_id, vendor=connection.vendor,
        auth_type=connection.auth_type, header_name=connection.header_name, ciphertext=connection.ciphertext,
        hosts=list(connection.hosts), status=connection.status, created_at=connection.created_at,
    ).save(condition=ConnectionItem.connection_id.does_not_exist())


def get(account_id: str, connection_id: str) -> Connection | None:
    """A connection of the account, or None."""
    if not key_ok(account_id, connection_id):
        return None
    try:
        return _record(ConnectionItem.get(account_id, connection_id))
    except DoesNotExist:
        return None


def list_all(account_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The account's connections."""
    return page(ConnectionItem, account_id, limit=limit, cursor=cursor, record=_record)


def revoke(account_id: str, connection_id: str, now: datetime) -> bool:
    """Mark a connection revoked; False when it was revoked already."""
    return update_if(
        ConnectionItem(account_id=account_id, connection_id=connection_id),
        [ConnectionItem.status.set(REVOKED), ConnectionItem.revoked_at.set(now)],
        ConnectionItem.status == ACTIVE,
    )


def _record(item: ConnectionItem) -> Connection:
    return Connection(
        connection_id=item.connection_id, account_id=item.account_id, vendor=item.vendor,
        auth_type=item.auth_type, header_name=item.header_name, hosts=tuple(item.hosts or ()),
        status=item.status, created_at=item.created_at, revoked_at=item.revoked_at,
        ciphertext=bytes(item.ciphertext),
    )
