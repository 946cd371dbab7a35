"""The MCP server: one stateless POST, a method table per revision, and the two tiers of
failure (JSON-RPC errors for bad requests, `isError` results for failed tool calls)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from chalicelib.agents import workingset
from chalicelib.base import jsontext, log
from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.base.errors import ListenLimit, WorksetError
from chalicelib.base.outcomes import Outcome, RunStatus, failure, tool_result
from chalicelib.calls import runs
from chalicelib.catalog import usage
from chalicelib.identity import accounts
from chalicelib.mcp import approvals, extensions, tasks
from chalicelib.mcp.metatools import INSTRUCTIONS, META_TOOLS, Call, listed, split_name
from chalicelib.net import protocol
from chalicelib.net.protocol import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    ProtocolError,
    Request,
)
from chalicelib.oauth import discovery
from chalicelib.store.records import AgentState

SERVER_INFO = {"name": "workset", "version": "0.1.0"}
SUBSCRIPTION_META = "io.modelcontextprotocol/subscriptionId"
LIST_TTL_MS = 0  # the list changes whenever the agent promotes or demotes: never serve it stale


@dataclass(frozen=True)
class HttpAnswer:
    """What the route sends back; `events` go first, in one buffered text/event-stream body."""

    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Reply:
    """A handler's result, the messages that must precede it, and whether the call changed the
    caller's working set."""

    result: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    changed: bool = False
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[AgentState, Request, datetime], "dict[str, Any] | Reply"]
LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
LIST_PAGE_BYTES = 1_000_000  # a tools/list page ends past this: far under Lambda's 6 MB answer
LIST_CURSOR = "tools-from-"
LISTEN_LIMITED = -32029  # the account holds its most listens at once (WORKSET_MAX_LISTENS_PER_ACCOUNT)


def handle(raw: bytes, headers: Mapping[str, str], *, now: datetime | None = None) -> HttpAnswer:
    """Answer one POST to /mcp. `headers` are keyed by lower-case name."""
    presented = accounts.bearer(headers.get("authorization"))
    try:
        state = accounts.authenticate_agent(presented)
    except WorksetError as error:
        # RFC 9728 5.1: the challenge names the resource metadata, which names the authorization
        # server; RFC 6750 3.1: `invalid_token` only when a token was sent
        challenge = discovery.challenge() + (', error="invalid_token"' if presented else "")
        return HttpAnswer(401, protocol.error_body(None, ProtocolError(-32001, error.message)),
                          {"WWW-Authenticate": challenge})
    request_id, modern = None, False
    try:
        message = protocol.parse_message(raw)
        log.note(rpc_method=_metric_method(message.get("method")))
        request_id = message.get("id") if isinstance(message.get("id"), str | int) else None
        modern = protocol.is_modern(message)
        if approvals.is_client_response(message):  # the client's answer to our elicitation/create
            return HttpAnswer(202)
        request = protocol.classify(message, headers)
        if not request.modern and approvals.legacy_declared(headers):  # declared at initialize (stateless)
            request = replace(request, client_capabilities=approvals.LEGACY_URL_CAPABILITIES)
        if request.is_notification:
            return HttpAnswer(202)
        table = MODERN_METHODS if request.modern else LEGACY_METHODS
        handler = table.get(request.method)
        if handler is None:
            raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {request.method}")
        answered = handler(state, request, now or utcnow())
    except ProtocolError as error:
        return HttpAnswer(protocol.error_status(error, modern=modern), protocol.error_body(request_id, error))
    reply = answered if isinstance(answered, Reply) else Reply(answered)
    if request.modern:
        reply.result.setdefault("resultType", "complete")
        reply.result.setdefault("_meta", {protocol.SERVER_INFO_META: SERVER_INFO})
    elif request.method != "initialize":
        _carry_news(state, reply)
    else:
        reply.headers.update(approvals.session_header(request.params.get("capabilities")))
    return HttpAnswer(200, protocol.success(request.id, reply.result), reply.headers, events=reply.events)


def _metric_method(method: Any) -> str:
    """The JSON-RPC method as a metric dimension: one of ours by name, anything else by kind (a
    caller's made-up method must not become a metric of its own)."""
    if not isinstance(method, str):
        return "none"
    if method in LEGACY_METHODS or method in MODERN_METHODS:
        return method
    return "notification" if method.startswith("notifications/") else "unknown"


def _carry_news(state: AgentState, reply: Reply) -> None:
    """2025-11-25 clients hear of a change on the HTTP response: their own change, or one made
    elsewhere since their agent's last response, once (`workingset.tell_client`)."""
    if workingset.tell_client(state, changed=reply.changed):
        reply.events.insert(0, LIST_CHANGED)


def _initialize(state: AgentState, request: Request, now: datetime) -> dict[str, Any]:
    asked = request.params.get("protocolVersion")
    version = asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else protocol.LEGACY
    return {
        "protocolVersion": version,
        "capabilities": _capabilities(),
        "serverInfo": SERVER_INFO,
        "instructions": INSTRUCTIONS,
    }


def _discover(state: AgentState, request: Request, now: datetime) -> dict[str, Any]:
    return {
        "supportedVersions": protocol.SUPPORTED_VERSIONS,
        "capabilities": _capabilities(modern=True),
        "instructions": INSTRUCTIONS,
        "ttlMs": LIST_TTL_MS,
        "cacheScope": "private",
    }


def _ping(state: AgentState, request: Request, now: datetime) -> dict[str, Any]:
    return {}


def _list_tools(state: AgentState, request: Request, now: datetime) -> dict[str, Any]:
    """The agent's tools, a page at a time: a page ends once it passes LIST_PAGE_BYTES, so however
    large the definitions an agent promoted, no answer outgrows what Lambda and API Gateway carry
    (a definition is at most 320 KB; a page holds at least one)."""
    tools = listed(*workingset.promoted_tools_with_policies(state))  # the tools and their policies: one read
    start = _list_offset(request.params.get("cursor"))
    end, size = start, 0
    while end < len(tools) and (end == start or size <= LIST_PAGE_BYTES):
        size += len(jsontext.dumps(tools[end]))
        end += 1
    result: dict[str, Any] = {"tools": tools[start:end]}
    if end < len(tools):
        result["nextCursor"] = f"{LIST_CURSOR}{end}"
    if request.modern:
        result.update(ttlMs=LIST_TTL_MS, cacheScope="private")
    return result


def _list_offset(cursor: Any) -> int:
    """Where a tools/list page starts: 0 without a cursor, else where the page before it ended
    (past the end, when the list shrank meanwhile, an empty last page)."""
    if cursor is None:
        return 0
    offset = cursor.removeprefix(LIST_CURSOR) if isinstance(cursor, str) and cursor.startswith(LIST_CURSOR) else ""
    if not (offset.isascii() and offset.isdigit() and len(offset) <= 6):
        raise ProtocolError(INVALID_PARAMS, "Invalid params: cursor is not one this server gave")
    return int(offset)


def _call_tool(state: AgentState, request: Request, now: datetime) -> Reply:
    name = request.params.get("name")
    arguments = request.params.get("arguments") or {}
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise ProtocolError(INVALID_PARAMS, "Invalid params: tools/call needs a name and an arguments object")
    if approvals.is_retry(request):  # 2026-07-28: the retry of a call answered input_required
        return Reply(approvals.continue_call(state, request, name, arguments, now))
    outcome = _call(state, name, arguments, now)
    if outcome.status == RunStatus.AWAITING and outcome.run_id and tasks.declared(request):
        return Reply(tasks.created(outcome.run_id, state, now))
    if outcome.waiting is not None and approvals.url_mode(request.client_capabilities):
        if request.modern:
            return Reply(approvals.input_required(state, outcome.waiting, name, arguments))
        events, result = approvals.elicit_in_stream(state, outcome.waiting.run_id, now)
        return Reply(result, events=events)
    return Reply(tool_result(outcome), changed=outcome.list_changed)


def _listen(state: AgentState, request: Request, now: datetime) -> Reply:
    """`subscriptions/listen`: the acknowledgement, then (if asked for and it happens while the
    request is held) the agent's next working-set change, then a clean close."""
    asked = request.params.get("notifications")
    wants_tools = isinstance(asked, dict) and asked.get("toolsListChanged") is True
    meta = {SUBSCRIPTION_META: request.id}
    honored = {"toolsListChanged": True} if wants_tools else {}
    events: list[dict[str, Any]] = [{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                                     "params": {"notifications": honored, "_meta": meta}}]
    # the request is held (a buffered gateway cannot stream) until the set changes or the hold
    # ends; the client listens again after the close
    if wants_tools:
        hold = settings().listen_hold_seconds
        try:  # each held listen is one busy Lambda execution: an account holds a bounded number
            with workingset.listen_slot(state, now, hold_seconds=hold):
                changed = workingset.wait_for_change(state, hold_seconds=hold)
        except ListenLimit as error:
            raise ProtocolError(LISTEN_LIMITED, error.message) from error
        if changed:
            events.append({**LIST_CHANGED, "params": {"_meta": meta}})
    return Reply({"resultType": "complete", "_meta": meta}, events=events)


def _call(state: AgentState, name: str, arguments: dict[str, Any], now: datetime) -> Outcome:
    try:
        meta = META_TOOLS.get(name)
        if meta is not None:
            return meta.handler(Call(state, now), arguments)
        ref = split_name(name)
        if ref is None or state.promotion(*ref) is None:
            raise ProtocolError(INVALID_PARAMS, _unknown_tool(name, ref))
        outcome = runs.call(state, *ref, arguments, dry_run=False, now=now)
        usage.credit(state, *ref, now)
        return outcome
    except WorksetError as error:
        return failure(error)


def _unknown_tool(name: str, ref: tuple[str, str] | None) -> str:
    """MCP's answer to a tool that is not in the caller's list: only promoted tools are callable
    by name; the message says how to reach the rest of the toolbox."""
    if ref is None:
        return f"Unknown tool: {name}"
    vendor_name, tool_name = ref
    return (f"Unknown tool: {name} is not in your tool list. Promote it first (promote with vendor "
            f"{vendor_name!r} and name {tool_name!r}), or call it once with run_tool; find_tool lists the toolbox.")


def _capabilities(*, modern: bool = False) -> dict[str, Any]:
    # the working set is declared to both revisions (2025-11-25's ServerCapabilities admits it)
    capabilities: dict[str, Any] = {"tools": {"listChanged": True},
                                    "extensions": {extensions.WORKING_SET: extensions.working_set(LIST_TTL_MS)}}
    if modern:
        capabilities["extensions"][tasks.EXTENSION] = {}
    return capabilities


LEGACY_METHODS: dict[str, Handler] = {
    "initialize": _initialize,
    "ping": _ping,
    "tools/list": _list_tools,
    "tools/call": _call_tool,
}
MODERN_METHODS: dict[str, Handler] = {
    "server/discover": _discover,
    "ping": _ping,
    "tools/list": _list_tools,
    "tools/call": _call_tool,
    "tasks/get": tasks.get,
    "subscriptions/listen": _listen,
}
