"""The vendor side of a call: build the HTTP request from a tool and its input, carry the
connection's credential, preview or send it, and shape the vendor's answer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlencode, urlsplit, urlunsplit

from chalicelib import jsontext, outbound
from chalicelib.config import settings
from chalicelib.connections import Credential
from chalicelib.errors import InvalidInput, VendorError, WorksetError
from chalicelib.outbound import HttpRequest
from chalicelib.toolbox import Tool

QUERY_METHODS = frozenset({"GET", "HEAD", "DELETE"})
ERROR_BODY_PREVIEW = 2000
REDACTED = "[redacted]"
DOT_SEGMENTS = frozenset({".", ".."})


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
    """A request ready to preview or send; `secrets` are the credential's values, which no
    preview or answer may show."""

    http: HttpRequest
    secrets: tuple[str, ...] = field(default=(), repr=False)


def check_arguments(tool: Tool, arguments: dict[str, Any]) -> None:
    """Input the schema accepts but the request cannot carry: a path placeholder whose value is a
    dot segment (`.`, `..`, however encoded) would move the request to another path."""
    for name in tool.spec.request.path_placeholders():
        text = _scalar(arguments[name])
        decoded = text
        for _ in range(3):  # %2e, %252e, ...
            decoded = unquote(decoded)
        if {text, decoded} & DOT_SEGMENTS:
            raise InvalidInput(f"input.{name}: {text!r} is not allowed in the URL's path", field=f"input.{name}")


def build(tool: Tool, arguments: dict[str, Any], credential: Credential | None = None) -> Request:
    """Fill `{field}` placeholders in the URL (URL-encoded); the rest of the input goes to the
    query string for GET/HEAD/DELETE and to a JSON body otherwise. The arguments passed
    `check_arguments` when the call was made (a run's input never changes)."""
    template = tool.spec.request
    used = template.placeholders()
    url = template.fill({name: quote(_scalar(arguments[name]), safe="") for name in used})
    rest = {key: value for key, value in arguments.items() if key not in used}
    headers = dict(template.headers)
    body: bytes | None = None
    if template.method in QUERY_METHODS:
        url = _with_query(url, rest)
    else:
        body = jsontext.dumps(rest).encode()
        headers["Content-Type"] = "application/json"
    headers.setdefault("Accept", "application/json")
    if credential is None:
        return Request(HttpRequest(method=template.method, url=url, headers=headers, body=body))
    headers = {name: value for name, value in headers.items() if name.lower() != credential.header.lower()}
    headers[credential.header] = credential.value
    return Request(HttpRequest(method=template.method, url=url, headers=headers, body=body), credential.secrets)


def preview(request: Request) -> Outcome:
    """What would be sent, with the credential's values replaced by a marker wherever they appear."""
    http = request.http
    body = json.loads(http.body) if http.body else None
    shown = {"method": http.method, "url": http.url, "headers": dict(http.headers), "body": body}
    return Outcome(structured={"preview": redact(shown, request.secrets)})


def send(request: Request, *, timeout: float | None = None) -> Outcome:
    """Send the request within `timeout` (the vendor timeout by default); every failure becomes an
    error Outcome, and the credential never comes back in the answer."""
    config = settings()
    try:
        response = outbound.send(
            request.http,
            timeout=config.vendor_timeout_seconds if timeout is None else timeout,
            max_bytes=config.vendor_max_response_bytes,
            allow_private=config.allow_private_network,
        )
    except WorksetError as error:
        return failure(error)
    return _answer(response, request.secrets)


def perform(request: Request, *, dry_run: bool, read_only: bool, timeout: float | None = None) -> Outcome:
    """A dry run reaches the vendor only for a tool published read-only; any other tool, whatever
    its method, answers the preview. Everything else is sent."""
    if dry_run and not read_only:
        return preview(request)
    return send(request, timeout=timeout)


def redact(value: Any, secrets: tuple[str, ...]) -> Any:
    """`value` with every occurrence of each secret (in any string or key, raw or URL-encoded)
    replaced by a marker."""
    if not secrets:
        return value
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {redact_text(str(key), secrets): redact(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item, secrets) for item in value]
    return value


def redact_text(text: str, secrets: tuple[str, ...], *, cut: bool = False) -> str:
    """`text` with the secrets replaced; with `cut`, the text was cut short, so a tail that is the
    start of a secret is dropped too (a half secret is still a secret)."""
    for secret in sorted(secrets, key=len, reverse=True):
        for form in dict.fromkeys((secret, quote(secret, safe=""), quote_plus(secret))):
            text = text.replace(form, REDACTED)
    if cut:
        for secret in secrets:
            for length in range(min(len(secret), len(text)), 0, -1):
                if text.endswith(secret[:length]):
                    return text[:-length]
    return text


def failure(error: WorksetError) -> Outcome:
    """An error Outcome carrying the error's code and message."""
    return Outcome(structured={"error": error.to_dict()}, is_error=True, status="failed")


def _answer(response: outbound.HttpResponse, secrets: tuple[str, ...]) -> Outcome:
    try:
        payload = _decode(response, secrets)
    except VendorError as refused:
        return failure(refused)
    if not 200 <= response.status < 300:
        error = VendorError(f"the vendor answered HTTP {response.status}").to_dict()
        return Outcome(
            structured={"error": {**error, "status": response.status, "body": _clip(payload, secrets)}},
            is_error=True,
            status="failed",
        )
    structured = payload if isinstance(payload, dict) else {"result": payload}
    if response.truncated:
        structured = {"result": payload, "truncated": True}
    return Outcome(structured=structured)


def _decode(response: outbound.HttpResponse, secrets: tuple[str, ...]) -> Any:
    """The answer as JSON where it is JSON, else as text; redacted. JSON that Workset could not
    pass on faithfully (NaN, 1e999, lone surrogates, absurd nesting) is a vendor error."""
    text = response.body.decode("utf-8", errors="replace")
    if not text:
        return None
    if not response.truncated and ("json" in response.headers.get("content-type", "") or text[:1] in "{["):
        try:
            return redact(jsontext.loads(text), secrets)
        except jsontext.JsonRefused as refused:
            if refused.kind != "syntax":  # not JSON after all: passed on as text
                raise VendorError(f"the vendor answered JSON that cannot be passed on: {refused.reason}") from None
    return redact_text(text, secrets, cut=response.truncated)


def _clip(payload: Any, secrets: tuple[str, ...]) -> Any:
    text = payload if isinstance(payload, str) else jsontext.dumps(payload)
    if isinstance(payload, str) or len(text) > ERROR_BODY_PREVIEW:
        return redact_text(text[:ERROR_BODY_PREVIEW], secrets, cut=len(text) > ERROR_BODY_PREVIEW)
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
