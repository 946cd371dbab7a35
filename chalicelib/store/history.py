"""The append-only history of promotions and demotions."""

from __future__ import annotations

import itertools
import secrets

from chalicelib.clock import iso
from chalicelib.store.base import decode_cursor, encode_cursor
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
    )


def list_events(agent_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The agent's events, newest first."""
    start = decode_cursor(cursor, agent_id=agent_id)
    result = HistoryItem.query(agent_id, scan_index_forward=False, limit=limit, last_evaluated_key=start)
    items = [_record(item) for item in result]
    return Page(items=items, next=encode_cursor(result.last_evaluated_key))


def _record(item: HistoryItem) -> HistoryEvent:
    return HistoryEvent(
        vendor=item.vendor,
        name=item.name,
        action=item.action,
        cause=item.cause,
        actor=item.actor,
        at=item.at,
    )
