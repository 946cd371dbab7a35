"""An agent's working set: promote, demote, pin, unpin, the list the harness sees, its history,
and how an MCP client hears that it changed.

Pinned tools. A pinned tool is an ordinary promoted tool (same place in tools/list, same calls)
that the rule never demotes, for idle or for cap. It still counts toward the cap, but the cap's
candidates skip it. At most `pin_limit(cap)` = half the cap, rounded down, and at least one, may be
pinned (so an agent with cap 1 may pin its one tool); past that, pinning is refused with
`pin_limit` and changes nothing. Lowering the cap never unpins anything: the pins stay, new pins
are refused until the count is under the new limit, and the cap's candidates are only the
unpinned tools, so the set may stay above the cap, as an all-used set does. Pinning a tool that is
not promoted is refused with `not_promoted` (`promote` with `pinned: true` promotes and pins in
one transaction), and so is a tool no call could run (`tool_unavailable`: its source withdrew it;
`connection_revoked`: a person revoked its connection), which is not promoted either. Demoting a pinned tool explicitly (the agent, the console, the admin API) takes
the pin with it: the demotion's transaction moves the pin count back. A revoked connection still
demotes a pinned tool (it could not be called any more). Unpinning puts the tool back under the
idle rule at its idle deadline (last use, or promotion, plus the window), as if never pinned.
Pin and unpin are history events (`pinned`, `unpinned`) with their actor and cause; they do not
change the tool list, so nothing is announced.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from chalicelib.access import connections
from chalicelib.base import log
from chalicelib.base.causes import PROMOTION_CAUSES, Action, Cause, PromotedBy
from chalicelib.base.config import settings
from chalicelib.base.errors import Busy, ListenLimit, NotPromoted, PinLimit
from chalicelib.catalog import toolbox
from chalicelib.net import notify
from chalicelib.store import agents as agent_store
from chalicelib.store import history as history_store
from chalicelib.store import listens, outbox
from chalicelib.store.agents import News, Pin, idle_deadline
from chalicelib.store.records import AgentState, HistoryEvent, Page, Promotion
from chalicelib.tools.definitions import Tool


@dataclass(frozen=True)
class Change:
    """The working set after a promote or demote; `changed` is False for an idempotent repeat."""

    size: int
    changed: bool
    tool: Tool | None = None
    pinned: bool = False  # the tool is pinned after the change


@dataclass(frozen=True)
class PinChange:
    """A tool's pin after a pin or unpin; `changed` is False for an idempotent repeat."""

    pinned: bool
    changed: bool
    pins: int  # pinned tools in the set now
    limit: int  # the most the agent may pin (`pin_limit`)


ATTEMPTS = 3  # a write that lost to a concurrent change reads the agent again, this many times in all
# A held listen reads the agent's change counter (one strongly consistent GetItem) after 1 s, then
# at doubling intervals up to 5 s: a change made around the listen's start is told within a
# second, a later one at most 5 s late, and a 20 s hold makes 6 reads instead of 20.
LISTEN_POLL_SECONDS = 1.0
LISTEN_POLL_MAX_SECONDS = 5.0
LISTEN_SLOT_MARGIN_SECONDS = 10.0  # a dead holder's slot frees this long after its hold would end


def pin_limit(cap: int) -> int:
    """The most tools an agent with this cap may pin: half the cap, rounded down, at least one."""
    return max(1, cap // 2)


def promoted_tools(state: AgentState) -> list[Tool]:
    """The promoted tools at their newest versions, in promotion order."""
    keys = [(p.vendor, p.name) for p in state.promotions]
    return toolbox.resolve_many(state.agent.account_id, keys)


def promoted_tools_with_policies(state: AgentState) -> tuple[list[Tool], toolbox.Policies]:
    """`promoted_tools`, and the approval policies that can apply to them, in the same batch reads."""
    keys = [(p.vendor, p.name) for p in state.promotions]
    return toolbox.resolve_many_with_policies(state.agent.account_id, keys)


def history(agent_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The agent's promotions, demotions, pins and unpins, newest first."""
    return history_store.list_events(agent_id, limit=limit, cursor=cursor)


def agents_with_tool(account_id: str, vendor: str, name: str) -> list[str]:
    """The ids of the agents that have this tool promoted now."""
    return agent_store.agents_with_tool(account_id, vendor, name)


def tell_client(state: AgentState, *, changed: bool) -> bool:
    """Whether a response to an MCP client that hears of changes on its responses must say the
    list changed: the request's own change (`changed`), or one made elsewhere (sweep, console,
    another client) since the agent's last such response. When it must, what the client was told
    is marked now that the answer carrying the news exists (never in the change's own
    transaction, whose answer may be lost), and best effort: if the mark fails, the next response
    tells it again, which is harmless."""
    elsewhere = state.change_seq > state.mcp_seen_seq
    if not (changed or elsewhere):
        return False
    try:
        outbox.mark_seen(state.agent.agent_id, state.change_seq + (1 if changed else 0))
    except Exception as error:  # noqa: BLE001 - the answer stands; the news is told again next time
        log.failure("mcp.mark_seen_failed", error, agent_id=state.agent.agent_id)
    return True


APPROVAL_HOLDS = "approval-"  # the slots of calls held for a person's decision (mcp/approvals.py)


@contextmanager
def listen_slot(state: AgentState, now: datetime, *, hold_seconds: float, pool: str = "") -> Iterator[None]:
    """Hold one of the account's slots for a held listen (or, `pool` APPROVAL_HOLDS, for a call
    held for a person's decision, mcp/approvals.py, in slots of their own; store/listens.py), or raise
    ListenLimit when the account holds WORKSET_MAX_LISTENS_PER_ACCOUNT already. A slot whose
    holder died is free again LISTEN_SLOT_MARGIN_SECONDS after its hold would have ended."""
    limit = settings().max_listens_per_account
    until = now + timedelta(seconds=hold_seconds + LISTEN_SLOT_MARGIN_SECONDS)
    taken = listens.take(state.agent.account_id, limit=limit, now=now, until=until, pool=pool)
    if taken is None:
        raise ListenLimit(f"this account already holds {limit} listens at once (the deployment's limit): listen "
                          f"again in {int(hold_seconds)} s")
    try:
        yield
    finally:
        try:  # the answer stands: a slot not given back frees by the clock (`until`)
            listens.give_back(state.agent.account_id, taken)
        except Exception as error:  # noqa: BLE001 - logged; never turns a held answer into a crash
            log.failure("listen.slot_not_freed", error, agent_id=state.agent.agent_id)


def wait_for_change(state: AgentState, *, hold_seconds: float) -> bool:
    """Wait up to `hold_seconds` for the agent's set to change after `state` was read; True as
    soon as it has (read at LISTEN_POLL_SECONDS, then doubling up to LISTEN_POLL_MAX_SECONDS)."""
    deadline = time.monotonic() + hold_seconds
    pause = LISTEN_POLL_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(pause, left))
        if outbox.change_seq(state.agent.agent_id) > state.change_seq:
            return True
        pause = min(pause * 2, LISTEN_POLL_MAX_SECONDS)
    return False


def promote(state: AgentState, vendor: str, name: str, *, by: PromotedBy, actor: str, now: datetime,
            tool: Tool | None = None, pinned: bool = False) -> Change:
    """Put a tool in the working set; promoting a promoted tool changes nothing; a tool its source
    no longer offers, or whose connection was revoked, is refused (ToolUnavailable,
    ConnectionRevoked). With `pinned`, the tool is pinned too (promoted
    and pinned in one transaction, or pinned if it was promoted already); a pin past the limit is
    refused (PinLimit) and nothing changes."""
    tool = tool or toolbox.resolve(state.agent.account_id, vendor, name)
    size = len(state.promotions)
    current = state.promotion(vendor, name)
    if current is not None:
        if pinned and not current.pinned:
            pin(state, vendor, name, cause=PROMOTION_CAUSES[by], actor=actor, now=now)
        return Change(size=size, changed=False, tool=tool, pinned=pinned or current.pinned)
    _check_callable(state, tool)
    limit = pin_limit(state.agent.cap)
    if pinned and state.pins >= limit:
        raise PinLimit(limit)
    cause = PROMOTION_CAUSES[by].value
    event = HistoryEvent(vendor, name, action=Action.PROMOTED.value, cause=cause, actor=actor, at=now)
    promotion = Promotion(vendor, name, promoted_at=now, promoted_by=by.value)
    pin_event = HistoryEvent(vendor, name, action=Action.PINNED.value, cause=cause, actor=actor, at=now)
    changed = agent_store.add_promotion(
        state.agent.agent_id, state.agent.account_id, promotion, event,
        due_at=idle_deadline(state, now), over_cap=size + 1 > state.agent.cap, news=_news(state),
        pin=Pin(pin_event, limit) if pinned else None,
    )
    if changed:
        notify.announce(state, changes=1, size=size + 1)
    elif pinned and (fresh := _reload(state)).promotion(vendor, name) is not None:
        # promoted meanwhile by someone else: pin what is there now
        return promote(fresh, vendor, name, by=by, actor=actor, now=now, tool=tool, pinned=True)
    return Change(size=size + 1 if changed else size, changed=changed, tool=tool, pinned=pinned and changed)


def demote(state: AgentState, vendor: str, name: str, *, cause: Cause, actor: str, now: datetime) -> Change:
    """Take a tool out of the working set (a pinned one loses its pin with it); demoting a tool
    that is not promoted changes nothing."""
    for _ in range(ATTEMPTS):
        size = len(state.promotions)
        current = state.promotion(vendor, name)
        if current is None:
            toolbox.resolve(state.agent.account_id, vendor, name)  # unknown tools are refused
            return Change(size=size, changed=False)
        event = HistoryEvent(vendor, name, action=Action.DEMOTED.value, cause=cause.value, actor=actor, at=now)
        if agent_store.remove_promotion(state.agent.agent_id, vendor, name, event, news=_news(state),
                                        pinned=current.pinned):
            notify.announce(state, changes=1, size=size - 1)
            return Change(size=size - 1, changed=True)
        state = _reload(state)  # demoted, pinned or unpinned meanwhile: judge it again
    raise Busy("the tool kept changing while it was demoted; nothing was changed, try again")


def pin(state: AgentState, vendor: str, name: str, *, cause: Cause, actor: str, now: datetime) -> PinChange:
    """Pin a promoted tool so the rule never demotes it; pinning a pinned tool changes nothing. A
    tool that is not promoted is refused (NotPromoted; an unknown one ToolNotFound), and so are a
    pin past `pin_limit` (PinLimit) and a tool that could not be called (its source withdrew it,
    its connection was revoked: a pin would keep it in the list for ever): none changes anything."""
    limit = pin_limit(state.agent.cap)
    first = state.promotion(vendor, name)
    if first is not None and not first.pinned:
        _check_callable(state, toolbox.resolve(state.agent.account_id, vendor, name))
    for _ in range(ATTEMPTS):
        current = state.promotion(vendor, name)
        if current is None:
            toolbox.resolve(state.agent.account_id, vendor, name)
            raise NotPromoted(vendor, name)
        if current.pinned:
            return PinChange(pinned=True, changed=False, pins=state.pins, limit=limit)
        if state.pins >= limit:
            raise PinLimit(limit)
        event = HistoryEvent(vendor, name, action=Action.PINNED.value, cause=cause.value, actor=actor, at=now)
        if agent_store.pin_promotion(state.agent.agent_id, vendor, name, event, limit=limit,
                                     keep_due=current.due_cause is not None):
            return PinChange(pinned=True, changed=True, pins=state.pins + 1, limit=limit)
        state = _reload(state)
    raise Busy("the tool kept changing while it was pinned; nothing was changed, try again")


def unpin(state: AgentState, vendor: str, name: str, *, cause: Cause, actor: str, now: datetime) -> PinChange:
    """Unpin a tool: the rule applies to it again from its idle deadline. Unpinning a tool that is
    not pinned (or not promoted) changes nothing; an unknown tool is refused (ToolNotFound)."""
    limit = pin_limit(state.agent.cap)
    for _ in range(ATTEMPTS):
        current = state.promotion(vendor, name)
        if current is None:
            toolbox.resolve(state.agent.account_id, vendor, name)
            return PinChange(pinned=False, changed=False, pins=state.pins, limit=limit)
        if not current.pinned:
            return PinChange(pinned=False, changed=False, pins=state.pins, limit=limit)
        event = HistoryEvent(vendor, name, action=Action.UNPINNED.value, cause=cause.value, actor=actor, at=now)
        # a revocation's due cause kept its deadline through the pin; otherwise the idle deadline
        due_at = None if current.due_cause else idle_deadline(state, current.last_used_at or current.promoted_at)
        if agent_store.unpin_promotion(state.agent.agent_id, vendor, name, event, due_at=due_at,
                                       over_cap=len(state.promotions) > state.agent.cap):
            return PinChange(pinned=False, changed=True, pins=state.pins - 1, limit=limit)
        state = _reload(state)
    raise Busy("the tool kept changing while it was unpinned; nothing was changed, try again")


def _check_callable(state: AgentState, tool: Tool) -> None:
    """Refuse a tool no call could run: its source withdrew it, or a person revoked its connection
    (the revocation demoted it, pinned or not; promoting or pinning it must not undo that)."""
    tool.check_available()
    if tool.spec.connection:
        connections.check_not_revoked(state.agent.account_id, tool.spec.connection)


def _reload(state: AgentState) -> AgentState:
    fresh = agent_store.load_state(state.agent.agent_id)
    if fresh is None:
        raise Busy("the agent could not be read again; try again")
    return fresh


def _news(state: AgentState) -> News:
    """Who hears of a change through the outbox: the webhook, if the agent has one."""
    return News(webhook=bool(state.webhook_url))
