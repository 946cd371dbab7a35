"""A small MCP client for the MCP servers an admin registers as vendors (Streamable HTTP).

Every request goes through `outbound.send`: the address checks, the size cap, and one deadline
that every exchange of an operation shares (handshakes and retries included). The revision is chosen the way the SDK client's auto mode chooses it
(`mcp.client._probe`): `server/discover` at 2026-07-28, and on any answer that is not a discover
result naming that revision, the handshake era (`initialize`, a session id if the server mints
one, `notifications/initialized`). What was negotiated is kept per process, so a warm Lambda does
not handshake per call. An answer is JSON or an event stream; of a stream only our response
counts: notifications are ignored, and so are the server's own requests (sampling, elicitation,
roots), which nothing here can answer. A session is kept per tenant (account) as well as per
server and credential: two accounts calling the same keyless server never share one.

The server is hostile: every failure is a VendorError (VendorTimeout at the deadline) saying what
was wrong, with the server's text clipped and nothing of the headers we sent in it.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, quote_plus

from chalicelib.base import jsontext
from chalicelib.base.errors import VendorError, VendorTimeout
from chalicelib.base.text import visible
from chalicelib.net import outbound, protocol

MODERN = protocol.MODERN
LEGACY = protocol.LEGACY
CLIENT_INFO = {"name": "workset", "version": "1"}
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
SESSIONS_KEPT = 64
CLIP = 300
REDACTED = "[redacted]"
CUT_SECRET_SHOWN = 3  # the most of a secret's start a clip may leave in an error (fewer tell nothing)

_ids = itertools.count(1)
_LINE_END = re.compile(rb"\r\n|\r|\n")
_HEADER_SAFE = re.compile(r"[\x20-\x7e]*")
_SESSION_ID = re.compile(r"[\x21-\x7e]{1,1024}")


@dataclass(frozen=True)
class Upstream:
    """Where and how to reach one MCP server."""

    url: str
    headers: dict[str, str] = field(repr=False)  # e.g. the credential header; never logged or echoed
    timeout: float  # seconds for the whole of list_tools or call_tool, handshakes included
    max_bytes: int
    allow_private: bool
    revision: str | None = None  # known revision (skip negotiation), else negotiate
    deadline: float | None = field(default=None, repr=False)  # time.monotonic() by which all must be over
    # whose calls these are (the account): a session a server minted is never used for another
    # tenant's calls, since a server may keep state in it (a browser, a scratchpad)
    tenant: str = ""
    # the credential's bare secrets besides the header's value (a basic credential's password, its
    # decoded `user:password`), and a key the server's URL carries (`?api_key=`): an error never
    # quotes them either
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def started(self) -> Upstream:
        """The same server with the deadline set `timeout` from now: every exchange of one
        operation (discover, initialize, the request, a retry after an expired session) shares
        it, so a run's vendor call never outlives the lease it was given."""
        return replace(self, deadline=time.monotonic() + self.timeout)

    def remaining(self) -> float:
        """Seconds left for the next exchange; VendorTimeout when none are."""
        left = (self.deadline if self.deadline is not None else time.monotonic() + self.timeout) - time.monotonic()
        if left <= 0:
            raise VendorTimeout(f"the MCP server did not answer within {self.timeout:g} s")
        return left


@dataclass(frozen=True)
class _Session:
    revision: str
    id: str | None = None  # the handshake era's Mcp-Session-Id, when the server minted one


class _SessionExpired(VendorError):
    """HTTP 404 to a request that carried a session id: the server has forgotten the session."""


def list_tools(upstream: Upstream, *, max_pages: int = 50, max_tools: int = 2000,
               max_total_bytes: int = 16 * 2**20) -> tuple[str, list[Any]]:
    """(the revision spoken, every tool definition over all pages via nextCursor). Each tool is
    as the server sent it: the caller judges them. Each page is at most `upstream.max_bytes`, and
    all of them together at most `max_total_bytes` (as JSON), so a server cannot fill memory with
    many full pages."""
    tools: list[Any] = []
    cursors: set[str] = set()
    params: dict[str, Any] = {}
    total = 0
    upstream = upstream.started()
    with _secrets_kept(upstream):
        for _ in range(max_pages):
            revision, result = _request(upstream, "tools/list", params)
            page = result.get("tools")
            if not isinstance(page, list):
                raise VendorError("the MCP server's tools/list result has no list of tools")
            tools.extend(page)
            if len(tools) > max_tools:
                raise VendorError(f"the MCP server lists more than {max_tools} tools")
            total += len(jsontext.dumps(page))
            if total > max_total_bytes:
                raise VendorError(f"the MCP server's tool list is larger than {max_total_bytes >> 20} MB")
            cursor = result.get("nextCursor")
            if cursor is None:
                return revision, tools
            if not isinstance(cursor, str) or cursor in cursors:
                raise VendorError("the MCP server's tools/list gave a nextCursor that is not a new string")
            cursors.add(cursor)
            params = {"cursor": cursor}
        raise VendorError(f"the MCP server's tool list goes on past {max_pages} pages")


def call_tool(upstream: Upstream, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The tools/call result object (content, structuredContent, isError) as the server sent it."""
    upstream = upstream.started()
    with _secrets_kept(upstream):
        return _request(upstream, "tools/call", {"name": name, "arguments": arguments})[1]


def tools_call_message(name: str, arguments: dict[str, Any], revision: str | None, *,
                       request_id: int = 1) -> dict[str, Any]:
    """The JSON-RPC request tools/call would send at `revision` (for dry-run previews); None, like
    a handshake-era revision, gives the plain message without the 2026-07-28 envelope."""
    return _envelope(request_id, "tools/call", {"name": name, "arguments": arguments}, revision)


def forget_sessions() -> None:
    """Forget every negotiated session (a changed registration; tests)."""
    with _lock:
        _sessions.clear()


# --- sessions: negotiated once per process and server -------------------------------------------

_sessions: OrderedDict[tuple[str, str, str, str | None], _Session] = OrderedDict()
_lock = threading.Lock()


def _request(upstream: Upstream, method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """One request on the server's session: (the revision spoken, the result). An expired
    session (HTTP 404) is opened again once; a session that fails in any way is forgotten."""
    key = (upstream.tenant, upstream.url,
           hashlib.sha256(json.dumps(sorted(upstream.headers.items())).encode()).hexdigest(), upstream.revision)
    with _lock:
        session = _sessions.get(key)
    try:
        session = session or _open(upstream)
        try:
            result = _exchange(upstream, session, method, params)
        except _SessionExpired:
            session = _initialize(upstream, upstream.revision or LEGACY)
            result = _exchange(upstream, session, method, params)
    except VendorError:
        with _lock:
            _sessions.pop(key, None)
        raise
    with _lock:
        _sessions[key] = session
        _sessions.move_to_end(key)
        while len(_sessions) > SESSIONS_KEPT:
            _sessions.popitem(last=False)
    return session.revision, result


def _open(upstream: Upstream) -> _Session:
    """A known revision as given; else the SDK's auto mode: a discover result that names
    2026-07-28 means modern, any other answer (HTTP 4xx or 5xx, a JSON-RPC error, something else)
    the handshake era. A transport failure or the deadline is no verdict: it propagates."""
    if upstream.revision in protocol.MODERN_PROTOCOL_VERSIONS:
        return _Session(upstream.revision)
    if upstream.revision is not None:
        if upstream.revision not in protocol.HANDSHAKE_PROTOCOL_VERSIONS:
            raise VendorError(f"Workset does not speak MCP revision {_clip(upstream.revision)}")
        return _initialize(upstream, upstream.revision)
    request_id = next(_ids)
    response, events = _post(upstream, _Session(MODERN), _envelope(request_id, "server/discover", {}, MODERN))
    try:
        versions = _result(response, events, request_id).get("supportedVersions")
    except VendorError:
        versions = None
    if isinstance(versions, list) and MODERN in versions:
        return _Session(MODERN)
    return _initialize(upstream, LEGACY)


def _initialize(upstream: Upstream, proposed: str) -> _Session:
    """The handshake: `initialize` (a version the server answers back must be one of the handshake
    era's), the session id it mints, then `notifications/initialized`."""
    request_id = next(_ids)
    params = {"protocolVersion": proposed, "capabilities": {}, "clientInfo": CLIENT_INFO}
    response, events = _post(upstream, _Session(proposed), _envelope(request_id, "initialize", params, proposed))
    spoken = _result(response, events, request_id).get("protocolVersion")
    if not isinstance(spoken, str) or spoken not in protocol.HANDSHAKE_PROTOCOL_VERSIONS:
        raise VendorError(f"the MCP server speaks protocol version {_clip(str(spoken))}, which Workset does not")
    minted = response.headers.get("mcp-session-id")
    if minted is not None and not _SESSION_ID.fullmatch(minted):
        raise VendorError("the MCP server minted a session id that is not visible ASCII")
    session = _Session(spoken, minted)
    notified, _ = _post(upstream, session, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    if not 200 <= notified.status < 300:
        raise VendorError(f"the MCP server answered HTTP {notified.status} to notifications/initialized")
    return session


def _exchange(upstream: Upstream, session: _Session, method: str, params: dict[str, Any]) -> dict[str, Any]:
    request_id = next(_ids)
    response, events = _post(upstream, session, _envelope(request_id, method, params, session.revision))
    if response.status == 404 and session.id is not None:
        raise _SessionExpired("the MCP server no longer knows its session (HTTP 404)")
    result = _result(response, events, request_id)
    kind = result.get("resultType", "complete")
    if session.revision in protocol.MODERN_PROTOCOL_VERSIONS and kind != "complete":
        raise VendorError(f"the MCP server answered resultType {_clip(str(kind))}, which Workset cannot take up")
    return result


# --- one HTTP exchange ----------------------------------------------------------------------------

def _envelope(request_id: int, method: str, params: dict[str, Any], revision: str | None) -> dict[str, Any]:
    if revision in protocol.MODERN_PROTOCOL_VERSIONS:
        meta = {protocol.VERSION_META: revision, protocol.CAPABILITIES_META: {}, CLIENT_INFO_META: CLIENT_INFO}
        params = {**params, "_meta": meta}
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _headers(upstream: Upstream, session: _Session, message: dict[str, Any]) -> dict[str, str]:
    """The upstream's own headers, then the protocol's (which win: a registration cannot set them)."""
    method = message["method"]
    own = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session.revision in protocol.MODERN_PROTOCOL_VERSIONS:
        own |= {"MCP-Protocol-Version": session.revision, "Mcp-Method": method}
        name = message["params"].get(protocol.NAME_BEARING.get(method, ""))
        if isinstance(name, str):
            own["Mcp-Name"] = _header_value(name)
    elif method != "initialize":
        own["MCP-Protocol-Version"] = session.revision
        if session.id is not None:
            own["Mcp-Session-Id"] = session.id
    taken = {name.lower() for name in own}
    given = {name: value for name, value in upstream.headers.items()
             if name.lower() not in taken and not outbound.is_client_header(name)}
    return {**given, **own}


def _header_value(value: str) -> str:
    """As the SDK writes Mcp-Name: printable ASCII as it is, anything else as `=?base64?...?=`."""
    sentinel = value.startswith("=?base64?") and value.endswith("?=")
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() and not sentinel:
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode()}?="


def _post(upstream: Upstream, session: _Session, message: dict[str, Any]) -> tuple[outbound.HttpResponse, _Events]:
    """Send one message; an event stream is read only until our response has arrived."""
    events = _Events(message.get("id"))
    request = outbound.HttpRequest("POST", upstream.url, _headers(upstream, session, message),
                                   jsontext.dumps(message).encode())
    response = outbound.send(request, timeout=upstream.remaining(), max_bytes=upstream.max_bytes,
                             allow_private=upstream.allow_private, complete=events.feed)
    return response, events


def _result(response: outbound.HttpResponse, events: _Events, request_id: int) -> dict[str, Any]:
    """Our response's result, or a VendorError saying what the answer was instead."""
    if not 200 <= response.status < 300:
        raise VendorError(f"the MCP server answered HTTP {response.status}{_error_in(response)}")
    if response.truncated:
        raise VendorError(f"the MCP server's answer is larger than {len(response.body)} bytes")
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind == "application/json":
        try:
            parsed = jsontext.loads(response.body)
        except jsontext.JsonRefused as refused:
            raise VendorError(f"the MCP server's answer is not usable JSON: {refused.reason}") from None
        messages = parsed if isinstance(parsed, list) else [parsed]
    elif kind == "text/event-stream":
        messages = events.messages  # `_post` fed it every byte of the body as it arrived
    elif response.status == 202:
        raise VendorError("the MCP server accepted the request but did not answer it (HTTP 202)")
    else:
        raise VendorError(f"the MCP server answered {_clip(kind) or 'no content type'}, not JSON or an event stream")
    return _pick(messages, request_id)


def _pick(messages: list[Any], request_id: int) -> dict[str, Any]:
    fault = "the MCP server's answer holds no response to our request"
    for message in messages:
        if isinstance(message, jsontext.JsonRefused):
            fault = f"the MCP server sent an event that is not usable JSON: {message.reason}"
        elif not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            fault = "the MCP server sent a message that is not JSON-RPC 2.0"
        elif "method" in message:
            continue  # a notification, or a request of the server's own that nothing here can answer
        elif not _ours(message, request_id):
            fault = "the MCP server answered with another request's id"
        elif "error" in message:
            raise VendorError(f"the MCP server answered {_error_text(message['error'])}")
        elif not isinstance(result := message.get("result"), dict):
            raise VendorError("the MCP server's result is not an object")
        else:
            return result
    raise VendorError(fault)


def _ours(message: dict[str, Any], request_id: int) -> bool:
    return type(message.get("id")) is int and message["id"] == request_id  # True == 1, but not an id


def _error_text(error: Any) -> str:
    if not isinstance(error, dict) or type(error.get("code")) is not int:
        return "a malformed JSON-RPC error"
    text = error.get("message")
    return f"JSON-RPC error {error['code']}: {_clip(text if isinstance(text, str) else '')}"


def _error_in(response: outbound.HttpResponse) -> str:
    """`: JSON-RPC error ...` when a non-2xx answer's body is one, else nothing."""
    try:
        message = jsontext.loads(response.body)
    except jsontext.JsonRefused:
        return ""
    if isinstance(message, dict) and message.get("jsonrpc") == "2.0" and "error" in message:
        return f": {_error_text(message['error'])}"
    return ""


class _Events:
    """The messages of a server-sent event stream, read as the bytes arrive (the WHATWG rules:
    lines end in CRLF, LF or CR; a blank line ends an event; `data` lines join with LF; a line
    starting with a colon is a comment; an event left unfinished when the stream ends is dropped).
    Only `message` events with data count; `id` and `retry` serve reconnecting, which we never do."""

    def __init__(self, request_id: int | None) -> None:
        self.request_id = request_id
        self.messages: list[Any] = []  # each event's JSON, or the JsonRefused saying why it is none
        self.answered = request_id is None  # a notification waits for no answer: its body is not read
        self._partial: list[bytes] = []  # the current line's bytes so far (a line may span reads)
        self._after_cr = False  # the last read ended in CR: an LF first in the next is its pair
        self._kind = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> bool:
        """Read the stream's next bytes (each byte once: a long line or stream arriving in many
        small reads costs its length); True once our response is among the events."""
        if not chunk:
            return self.answered
        start = 1 if self._after_cr and chunk.startswith(b"\n") else 0
        for end in _LINE_END.finditer(chunk, start):
            self._partial.append(chunk[start:end.start()])
            self._line(b"".join(self._partial).decode("utf-8", "replace"))
            self._partial, start = [], end.end()
        if start < len(chunk):
            self._partial.append(chunk[start:])
        self._after_cr = chunk.endswith(b"\r")
        return self.answered

    def _line(self, line: str) -> None:
        if not line:
            data, kind = "\n".join(self._data), self._kind or "message"
            self._kind, self._data = "", []
            if data and kind == "message":
                try:
                    message = jsontext.loads(data)
                except jsontext.JsonRefused as refused:
                    message = refused
                self.messages.append(message)
                self.answered = self.answered or (isinstance(message, dict) and "method" not in message
                                                  and self.request_id is not None and _ours(message, self.request_id))
            return
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._kind = value
        elif name == "data":
            self._data.append(value)


# --- what an error may say ------------------------------------------------------------------------

def _clip(text: str) -> str:
    """A server's text as an error may quote it: encodable, without what hides or reorders text
    (a bidi override, invisible tag characters: a model reads them, a person does not), cut short."""
    text = visible(jsontext.scrub(text))
    return text if len(text) <= CLIP else text[: CLIP - 1] + "…"


@contextmanager
def _secrets_kept(upstream: Upstream) -> Iterator[None]:
    """Whatever the server echoed of our headers' values (whole, or a word of 8 characters or more
    within, such as a bearer token) or of the credential's own secrets (`Upstream.secrets`), as
    they are or URL-encoded, is replaced in the error's message; so is the start of one that the
    clip of the server's text cut (`…`)."""
    try:
        yield
    except VendorError as error:
        secrets = {value for value in upstream.headers.values() if len(value) >= 4}
        secrets |= {part for value in upstream.headers.values() for part in value.split() if len(part) >= 8}
        secrets |= {secret for secret in upstream.secrets if secret}
        secrets |= {form for secret in list(secrets) for form in (quote(secret, safe=""), quote_plus(secret))}
        message = error.message
        for secret in sorted(secrets, key=len, reverse=True):
            message = message.replace(secret, REDACTED)
        if "…" in message:  # a clip that cut a secret left its start: that goes too
            for secret in sorted(secrets, key=len, reverse=True):
                for length in range(len(secret) - 1, CUT_SECRET_SHOWN, -1):
                    message = message.replace(f"{secret[:length]}…", f"{REDACTED}…")
        if message == error.message:
            raise
        raise type(error)(message) from None
