"""A call that waits on a person, answered inside the client where the client says it can take
it (issue 26 section 2). The approval itself always happens on the run's console page, which the
model cannot drive; what the client gets is the page's URL and, when the person decides in time,
the call's own result. Clients that declare neither capability get today's `awaiting_approval`
result (and `get_run`), unchanged.

2026-07-28 (basic/patterns/mrtr, client/elicitation "URL Mode Elicitation Requests"): a client
whose request capabilities declare `elicitation.url` gets an `InputRequiredResult` whose one input
request is a URL-mode `elicitation/create` for the run's page, with a `requestState` sealed to
the agent, the run, the tool's name and its arguments, and expiring with the wait. The retry
(`inputResponses`, the state echoed) never starts a run: it reads the run the first call started,
holding up to `approval_hold_seconds` for the person (when one of the account's slots for approval
holds is free, `wait_for_decision`), and answers the vendor's result, the denial,
or (still waiting) today's `awaiting_approval` result. The console's approval is the one
conditional write that moves the run on and calls the vendor (`runs.approve`), so however a retry
races it, there is one run and one vendor call.

2025-11-25 (client/elicitation, "URL Mode Elicitation Requests", "Completion Notifications"): the
endpoint is stateless, so a client that declared `elicitation.url` in `initialize` is given an
`Mcp-Session-Id` that says so, and its calls carry it. A call that waits then answers, on its own
response stream, a URL-mode `elicitation/create` (its `elicitationId` the run id), and, when the
person decides within the hold, `notifications/elicitation/complete` and the call's result; else
today's `awaiting_approval` result. The client's answer to the elicitation is a JSON-RPC response
POSTed back: accepted (202) and otherwise ignored, as any client answer is (a model could give it).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from chalicelib.agents import workingset
from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.base.errors import ListenLimit, ToolDenied, WorksetError
from chalicelib.base.outcomes import Outcome, RunStatus, Waiting, failure, tool_result
from chalicelib.calls import runs
from chalicelib.net.protocol import INVALID_PARAMS, ProtocolError, Request
from chalicelib.store.records import AgentState, Run

INPUT_KEY = "approval"  # the one input request's key in `inputRequests`
SESSION_PREFIX = "url-elicitation."  # an Mcp-Session-Id given to a 2025-11-25 client that declared URL mode
POLL_SECONDS = 0.25
POLL_MAX_SECONDS = 2.0
STATE_VERSION = 1
LEGACY_URL_CAPABILITIES: dict[str, Any] = {"elicitation": {"url": {}}}  # what such a session id stands for


class ApprovalExpired(WorksetError):
    """Nobody decided within the approval window: the call never reached the vendor."""

    code = "approval_expired"
    status = 409


def url_mode(capabilities: Any) -> bool:
    """True when client capabilities declare URL-mode elicitation (`{"elicitation": {"url": {}}}`;
    an empty `elicitation` object means form mode only)."""
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, Mapping) else None
    return isinstance(elicitation, Mapping) and isinstance(elicitation.get("url"), Mapping) and bool(_key())


def message(vendor: str, name: str) -> str:
    """What the client shows the person beside the URL."""
    return (f"A person must approve this call of {vendor}__{name} before it reaches the vendor. "
            "Open the page to review its input and approve or deny it.")


# -- 2026-07-28 ---------------------------------------------------------------------------------

def input_required(state: AgentState, waiting: Waiting, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The InputRequiredResult for a call that now waits on a person: from the run the call just
    started, as the call knows it (not read again)."""
    params = {"mode": "url", "message": message(waiting.vendor, waiting.name), "url": runs.approval_url(waiting.run_id)}
    return {"resultType": "input_required",
            "inputRequests": {INPUT_KEY: {"method": "elicitation/create", "params": params}},
            "requestState": seal(state, waiting.run_id, waiting.expires_at, name, arguments)}


def is_retry(request: Request) -> bool:
    """A 2026-07-28 tools/call that carries the fields only a retry does."""
    return request.modern and ("requestState" in request.params or "inputResponses" in request.params)


def continue_call(state: AgentState, request: Request, name: str, arguments: dict[str, Any],
                  now: datetime) -> dict[str, Any]:
    """A retry: the run the sealed state names, once the person decided (held up to the hold), as
    the call's result. Never starts a run nor calls a vendor. A state that does not verify, was
    made for another agent, call or arguments, or has expired is invalid params."""
    run_id = unseal(state, request.params.get("requestState"), name, arguments)
    try:
        run = runs.get_for_agent(state, run_id, now)
    except runs.RunNotFound:  # a store fault is ours, not the state's: it is not answered as one
        raise ProtocolError(INVALID_PARAMS, "Invalid params: requestState names no call of yours") from None
    responses = request.params.get("inputResponses")
    answer = responses.get(INPUT_KEY) if isinstance(responses, Mapping) else None
    if isinstance(answer, Mapping) and answer.get("action") == "accept":
        run = wait_for_decision(state, run, settings().approval_hold_seconds)
    # declined or dismissed in the client: the page still decides; the agent can ask get_run
    return tool_result(answer_for(run))


def seal(state: AgentState, run_id: str, expires_at: datetime, name: str, arguments: dict[str, Any]) -> str:
    """The requestState: who, which run, which call, until when; HMAC-SHA256 over all of it."""
    payload = {"v": STATE_VERSION, "agent": state.agent.agent_id, "run": run_id, "call": _digest(name, arguments),
               "exp": int(expires_at.timestamp())}
    body = _b64(json.dumps(payload, separators=(",", ":")).encode())
    return f"{body}.{_mac(body)}"


def unseal(state: AgentState, sealed: Any, name: str, arguments: dict[str, Any]) -> str:
    """The run id a requestState names, once it verifies for this agent and this very call."""
    refused = ProtocolError(INVALID_PARAMS, "Invalid params: requestState is not one this server gave for this call")
    if not isinstance(sealed, str) or len(sealed) > 1024 or sealed.count(".") != 1:
        raise refused
    body, mac = sealed.split(".")
    if not hmac.compare_digest(mac.encode(), _mac(body).encode()):
        raise refused
    try:
        payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError):
        raise refused from None
    if (not isinstance(payload, dict) or payload.get("v") != STATE_VERSION
            or payload.get("agent") != state.agent.agent_id or payload.get("call") != _digest(name, arguments)
            or not isinstance(payload.get("run"), str)):
        raise refused
    if not isinstance(payload.get("exp"), int) or payload["exp"] < time.time():
        raise ProtocolError(INVALID_PARAMS, "Invalid params: requestState has expired; call the tool again")
    return str(payload["run"])


# -- 2025-11-25 ---------------------------------------------------------------------------------

def session_header(capabilities: Any) -> dict[str, str]:
    """The Mcp-Session-Id for an `initialize` that declared URL-mode elicitation (none otherwise:
    such clients keep today's sessionless exchange)."""
    return {"Mcp-Session-Id": f"{SESSION_PREFIX}{secrets.token_urlsafe(12)}"} if url_mode(capabilities) else {}


def legacy_declared(headers: Mapping[str, str]) -> bool:
    """A 2025-11-25 request from a client that declared URL-mode elicitation at `initialize`."""
    session = headers.get("mcp-session-id") or ""
    return session.startswith(SESSION_PREFIX) and bool(_key())


def elicit_in_stream(state: AgentState, run_id: str, now: datetime) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The events and result of a 2025-11-25 call that waits: the URL-mode `elicitation/create`,
    then (decided within the hold) the completion notice and the call's result, else today's
    `awaiting_approval` result."""
    run = runs.get_for_agent(state, run_id, now)
    events: list[dict[str, Any]] = [{
        "jsonrpc": "2.0", "id": f"approval-{run.run_id}", "method": "elicitation/create",
        "params": {"mode": "url", "elicitationId": run.run_id, "url": runs.approval_url(run.run_id),
                   "message": message(run.vendor, run.name)},
    }]
    run = wait_for_decision(state, run, settings().approval_hold_seconds)
    if run.status != RunStatus.AWAITING:
        events.append({"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                       "params": {"elicitationId": run.run_id}})
    return events, tool_result(answer_for(run))


def is_client_response(message: Mapping[str, Any]) -> bool:
    """A JSON-RPC response from the client (its answer to our `elicitation/create`)."""
    return "method" not in message and "id" in message and ("result" in message or "error" in message)


# -- both ---------------------------------------------------------------------------------------

def wait_for_decision(state: AgentState, run: Run, hold_seconds: float) -> Run:
    """The run once it has ended, or as it stands when the hold is over (read at POLL_SECONDS,
    doubling up to POLL_MAX_SECONDS). A hold keeps one Lambda execution busy, as a held listen
    does, so it takes one of the account's slots for approval holds (`workingset.listen_slot`,
    as many as for listens, and apart from them); with none free the run is answered as it stands,
    at once (the agent follows with get_run)."""
    if run.status not in (RunStatus.AWAITING, RunStatus.RUNNING) or hold_seconds <= 0:
        return run
    try:
        with workingset.listen_slot(state, utcnow(), hold_seconds=hold_seconds, pool=workingset.APPROVAL_HOLDS):
            return _poll(state, run, hold_seconds)
    except ListenLimit:
        return run


def _poll(state: AgentState, run: Run, hold_seconds: float) -> Run:
    deadline = time.monotonic() + hold_seconds
    pause = POLL_SECONDS
    while run.status in (RunStatus.AWAITING, RunStatus.RUNNING) and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(pause, left))
        run = runs.get_for_agent(state, run.run_id, utcnow())
        pause = min(pause * 2, POLL_MAX_SECONDS)
    return run


def answer_for(run: Run) -> Outcome:
    """The call's answer as its run stands: the vendor's result, the failure, the denial, the
    expiry, or (undecided, or still running) where it stands, to follow with get_run."""
    if run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED):
        return runs.recorded_answer(run)
    if run.status == RunStatus.DENIED:
        # "a person", as get_run and a standing denial say: who decided is for the account's people
        return _ended(ToolDenied("a person denied this call; it never reached the vendor"), run)
    if run.status == RunStatus.EXPIRED:
        return _ended(ApprovalExpired("nobody approved this call in time; it never reached the vendor"), run)
    if run.status == RunStatus.AWAITING:
        return runs.waiting(run)
    return Outcome({"status": run.status, "run_id": run.run_id}, status=RunStatus(run.status), run_id=run.run_id)


def _ended(error: WorksetError, run: Run) -> Outcome:
    outcome = failure(error)
    outcome.structured["run_id"] = run.run_id
    return outcome


def _digest(name: str, arguments: dict[str, Any]) -> str:
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(f"{name}\n{text}".encode()).hexdigest()[:32]


def _key() -> bytes:
    secret = settings().console_secret
    return hashlib.sha256(b"workset-mcp-request-state\n" + secret.encode()).digest() if secret else b""


def _mac(body: str) -> str:
    return _b64(hmac.new(_key(), body.encode(), hashlib.sha256).digest())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")
