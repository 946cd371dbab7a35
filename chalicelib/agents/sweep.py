"""The rule: every five minutes, for each agent with something due, demote what it left idle,
then what exceeds its cap; never while it has a run in flight, and never a pinned tool (pinned
tools count toward the cap, but the cap's candidates skip them; only a revoked connection demotes
one; see `workingset` for pins).

Finding the work costs the same for 10 agents or 100,000: only promotions whose idle deadline
has passed (the sharded `due` index, which pinned promotions leave: the sweep never reads them), agents flagged for a whole review (the sparse
`to_review` index: over the cap, settings changed, a connection revoked) and agents with an
unannounced change (the sparse `outbox` index) are read, and the registered MCP servers (the
sparse `upstreams` index, to sync them hourly): 4 x SHARDS = 16 queries when nothing is due. Each agent found costs one Query plus one transaction per demotion, so a sweep with D
due demotions is O(D) (measured: 12 + 2 x D calls; bench/sweep_scale.py). More agents than
one Lambda should handle go out in batches to workers (`dispatch`).

The guard, as a timeline of one demotion (the condition is evaluated by DynamoDB in the same
transaction that removes the promotion, counts the set and appends the history event):

    sweep reads agent A: lease_rev = 7, no unexpired lease, tool T last used at L, T not pinned
        |                                   a run of A starts: lease_rev 7 -> 8 (same write
        |                                   as its run item), or T is used: last_used_at -> L',
        |                                   or a person pins T: pinned_at set
        v
    sweep writes: delete T  IF  T.last_used_at = L  AND  T.pinned_at absent  AND  A.lease_rev = 7
        -> cancelled: the run (or the use, or the pin) wins; the sweep reports it held and moves
           on to the next agent, without retrying. What it could not demote stays due for a later
           sweep (a pinned tool stays only until the sweep sees it pinned).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from chalicelib.agents import workingset
from chalicelib.base import log
from chalicelib.base.causes import Action, Cause
from chalicelib.base.config import settings
from chalicelib.calls import run_ends
from chalicelib.catalog import imports, upstreams
from chalicelib.net import notify
from chalicelib.store import agents as agent_store
from chalicelib.store import queues
from chalicelib.store import sweep as sweep_store
from chalicelib.store.agents import DemotionGuard, News
from chalicelib.store.records import AgentState, HistoryEvent, Promotion

RULE = "rule"  # the actor of the rule's demotions in history
INLINE_AGENTS = 200  # more agents than this are handed to workers in batches
BATCH = 25

Dispatch = Callable[[list[list[str]]], None]


@dataclass
class Report:
    """What one sweep did: the demotions it made and the ones it held back (and why), the agents
    it could not review (tried again at the next sweep), and what it did to runs."""

    demoted: list[dict[str, str]] = field(default_factory=list)
    held: list[dict[str, str]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    runs: dict[str, int] = field(default_factory=dict)
    dispatched: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The shape `POST /v1/sweep` answers."""
        return {"demoted": self.demoted, "held": self.held, "failed": self.failed, "runs": self.runs,
                "dispatched": self.dispatched}


def run(now: datetime, *, account_id: str | None = None, dispatch: Dispatch | None = None) -> Report:
    """One sweep over every agent with something due (or only `account_id`'s agents)."""
    with _logged("sweep", account_id=account_id) as (report, line):
        # each step alone: a failing one is logged, and the rest of the rule still runs
        line["drained"] = _step(report, "drain", notify.drain, 0)  # changes a crash left unannounced
        report.runs = _step(report, "runs", lambda: run_ends.sweep_runs(now, account_id=account_id), {})
        line["upstreams_queued"] = _step(report, "upstreams", lambda: upstreams.queue_due(now, account_id=account_id),
                                         0)
        found = {**_step(report, "due", lambda: sweep_store.due_agents(now), {}),
                 **_step(report, "to_review", sweep_store.agents_to_review, {})}
        agent_ids = sorted(agent for agent, account in found.items() if account_id in (None, account))
        line["agents"] = len(agent_ids)
        if dispatch is not None and len(agent_ids) > INLINE_AGENTS:
            dispatch([agent_ids[start:start + BATCH] for start in range(0, len(agent_ids), BATCH)])
            report.dispatched = len(agent_ids)
            return report
        review_all(agent_ids, now, report)
        return report


def queue_dispatch(batches: list[list[str]]) -> None:
    """Hand batches of agents to the sweep workers (a message and a worker invocation per batch,
    ten messages per SQS call)."""
    queues.send(settings().sweep_queue, [{"agent_ids": batch} for batch in batches])


def handle_message(body: str, now: datetime) -> None:
    """One message of the work queue: a batch of a large sweep, the end of a run its Lambda could
    not record (`run_ends.DEFERRED_END`), a batch of imported tools' search vectors
    (`imports.VECTORS`), or an MCP server to sync (`upstreams.SYNC`). Raises while it cannot be handled: SQS tries again,
    and parks it in the dead-letter queue after the last try."""
    message = json.loads(body)
    kind = message.get("type")
    if kind == run_ends.DEFERRED_END:
        run_ends.record_deferred_end(message, now)
    elif kind == imports.VECTORS:
        imports.fill_vectors(message)
    elif kind == upstreams.SYNC:
        upstreams.handle_sync(message, now)
    else:
        handle_batch(message["agent_ids"], now)


def handle_batch(agent_ids: list[str], now: datetime) -> Report:
    """A worker's share of a sweep: the agents of one queued batch."""
    with _logged("sweep.batch") as (report, line):
        line["agents"] = len(agent_ids)
        return review_all(agent_ids, now, report)


def review_all(agent_ids: Iterable[str], now: datetime, report: Report | None = None) -> Report:
    """Apply the rule to each agent in turn (a worker's batch, or the inline sweep), each alone:
    an agent whose review fails (the store, a bug) is reported in `failed` and logged, and the
    next sweep finds it again (its deadlines and flags are still set)."""
    report = report or Report()
    for agent_id in agent_ids:
        try:
            state = agent_store.load_state(agent_id)
            if state is not None:
                review(state, now, report)
        except Exception as error:  # noqa: BLE001 - one agent's failure must not stop the sweep
            log.failure("sweep.agent_failed", error, agent_id=agent_id, left_to="next sweep")
            report.failed.append({"agent_id": agent_id, "error": type(error).__name__})
    return report


def _step(report: Report, name: str, step: Callable[[], Any], fallback: Any) -> Any:
    """One step of a sweep that must not stop the others: its answer, or `fallback` (logged, and
    reported in `failed`)."""
    try:
        return step()
    except Exception as error:  # noqa: BLE001 - the rule goes on without this step; the next sweep tries it again
        log.failure("sweep.step_failed", error, step=name, left_to="next sweep")
        report.failed.append({"step": name, "error": type(error).__name__})
        return fallback


def review(state: AgentState, now: datetime, report: Report) -> None:
    """Idle, then cap, for one agent, every demotion guarded; then the bookkeeping. Pinned tools
    are never idle and never the cap's candidates, but they count toward the cap."""
    agent_id = state.agent.agent_id
    due = [(promotion, cause) for promotion in state.promotions if (cause := _idle_cause(state, promotion, now))]
    if state.in_flight(now):
        report.held += [_entry(agent_id, p, cause.value, reason="run_in_flight") for p, cause in due]
        return  # flags and deadlines stay: a later sweep finds the agent again
    remaining = list(state.promotions)
    excess = len(remaining) - len(due) - state.agent.cap
    never_called = sorted((p for p in remaining
                           if p.last_used_at is None and not p.pinned and not any(p is d for d, _ in due)),
                          key=lambda p: (p.promoted_at, p.name))
    plan = due + [(promotion, Cause.CAP) for promotion in never_called[:max(excess, 0)]]
    for promotion, cause in plan:
        if not _demote(state, promotion, cause, now, report):
            break
        remaining.remove(promotion)
    else:
        _keep_books(state, remaining)
    if len(remaining) < len(state.promotions):
        notify.announce(state, changes=len(state.promotions) - len(remaining), size=len(remaining))


@contextmanager
def _logged(kind: str, **fields: Any) -> Iterator[tuple[Report, dict[str, Any]]]:
    """One line per sweep (or worker batch), however it ends: what it demoted and held back (counted
    as `SweepDemotions` and `SweepHeld`), how long it took, and the error that stopped it."""
    report, line, started = Report(), dict(fields), time.perf_counter()
    try:
        yield report, line
    except Exception as error:
        log.failure(kind, error, metrics=_counts(report), outcome="error", **_summary(report, line, started))
        raise
    log.event(kind, metrics=_counts(report), outcome="ok", **_summary(report, line, started))


def _counts(report: Report) -> list[log.Metric]:
    return [log.Metric("SweepDemotions", len(report.demoted)), log.Metric("SweepHeld", len(report.held)),
            log.Metric("SweepFailures", len(report.failed) + report.runs.get("failed", 0)),
            log.Metric("RunsExpired", report.runs.get("expired", 0))]


def _summary(report: Report, line: dict[str, Any], started: float) -> dict[str, Any]:
    return {**line, "demoted": len(report.demoted), "held": len(report.held), "failed": len(report.failed),
            "runs": report.runs, "dispatched": report.dispatched, "duration_ms": log.elapsed_ms(started)}


def _idle_cause(state: AgentState, promotion: Promotion, now: datetime) -> Cause | None:
    if promotion.due_cause:
        return Cause(promotion.due_cause)  # a revoked connection demotes a pinned tool too
    if promotion.pinned:
        return None
    if workingset.idle_deadline(state, promotion.last_used_at or promotion.promoted_at) < now:
        return Cause.IDLE
    return None


def _demote(state: AgentState, promotion: Promotion, cause: Cause, now: datetime, report: Report) -> bool:
    agent_id = state.agent.agent_id
    event = HistoryEvent(promotion.vendor, promotion.name, action=Action.DEMOTED.value, cause=cause.value, actor=RULE,
                         at=_not_before_what_it_judged(state, now))
    guard = DemotionGuard(lease_rev=state.lease_rev, last_used_at=promotion.last_used_at)
    news = News(webhook=bool(state.webhook_url))
    if agent_store.remove_promotion(agent_id, promotion.vendor, promotion.name, event, news=news, guard=guard,
                                    pinned=promotion.pinned):
        report.demoted.append(_entry(agent_id, promotion, cause.value))
        return True
    report.held.append(_entry(agent_id, promotion, cause.value, reason="changed_since_read"))
    return False


def _not_before_what_it_judged(state: AgentState, now: datetime) -> datetime:
    """When a demotion is recorded: `now`, the sweep's clock read as it started, unless the
    working set it judged changed after that (a promotion that lands while the sweep runs, and
    puts the agent over its cap); History then lists the demotion after its cause."""
    changes = [moment for p in state.promotions for moment in (p.promoted_at, p.last_used_at, p.pinned_at) if moment]
    return max([now, *changes])


def _keep_books(state: AgentState, remaining: list[Promotion]) -> None:
    """Correct idle deadlines that no longer match the settings (so the due index does not keep
    returning them), take pinned tools out of the index (a use that raced a pin put one back),
    and drop the review flag the sweep acted on."""
    for promotion in remaining:
        if promotion.pinned:
            if promotion.due_at is not None and not promotion.due_cause:
                sweep_store.leave_due(state.agent.agent_id, promotion.vendor, promotion.name)
            continue
        deadline = workingset.idle_deadline(state, promotion.last_used_at or promotion.promoted_at)
        if promotion.due_at != deadline:
            sweep_store.move_deadline(state.agent.agent_id, promotion.vendor, promotion.name, deadline,
                                      last_used_at=promotion.last_used_at)
    if state.review_token:
        sweep_store.clear_review(state.agent.agent_id, state.review_token)


def _entry(agent_id: str, promotion: Promotion, cause: str, *, reason: str | None = None) -> dict[str, str]:
    entry = {"agent_id": agent_id, "vendor": promotion.vendor, "name": promotion.name, "cause": cause}
    if reason is not None:
        entry["reason"] = reason
    return entry
