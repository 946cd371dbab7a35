"""Runs, and the writes that keep an agent's in-flight state exact.

Every run holds a lease on its agent's settings item (`leases[run_id] = expiry`) from the
moment it starts (or starts waiting for a person) until it ends, written in the same
transaction as the run's own change. A run that starts also moves `lease_rev` on, which is what
the sweep's demotions are conditioned on.

A run is in the sparse `to_sweep` index while the sweep may have to act on it: live, at its
lease's end (found there if its Lambda dies), and, once ended after waiting on a person, until
its `run_finished` news is handed to the webhook queue (`unannounced`, at its end).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pynamodb.exceptions import DoesNotExist

from chalicelib.base.config import settings
from chalicelib.base.outcomes import RunStatus
from chalicelib.store import history
from chalicelib.store.agents import due_fields
from chalicelib.store.base import ConditionFailed, key_ok, page, transaction, update_if
from chalicelib.store.models import (
    AGENT_SK,
    SHARDS,
    AgentSettingsItem,
    ApprovalItem,
    HistoryItem,
    PromotionItem,
    RunItem,
    RunResultItem,
    approval_sk,
    connection_key,
    promotion_sk,
    shard,
)
from chalicelib.store.records import ALLOW, DENY, Page, Run, RunToSweep

INLINE_RESULT_BYTES = 4096  # a result up to this size rides in the run item itself
RESULT_SUFFIX = "#result"


def start(run: Run, *, use_due_at: datetime | None, pinned: bool = False) -> None:
    """Write the run, take its lease, and (for a promoted tool, `use_due_at` given) record the use
    and move the tool's idle deadline, atomically. A `pinned` tool records the use only: it stays
    out of the `due` index.

    A promotion that was demoted meanwhile is no reason to refuse the run: the use is dropped.
    """
    try:
        _start(run, use_due_at=use_due_at, pinned=pinned)
    except ConditionFailed as failure:
        # items go as [put run, update agent, update promotion]: the last one is the use
        if not (use_due_at and failure.reasons[-1:] == ["ConditionalCheckFailed"]):
            raise
        _start(run, use_due_at=None)


def _start(run: Run, *, use_due_at: datetime | None, pinned: bool = False) -> None:
    with transaction() as write:
        write.save(_item(run), condition=RunItem.run_id.does_not_exist())
        write.update(
            AgentSettingsItem(agent_id=run.agent_id, sk=AGENT_SK),
            actions=[
                AgentSettingsItem.leases[run.run_id].set(run.lease_expires_at.timestamp()),
                AgentSettingsItem.lease_rev.add(1),
            ],
            condition=AgentSettingsItem.agent_id.exists(),
        )
        if use_due_at is not None:
            due = {} if pinned else due_fields(run.agent_id, use_due_at)
            write.update(
                PromotionItem(agent_id=run.agent_id, sk=promotion_sk(run.vendor, run.name)),
                actions=[PromotionItem.last_used_at.set(run.created_at),
                         *(getattr(PromotionItem, key).set(value) for key, value in due.items())],
                condition=PromotionItem.sk.exists(),
            )


def finish(run: Run, status: RunStatus, now: datetime, *, result: dict[str, Any] | None = None,
           error: dict[str, Any] | None = None, announce: bool = False, after_expiry: bool = False) -> bool:
    """End a running run with its result and release its lease. False if it was not running
    (nor, `after_expiry`, expired: a late record of the truth replaces a sweep's guess).
    `announce` keeps it in the `to_sweep` index until its `run_finished` news is handed over.

    A result (or error) over INLINE_RESULT_BYTES is written first, on its own, as the run's
    RunResultItem; the transaction then only flips the run's status and frees the lease, so a
    large answer costs one plain write instead of a doubled one (and no index copies it).
    """
    actions = [RunItem.status.set(status), RunItem.updated_at.set(now)]
    if len(json.dumps([result, error])) > INLINE_RESULT_BYTES:
        RunResultItem(run_id=_result_key(run.run_id), result=result, error=error, ttl=_expiry(run)).save()
        actions.append(RunItem.result_apart.set(True))
    else:
        actions += [RunItem.result.set(result)] if result is not None else []
        actions += [RunItem.error.set(error)] if error is not None else []
    code = _error_code(error)
    if code is not None:
        actions.append(RunItem.error_code.set(code))  # what a connection's recent calls show
    condition = (RunItem.status.is_in(RunStatus.RUNNING, RunStatus.EXPIRED) if after_expiry
                 else RunItem.status == RunStatus.RUNNING)
    return _end(run, actions, condition, now, announce=announce)


def approve(run: Run, approver: str, lease_expires_at: datetime, now: datetime, *, shape: dict[str, Any],
            remember: bool = True) -> bool:
    """Move a waiting run to running and (`remember`) remember the approval for its agent, tool and
    request shape (replacing any earlier decision on that tool).

    Only one of any number of concurrent approvals wins (False for the others).
    """
    try:
        with transaction() as write:
            write.update(
                RunItem(run_id=run.run_id),
                actions=[
                    RunItem.status.set(RunStatus.RUNNING),
                    RunItem.decided_by.set(approver),
                    RunItem.updated_at.set(now),
                    RunItem.lease_expires_at.set(lease_expires_at),
                    RunItem.sweep_at.set(lease_expires_at),
                    RunItem.pending_account_id.remove(),
                ],
                condition=(RunItem.status == RunStatus.AWAITING) & (RunItem.lease_expires_at > now),
            )
            if remember:
                write.save(_decision(run, ALLOW, approver, now, shape))
            _save_event(write, history.decision_item(run, history.APPROVED, approver, now))
            write.update(
                AgentSettingsItem(agent_id=run.agent_id, sk=AGENT_SK),
                actions=[AgentSettingsItem.leases[run.run_id].set(lease_expires_at.timestamp())],
                condition=AgentSettingsItem.agent_id.exists(),
            )
    except ConditionFailed:
        return False
    return True


def deny(run: Run, approver: str, now: datetime, *, shape: dict[str, Any]) -> bool:
    """End a waiting run without executing it, and let the denial stand for its agent, tool and
    request shape. False if it was not waiting any more."""
    actions = [RunItem.status.set(RunStatus.DENIED), RunItem.updated_at.set(now), RunItem.decided_by.set(approver),
               RunItem.pending_account_id.remove()]
    return _end(run, actions, RunItem.status == RunStatus.AWAITING, now, announce=True,
                also=_decision(run, DENY, approver, now, shape),
                event=history.decision_item(run, history.DENIED, approver, now))


def expire(run: Run | RunToSweep, now: datetime, *, cutoff: datetime, announce: bool) -> bool:
    """End a run whose lease ran out by `cutoff` (a wait nobody decided, or a Lambda that died
    mid-run) and was still in the status it was read in; `announce` as for `finish`. A wait's
    expiry (`run` read in full) is an event in its agent's History, in the same transaction."""
    actions = [RunItem.status.set(RunStatus.EXPIRED), RunItem.updated_at.set(now), RunItem.pending_account_id.remove()]
    condition = (RunItem.status == run.status) & (RunItem.lease_expires_at <= cutoff)
    event = (history.decision_item(run, history.EXPIRED, history.EXPIRY_ACTOR, now)
             if isinstance(run, Run) and run.status == RunStatus.AWAITING else None)
    return _end(run, actions, condition, now, announce=announce, event=event)


def to_sweep(now: datetime) -> list[RunToSweep]:
    """Runs the sweep may have to act on now: live runs whose lease ended by `now`, ended runs
    whose news is still to hand over. SHARDS queries, whatever the fleet's size."""
    return [RunToSweep(item.run_id, item.agent_id, item.account_id, item.status, item.lease_expires_at,
                       bool(item.unannounced), item.decided_by)
            for index in range(SHARDS) for item in RunItem.to_sweep.query(f"s{index}", RunItem.sweep_at <= now)]


def announced(run_id: str) -> bool:
    """The run's `run_finished` news is with the webhook queue: it leaves the `to_sweep` index."""
    return update_if(RunItem(run_id=run_id),
                     [RunItem.unannounced.remove(), RunItem.sweep_shard.remove(), RunItem.sweep_at.remove()],
                     RunItem.unannounced.exists())


def _end(run: Run | RunToSweep, actions: list[Any], condition: Any, now: datetime, *, announce: bool,
         also: ApprovalItem | None = None, event: HistoryItem | None = None) -> bool:
    """The run's change and its lease released, atomically; it stays in `to_sweep` (at `now`)
    only when its end is news still to hand over."""
    if announce:
        actions = [*actions, RunItem.unannounced.set(True), RunItem.sweep_at.set(now)]
    else:
        actions = [*actions, RunItem.sweep_shard.remove(), RunItem.sweep_at.remove()]
    try:
        with transaction() as write:
            write.update(RunItem(run_id=run.run_id), actions=actions, condition=condition)
            write.update(
                AgentSettingsItem(agent_id=run.agent_id, sk=AGENT_SK),
                actions=[AgentSettingsItem.leases[run.run_id].remove()],
            )
            if also is not None:
                write.save(also)
            if event is not None:
                _save_event(write, event)
    except ConditionFailed:
        return False
    return True


def _save_event(write: Any, event: HistoryItem) -> None:
    """A decision's History event, in the decision's own transaction; never over another."""
    write.save(event, condition=HistoryItem.event_id.does_not_exist())


def _decision(run: Run, decision: str, approver: str, now: datetime, shape: dict[str, Any]) -> ApprovalItem:
    return ApprovalItem(
        agent_id=run.agent_id, sk=approval_sk(run.vendor, run.name), vendor=run.vendor, name=run.name,
        approved_by=approver, approved_at=now, decision=decision, version=run.version, shape=shape,
    )


def get(run_id: str) -> Run | None:
    """A run by id with its result, or None (also once its retention has passed: DynamoDB's TTL
    deletes it some time later)."""
    if not key_ok(run_id) or RESULT_SUFFIX in run_id:
        return None
    try:
        item = RunItem.get(run_id)
    except DoesNotExist:
        return None
    if _expired(item):
        return None
    run = _record(item)
    if item.result_apart:
        try:
            apart = RunResultItem.get(_result_key(run_id))
        except DoesNotExist:  # expired with the run, or a write that never landed
            return run
        run = replace(run, result=apart.result, error=apart.error)
    return run


def approval_policies(run_ids: list[str]) -> dict[str, str | None]:
    """Run id -> the policy its wait was asked under, in batch reads (the pending index does not
    project it: the runs of a page are read for it, 100 keys a call)."""
    keys = [run_id for run_id in dict.fromkeys(run_ids) if key_ok(run_id)]
    if not keys:
        return {}
    return {item.run_id: item.approval_policy
            for item in RunItem.batch_get(keys, attributes_to_get=["run_id", "approval_policy"])}


def list_for_agent(agent_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """An agent's runs, newest first, as summaries (no input or result: `get` has them)."""
    return page(RunItem, agent_id, index=RunItem.by_agent, limit=limit, cursor=cursor, record=_record,
                scan_index_forward=False)


def list_pending(account_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The account's runs waiting for a person, oldest first."""
    return page(RunItem, account_id, index=RunItem.pending_by_account, limit=limit, cursor=cursor, record=_record)


def _item(run: Run) -> RunItem:
    return RunItem(
        run_id=run.run_id, agent_id=run.agent_id, account_id=run.account_id, vendor=run.vendor,
        name=run.name, version=run.version, input=run.input, dry_run=run.dry_run, status=run.status,
        created_at=run.created_at, updated_at=run.updated_at, lease_expires_at=run.lease_expires_at,
        pending_account_id=run.account_id if run.status == RunStatus.AWAITING else None, ttl=_expiry(run),
        sweep_shard=shard(run.run_id, SHARDS), sweep_at=run.lease_expires_at,
        connection_key=connection_key(run.account_id, run.connection_id) if run.connection_id else None,
        approval_policy=run.approval_policy,
    )


def _error_code(error: dict[str, Any] | None) -> str | None:
    """The code of a run's error (`{"error": {"code": ...}}`, as a tool result carries it)."""
    inner = error.get("error", error) if isinstance(error, dict) else None
    code = inner.get("code") if isinstance(inner, dict) else None
    return code[:64] if isinstance(code, str) else None


def _expiry(run: Run) -> datetime:
    return run.created_at + timedelta(days=settings().run_retention_days)


def _expired(item: RunItem) -> bool:
    return item.ttl is not None and item.ttl <= datetime.now(UTC)


def _result_key(run_id: str) -> str:
    return f"{run_id}{RESULT_SUFFIX}"


def _record(item: RunItem) -> Run:
    return Run(
        run_id=item.run_id, agent_id=item.agent_id, account_id=item.account_id, vendor=item.vendor,
        name=item.name, version=int(item.version), input=item.input or {}, status=item.status,
        created_at=item.created_at, updated_at=item.updated_at, lease_expires_at=item.lease_expires_at,
        dry_run=bool(item.dry_run), result=item.result, error=item.error, decided_by=item.decided_by,
        connection_id=item.connection_key.partition("#")[2] if item.connection_key else None,
        approval_policy=item.approval_policy,
    )
