"""Calling a tool as a durable run: validate, wait for a person where a write needs one, hold a
lease while in flight, execute once, keep the result for `get_run`.

A run's life, and what holds its agent in flight (no demotion while a lease is unexpired):

    call ──(write, shape not approved, or every_call)───> awaiting_approval ──approve──> running ──> succeeded | failed
      │                                   │  lease: approval TTL       lease: vendor timeout + margin
      │                                   ├──deny──> denied
      │                                   └──lease runs out──> expired
      ├──(read, dry run, or approved)──> running ──> succeeded | failed
      └──(denied for its request shape)──> tool_denied at once, no run

A tool writes unless its guard (`guards`: the hints a person accepted, never looser ones a new
version claims) is read-only. A person's decision stands for the agent, the tool and its request
shape (`toolbox.request_shape`, the guard included): an approval lets later calls run at once, a
denial refuses them at once, until a version changes the shape (then a person is asked again) or a
person withdraws the decision. Under a tool's `every_call` policy (`policies`) an approval lets only
its own run through: every call waits, whatever was approved before. The vendor call's
deadline always ends before the run's lease, so a live run is never taken for an abandoned one.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from chalicelib.access import credentials
from chalicelib.access.connection_auth import Credential
from chalicelib.base import log
from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.base.errors import (
    AgentRevoked,
    Conflict,
    ConnectionNotInScope,
    InternalError,
    InvalidInput,
    NotFound,
    StoreUnavailable,
    ToolDenied,
    ToolNotFound,
    VendorError,
    VendorTimeout,
    WorksetError,
)
from chalicelib.base.outcomes import Outcome, RunStatus, Waiting, failure
from chalicelib.base.validation import check_instance
from chalicelib.calls import policies, run_ends, vendor
from chalicelib.catalog import toolbox
from chalicelib.identity import accounts
from chalicelib.store import agents as agent_store
from chalicelib.store import runs as run_store
from chalicelib.store.agents import idle_deadline
from chalicelib.store.records import ALLOW, DENY, AgentState, Approval, Page, Run
from chalicelib.tools.definitions import Tool

LEASE_SAFETY_SECONDS = 2.0  # the vendor's deadline ends at least this long before the run's lease


class RunNotFound(NotFound):
    """No such run for this caller (another agent's or account's runs are not found)."""

    code = "run_not_found"


def call(state: AgentState, vendor_name: str, name: str, arguments: Any, *, dry_run: bool,
         now: datetime) -> Outcome:
    """Call a tool for an agent. Unknown tools raise ToolNotFound; every other failure is an
    error Outcome. A first-class call may pass `dryRun` among its arguments unless the tool's own
    schema has a field of that name."""
    # the tool and the approval policies that can apply to it: one read
    tool, settings = toolbox.resolve_with_policies(state.agent.account_id, vendor_name, name)
    arguments, dry_run = _split_dry_run(tool, arguments, dry_run)
    try:
        _check_call(state, tool, arguments)
        return _call_checked(state, tool, arguments, policies.effective(tool, settings), dry_run=dry_run, now=now)
    except WorksetError as error:  # refused, or not recorded (so not sent)
        return failure(error)


def _call_checked(state: AgentState, tool: Tool, arguments: dict[str, Any], policy: str, *, dry_run: bool,
                  now: datetime) -> Outcome:
    """A call that passed its checks: refused by a standing denial, waiting on a person, or run;
    `policy` is the approval policy the tool is held to."""
    vendor_name, name = tool.key
    standing = _standing_decision(state, tool)
    if standing == DENY and not (dry_run and tool.writes):  # a preview of a write reaches nothing
        return failure(ToolDenied(
            f"a person denied this agent's calls of {vendor_name}/{name}; the denial stands until a person "
            "withdraws it in the console"))
    # a call is a use of a promoted tool: its idle deadline moves to a window from now (a pinned
    # tool records the use but stays out of the sweep's due index)
    promotion = state.promotion(vendor_name, name)
    use_due_at = idle_deadline(state, now) if promotion is not None else None
    pinned = promotion is not None and promotion.pinned
    # every_call: a person's earlier approval is never reused (each call is its own run)
    every_call = tool.writes and not dry_run and policy == policies.EVERY_CALL
    if tool.writes and not dry_run and (standing != ALLOW or every_call):
        lease = now + timedelta(seconds=settings().approval_ttl_seconds)
        run = _new_run(state, tool, arguments, RunStatus.AWAITING, lease, now, dry_run=False)
        if every_call:
            run = replace(run, approval_policy=policies.EVERY_CALL)
        _start(run, use_due_at, pinned=pinned)
        log.note(run_id=run.run_id)
        log.event("run.awaiting_approval", metrics=[log.Metric("RunsAwaitingApproval", 1)], run_id=run.run_id,
                  agent_id=run.agent_id, account_id=run.account_id, vendor=run.vendor, tool=run.name)
        return waiting(run)
    run = _new_run(state, tool, arguments, RunStatus.RUNNING, now + _running_lease(), now, dry_run=dry_run)
    _start(run, use_due_at, pinned=pinned)
    return _execute(run, tool)


def approve(account_id: str, run_id: str, approver: str, now: datetime) -> Run:
    """Approve a waiting run: remember the approval for its agent, tool and request shape (unless
    it was asked under `every_call`: then it lets this one call through), then execute it exactly
    once (a second approval, concurrent or late, is a conflict)."""
    run = _account_run(account_id, run_id, now)
    _must_wait(run)
    tool = toolbox.resolve_version(account_id, run.vendor, run.name, run.version)
    shape = toolbox.request_shape(tool)
    remember = run.approval_policy != policies.EVERY_CALL
    if not run_store.approve(run, approver, now + _running_lease(), now, shape=shape, remember=remember):
        raise Conflict(f"run {run_id} was decided already")
    _execute(replace(run, lease_expires_at=now + _running_lease()), tool, waited=True)
    return _account_run(account_id, run_id, utcnow())


def deny(account_id: str, run_id: str, approver: str, now: datetime) -> Run:
    """Deny a waiting run: it ends without reaching the vendor, and later calls of the tool (as it
    requests now) by this agent are refused until a person withdraws the denial."""
    run = _account_run(account_id, run_id, now)
    _must_wait(run)
    shape = toolbox.request_shape(toolbox.resolve_version(account_id, run.vendor, run.name, run.version))
    if not run_store.deny(run, approver, now, shape=shape):
        raise Conflict(f"run {run_id} was decided already")
    denied = _account_run(account_id, run_id, now)
    run_ends.announce_end(denied)
    return denied


@dataclass(frozen=True)
class ShapeChange:
    """What a pending run asks for against the agent's earlier decision on the same tool."""

    decision: Approval
    changes: dict[str, dict[str, Any]]


def change_since_decision(account_id: str, run: Run) -> ShapeChange | None:
    """For a run waiting on a person: the agent's earlier decision on the tool and how the run's
    request shape differs from it (None when no decision was made)."""
    return changes_since_decisions(account_id, [run])[run.run_id]


def changes_since_decisions(account_id: str, waiting: list[Run]) -> dict[str, ShapeChange | None]:
    """`change_since_decision` for each run of a page, reading each agent once."""
    states = {agent_id: agent_store.load_state(agent_id) for agent_id in {run.agent_id for run in waiting}}
    found: dict[str, ShapeChange | None] = {}
    for run in waiting:
        state = states[run.agent_id]
        decision = state.decision(run.vendor, run.name) if state is not None else None
        found[run.run_id] = None
        if decision is None:
            continue
        try:
            tool = toolbox.resolve_version(account_id, run.vendor, run.name, run.version)
        except ToolNotFound:
            continue
        found[run.run_id] = ShapeChange(decision, toolbox.shape_changes(decision.shape,
                                                                        toolbox.request_shape(tool)))
    return found


def decisions(account_id: str, agent_id: str) -> tuple[Approval, ...]:
    """The agent's standing approvals and denials."""
    return accounts.get_state(account_id, agent_id).approvals


def withdraw_decision(account_id: str, agent_id: str, vendor_name: str, name: str) -> None:
    """Withdraw a standing approval or denial: the agent's next call of the tool asks a person."""
    accounts.get_state(account_id, agent_id)
    if not agent_store.remove_decision(agent_id, vendor_name, name):
        raise NotFound(f"no standing decision on {vendor_name}/{name} for agent {agent_id}")


def get_for_agent(state: AgentState, run_id: str, now: datetime) -> Run:
    """One of this agent's runs; anyone else's is not found."""
    run = run_store.get(run_id)
    if run is None or run.agent_id != state.agent.agent_id:
        raise RunNotFound(f"no run {run_id}")
    return run_ends.expire_if_due(run, now)


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


def asked_every_call(listed: list[Run]) -> dict[str, bool]:
    """Run id -> True for the waits asked under `every_call` (their approval is for that call only)."""
    found = run_store.approval_policies([run.run_id for run in listed])
    return {run_id: policy == policies.EVERY_CALL for run_id, policy in found.items()}


def waiting(run: Run) -> Outcome:
    """The answer for a call that waits on a person: not a failure."""
    return Outcome(
        structured={"status": RunStatus.AWAITING, "run_id": run.run_id, "approval_url": approval_url(run.run_id)},
        status=RunStatus.AWAITING,
        run_id=run.run_id,
        waiting=Waiting(run.run_id, run.vendor, run.name, run.lease_expires_at),
    )


def recorded_answer(run: Run) -> Outcome:
    """An ended run's answer as the call itself gave it (for a retry or a task that reads it
    later): the vendor's result or the failure, and an MCP server's own tool result passed on as
    it is, not wrapped as structured content (one GetItem, for the tool's version)."""
    failed = run.status == RunStatus.FAILED
    stored = (run.error if failed else run.result) or {}
    passed_on = isinstance(stored.get("content"), list) and "error" not in stored  # not a failure of ours, nor clipped
    return Outcome(stored, is_error=failed, status=RunStatus(run.status), run_id=run.run_id,
                   mcp=passed_on and _from_upstream(run))


def _from_upstream(run: Run) -> bool:
    try:
        return toolbox.resolve_version(run.account_id, run.vendor, run.name, run.version).spec.upstream is not None
    except ToolNotFound:
        return False


def approval_url(run_id: str) -> str:
    """Where a person approves or denies a run."""
    return f"{settings().public_url}/console/approvals/{run_id}"


def _execute(run: Run, tool: Tool, *, waited: bool = False) -> Outcome:
    """Send (or preview) the run's request and record how it ended; never raises: whatever goes
    wrong, the run ends and its lease is released. A run that `waited` on a person is checked
    again first: its wait may outlive the agent itself (revoked), its connection scope or the host
    allow list it was called under (a run that did not wait was checked by `call` a moment ago)."""
    started, vendor_ms, sent = time.perf_counter(), None, False
    try:
        if waited:  # the tool as it stands now: its source may have withdrawn it meanwhile
            toolbox.resolve(run.account_id, run.vendor, run.name).check_available()
            _check_scope(_live_agent(run.agent_id), tool)
            toolbox.check_reach(run.account_id, tool)
        sent = not (run.dry_run and tool.writes)  # a preview of a write (as guarded) reaches no vendor
        deadline = _deadline(run)
        credential = _credential(run, tool, deadline, preview=not sent)
        request = vendor.build(tool, run.input, credential, account_id=run.account_id)
        sending = time.perf_counter()
        outcome = vendor.perform(request, dry_run=run.dry_run, read_only=not tool.writes,
                                 timeout=_left(deadline))
        if sent and credential is not None and credential.renewable and _unauthorized(outcome):
            # the vendor refused the token: one new token (another call's, or fetched), one retry
            assert tool.spec.connection is not None
            credential = credentials.renew(run.account_id, tool.spec.connection, tool.spec.url, credential,
                                           timeout=_left(deadline))
            outcome = vendor.perform(vendor.build(tool, run.input, credential, account_id=run.account_id),
                                     dry_run=run.dry_run, read_only=not tool.writes, timeout=_left(deadline))
        vendor_ms = log.elapsed_ms(sending) if sent else None
    except WorksetError as error:
        outcome = failure(error)
    except Exception as error:  # noqa: BLE001 - no exception may leave a run running
        log.failure("run_crashed", error, run_id=run.run_id, agent_id=run.agent_id, account_id=run.account_id)
        outcome = failure(InternalError(f"Workset failed while running {run.run_id}; it is logged"))
    answer = run_ends.record(run, outcome, waited=waited, sent=sent)
    _log_run(run, answer, started, vendor_ms, sent=sent)
    return answer


def _log_run(run: Run, outcome: Outcome, started: float, vendor_ms: float | None, *, sent: bool) -> None:
    """The run's one line (never its input or result): how it ended, the vendor's latency, and
    whether a call of the vendor was made and failed (`vendor_metrics`)."""
    error = outcome.structured.get("error") if outcome.is_error else None
    code = error.get("code") if isinstance(error, dict) else None
    latency = [log.Metric("VendorLatency", vendor_ms, "Milliseconds")] if vendor_ms is not None else []
    log.note(run_id=run.run_id)
    log.event("run", metrics=latency + vendor_metrics(error if isinstance(error, dict) else None,
                                                      called=sent and (vendor_ms is not None or code in _VENDOR_CODES)),
              run_id=run.run_id, agent_id=run.agent_id, account_id=run.account_id, vendor=run.vendor, tool=run.name,
              version=run.version, dry_run=run.dry_run, status=RunStatus.ended(is_error=outcome.is_error),
              error_code=code if isinstance(code, str) else None, duration_ms=log.elapsed_ms(started),
              vendor_ms=vendor_ms)


_VENDOR_CODES = (VendorError.code, VendorTimeout.code)


def vendor_metrics(error: dict[str, Any] | None, *, called: bool) -> list[log.Metric]:
    """VendorCalls and VendorFailures for a run that called its vendor (none for a preview, or a
    run refused before the call): a failure is the vendor's, not the caller's: a timeout, a 5xx,
    or no usable answer at all (refused, reset, undecodable); a 4xx is the caller's and counts as a
    call only. Each is counted by stage alone (what the alarm reads: failures / calls): two metric
    series whatever the accounts do. Not by vendor: vendor names are the accounts' to write, and
    every value of a dimension is a CloudWatch series of its own ($0.30 a month), so a hostile
    account inventing thousands of names would bill the operator for each. The run line carries
    the vendor and the account as plain fields; the dashboard's per-vendor table is a Logs
    Insights query over those lines (infra/resources.json), which costs by what it reads."""
    if not called:
        return []
    code = error.get("code") if error is not None else None
    status = error.get("status") if error is not None else None
    failed = code == VendorTimeout.code or (code == VendorError.code and not (isinstance(status, int) and status < 500))
    return [log.Metric("VendorCalls", 1), log.Metric("VendorFailures", int(failed))]


def _deadline(run: Run) -> float:
    """When (on the monotonic clock) the vendor call, token requests included, must be over: before
    the lease ends, so the run is never taken for abandoned."""
    budget = (run.lease_expires_at - utcnow()).total_seconds() - LEASE_SAFETY_SECONDS
    timeout = min(settings().vendor_timeout_seconds, budget)
    if timeout <= 0:
        raise VendorTimeout("the run's time ran out before the vendor was called")
    return time.monotonic() + timeout


def _left(deadline: float) -> float:
    """Seconds left before `deadline`; none left is a timeout (nothing more is sent)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise VendorTimeout("the run's time ran out before the vendor answered")
    return left


def _credential(run: Run, tool: Tool, deadline: float, *, preview: bool) -> Credential | None:
    """The tool's credential (an OAuth token fetched or refreshed within the deadline if need be;
    none for a preview, which would redact it)."""
    if not tool.spec.connection:
        return None
    return credentials.credential(run.account_id, tool.spec.connection, tool.spec.url, timeout=_left(deadline),
                                  preview=preview)


def _unauthorized(outcome: Outcome) -> bool:
    """The vendor answered 401: the token it was sent is no good (any more)."""
    error = outcome.structured.get("error") if outcome.is_error else None
    return isinstance(error, dict) and error.get("code") == "vendor_error" and error.get("status") == 401


def _start(run: Run, use_due_at: datetime | None, *, pinned: bool = False) -> None:
    """Record the run and take its lease before anything is sent; a store failing past its retries
    is a clean error that says the vendor was not called."""
    try:
        run_store.start(run, use_due_at=use_due_at, pinned=pinned)
    except Exception as error:
        log.failure("run.start_failed", error, run_id=run.run_id, agent_id=run.agent_id)
        raise StoreUnavailable("Workset could not record the call, so the vendor was not called; "
                               "try again shortly") from error


def _standing_decision(state: AgentState, tool: Tool) -> str | None:
    """`allow` or `deny` when a person decided this agent's calls of the tool as it requests now;
    None when nobody did (or the decision was for another request shape)."""
    decision = state.decision(*tool.key)
    if decision is None or decision.shape != toolbox.request_shape(tool):
        return None
    return decision.decision


def _check_call(state: AgentState, tool: Tool, arguments: dict[str, Any]) -> None:
    """What refuses a call before it becomes a run: bad input, a connection outside the agent's
    scope, an agent-authored tool whose host no person allows (any longer)."""
    tool.check_available()
    check_instance(tool.spec.input_schema, arguments)
    vendor.check_arguments(tool, arguments)
    _check_scope(state, tool)
    toolbox.check_reach(state.agent.account_id, tool)


def _live_agent(agent_id: str) -> AgentState | None:
    """The agent as it stands now; a revoked one is refused (AgentRevoked): revoking an agent stops
    the calls it left waiting on a person too."""
    state = agent_store.load_state(agent_id)
    if state is not None and state.agent.revoked:
        raise AgentRevoked(f"agent {agent_id} was revoked while its call waited; nothing was sent")
    return state


def _check_scope(state: AgentState | None, tool: Tool) -> None:
    if tool.spec.connection and (state is None or not state.may_use(tool.spec.connection)):
        raise ConnectionNotInScope(f"{tool.spec.vendor}/{tool.spec.name} uses connection {tool.spec.connection}, "
                                   "which is not in this agent's connection scope")


def _new_run(state: AgentState, tool: Tool, arguments: dict[str, Any], status: RunStatus, lease: datetime,
             now: datetime, *, dry_run: bool) -> Run:
    return Run(
        run_id=f"run{secrets.token_hex(10)}", agent_id=state.agent.agent_id, account_id=state.agent.account_id,
        vendor=tool.spec.vendor, name=tool.spec.name, version=tool.version.version, input=arguments,
        status=status, created_at=now, updated_at=now, lease_expires_at=lease, dry_run=dry_run,
        connection_id=tool.spec.connection or None,
    )


def _running_lease() -> timedelta:
    config = settings()
    margin = max(config.lease_margin_seconds, LEASE_SAFETY_SECONDS * 2)
    return timedelta(seconds=config.vendor_timeout_seconds + margin)


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
    return run_ends.expire_if_due(run, now)


def _must_wait(run: Run) -> None:
    if run.status != RunStatus.AWAITING:
        raise Conflict(f"run {run.run_id} is {run.status}, not awaiting approval")


