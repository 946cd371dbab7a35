"""The vendor side of a call: build the HTTP request from a tool and its input, carry the
connection's credential, preview or send it, and shape the vendor's answer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from chalicelib import outbound
from chalicelib.config import settings
from chalicelib.errors import VendorError, WorksetError
from chalicelib.outbound import HttpRequest
from chalicelib.toolbox import SAFE_METHODS, Tool

QUERY_METHODS = frozenset({"GET", "HEAD", "DELETE"})
ERROR_BODY_PREVIEW = 2000
REDACTED = "[redacted]"


@dataclass(frozen=True)
class Outcome:
    """A call's answer: `structured` is the tool result's structuredContent; `status` is what
    the run records (`succeeded`, `failed`, `awaiting_approval`)."""

    structured: dict[str, Any]
    is_error: bool = False
    status: str = "succeeded"
    run_id: str | None = None
    list_changed: bool = False  # the call changed the caller's working set


@dataclass(frozen=True)
class Request:
    """A request ready to preview or send; `secret_headers` are redacted in previews."""

    http: HttpRequest
    secret_headers: frozenset[str] = field(default_factory=frozenset)


def build(tool: Tool, arguments: dict[str, Any], credential: tuple[str, str] | None = None) -> Request:
    """Fill `{field}` placeholders in the URL (URL-encoded); the rest of the input goes to the
    query string for GET/HEAD/DELETE and to a JSON body otherwise."""
    template = tool.spec.request
    used = template.placeholders()
    url = template.url.format_map({name: quote(_scalar(arguments[name]), safe="") for name in used})
    rest = {key: value for key, value in arguments.items() if key not in used}
    headers = dict(template.headers)
    body: bytes | None = None
    if template.method in QUERY_METHODS:
        url = _with_query(url, rest)
    else:
        body = json.dumps(rest).encode()
        headers["Content-Type"] = "application/json"
    headers.setdefault("Accept", "application/json")
    secret_headers: frozenset[str] = frozenset()
    if credential is not None:
        headers[credential[0]] = credential[1]
        secret_headers = frozenset({credential[0].lower()})
    return Request(HttpRequest(method=template.method, url=url, headers=headers, body=body), secret_headers)


def preview(request: Request) -> Outcome:
    """What would be sent, with the credential replaced by a marker."""
    http = request.http
    headers = {name: (REDACTED if name.lower() in request.secret_headers else value)
               for name, value in http.headers.items()}
    body = json.loads(http.body) if http.body else None
    return Outcome(structured={"preview": {"method": http.method, "url": http.url, "headers": headers, "body": body}})


def send(request: Request) -> Outcome:
    """Send the request; every failure becomes an error Outcome."""
    config = settings()
    try:
        response = outbound.send(
            request.http,
            timeout=config.vendor_timeout_seconds,
            max_bytes=config.vendor_max_response_bytes,
            allow_private=config.allow_private_network,
        )
    except WorksetError as error:
        return failure(error)
    return _answer(response)


def perform(request: Request, *, dry_run: bool) -> Outcome:
    """A dry run of a method that could write is previewed; everything else is sent."""
    if dry_run and request.http.method not in SAFE_METHODS:
        return preview(request)
    return send(request)


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
        structured = {"result": payload, "truncated": True}
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
