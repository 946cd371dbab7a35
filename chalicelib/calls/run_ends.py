"""How a run ends: its end recorded (or handed to the work queue when the store will not take it,
and recorded from there), a run whose lease ran out expired, and the end of a run that waited on
a person announced. The sweep's pass over runs is here too. Starting and executing a run is
`runs`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Any

from chalicelib.base import log
from chalicelib.base.clock import SKEW_ALLOWANCE, utcnow
from chalicelib.base.config import settings
from chalicelib.base.errors import OutcomeNotRecorded
from chalicelib.base.outcomes import LIVE, Outcome, RunStatus
from chalicelib.net import notify
from chalicelib.store import queues
from chalicelib.store import runs as run_store
from chalicelib.store.records import Run, RunToSweep

MAX_STORED_RESULT = 300_000  # DynamoDB items hold 400 KB; a bigger answer is kept clipped
DEFERRED_END = "run_end"  # the work queue message that records a run's end later
DEFERRED_OUTCOME_BYTES = 200_000  # an SQS message holds 256 KiB


def record(run: Run, outcome: Outcome, *, waited: bool, sent: bool) -> Outcome:
    """Record the run's end (the store retries transient failures within its budget). When the
    store will not take it, the end goes to the work queue, which records it shortly
    (`record_deferred_end`); when neither will, the caller is told that the vendor was called
    and what it said, and the run is left to expire. Never raises."""
    status = RunStatus.ended(is_error=outcome.is_error)
    stored = _storable(outcome.structured)
    answer = replace(outcome, list_changed=False, run_id=run.run_id)
    try:
        _finish(run, status, utcnow(), stored, announce=waited)
    except Exception as error:  # noqa: BLE001 - the end goes to the work queue instead
        log.failure("run.end_unrecorded", error, metrics=[log.Metric("RunEndsUnrecorded", 1)], run_id=run.run_id,
                    agent_id=run.agent_id, left_to="work queue")
        if _defer_end(run, status, stored, waited=waited):
            return answer
        unrecorded = OutcomeNotRecorded(
            f"Workset could not record the end of run {run.run_id}: the vendor {'was' if sent else 'was not'} "
            "called (its answer is in `outcome`). Do not call again without checking whether it acted; the run "
            "shows as expired once its lease ends.")
        unrecorded.vendor_acted = sent
        return Outcome({"error": unrecorded.to_dict(), "outcome": outcome.structured}, True, RunStatus.FAILED,
                       run_id=run.run_id)
    if waited:
        announce_end(replace(run, status=status))
    return answer


def _finish(run: Run, status: RunStatus, now: datetime, stored: dict[str, Any], *, announce: bool,
            after_expiry: bool = False) -> bool:
    """Record the run's end: a success keeps its answer as the result, a failure as the error."""
    succeeded = status == RunStatus.SUCCEEDED
    return run_store.finish(run, status, now, result=stored if succeeded else None,
                            error=None if succeeded else stored, announce=announce, after_expiry=after_expiry)


def _defer_end(run: Run, status: RunStatus, stored: dict[str, Any], *, waited: bool) -> bool:
    """Hand the run's end to the work queue (SQS keeps it, retries it, and parks it in the
    dead-letter queue if it can never be recorded); False when the queue will not take it."""
    text = json.dumps(stored)
    if len(text) > DEFERRED_OUTCOME_BYTES:
        stored = {"result": text[:DEFERRED_OUTCOME_BYTES], "truncated": True}
    try:
        queues.send(settings().sweep_queue, [{"type": DEFERRED_END, "run_id": run.run_id, "status": status,
                                              "outcome": stored, "announce": waited}])
    except Exception as error:  # noqa: BLE001 - logged; the lease's expiry ends the run
        log.failure("run.end_lost", error, run_id=run.run_id, agent_id=run.agent_id, left_to="lease expiry")
        return False
    log.event("run.end_deferred", run_id=run.run_id, agent_id=run.agent_id, status=status)
    return True


def record_deferred_end(message: dict[str, Any], now: datetime) -> None:
    """Record a run's end that its Lambda could not (a work queue message). Raises while the store
    still fails, so SQS tries again. A run already ended stays as it is; one the sweep expired
    meanwhile gets its true end."""
    run = run_store.get(str(message["run_id"]))
    if run is None or run.status not in (RunStatus.RUNNING, RunStatus.EXPIRED):
        return
    status = message["status"]
    if status not in (RunStatus.SUCCEEDED, RunStatus.FAILED):
        raise ValueError(f"a deferred end with status {status!r}")
    ended = _finish(run, RunStatus(status), now, message["outcome"], announce=bool(message.get("announce")),
                    after_expiry=True)
    if ended and message.get("announce"):
        announce_end(replace(run, status=status))


def announce_end(run: Run | RunToSweep) -> None:
    """Tell the agent's webhook that a run which waited on a person has ended, then take it out of
    the sweep's index; if the queue fails, the sweep announces it later (`sweep_runs`)."""
    if notify.run_finished(run):
        run_store.announced(run.run_id)


def sweep_runs(now: datetime, *, account_id: str | None = None) -> dict[str, int]:
    """The sweep's pass over runs anywhere in the fleet (or only `account_id`'s): expire those
    whose lease ran out (their Lambda died, or nobody decided), announce ends still unannounced.
    O(such runs): the sparse `to_sweep` index holds nothing else, and says enough of each run to
    act on it without reading it. Each run alone: a failure is logged and tried again at the next
    sweep."""
    counts = {"expired": 0, "announced": 0, "failed": 0}
    for found in run_store.to_sweep(now):
        if account_id not in (None, found.account_id):
            continue
        try:
            if found.unannounced:
                announce_end(found)
                counts["announced"] += 1
            elif _expire(found, now):
                counts["expired"] += 1
        except Exception as error:  # noqa: BLE001 - one run's fault must not stop the sweep
            log.failure("sweep.run_failed", error, run_id=found.run_id, agent_id=found.agent_id)
            counts["failed"] += 1
    return counts


def expire_if_due(run: Run, now: datetime) -> Run:
    """A run whose lease ran out (nobody decided, or its Lambda died) is recorded as expired the
    first time anyone looks; the sweep does the same for runs nobody looks at. Answers the run
    as it stands."""
    if run.status in LIVE and run.lease_expires_at <= _cutoff(run.status, now):
        _expire(run, now)
        return run_store.get(run.run_id) or run
    return run


def _expire(run: Run | RunToSweep, now: datetime) -> bool:
    """End a live run whose lease ran out, if it did: a wait when its time is up; a running run
    only after the clock skew allowance too, so a judge whose clock runs ahead never ends a live
    run. The end of a run that waited on a person is announced. False when it was not due or
    ended otherwise. A wait's expiry is recorded in its agent's History (`store.history`)."""
    cutoff = _cutoff(run.status, now)
    if run.status not in LIVE or run.lease_expires_at > cutoff:
        return False
    waited = run.status == RunStatus.AWAITING or run.decided_by is not None  # still waiting, or approved
    if isinstance(run, RunToSweep) and run.status == RunStatus.AWAITING:
        # a wait's expiry is an event in History, which names the tool and policy: one GetItem
        full = run_store.get(run.run_id)
        if full is None or full.status != RunStatus.AWAITING:
            return False
        run = full
    if not run_store.expire(run, now, cutoff=cutoff, announce=waited):
        return False
    if waited:
        announce_end(replace(run, status=RunStatus.EXPIRED))
    return True


def _cutoff(status: str, now: datetime) -> datetime:
    """Leases that ended by this moment have run out: for a wait, now (the person's window is
    exact); for a running run, now less the clock skew allowance."""
    return now if status == RunStatus.AWAITING else now - SKEW_ALLOWANCE


def _storable(structured: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(structured)
    if len(text) <= MAX_STORED_RESULT:
        return structured
    return {"result": text[:MAX_STORED_RESULT], "truncated": True}
