"""The append-only history of promotions and demotions."""

from __future__ import annotations

import itertools
import secrets
from datetime import timedelta

from chalicelib.clock import iso
from chalicelib.config import settings
from chalicelib.store.base import page
from chalicelib.store.models import HistoryItem
from chalicelib.store.records import HistoryEvent, Page

_sequence = itertools.count()  # orders events of one process that share a time (one sweep's demotions)


def new_item(agent_id: str, event: HistoryEvent) -> HistoryItem:
    """The item that records `event`; its id sorts by time and never collides."""
    return HistoryItem(
        agent_id=agent_id,
        event_id=f"{iso(event.at)}#{next(_sequence):012d}{secrets.token_hex(3)}",
        vendor=event.vendor,
        name=event.name,
        action=event.action,
        cause=event.cause,
        actor=event.actor,
        at=event.at,
        ttl=event.at + timedelta(days=settings().history_retention_days),
    )


def list_events(agent_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The agent's events, newest first."""
    return page(HistoryItem, agent_id, limit=limit, cursor=cursor, record=_record, scan_index_forward=False)


def _record(item: HistoryItem) -> HistoryEvent:
    return HistoryEvent(
        vendor=item.vendor,
        name=item.name,
        action=item.action,
        cause=item.cause,
        actor=item.actor,
        at=item.at,
    )
