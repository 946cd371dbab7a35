"""An agent's partition: settings, key hashes, promotions, approvals; and the writes that move
tools in and out of the working set, each one transaction with its history event."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pynamodb.exceptions import DeleteError
from pynamodb.transactions import TransactWrite

from chalicelib.store import history
from chalicelib.store.base import ConditionFailed, key_ok, page, transaction, update_if, update_once_if
from chalicelib.store.models import (
    AGENT_SK,
    SHARDS,
    AgentPartitionItem,
    AgentSettingsItem,
    ApprovalItem,
    PromotionItem,
    approval_sk,
    promotion_sk,
    shard,
    tool_key,
)
from chalicelib.store.records import ALLOW, Agent, AgentState, Approval, HistoryEvent, Page, Promotion


def create_agent(agent: Agent, key_hash: str, *, webhook_secret: bytes | None = None) -> None:
    """Write a new agent's settings item with its first key hash."""
    item = AgentSettingsItem(
        agent_id=agent.agent_id,
        sk=AGENT_SK,
        account_id=agent.account_id,
        created_at=agent.created_at,
        name=agent.name,
        cap=agent.cap,
        idle_window_days=agent.idle_window_days,
        key_hashes=[key_hash],
        size=0,
        webhook_url=agent.webhook_url,
        webhook_secret=webhook_secret,
    )
    item.save(condition=AgentPartitionItem.agent_id.does_not_exist())


def load_state(agent_id: str) -> AgentState | None:
    """The agent's whole partition in one Query, or None for an unknown agent."""
    if not key_ok(agent_id):
        return None
    settings_item: AgentSettingsItem | None = None
    promotions: list[Promotion] = []
    approvals: list[Approval] = []
    for item in AgentPartitionItem.query(agent_id):
        if isinstance(item, AgentSettingsItem):
            settings_item = item
        elif isinstance(item, PromotionItem):
            promotions.append(_promotion(item))
        elif isinstance(item, ApprovalItem):
            approvals.append(decision_record(item))
    if settings_item is None:
        return None
    promotions.sort(key=lambda p: (p.promoted_at, p.vendor, p.name))
    return AgentState(
        agent=_agent(settings_item),
        key_hashes=tuple(settings_item.key_hashes or ()),
        promotions=tuple(promotions),
        approvals=tuple(approvals),
        leases={run_id: float(expiry) for run_id, expiry in settings_item.leases.as_dict().items()},
        lease_rev=int(settings_item.lease_rev or 0),
        review_token=settings_item.review_token,
        change_seq=int(settings_item.change_seq or 0),
        mcp_seen_seq=int(settings_item.mcp_seen_seq or 0),
        webhook_url=settings_item.webhook_url,
        webhook_secret=bytes(settings_item.webhook_secret) if settings_item.webhook_secret else None,
    )


def list_agents(account_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The account's agents, oldest first."""
    return page(AgentSettingsItem, account_id, index=AgentSettingsItem.by_account, limit=limit, cursor=cursor,
                record=_agent)


def update_settings(agent_id: str, changes: dict[str, Any]) -> Agent:
    """Set some of name, cap and idle_window_days; answer the agent as saved. A new cap or window
    flags the agent for the next sweep, which applies it (and only the sweep does)."""
    item = AgentSettingsItem(agent_id=agent_id, sk=AGENT_SK)
    actions = [getattr(AgentSettingsItem, name).set(value) if value is not None
               else getattr(AgentSettingsItem, name).remove() for name, value in changes.items()]
    if {"cap", "idle_window_days"} & changes.keys():
        actions += review_actions(agent_id)
    if not update_if(item, actions, AgentSettingsItem.agent_id.exists()):
        raise ConditionFailed(["ConditionalCheckFailed"])
    return _agent(item)


def add_promotion(agent_id: str, account_id: str, promotion: Promotion, event: HistoryEvent, *,
                  due_at: datetime, over_cap: bool, news: News) -> bool:
    """Put the tool in the set with its idle deadline, count it and record the event, atomically;
    a set that goes over its cap flags the agent for the sweep.

    Answers False (and writes nothing) when the tool was already promoted.
    """
    item = PromotionItem(
        agent_id=agent_id,
        sk=promotion_sk(promotion.vendor, promotion.name),
        vendor=promotion.vendor,
        name=promotion.name,
        promoted_at=promotion.promoted_at,
        promoted_by=promotion.promoted_by,
        tool_key=tool_key(account_id, promotion.vendor, promotion.name),
        **due_fields(agent_id, due_at),
    )
    return _change_set(
        agent_id, event, +1, lambda write: write.save(item, condition=PromotionItem.sk.does_not_exist()),
        flag=over_cap, news=news,
    )


def remove_promotion(agent_id: str, vendor: str, name: str, event: HistoryEvent, *, news: News,
                     guard: DemotionGuard | None = None) -> bool:
    """Take the tool out of the set, count it and record the event, atomically.

    Answers False (and writes nothing) when the tool was not promoted, or when a `guard` no
    longer holds (a run started, or the tool was used, after the caller read the agent).
    """
    condition = PromotionItem.sk.exists()
    if guard is not None:
        condition &= (PromotionItem.last_used_at == guard.last_used_at if guard.last_used_at is not None
                      else PromotionItem.last_used_at.does_not_exist())
    item = PromotionItem(agent_id=agent_id, sk=promotion_sk(vendor, name))
    return _change_set(
        agent_id, event, -1, lambda write: write.delete(item, condition=condition),
        lease_rev=guard.lease_rev if guard is not None else None, news=news,
    )


@dataclass(frozen=True)
class News:
    """Who must hear of a change through the outbox: the webhook."""

    webhook: bool = False


def due_fields(agent_id: str, due_at: datetime) -> dict[str, Any]:
    """The attributes that put a promotion in the `due` index at its idle deadline."""
    return {"due_at": due_at, "due_shard": shard(agent_id, SHARDS)}


def review_actions(agent_id: str) -> list[Any]:
    """The update actions that flag an agent for a whole review at the next sweep."""
    return [AgentSettingsItem.review_shard.set(shard(agent_id, SHARDS)),
            AgentSettingsItem.review_token.set(secrets.token_hex(6))]


@dataclass(frozen=True)
class DemotionGuard:
    """What a demotion by the rule was entitled on: the agent's lease revision and the tool's last
    use as read. A run that starts, or a use, after that read makes the demotion fail."""

    lease_rev: int
    last_used_at: datetime | None


def _change_set(agent_id: str, event: HistoryEvent, delta: int, change: Callable[[TransactWrite], None], *,
                news: News, lease_rev: int | None = None, flag: bool = False) -> bool:
    """One transaction: the promotion's own write, the set's size and change counter (with the
    outbox flag), the history event."""
    condition = AgentSettingsItem.agent_id.exists()
    if lease_rev is not None:
        condition &= AgentSettingsItem.lease_rev == lease_rev
    actions = [AgentSettingsItem.size.add(delta), AgentSettingsItem.change_seq.add(1)]
    if news.webhook:
        actions.append(AgentSettingsItem.outbox_shard.set(shard(agent_id, SHARDS)))
    actions += review_actions(agent_id) if flag else []
    try:
        with transaction() as write:
            change(write)
            write.update(AgentSettingsItem(agent_id=agent_id, sk=AGENT_SK), actions=actions, condition=condition)
            write.save(history.new_item(agent_id, event))
    except ConditionFailed:
        return False  # the promotion (or the guard) did not hold: nothing was written
    return True


def remove_decision(agent_id: str, vendor: str, name: str) -> bool:
    """Withdraw a person's standing decision; False when there was none."""
    if not key_ok(agent_id, approval_sk(vendor, name)):
        return False
    try:
        ApprovalItem(agent_id=agent_id, sk=approval_sk(vendor, name)).delete(condition=ApprovalItem.sk.exists())
    except DeleteError as error:
        if error.cause_response_code == "ConditionalCheckFailedException":
            return False
        raise
    return True


def count_acquire(agent_id: str, day: str, limit: int) -> bool:
    """Count one publish by the agent on `day` (UTC date); False, and nothing counted, when the
    agent has published `limit` already that day. Each step is idempotent (`update_once_if`), so
    a lost answer never counts a publish twice."""
    if limit <= 0:
        return False
    item = AgentSettingsItem(agent_id=agent_id, sk=AGENT_SK)
    same_day = (AgentSettingsItem.acquire_day == day) & (AgentSettingsItem.acquire_count < limit)
    new_day = AgentSettingsItem.agent_id.exists() & (
        AgentSettingsItem.acquire_day.does_not_exist() | (AgentSettingsItem.acquire_day != day))
    count = [AgentSettingsItem.acquire_count.add(1)]
    start_day = [AgentSettingsItem.acquire_day.set(day), AgentSettingsItem.acquire_count.set(1)]
    # the last step: another publish may have started the day between the first two
    return any(update_once_if(item, actions, condition)
               for actions, condition in ((count, same_day), (start_day, new_day), (count, same_day)))


def decision_record(item: ApprovalItem) -> Approval:
    """The record of a stored decision (items from before request shapes have none: they match nothing)."""
    return Approval(item.vendor, item.name, approved_by=item.approved_by, approved_at=item.approved_at,
                    decision=item.decision or ALLOW, version=int(item.version) if item.version else None,
                    shape=item.shape)


def _promotion(item: PromotionItem) -> Promotion:
    return Promotion(
        vendor=item.vendor,
        name=item.name,
        promoted_at=item.promoted_at,
        promoted_by=item.promoted_by,
        last_used_at=item.last_used_at,
        due_at=item.due_at,
        due_cause=item.due_cause,
    )


def _agent(item: AgentSettingsItem) -> Agent:
    return Agent(
        agent_id=item.agent_id,
        account_id=item.account_id,
        name=item.name,
        cap=int(item.cap),
        idle_window_days=int(item.idle_window_days),
        created_at=item.created_at,
        size=int(item.size or 0),
        webhook_url=item.webhook_url,
        connection_scope=tuple(item.connection_scope) if item.connection_scope is not None else None,
    )
