"""The MCP server: one stateless POST, a method table per revision, and the two tiers of
failure (JSON-RPC errors for bad requests, `isError` results for failed tool calls)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mcp_types.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from chalicelib import accounts, runs, vendor, workingset
from chalicelib.clock import utcnow
from chalicelib.errors import WorksetError
from chalicelib.mcp import protocol, tasks
from chalicelib.mcp.metatools import INSTRUCTIONS, META_TOOLS, Call, split_name, tool_definition
from chalicelib.mcp.protocol import ProtocolError, Request
from chalicelib.vendor import Outcome
from chalicelib.store.records import AgentState

SERVER_INFO = {"name": "workset", "version": "0.1.0"}
RUN_ID_META = "io.workset/runId"  # every tool call is a run; get_run and the console know it by this id
LIST_TTL_MS = 0  # the list changes whenever the agent promotes or demotes: never serve it stale


@dataclass(frozen=True)
class HttpAnswer:
    """What the route sends back."""

    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[AgentState, Request, datetime], dict[str, Any]]


def handle(raw: bytes, headers: Mapping[str, str], *, now: datetime | None = None) -> HttpAnswer:
    """Answer one POST to /mcp. `headers` are keyed by lower-case name."""
    try:
        state = accounts.authenticate_agent(_bearer(headers.get("authorization")))
    except WorksetError as error:
        return HttpAnswer(
            401,
            protocol.error_body(None, ProtocolError(-32001, error.message)),
            {"WWW-Authenticate": 'Bearer realm="workset", error="invalid_token"'},
        )
    request_id, modern = None, False
    try:
        message = protocol.parse_message(raw)
        request_id = message.get("id") if isinstance(message.get("id"), str | int) else None
        modern = protocol.is_modern(message)
        request = protocol.classify(message, headers)
        if request.is_notification:
            return HttpAnswer(202)
        table = MODERN_METHODS if request.modern else LEGACY_METHODS
        handler = table.get(request.method)
        if handler is None:
            raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {request.method}")
        result = handler(state, request, now or utcnow())
    except ProtocolError as error:
        return HttpAnswer(protocol.error_status(error, modern=modern), protocol.error_body(request_id, error))
    if request.modern:
        result.setdefault("resultType", "complete")
        result.setdefault("_meta", {protocol.SERVER_INFO_META: SERVER_INFO})
    return HttpAnswer(200, protocol.success(request.id, result))


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
    tools = [meta.definition for meta in META_TOOLS.values()]
    tools += [tool_definition(tool) for tool in workingset.promoted_tools(state)]
    result: dict[str, Any] = {"tools": tools}
    if request.modern:
        result.update(ttlMs=LIST_TTL_MS, cacheScope="private")
    return result


def _call_tool(state: AgentState, request: Request, now: datetime) -> dict[str, Any]:
    name = request.params.get("name")
    arguments = request.params.get("arguments") or {}
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise ProtocolError(INVALID_PARAMS, "Invalid params: tools/call needs a name and an arguments object")
    outcome = _call(state, name, arguments, now)
    if outcome.status == runs.AWAITING and outcome.run_id and tasks.declared(request):
        return tasks.created(outcome.run_id, state, now)
    return _tool_result(outcome)


def _call(state: AgentState, name: str, arguments: dict[str, Any], now: datetime) -> Outcome:
    try:
        meta = META_TOOLS.get(name)
        if meta is not None:
            return meta.handler(Call(state, now), arguments)
        ref = split_name(name)
        if ref is None:
            raise ProtocolError(INVALID_PARAMS, f"Unknown tool: {name}")
        return runs.call(state, *ref, arguments, dry_run=False, now=now)
    except WorksetError as error:
        return vendor.failure(error)


def _tool_result(outcome: Outcome) -> dict[str, Any]:
    result = tasks.tool_result(outcome.structured, is_error=outcome.is_error)
    if outcome.run_id is not None:
        result["_meta"] = {RUN_ID_META: outcome.run_id}
    return result


def _capabilities(*, modern: bool = False) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"tools": {"listChanged": False}}
    if modern:
        capabilities["extensions"] = {tasks.EXTENSION: {}}
    return capabilities


def _bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


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
}
