"""An agent's partition: settings, key hashes, promotions, approvals; and the writes that move
tools in and out of the working set, or pin and unpin them, each one transaction with its history
event."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pynamodb.exceptions import DeleteError
from pynamodb.transactions import TransactWrite

from chalicelib.base.errors import PinLimit
from chalicelib.store import history
from chalicelib.store.base import ConditionFailed, error_code, key_ok, page, transaction, update_if, update_once_if
from chalicelib.store.models import (
    AGENT_SK,
    SHARDS,
    AgentPartitionItem,
    AgentSettingsItem,
    ApprovalItem,
    GrantItem,
    PromotionItem,
    SearchesItem,
    approval_sk,
    promotion_sk,
    shard,
    tool_key,
)
from chalicelib.store.records import (
    ALLOW,
    Agent,
    AgentState,
    Approval,
    Grant,
    HistoryEvent,
    Page,
    Promotion,
    SeenSearch,
)
from chalicelib.store.usage import searches_of


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
    grants: list[Grant] = []
    searches: tuple[SeenSearch, ...] = ()
    for item in AgentPartitionItem.query(agent_id):
        if isinstance(item, AgentSettingsItem):
            settings_item = item
        elif isinstance(item, PromotionItem):
            promotions.append(_promotion(item))
        elif isinstance(item, ApprovalItem):
            approvals.append(decision_record(item))
        elif isinstance(item, GrantItem):
            grants.append(_grant(item))
        elif isinstance(item, SearchesItem):
            searches = searches_of(item)
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
        grants=tuple(sorted(grants, key=lambda grant: grant.created_at)),
        searches=searches,
    )


def list_agents(account_id: str, *, limit: int, cursor: str | None = None, archived: bool = False) -> Page:
    """The account's agents, oldest first: those not archived, or only the archived ones."""
    wanted = AgentSettingsItem.archived_at.exists() if archived else AgentSettingsItem.archived_at.does_not_exist()
    return page(AgentSettingsItem, account_id, index=AgentSettingsItem.by_account, limit=limit, cursor=cursor,
                record=_agent, filter_condition=wanted)


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


def replace_key(agent_id: str, key_hash: str) -> bool:
    """Make `key_hash` the agent's only key (the old ones stop at once); False for an unknown or
    revoked agent."""
    return update_if(AgentSettingsItem(agent_id=agent_id, sk=AGENT_SK), [AgentSettingsItem.key_hashes.set([key_hash])],
                     AgentSettingsItem.agent_id.exists() & AgentSettingsItem.revoked_at.does_not_exist())


def revoke_agent(agent_id: str, now: datetime) -> bool:
    """Stop every key of the agent (its grants stop with it: authentication checks `revoked_at`);
    revoking again keeps the first time. False for an unknown agent."""
    return update_if(AgentSettingsItem(agent_id=agent_id, sk=AGENT_SK),
                     [AgentSettingsItem.revoked_at.set(AgentSettingsItem.revoked_at | now),
                      AgentSettingsItem.key_hashes.set([])],
                     AgentSettingsItem.agent_id.exists())


def archive_agent(agent_id: str, now: datetime) -> bool:
    """Take a revoked agent out of the list (archiving again keeps the first time); False unless
    the agent is revoked."""
    return update_if(AgentSettingsItem(agent_id=agent_id, sk=AGENT_SK),
                     [AgentSettingsItem.archived_at.set(AgentSettingsItem.archived_at | now)],
                     AgentSettingsItem.revoked_at.exists())


def add_promotion(agent_id: str, account_id: str, promotion: Promotion, event: HistoryEvent, *,
                  due_at: datetime, over_cap: bool, news: News, pin: Pin | None = None) -> bool:
    """Put the tool in the set with its idle deadline, count it and record the event, atomically;
    a set that goes over its cap flags the agent for the sweep. With a `pin`, the tool goes in
    pinned (out of the `due` index) in the same transaction, counted against the pin limit.

    Answers False (and writes nothing) when the tool was already promoted; raises PinLimit (and
    writes nothing) when the agent's pins reached the limit meanwhile.
    """
    fields: dict[str, Any] = (
        {"pinned_at": pin.event.at, "pinned_by": pin.event.actor} if pin is not None else due_fields(agent_id, due_at))
    item = PromotionItem(
        agent_id=agent_id,
        sk=promotion_sk(promotion.vendor, promotion.name),
        vendor=promotion.vendor,
        name=promotion.name,
        promoted_at=promotion.promoted_at,
        promoted_by=promotion.promoted_by,
        tool_key=tool_key(account_id, promotion.vendor, promotion.name),
        **fields,
    )
    return _change_set(
        agent_id, [event, *([pin.event] if pin else [])], +1,
        lambda write: write.save(item, condition=PromotionItem.sk.does_not_exist()),
        flag=over_cap, news=news, pins=+1 if pin else 0, pin_limit=pin.limit if pin else None,
    )


def remove_promotion(agent_id: str, vendor: str, name: str, event: HistoryEvent, *, news: News, pinned: bool = False,
                     guard: DemotionGuard | None = None) -> bool:
    """Take the tool out of the set, count it and record the event, atomically; a pinned tool
    (`pinned`, as the caller read it) leaves the pin count too, so demoting it unpins it.

    Answers False (and writes nothing) when the tool was not promoted, when it was pinned or
    unpinned since the caller read it, or when a `guard` no longer holds (a run started, or the
    tool was used, after the caller read the agent).
    """
    condition = PromotionItem.sk.exists() & _pinned_as_read(pinned)
    if guard is not None:
        condition &= (PromotionItem.last_used_at == guard.last_used_at if guard.last_used_at is not None
                      else PromotionItem.last_used_at.does_not_exist())
    item = PromotionItem(agent_id=agent_id, sk=promotion_sk(vendor, name))
    return _change_set(
        agent_id, [event], -1, lambda write: write.delete(item, condition=condition),
        lease_rev=guard.lease_rev if guard is not None else None, news=news, pins=-1 if pinned else 0,
    )


def agents_with_tool(account_id: str, vendor: str, name: str) -> list[str]:
    """The agents that have this tool promoted now (the promotions' `by_tool` index)."""
    return [item.agent_id for item in PromotionItem.by_tool.query(tool_key(account_id, vendor, name))]


def pin_promotion(agent_id: str, vendor: str, name: str, event: HistoryEvent, *, limit: int, keep_due: bool) -> bool:
    """Pin a promoted tool: it leaves the `due` index (unless `keep_due`: a revocation made it due
    with its own cause, which pinning does not cancel), the pin count moves on within `limit`, and
    the event is recorded, atomically. The tool list does not change: no change counter, no news.

    Answers False (and writes nothing) when the tool is no longer promoted, is pinned already, or
    was made due since it was read; raises PinLimit when the agent has `limit` pins already.
    """
    condition = PromotionItem.sk.exists() & PromotionItem.pinned_at.does_not_exist()
    actions: list[Any] = [PromotionItem.pinned_at.set(event.at), PromotionItem.pinned_by.set(event.actor)]
    if not keep_due:
        condition &= PromotionItem.due_cause.does_not_exist()
        actions += [PromotionItem.due_at.remove(), PromotionItem.due_shard.remove()]
    item = PromotionItem(agent_id=agent_id, sk=promotion_sk(vendor, name))
    return _change_set(agent_id, [event], 0, lambda write: write.update(item, actions=actions, condition=condition),
                       news=News(), pins=+1, pin_limit=limit)


def unpin_promotion(agent_id: str, vendor: str, name: str, event: HistoryEvent, *, due_at: datetime | None,
                    over_cap: bool) -> bool:
    """Unpin a tool: it goes back in the `due` index at `due_at` (None: it kept its deadline), the
    pin count moves back and the event is recorded, atomically; a set over its cap flags the agent
    for the sweep (the tool is a cap candidate again).

    Answers False (and writes nothing) when the tool is no longer promoted or no longer pinned.
    """
    condition = PromotionItem.sk.exists() & PromotionItem.pinned_at.exists()
    actions: list[Any] = [PromotionItem.pinned_at.remove(), PromotionItem.pinned_by.remove()]
    if due_at is not None:
        actions += [getattr(PromotionItem, key).set(value) for key, value in due_fields(agent_id, due_at).items()]
    item = PromotionItem(agent_id=agent_id, sk=promotion_sk(vendor, name))
    return _change_set(agent_id, [event], 0, lambda write: write.update(item, actions=actions, condition=condition),
                       news=News(), pins=-1, flag=over_cap)


@dataclass(frozen=True)
class Pin:
    """A promotion that goes in pinned: the pin's own history event and the agent's pin limit."""

    event: HistoryEvent
    limit: int


@dataclass(frozen=True)
class News:
    """Who must hear of a change through the outbox: the webhook."""

    webhook: bool = False


def idle_deadline(state: AgentState, last_activity: datetime) -> datetime:
    """When the idle rule may demote a tool last used (or promoted) at `last_activity`."""
    return last_activity + timedelta(days=state.agent.idle_window_days)


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


def _change_set(agent_id: str, events: list[HistoryEvent], delta: int, change: Callable[[TransactWrite], None], *,
                news: News, lease_rev: int | None = None, flag: bool = False, pins: int = 0,
                pin_limit: int | None = None) -> bool:
    """One transaction: the promotion's own write, the set's size and change counter (with the
    outbox flag) when the list changes (`delta`), the pin count (kept under `pin_limit`), the
    history events."""
    condition = AgentSettingsItem.agent_id.exists()
    if lease_rev is not None:
        condition &= AgentSettingsItem.lease_rev == lease_rev
    if pin_limit is not None:
        condition &= AgentSettingsItem.pins.does_not_exist() | (AgentSettingsItem.pins < pin_limit)
    actions: list[Any] = []
    if delta:
        actions += [AgentSettingsItem.size.add(delta), AgentSettingsItem.change_seq.add(1)]
        if news.webhook:
            actions.append(AgentSettingsItem.outbox_shard.set(shard(agent_id, SHARDS)))
    if pins:
        actions.append(AgentSettingsItem.pins.add(pins))
    actions += review_actions(agent_id) if flag else []
    try:
        with transaction() as write:
            change(write)
            write.update(AgentSettingsItem(agent_id=agent_id, sk=AGENT_SK), actions=actions, condition=condition)
            for event in events:
                write.save(history.new_item(agent_id, event))
    except ConditionFailed as failed:
        # the settings item is an update, and pynamodb sends updates last: its reason is the last
        failed_items = [reason for reason in failed.reasons if reason == "ConditionalCheckFailed"]
        if pin_limit is not None and failed.reasons[-1:] == ["ConditionalCheckFailed"] and len(failed_items) == 1:
            raise PinLimit(pin_limit) from failed
        return False  # the promotion (or the guard) did not hold: nothing was written
    return True


def _pinned_as_read(pinned: bool) -> Any:
    return PromotionItem.pinned_at.exists() if pinned else PromotionItem.pinned_at.does_not_exist()


def remove_decision(agent_id: str, vendor: str, name: str) -> bool:
    """Withdraw a person's standing decision; False when there was none."""
    if not key_ok(agent_id, approval_sk(vendor, name)):
        return False
    try:
        ApprovalItem(agent_id=agent_id, sk=approval_sk(vendor, name)).delete(condition=ApprovalItem.sk.exists())
    except DeleteError as error:
        if error_code(error) == "ConditionalCheckFailedException":
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


def _grant(item: GrantItem) -> Grant:
    """The record of a stored grant."""
    return Grant(
        grant_id=item.sk.removeprefix("G#"), client_id=item.client_id, client_name=item.client_name, scope=item.scope,
        resource=item.resource, created_at=item.created_at, consented_by=item.consented_by,
        access_hash=item.access_hash, access_expires_at=item.access_expires_at, refresh_hash=item.refresh_hash,
        previous_refresh_hash=item.previous_refresh_hash, refresh_expires_at=item.refresh_expires_at,
        refreshed_at=item.refreshed_at, revoked_at=item.revoked_at,
    )


def _promotion(item: PromotionItem) -> Promotion:
    return Promotion(
        vendor=item.vendor,
        name=item.name,
        promoted_at=item.promoted_at,
        promoted_by=item.promoted_by,
        last_used_at=item.last_used_at,
        due_at=item.due_at,
        due_cause=item.due_cause,
        pinned_at=item.pinned_at,
        pinned_by=item.pinned_by,
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
        revoked_at=item.revoked_at,
        archived_at=item.archived_at,
    )
