"""The toolbox: immutable versions, the head copy of each tool's newest version, the revision."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pynamodb.exceptions import DoesNotExist

from chalicelib.store.base import key_ok, page, transaction
from chalicelib.store.models import (
    HEAD_PREFIX,
    VERSION_PREFIX,
    AccountItem,
    ToolboxItem,
    ToolHeadItem,
    ToolVersionItem,
    head_sk,
    version_sk,
)
from chalicelib.store.records import Page, ToolVersion


def get_head(account_id: str, vendor: str, name: str) -> ToolVersion | None:
    """The newest version of a tool, or None."""
    if not key_ok(account_id, head_sk(vendor, name)):
        return None
    try:
        return _record(ToolHeadItem.get(account_id, head_sk(vendor, name)))
    except DoesNotExist:
        return None


def get_version(account_id: str, vendor: str, name: str, version: int) -> ToolVersion | None:
    """One version of a tool, or None."""
    if not key_ok(account_id, version_sk(vendor, name, version)):
        return None
    try:
        return _record(ToolVersionItem.get(account_id, version_sk(vendor, name, version)))
    except DoesNotExist:
        return None


def get_heads(account_id: str, tools: Iterable[tuple[str, str]]) -> dict[tuple[str, str], ToolVersion]:
    """The newest versions of several tools in one batch read, keyed by (vendor, name)."""
    keys = [(account_id, head_sk(vendor, name)) for vendor, name in tools]
    if not keys:
        return {}
    return {(item.vendor, item.name): _record(item) for item in ToolHeadItem.batch_get(keys)}


def list_heads(account_id: str) -> list[ToolVersion]:
    """Every tool of the account at its newest version (the whole toolbox, all pages)."""
    condition = ToolboxItem.sk.startswith(HEAD_PREFIX)
    return [_record(item) for item in ToolHeadItem.query(account_id, condition)]


def page_heads(account_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """One page of the toolbox, ordered by vendor then name."""
    return page(ToolHeadItem, account_id, limit=limit, cursor=cursor, record=_record,
                range_key_condition=ToolboxItem.sk.startswith(HEAD_PREFIX))


def list_versions(account_id: str, vendor: str, name: str) -> list[ToolVersion]:
    """Every version of one tool, oldest first."""
    if not key_ok(account_id, version_sk(vendor, name, 0)):
        return []
    condition = ToolboxItem.sk.startswith(f"{VERSION_PREFIX}{vendor}#{name}#")
    return [_record(item) for item in ToolVersionItem.query(account_id, condition)]


def toolbox_revision(account_id: str) -> int:
    """A counter that every publish in the account moves on."""
    item = AccountItem.get(account_id, attributes_to_get=["toolbox_revision"])
    return int(item.toolbox_revision or 0)


def put_version(
    account_id: str, vendor: str, name: str, definition: dict[str, Any], published_by: str, now: datetime,
    *, previous: int, vector: bytes | None = None, vector_version: str | None = None,
) -> ToolVersion:
    """Publish version `previous + 1` and make it the head, atomically.

    Raises `ConditionFailed` when another publish of the same tool got there first.
    """
    version = previous + 1
    fields = dict(
        account_id=account_id, vendor=vendor, name=name, version=version, definition=definition,
        published_at=now, published_by=published_by, vector=vector, vector_version=vector_version,
    )
    head_condition = (
        ToolboxItem.sk.does_not_exist() if previous == 0 else ToolboxItem.version == previous
    )
    with transaction() as write:
        write.save(
            ToolVersionItem(sk=version_sk(vendor, name, version), **fields),
            condition=ToolboxItem.sk.does_not_exist(),
        )
        write.save(ToolHeadItem(sk=head_sk(vendor, name), **fields), condition=head_condition)
        write.update(
            AccountItem(account_id=account_id),
            actions=[AccountItem.toolbox_revision.add(1)],
            condition=AccountItem.account_id.exists(),
        )
    return ToolVersion(vendor, name, version, definition, published_at=now, published_by=published_by,
                       vector=vector, vector_version=vector_version)


def _record(item: ToolboxItem) -> ToolVersion:
    return ToolVersion(
        vendor=item.vendor,
        name=item.name,
        version=int(item.version),
        definition=item.definition,
        published_at=item.published_at,
        published_by=item.published_by,
        vector=bytes(item.vector) if item.vector else None,
        vector_version=item.vector_version,
    )
