"""Calling a tool: validate the input, build the vendor request, preview or send it, shape the
answer. First-class calls and `run_tool` both come through `call`.

The path is staged so the runs issue slots in: `call` resolves and validates, then hands a
`PreparedCall` to `execute`, which is where a durable run, the approval gate and credential
injection go.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from chalicelib import outbound, toolbox
from chalicelib.config import settings
from chalicelib.errors import InvalidInput, VendorError, WorksetError
from chalicelib.outbound import HttpRequest
from chalicelib.store import agents as agent_store
from chalicelib.store.records import AgentState
from chalicelib.toolbox import SAFE_METHODS, Tool
from chalicelib.validation import check_instance

QUERY_METHODS = frozenset({"GET", "HEAD", "DELETE"})
ERROR_BODY_PREVIEW = 2000


@dataclass(frozen=True)
class Outcome:
    """A call's answer: `structured` is the tool result's structuredContent."""

    structured: dict[str, Any]
    is_error: bool = False
    status: str = "succeeded"


@dataclass(frozen=True)
class PreparedCall:
    """A validated call, ready to preview or send."""

    state: AgentState
    tool: Tool
    arguments: dict[str, Any]
    request: HttpRequest
    dry_run: bool
    redact: frozenset[str] = field(default_factory=frozenset)


def call(state: AgentState, vendor: str, name: str, arguments: Any, *, dry_run: bool, now: datetime) -> Outcome:
    """Call a tool for an agent. Unknown tools raise ToolNotFound; every other failure is an
    error Outcome, never an exception. A first-class call may pass `dryRun` among its arguments
    unless the tool's own schema has a field of that name."""
    tool = toolbox.resolve(state.agent.account_id, vendor, name)
    if isinstance(arguments, dict) and "dryRun" in arguments and "dryRun" not in tool.spec.input_schema.get(
        "properties", {}
    ):
        arguments = dict(arguments)
        dry_run = dry_run or arguments.pop("dryRun") is True
    try:
        prepared = prepare(state, tool, arguments, dry_run=dry_run)
    except WorksetError as error:
        return failure(error)
    if state.promotion(vendor, name) is not None:
        agent_store.mark_used(state.agent.agent_id, vendor, name, now)
    return execute(prepared)


def prepare(state: AgentState, tool: Tool, arguments: Any, *, dry_run: bool) -> PreparedCall:
    """Validate the input against the tool's schema and build the vendor request."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise InvalidInput("input must be a JSON object", field="input")
    check_instance(tool.spec.input_schema, arguments)
    return PreparedCall(state, tool, arguments, build_request(tool, arguments), dry_run)


def execute(prepared: PreparedCall) -> Outcome:
    """Preview a dry run of a method that could write; send everything else."""
    request = prepared.request
    if prepared.dry_run and request.method not in SAFE_METHODS:
        return Outcome(structured={"preview": preview(request, prepared.redact)}, status="preview")
    config = settings()
    try:
        response = outbound.send(
            request,
            timeout=config.vendor_timeout_seconds,
            max_bytes=config.vendor_max_response_bytes,
            allow_private=config.allow_private_network,
        )
    except WorksetError as error:
        return failure(error)
    return _answer(response)


def build_request(tool: Tool, arguments: dict[str, Any]) -> HttpRequest:
    """Fill `{field}` placeholders in the URL (URL-encoded); the rest of the input goes to the
    query string for GET/HEAD/DELETE and to a JSON body otherwise."""
    template = tool.spec.request
    used = template.placeholders()
    filled = template.url.format_map({name: quote(_scalar(arguments[name]), safe="") for name in used})
    rest = {key: value for key, value in arguments.items() if key not in used}
    headers = dict(template.headers)
    body: bytes | None = None
    if template.method in QUERY_METHODS:
        filled = _with_query(filled, rest)
    else:
        body = json.dumps(rest).encode()
        headers["Content-Type"] = "application/json"
    headers.setdefault("Accept", "application/json")
    return HttpRequest(method=template.method, url=filled, headers=headers, body=body)


def preview(request: HttpRequest, redact: frozenset[str] = frozenset()) -> dict[str, Any]:
    """What would be sent, with secret header values replaced."""
    headers = {
        name: ("[redacted]" if name.lower() in redact else value) for name, value in request.headers.items()
    }
    body: Any = None
    if request.body:
        body = json.loads(request.body)
    return {"method": request.method, "url": request.url, "headers": headers, "body": body}


def failure(error: WorksetError) -> Outcome:
    """An error Outcome carrying the error's code and message."""
    return Outcome(structured={"error": error.to_dict()}, is_error=True, status="failed")


def _answer(response: outbound.HttpResponse) -> Outcome:
    payload = _decode(response.body, response.headers.get("content-type", ""))
    if not 200 <= response.status < 300:
        error = VendorError(f"the vendor answered HTTP {response.status}").to_dict()
        return Outcome(
            structured={"error": {**error, "status": response.status, "body": _clip(payload)}},
            is_error=True,
            status="failed",
        )
    structured = payload if isinstance(payload, dict) else {"result": payload}
    if response.truncated:
        structured = {"result": _clip(payload), "truncated": True}
    return Outcome(structured=structured)


def _decode(body: bytes, content_type: str) -> Any:
    text = body.decode("utf-8", errors="replace")
    if not text:
        return None
    if "json" in content_type or text[:1] in "{[":
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _clip(payload: Any) -> Any:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    if isinstance(payload, str) or len(text) > ERROR_BODY_PREVIEW:
        return text[:ERROR_BODY_PREVIEW]
    return payload


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _with_query(url: str, params: dict[str, Any]) -> str:
    if not params:
        return url
    parts = urlsplit(url)
    extra = urlencode({key: _scalar(value) for key, value in params.items()})
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))
