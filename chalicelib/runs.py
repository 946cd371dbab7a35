"""Calling a tool as a durable run: validate, wait for a person where a write needs one, hold a
lease while in flight, execute once, keep the result for `get_run`.

A run's life, and what holds its agent in flight (no demotion while a lease is unexpired):

    call ──(write, never approved)──> awaiting_approval ──approve──> running ──> succeeded | failed
      │                                   │  lease: approval TTL       lease: vendor timeout + margin
      │                                   ├──deny──> denied
      │                                   └──lease runs out──> expired
      └──(read, dry run, or approved)──> running ──> succeeded | failed
"""

from __future__ import annotations

import json
import secrets
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from chalicelib import connections, notify, toolbox, vendor
from chalicelib.clock import utcnow
from chalicelib.config import settings
from chalicelib.errors import Conflict, InvalidInput, NotFound, WorksetError
from chalicelib.store import runs as run_store
from chalicelib.store.records import AgentState, Page, Run
from chalicelib.toolbox import Tool
from chalicelib.validation import check_instance
from chalicelib.workingset import idle_deadline
from chalicelib.vendor import Outcome

AWAITING = run_store.AWAITING
RUNNING = run_store.RUNNING
FINISHED = frozenset({"succeeded", "failed", "denied", "expired"})
MAX_STORED_RESULT = 300_000  # DynamoDB items hold 400 KB; a bigger answer is kept clipped


class RunNotFound(NotFound):
    """No such run for this caller (another agent's or account's runs are not found)."""

    code = "run_not_found"


def call(state: AgentState, vendor_name: str, name: str, arguments: Any, *, dry_run: bool,
         now: datetime) -> Outcome:
    """Call a tool for an agent. Unknown tools raise ToolNotFound; every other failure is an
    error Outcome. A first-class call may pass `dryRun` among its arguments unless the tool's own
    schema has a field of that name."""
    tool = toolbox.resolve(state.agent.account_id, vendor_name, name)
    arguments, dry_run = _split_dry_run(tool, arguments, dry_run)
    try:
        check_instance(tool.spec.input_schema, arguments)
    except WorksetError as error:
        return vendor.failure(error)
    # a call is a use of a promoted tool: its idle deadline moves to a window from now
    use_due_at = idle_deadline(state, now) if state.promotion(vendor_name, name) is not None else None
    if tool.spec.writes and not dry_run and not state.is_approved(vendor_name, name):
        lease = now + timedelta(seconds=settings().approval_ttl_seconds)
        run = _new_run(state, tool, arguments, AWAITING, lease, now, dry_run=False)
        run_store.start(run, use_due_at=use_due_at)
        return waiting(run)
    run = _new_run(state, tool, arguments, RUNNING, now + _running_lease(), now, dry_run=dry_run)
    run_store.start(run, use_due_at=use_due_at)
    return _execute(run, tool)


def approve(account_id: str, run_id: str, approver: str, now: datetime) -> Run:
    """Approve a waiting run: remember the approval for its agent and tool, then execute it
    exactly once (a second approval, concurrent or late, is a conflict)."""
    run = _account_run(account_id, run_id, now)
    _must_wait(run)
    if not run_store.approve(run, approver, now + _running_lease(), now):
        raise Conflict(f"run {run_id} was decided already")
    tool = toolbox.resolve_version(account_id, run.vendor, run.name, run.version)
    _execute(run, tool)
    finished = _account_run(account_id, run_id, utcnow())
    notify.run_finished(finished)
    return finished


def deny(account_id: str, run_id: str, approver: str, now: datetime) -> Run:
    """Deny a waiting run: it ends without reaching the vendor."""
    run = _account_run(account_id, run_id, now)
    _must_wait(run)
    if not run_store.deny(run, approver, now):
        raise Conflict(f"run {run_id} was decided already")
    denied = _account_run(account_id, run_id, now)
    notify.run_finished(denied)
    return denied


def get_for_agent(state: AgentState, run_id: str, now: datetime) -> Run:
    """One of this agent's runs; anyone else's is not found."""
    run = run_store.get(run_id)
    if run is None or run.agent_id != state.agent.agent_id:
        raise RunNotFound(f"no run {run_id}")
    return expire_if_due(run, now)


def get_for_account(account_id: str, run_id: str, now: datetime) -> Run:
    """One of this account's runs; another account's is not found."""
    return _account_run(account_id, run_id, now)


def list_for_agent(agent_id: str, *, limit: int, cursor: str | None) -> Page:
    """An agent's runs, newest first."""
    return run_store.list_for_agent(agent_id, limit=limit, cursor=cursor)


def list_pending(account_id: str, *, limit: int, cursor: str | None, now: datetime) -> Page:
    """Runs waiting for a person, oldest first (those whose wait ran out are left out)."""
    page = run_store.list_pending(account_id, limit=limit, cursor=cursor)
    return Page(items=[run for run in page.items if run.lease_expires_at > now], next=page.next)


def waiting(run: Run) -> Outcome:
    """The answer for a call that waits on a person: not a failure."""
    return Outcome(
        structured={"status": AWAITING, "run_id": run.run_id, "approval_url": approval_url(run.run_id)},
        status=AWAITING,
        run_id=run.run_id,
    )


def approval_url(run_id: str) -> str:
    """Where a person approves or denies a run."""
    return f"{settings().public_url}/console/approvals/{run_id}"


def _execute(run: Run, tool: Tool) -> Outcome:
    """Send (or preview) the run's request and record how it ended; never raises."""
    try:
        credential = None
        if tool.spec.connection:
            credential = connections.credential(run.account_id, tool.spec.connection, tool.spec.request.url)
        outcome = vendor.perform(vendor.build(tool, run.input, credential), dry_run=run.dry_run)
    except WorksetError as error:
        outcome = vendor.failure(error)
    stored = _storable(outcome.structured)
    if outcome.is_error:
        run_store.finish(run, "failed", utcnow(), error=stored)
    else:
        run_store.finish(run, "succeeded", utcnow(), result=stored)
    return Outcome(outcome.structured, outcome.is_error, outcome.status, run_id=run.run_id)


def _new_run(state: AgentState, tool: Tool, arguments: dict[str, Any], status: str, lease: datetime,
             now: datetime, *, dry_run: bool) -> Run:
    return Run(
        run_id=f"run{secrets.token_hex(10)}", agent_id=state.agent.agent_id, account_id=state.agent.account_id,
        vendor=tool.spec.vendor, name=tool.spec.name, version=tool.version.version, input=arguments,
        status=status, created_at=now, updated_at=now, lease_expires_at=lease, dry_run=dry_run,
    )


def _running_lease() -> timedelta:
    config = settings()
    return timedelta(seconds=config.vendor_timeout_seconds + config.lease_margin_seconds)


def _split_dry_run(tool: Tool, arguments: Any, dry_run: bool) -> tuple[dict[str, Any], bool]:
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise InvalidInput("input must be a JSON object", field="input")
    if "dryRun" in arguments and "dryRun" not in tool.spec.input_schema.get("properties", {}):
        arguments = dict(arguments)
        dry_run = arguments.pop("dryRun") is True or dry_run
    return arguments, dry_run


def _account_run(account_id: str, run_id: str, now: datetime) -> Run:
    run = run_store.get(run_id)
    if run is None or run.account_id != account_id:
        raise RunNotFound(f"no run {run_id}")
    return expire_if_due(run, now)


def _must_wait(run: Run) -> None:
    if run.status != AWAITING:
        raise Conflict(f"run {run.run_id} is {run.status}, not awaiting approval")


def expire_if_due(run: Run, now: datetime) -> Run:
    """A run whose lease ran out (nobody decided, or its Lambda died) is recorded as expired the
    first time anyone looks; the sweep does the same for runs nobody looks at."""
    if run.status in (AWAITING, RUNNING) and run.lease_expires_at <= now:
        if run_store.expire(run, now) and run.status == AWAITING:
            notify.run_finished(replace(run, status="expired"))
        return run_store.get(run.run_id) or run
    return run


def _storable(structured: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(structured)
    if len(text) <= MAX_STORED_RESULT:
        return structured
    return {"result": text[:MAX_STORED_RESULT], "truncated": True}
