"""The MCP wire: JSON-RPC envelopes, the two revisions on one stateless endpoint, and the
protocol-level errors.

A request whose `params._meta` carries a protocol version is 2026-07-28 ("modern"): it must pass
the header ladder (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` equal to the body). Anything
else is the 2025-11-25 handshake era ("legacy").
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib.base import jsontext

# The protocol's constants, written out here rather than imported: any `mcp_types` import runs
# its package __init__, which builds every pydantic wire model (~0.1 s of each cold start) and
# the endpoint uses none of them. tests/test_cold_start.py holds them equal to mcp_types'.
# JSON-RPC 2.0 error codes (https://www.jsonrpc.org/specification#error_object):
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# MCP's own codes, 2026-07-28 revision (SEP-2243 header mismatch, SEP-2575 unsupported version):
HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022
# Revisions, oldest first: those reached through `initialize`, and those with the per-request
# `_meta` envelope (mcp_types.version).
HANDSHAKE_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_PROTOCOL_VERSIONS = ("2026-07-28",)
# The 2026-07-28 request envelope's `_meta` keys and the result's server info key.
VERSION_META = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"

MODERN = MODERN_PROTOCOL_VERSIONS[-1]
LEGACY = HANDSHAKE_PROTOCOL_VERSIONS[-1]
SUPPORTED_VERSIONS = [MODERN, *reversed(HANDSHAKE_PROTOCOL_VERSIONS)]

# HTTP status of a JSON-RPC error on the modern path (2026-07-28 transports page): the client's
# faults are 4xx. Our own crash, -32603, is the one server fault, so it is a 5xx there; codes
# not listed (tool-level -320xx) travel on 200.
MODERN_HTTP_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
    INTERNAL_ERROR: 500,
}
NAME_BEARING = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
# 2026-07-28 transports/streamable-http, "Standard Request Headers" (lower-case: headers arrive so)
STANDARD_HEADERS = ("mcp-protocol-version", "mcp-method", "mcp-name")
_HEADER_VALUE = re.compile(r"[\x20-\x7e\t]*")


class ProtocolError(Exception):
    """A JSON-RPC error: the request itself was wrong, not the tool call it asked for.

    `request_id` and `modern` are what was learnt of the request when the fault was found before
    its envelope was read (a lone surrogate in valid JSON); the answer uses them."""

    def __init__(self, code: int, message: str, data: Any = None, *,
                 request_id: str | int | None = None, modern: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.request_id = request_id
        self.modern = modern


@dataclass(frozen=True)
class Request:
    """One parsed JSON-RPC message; `id` is None for a notification."""

    id: str | int | None
    method: str
    params: dict[str, Any]
    version: str  # the protocol revision it speaks
    client_capabilities: dict[str, Any]

    @property
    def modern(self) -> bool:
        """True for a 2026-07-28 request."""
        return self.version in MODERN_PROTOCOL_VERSIONS

    @property
    def is_notification(self) -> bool:
        """Notifications get 202 and no body."""
        return self.id is None


def parse_message(raw: bytes) -> dict[str, Any]:
    """Bytes to a JSON-RPC object. Bad JSON (not UTF-8, NaN, 1e999, nested past
    `jsontext.MAX_DEPTH`) is -32700; a lone surrogate is -32602 inside params and -32600
    anywhere else; anything but one request is -32600."""
    try:
        message = jsontext.loads(raw)
    except jsontext.JsonRefused as refused:
        if refused.kind != "surrogate":
            raise ProtocolError(PARSE_ERROR, f"Parse error: {refused.reason}") from None
        raise _surrogate_error(raw, refused) from None
    if not isinstance(message, dict):
        raise ProtocolError(INVALID_REQUEST, "Invalid Request: send one JSON-RPC object (batches are not supported)")
    return message


def identify(raw: bytes | str) -> tuple[str | int | None, bool]:
    """Best effort, never raising: the request's id (when usable) and whether it is modern, for
    answering a request whose handling failed."""
    try:
        message = jsontext.loads(raw)
    except jsontext.JsonRefused:
        return None, False
    if not isinstance(message, dict):
        return None, False
    return _usable_id(message.get("id")), is_modern(message)


def _surrogate_error(raw: bytes | str, refused: jsontext.JsonRefused) -> ProtocolError:
    # The text is valid JSON (only a string's content was refused), so the lenient parser reads
    # it; the id is answered only if it is itself clean.
    message = json.loads(raw)
    request_id, modern = None, False
    if isinstance(message, dict):
        request_id, modern = _usable_id(message.get("id")), is_modern(message)
    if refused.path[:1] == ("params",):
        return ProtocolError(INVALID_PARAMS, f"Invalid params: {refused.reason}", request_id=request_id, modern=modern)
    return ProtocolError(INVALID_REQUEST, f"Invalid Request: {refused.reason}", request_id=request_id, modern=modern)


def _usable_id(value: Any) -> str | int | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return None if isinstance(value, str) and jsontext.has_surrogate(value) else value


def is_modern(message: dict[str, Any]) -> bool:
    """A message whose `params._meta` names a protocol version speaks the 2026-07-28 revision."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and VERSION_META in meta


def classify(message: dict[str, Any], headers: Mapping[str, str]) -> Request:
    """Check the envelope and decide the revision; `headers` are keyed by lower-case name."""
    if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        raise ProtocolError(INVALID_REQUEST, "Invalid Request: jsonrpc must be \"2.0\" and method a string")
    request_id = message.get("id")
    if "id" in message and (request_id is None or isinstance(request_id, bool) or not isinstance(request_id, str | int)):
        raise ProtocolError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    params = message.get("params", {})
    if not isinstance(params, dict):
        raise ProtocolError(INVALID_PARAMS, "Invalid params: params must be an object")
    if is_modern(message):
        version, capabilities = _modern_envelope(message, params, params["_meta"], headers)
    else:
        version, capabilities = _legacy_envelope(params, headers), {}
    return Request(request_id, message["method"], params, version, capabilities)


def _modern_envelope(
    message: dict[str, Any], params: dict[str, Any], meta: dict[str, Any], headers: Mapping[str, str]
) -> tuple[str, dict[str, Any]]:
    if CAPABILITIES_META not in meta:
        raise ProtocolError(INVALID_PARAMS, f"params._meta is missing the required envelope key {CAPABILITIES_META}")
    version = meta[VERSION_META]
    for header in STANDARD_HEADERS:
        if not _header_safe(headers.get(header)):
            raise ProtocolError(HEADER_MISMATCH, f"Header mismatch: the {header} header holds characters a header "
                                "value cannot carry as they are (Base64-encode it: =?base64?...?=)")
    if headers.get("mcp-protocol-version") != version:
        raise ProtocolError(HEADER_MISMATCH, "Header mismatch: MCP-Protocol-Version header does not match params._meta")
    if headers.get("mcp-method") != message["method"]:
        raise ProtocolError(HEADER_MISMATCH, "Header mismatch: Mcp-Method header does not match the request body's method")
    name_key = NAME_BEARING.get(message["method"])
    if name_key and params.get(name_key) is not None and _decode_header(headers.get("mcp-name")) != params[name_key]:
        raise ProtocolError(HEADER_MISMATCH, f"Header mismatch: Mcp-Name header does not match the request body's {name_key}")
    if version not in MODERN_PROTOCOL_VERSIONS:
        raise ProtocolError(
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            {"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": version},
        )
    capabilities = meta[CAPABILITIES_META]
    return version, capabilities if isinstance(capabilities, dict) else {}


def _legacy_envelope(params: dict[str, Any], headers: Mapping[str, str]) -> str:
    announced = headers.get("mcp-protocol-version")
    if announced is None:
        return LEGACY
    if announced not in HANDSHAKE_PROTOCOL_VERSIONS:
        raise ProtocolError(
            INVALID_REQUEST,
            f"Unsupported MCP-Protocol-Version {announced!r}",
            {"supported": SUPPORTED_VERSIONS, "requested": announced},
        )
    return announced


def _header_safe(value: str | None) -> bool:
    """A header value as the 2026-07-28 transport's "Value Encoding" allows it plain: visible ASCII,
    space and tab, not starting or ending with whitespace (an absent one is judged elsewhere)."""
    return value is None or (_HEADER_VALUE.fullmatch(value) is not None and value == value.strip(" \t"))


def _decode_header(value: str | None) -> str | None:
    """Undo the `=?base64?...?=` wrapping clients use for values that are not plain ASCII."""
    if value is None or not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    try:
        return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def success(request_id: str | int | None, result: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC response."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_body(request_id: str | int | None, error: ProtocolError) -> dict[str, Any]:
    """A JSON-RPC error response (with the id the error learnt, when the caller has none)."""
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data is not None:
        body["data"] = error.data
    return {"jsonrpc": "2.0", "id": request_id if request_id is not None else error.request_id, "error": body}


def error_status(error: ProtocolError, *, modern: bool) -> int:
    """The HTTP status for a JSON-RPC error: the modern table, or 400 for unparseable input
    and 200 otherwise on the legacy path (its clients read the error from the body, and a
    crash is no exception: -32603 travels on 200 there, on 500 on the modern path)."""
    if modern or error.modern:
        return MODERN_HTTP_STATUS.get(error.code, 200)
    return 400 if error.code in {PARSE_ERROR, INVALID_REQUEST} else 200


def internal_error(request_id: str | int | None, log_id: str) -> ProtocolError:
    """-32603 for a crash in our own code; `data.requestId` names the log line that explains it."""
    return ProtocolError(INTERNAL_ERROR, "Internal error", {"requestId": log_id}, request_id=request_id)
