"""The `/mcp` endpoint as a Chalice blueprint: a thin shell around `server.handle`. Whatever
escapes it is answered as JSON-RPC -32603 (see `_crashed`). Each request's log line names its
JSON-RPC method and outcome, and counts it (`McpCalls`, `McpErrors`) by method."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from chalice import Response

from chalicelib.base import jsontext, log
from chalicelib.base.config import settings
from chalicelib.base.errors import TooLarge
from chalicelib.base.responses import GuardedBlueprint, json_response
from chalicelib.mcp import server
from chalicelib.net import protocol


def _crashed(request_id: str) -> Response:
    """-32603 Internal error, with the JSON-RPC id when the body yields one; HTTP 500 on the
    modern path and 200 on the legacy one (`protocol.error_status`)."""
    rpc_id, modern = protocol.identify(bp.current_request.raw_body or b"")
    error = protocol.internal_error(rpc_id, request_id)
    return json_response(protocol.error_status(error, modern=modern), protocol.error_body(rpc_id, error))


bp = GuardedBlueprint(__name__, edge="mcp", on_crash=_crashed)

CONTENT_TYPES = ["application/json", "application/json; charset=utf-8"]


@bp.route("/mcp", methods=["POST"], content_types=CONTENT_TYPES)
def mcp_post() -> Response:
    """One JSON-RPC message in, one answer out."""
    request = bp.current_request
    headers = {name.lower(): value for name, value in request.headers.items()}
    if not _origin_allowed(headers.get("origin"), headers.get("host")):
        return json_response(403, {"error": {"code": "forbidden_origin", "message": "this Origin may not call /mcp"}})
    body = request.raw_body or b""
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body  # bytes reach jsontext.loads
    if len(raw) > settings().max_request_bytes:
        error = TooLarge(f"the body is larger than {settings().max_request_bytes} bytes")
        return json_response(error.status, {"error": error.to_dict()})
    log.note(rpc_method="unparsed")  # until server.handle has read the method from the body
    log.measure("McpCalls", 1, by=("rpc_method",))
    log.measure("McpErrors", 1, by=("rpc_method",))  # until the answer says otherwise: a crash is an error
    answer = server.handle(raw, headers)
    _note_outcome(answer)
    if answer.body is None:
        return Response(body="", status_code=answer.status, headers={**answer.headers})
    if answer.events:
        return _event_stream(answer)
    return json_response(answer.status, answer.body, answer.headers)


def _event_stream(answer: server.HttpAnswer) -> Response:
    """Notifications first, then the response, as one buffered text/event-stream body."""
    frames = "".join(f"event: message\ndata: {jsontext.dumps(message)}\n\n"
                     for message in [*answer.events, answer.body])
    return Response(body=frames, status_code=answer.status,
                    headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **answer.headers})


@bp.route("/mcp", methods=["GET", "DELETE"])
def mcp_other() -> Response:
    """No server-initiated stream and no sessions: GET and DELETE are not allowed."""
    return Response(body="", status_code=405, headers={"Allow": "POST"})


def _note_outcome(answer: server.HttpAnswer) -> None:
    """On the request's line: ok, accepted (a notification), tool_error (an `isError` result, with
    its code), rpc_error (with the JSON-RPC code) or unauthorized."""
    fields: dict[str, Any] = {}
    body = answer.body
    result = body.get("result") if body is not None else None
    if answer.status == 401:
        fields.update(outcome="unauthorized", rpc_method="unauthenticated")  # a stranger's method is not counted
    elif body is None:
        fields.update(outcome="accepted")
    elif "error" in body:
        fields.update(outcome="rpc_error", rpc_error=body["error"].get("code"))
    elif isinstance(result, dict) and result.get("isError") is True:
        error = (result.get("structuredContent") or {}).get("error")
        code = error.get("code") if isinstance(error, dict) else None
        fields.update(outcome="tool_error", error_code=code[:64] if isinstance(code, str) else None)
    else:
        fields.update(outcome="ok")
    log.note(**fields)
    log.measure("McpErrors", 0 if fields["outcome"] in ("ok", "accepted") else 1, by=("rpc_method",))


def _origin_allowed(origin: str | None, host: str | None) -> bool:
    """Browsers send Origin; only the server's own origin and configured ones may call (DNS
    rebinding protection). Non-browser clients send none."""
    if origin is None:
        return True
    if origin in settings().allowed_origins:
        return True
    return host is not None and urlsplit(origin).netloc == host

