"""Accounts and their admin tokens (stored by hash)."""

from __future__ import annotations

from datetime import datetime

from pynamodb.exceptions import DoesNotExist

from chalicelib.base.errors import Conflict
from chalicelib.store.base import ConditionFailed, transaction
from chalicelib.store.models import AccountItem, AdminTokenItem
from chalicelib.store.records import Account


def create_account(account_id: str, name: str, token_hash: str, now: datetime) -> Account:
    """Create a tenant and its first admin token, atomically."""
    try:
        with transaction() as write:
            write.save(
                AccountItem(account_id=account_id, name=name, created_at=now, toolbox_revision=0),
                condition=AccountItem.account_id.does_not_exist(),
            )
            write.save(
                AdminTokenItem(token_hash=token_hash, account_id=account_id, created_at=now),
                condition=AdminTokenItem.token_hash.does_not_exist(),
            )
    except ConditionFailed as error:
        raise Conflict("that account or admin token exists already") from error
    return Account(account_id=account_id, name=name)


def add_admin_token(account_id: str, token_hash: str, now: datetime) -> None:
    """Give an existing account one more admin token."""
    AdminTokenItem(token_hash=token_hash, account_id=account_id, created_at=now).save(
        condition=AdminTokenItem.token_hash.does_not_exist()
    )


def account_of_token(token_hash: str) -> str | None:
    """The account an admin token belongs to, or None."""
    try:
        return AdminTokenItem.get(token_hash).account_id
    except DoesNotExist:
        return None


def get_account(account_id: str) -> Account | None:
    """The account, or None."""
    try:
        item = AccountItem.get(account_id)
    except DoesNotExist:
        return None
    return Account(account_id=item.account_id, name=item.name, toolbox_revision=int(item.toolbox_revision or 0))


def get_allowed_hosts(account_id: str) -> tuple[str, ...]:
    """The keyless hosts the account lets agent-authored tools call."""
    try:
        item = AccountItem.get(account_id, attributes_to_get=["allowed_hosts"])
    except DoesNotExist:
        return ()
    return tuple(str(host) for host in item.allowed_hosts or ())


def set_allowed_hosts(account_id: str, hosts: list[str]) -> None:
    """Replace the account's allow list of keyless hosts."""
    AccountItem(account_id=account_id).update(
        actions=[AccountItem.allowed_hosts.set(hosts) if hosts else AccountItem.allowed_hosts.remove()],  # type: ignore[arg-type]
        condition=AccountItem.account_id.exists(),
    )
