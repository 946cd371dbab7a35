"""Approval policies a person set: one per tool, one default per vendor, each change recorded in
the account's policy history (who, what, when) in the same transaction."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from chalicelib.store.base import filtered_page, page, transaction
from chalicelib.store.history import history_record, list_events, new_item
from chalicelib.store.models import ANY_TOOL, HistoryItem, PolicyItem, policy_partition, policy_sk
from chalicelib.store.records import HistoryEvent, Page, PolicySetting

POLICY_ACTION = "approval_policy"  # a history event's action; its cause is the policy set, or `default`
CLEARED = "default"
TOOL_HISTORY_READS = 4  # Queries one page of a tool's changes reads at most...
TOOL_HISTORY_PAGE_SIZE = 100  # ...each of this many of the account's changes


def get_many(account_id: str, keys: Iterable[tuple[str, str | None]]) -> dict[tuple[str, str | None], PolicySetting]:
    """The settings of these (vendor, name) keys, a name of None meaning the vendor's default, in
    batch reads (100 keys each); keys nobody set are left out."""
    wanted = list(dict.fromkeys((policy_partition(account_id), policy_sk(vendor, name or ANY_TOOL))
                                for vendor, name in keys))
    if not wanted:
        return {}
    found = (setting_of(item) for item in PolicyItem.batch_get(wanted))
    return {(setting.vendor, setting.name): setting for setting in found}


def list_all(account_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The account's settings, by vendor and name (a vendor's default first)."""
    return page(PolicyItem, policy_partition(account_id), limit=limit, cursor=cursor, record=setting_of)


def put(account_id: str, vendor: str, name: str | None, policy: str | None, person: str, now: datetime) -> None:
    """Set (or, `policy` None, clear) a setting and record who did, atomically."""
    item = PolicyItem(account_id=policy_partition(account_id), sk=policy_sk(vendor, name or ANY_TOOL),
                      vendor=vendor, name=name or ANY_TOOL, policy=policy or CLEARED, set_by=person, set_at=now)
    event = HistoryEvent(vendor=vendor, name=name or ANY_TOOL, action=POLICY_ACTION, cause=policy or CLEARED,
                         actor=person, at=now)
    with transaction() as write:
        if policy is None:
            write.delete(item)
        else:
            write.save(item)
        write.save(new_item(policy_partition(account_id), event))


def history(account_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """Every change of the account's policies, newest first."""
    return list_events(policy_partition(account_id), limit=limit, cursor=cursor)


def tool_history(account_id: str, vendor: str, name: str, *, limit: int, cursor: str | None = None) -> Page:
    """The changes of one tool's policy and of its vendor's default, newest first: the account's
    policy history filtered by the tool, read in at most TOOL_HISTORY_READS Queries; `next` goes on
    where the reading stopped, so every change of the tool is reachable however many others came
    after it."""
    wanted = (HistoryItem.vendor == vendor) & HistoryItem.name.is_in(name, ANY_TOOL)
    return filtered_page(HistoryItem, policy_partition(account_id), limit=limit, cursor=cursor, record=history_record,
                         reads=TOOL_HISTORY_READS, page_size=TOOL_HISTORY_PAGE_SIZE, filter_condition=wanted,
                         scan_index_forward=False)


def setting_of(item: PolicyItem) -> PolicySetting:
    return PolicySetting(vendor=item.vendor, name=None if item.name == ANY_TOOL else item.name, policy=item.policy,
                         set_by=item.set_by, set_at=item.set_at)
