"""A vendor's new versions counted by UTC day: what its OpenAPI imports and its MCP server's syncs
published, counted before they are written, so that a day's cap is never passed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pynamodb.exceptions import DoesNotExist

from chalicelib.store.base import update_once_if
from chalicelib.store.models import DayCountItem, day_count_sk

KEPT = timedelta(days=2)  # after the day starts: the count is only read on its own day


def count(account_id: str, vendor: str, day: str, new: int, cap: int) -> bool:
    """Count `new` versions against the vendor's `day` (UTC, YYYY-MM-DD) before they are written:
    False, and nothing counted, when that would pass `cap`. One write, added only where the stored
    count leaves room, so two imports at once cannot both pass the cap; idempotent
    (`update_once_if`), so a lost answer never counts twice."""
    if new > cap:
        return False
    expires = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC) + KEPT
    room = DayCountItem.published.does_not_exist() | (DayCountItem.published <= cap - new)
    return update_once_if(DayCountItem(account_id=account_id, sk=day_count_sk(vendor, day)),
                          [DayCountItem.published.add(new), DayCountItem.kind.set("day_count"),
                           DayCountItem.ttl.set(expires)], room)


def give_back(account_id: str, vendor: str, day: str, unwritten: int) -> None:
    """Give back `unwritten` of `day`'s counted versions that were not written after all (the
    store refused them, or another publish of the same tool came first); never below zero."""
    update_once_if(DayCountItem(account_id=account_id, sk=day_count_sk(vendor, day)),
                   [DayCountItem.published.add(-unwritten)], DayCountItem.published >= unwritten)


def counted(account_id: str, vendor: str, day: str) -> int:
    """The versions counted for the vendor's `day` so far (a consistent read)."""
    try:
        return int(DayCountItem.get(account_id, day_count_sk(vendor, day), consistent_read=True).published)
    except DoesNotExist:
        return 0
