"""Registered MCP servers: one per vendor, in the account's toolbox partition under `U#vendor`."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from pynamodb.exceptions import DoesNotExist

from chalicelib.store.base import key_ok, page, update_if
from chalicelib.store.models import SHARDS, UPSTREAM_PREFIX, UpstreamItem, shard, upstream_sk
from chalicelib.store.records import Page, Upstream


def put(upstream: Upstream) -> bool:
    """Register a server; False when its vendor has one already."""
    return update_if(
        UpstreamItem(account_id=upstream.account_id, sk=upstream_sk(upstream.vendor)),
        [UpstreamItem.kind.set("upstream"), UpstreamItem.vendor.set(upstream.vendor),
         UpstreamItem.url.set(upstream.url), UpstreamItem.created_at.set(upstream.created_at),
         UpstreamItem.upstream_shard.set(shard(f"{upstream.account_id}#{upstream.vendor}", SHARDS)),
         *([UpstreamItem.connection_id.set(upstream.connection_id)] if upstream.connection_id else [])],
        UpstreamItem.sk.does_not_exist(),
    )


def get(account_id: str, vendor: str) -> Upstream | None:
    """The vendor's server, or None."""
    if not key_ok(account_id, upstream_sk(vendor)):
        return None
    try:
        return _record(UpstreamItem.get(account_id, upstream_sk(vendor)))
    except DoesNotExist:
        return None


def list_all(account_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The account's servers, by vendor."""
    return page(UpstreamItem, account_id, limit=limit, cursor=cursor, record=_record,
                range_key_condition=UpstreamItem.sk.startswith(UPSTREAM_PREFIX))


def list_fleet() -> list[Upstream]:
    """Every registered server of every account (the hourly sync's list): SHARDS queries of the
    sparse `upstreams` index, whatever the size of the toolboxes."""
    return [_record(cast(UpstreamItem, item)) for label in range(SHARDS)
            for item in UpstreamItem.by_shard.query(f"s{label}")]


def record_sync(account_id: str, vendor: str, now: datetime, outcome: dict[str, Any], revision: str | None) -> None:
    """Remember how a sync ended (and the revision the server spoke)."""
    actions = [UpstreamItem.synced_at.set(now), UpstreamItem.sync.set(outcome)]
    if revision is not None:
        actions.append(UpstreamItem.revision.set(revision))
    update_if(UpstreamItem(account_id=account_id, sk=upstream_sk(vendor)), actions, UpstreamItem.sk.exists())


def _record(item: UpstreamItem) -> Upstream:
    return Upstream(account_id=item.account_id, vendor=item.vendor, url=item.url, created_at=item.created_at,
                    connection_id=item.connection_id, revision=item.revision, synced_at=item.synced_at,
                    sync=item.sync)
