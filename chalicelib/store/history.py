"""The append-only history of promotions and demotions, and of people's decisions on runs.

A decision's event is written in the same DynamoDB transaction as the decision itself (the run's
conditional update in `store.runs`), so a decision and its event cannot disagree on a fault, and
of any number of racing decisions (the console, the admin API, an in-client approval's retry) only
the one whose condition holds writes its event. Its id is the run's own (`<at>#run#<run_id>`, and
the put is conditioned on its absence), so even a replayed transaction cannot record a run twice.
"""

from __future__ import annotations

import itertools
import secrets
from datetime import datetime, timedelta

from chalicelib.base.clock import iso
from chalicelib.base.config import settings
from chalicelib.store.base import page
from chalicelib.store.models import HistoryItem
from chalicelib.store.records import HistoryEvent, Page, Run

_sequence = itertools.count()  # orders events of one process that share a time (one sweep's demotions)

# a decision on a run: what it was, and the policy it was asked under (its cause)
APPROVED, DENIED, EXPIRED = "approved", "denied", "expired"
FIRST_CALL, EVERY_CALL = "first_call", "every_call"
EXPIRY_ACTOR = "nobody"  # a wait that expired undecided


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


def decision_item(run: Run, action: str, actor: str, at: datetime) -> HistoryItem:
    """The event of a person's decision on `run` (or of its wait expiring): who decided (the
    console user, the admin token's label; never a secret), the tool, the run and the policy it
    was asked under. One per run: its id is the run's."""
    cause = EVERY_CALL if run.approval_policy == EVERY_CALL else FIRST_CALL
    return HistoryItem(
        agent_id=run.agent_id,
        event_id=f"{iso(at)}#run#{run.run_id}",
        vendor=run.vendor,
        name=run.name,
        action=action,
        cause=cause,
        actor=actor,
        at=at,
        run_id=run.run_id,
        ttl=at + timedelta(days=settings().history_retention_days),
    )



def list_events(agent_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The agent's events, newest first."""
    return page(HistoryItem, agent_id, limit=limit, cursor=cursor, record=history_record, scan_index_forward=False)


def history_record(item: HistoryItem) -> HistoryEvent:
    """The event an item records."""
    return HistoryEvent(
        vendor=item.vendor,
        name=item.name,
        action=item.action,
        cause=item.cause,
        actor=item.actor,
        at=item.at,
        run_id=item.run_id,
    )
