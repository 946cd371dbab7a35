"""An agent's working set: promote, demote, and the list the harness sees."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from chalicelib import notify, toolbox
from chalicelib.store import agents as agent_store
from chalicelib.store.agents import News
from chalicelib.store.records import AgentState, HistoryEvent, Promotion
from chalicelib.toolbox import Tool


class PromotedBy(str, Enum):
    """Who put a tool in the working set."""

    AGENT = "agent"
    PUBLISH = "publish"
    CONSOLE = "console"


class Cause(str, Enum):
    """Why a tool moved; `label` is how the console says it."""

    AGENT_ASKED = "agent_asked"
    PUBLISHED = "published"
    CONSOLE = "console"
    IDLE = "idle"
    CAP = "cap"
    CONNECTION_REVOKED = "connection_revoked"

    @property
    def label(self) -> str:
        """The words a person reads in the History card."""
        return _CAUSE_LABELS[self]


_CAUSE_LABELS = {
    Cause.AGENT_ASKED: "the agent asked",
    Cause.PUBLISHED: "published by the agent",
    Cause.CONSOLE: "the console",
    Cause.IDLE: "unused past the idle window",
    Cause.CAP: "over the working-set cap",
    Cause.CONNECTION_REVOKED: "its connection was revoked",
}

PROMOTION_CAUSES = {PromotedBy.AGENT: Cause.AGENT_ASKED, PromotedBy.PUBLISH: Cause.PUBLISHED,
                    PromotedBy.CONSOLE: Cause.CONSOLE}


@dataclass(frozen=True)
class Change:
    """The working set after a promote or demote; `changed` is False for an idempotent repeat."""

    size: int
    changed: bool
    tool: Tool | None = None


def idle_deadline(state: AgentState, last_activity: datetime) -> datetime:
    """When the idle rule may demote a tool last used (or promoted) at `last_activity`."""
    return last_activity + timedelta(days=state.agent.idle_window_days)


def promoted_tools(state: AgentState) -> list[Tool]:
    """The promoted tools at their newest versions, in promotion order."""
    keys = [(p.vendor, p.name) for p in state.promotions]
    return toolbox.resolve_many(state.agent.account_id, keys)


def promote(state: AgentState, vendor: str, name: str, *, by: PromotedBy, actor: str, now: datetime,
            tool: Tool | None = None) -> Change:
    """Put a tool in the working set; promoting a promoted tool changes nothing; a tool its source
    no longer offers is refused (ToolUnavailable)."""
    tool = tool or toolbox.resolve(state.agent.account_id, vendor, name)
    size = len(state.promotions)
    if state.promotion(vendor, name) is not None:
        return Change(size=size, changed=False, tool=tool)
    tool.check_available()
    event = HistoryEvent(vendor, name, action="promoted", cause=PROMOTION_CAUSES[by].value, actor=actor, at=now)
    promotion = Promotion(vendor, name, promoted_at=now, promoted_by=by.value)
    changed = agent_store.add_promotion(
        state.agent.agent_id, state.agent.account_id, promotion, event,
        due_at=idle_deadline(state, now), over_cap=size + 1 > state.agent.cap, news=_news(state),
    )
    if changed:
        notify.announce(state, changes=1, size=size + 1)
    return Change(size=size + 1 if changed else size, changed=changed, tool=tool)


def demote(state: AgentState, vendor: str, name: str, *, cause: Cause, actor: str, now: datetime) -> Change:
    """Take a tool out of the working set; demoting a tool that is not promoted changes nothing."""
    size = len(state.promotions)
    if state.promotion(vendor, name) is None:
        toolbox.resolve(state.agent.account_id, vendor, name)  # unknown tools are refused
        return Change(size=size, changed=False)
    event = HistoryEvent(vendor, name, action="demoted", cause=cause.value, actor=actor, at=now)
    changed = agent_store.remove_promotion(state.agent.agent_id, vendor, name, event,
                                           news=_news(state))
    if changed:
        notify.announce(state, changes=1, size=size - 1)
    return Change(size=size - 1 if changed else size, changed=changed)


def _news(state: AgentState) -> News:
    """Who hears of a change through the outbox: the webhook, if the agent has one."""
    return News(webhook=bool(state.webhook_url))
