"""The words of an agent's history: who put a tool in the working set, what an event records,
and why a tool moved. Below every module that moves tools (the working set, the sweep, a
revoked connection) and every edge that shows or filters history.
"""

from __future__ import annotations

from enum import Enum


class PromotedBy(str, Enum):
    """Who put a tool in the working set."""

    AGENT = "agent"
    PUBLISH = "publish"
    CONSOLE = "console"


class Action(str, Enum):
    """What a history event records."""

    PROMOTED = "promoted"
    DEMOTED = "demoted"
    PINNED = "pinned"
    UNPINNED = "unpinned"


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
