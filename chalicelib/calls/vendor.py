"""The vendor side of a call: build the HTTP request from a tool and its input, carry the
connection's credential, preview or send it, and shape the vendor's answer."""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlencode, urlsplit, urlunsplit

from chalicelib.access.connection_auth import Credential
from chalicelib.base import jsontext, sensitive
from chalicelib.base.config import settings
from chalicelib.base.errors import InvalidInput, VendorError, WorksetError
from chalicelib.base.outcomes import Outcome, RunStatus, failure
from chalicelib.net import mcpclient, outbound, urls
from chalicelib.net.outbound import HttpRequest
from chalicelib.tools.definitions import FILE_ENCODING, HEADER_VALUE, Tool, UpstreamCall

QUERY_METHODS = frozenset({"GET", "HEAD", "DELETE"})
FORM = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"
FILE_TYPE = "application/octet-stream"
ERROR_BODY_PREVIEW = 2000
REDACTED = "[redacted]"
DOT_SEGMENTS = frozenset({".", ".."})


@dataclass(frozen=True)
class Request:
    """A request ready to preview or send; `secrets` are the credential's values, which no
    preview or answer may show."""

    http: HttpRequest
    secrets: tuple[str, ...] = field(default=(), repr=False)
    upstream: UpstreamCall | None = None  # an MCP server's tool: `http` is its tools/call, for previews
    arguments: dict[str, Any] = field(default_factory=dict, repr=False)  # what an upstream tool is called with
    account_id: str = ""  # whose call: an MCP server's session is never shared between accounts
    shown_body: Any = field(default=None, repr=False)  # what a preview shows of a body that is not text
    shown_url: str | None = field(default=None, repr=False)  # what a preview shows of an HTTP tool's URL
    shown_headers: dict[str, str] | None = field(default=None, repr=False)  # ... and of its headers


def check_arguments(tool: Tool, arguments: dict[str, Any]) -> None:
    """Input the schema accepts but the request cannot carry: a path placeholder whose value is a
    dot segment (`.`, `..`, however encoded) would move the request to another path; a header
    parameter's value must be printable ASCII on one line."""
    template = tool.spec.request
    if template is None:
        return  # an MCP server's tool: the input travels as JSON
    for name in template.path_placeholders():
        text = _scalar(arguments[name])
        decoded = text
        for _ in range(3):  # %2e, %252e, ...
            decoded = unquote(decoded)
        if {text, decoded} & DOT_SEGMENTS:
            raise InvalidInput(f"input.{name}: {text!r} is not allowed in the URL's path", field=f"input.{name}")
    for param in template.params:
        if param.in_ == "header" and param.field in arguments \
                and not HEADER_VALUE.fullmatch(_joined(arguments[param.field])):
            raise InvalidInput(f"input.{param.field}: a header's value is printable ASCII, at most 1000 characters",
                               field=f"input.{param.field}")
    for name in file_fields(tool):
        if name in arguments:
            _file_bytes(name, arguments[name])
    if template.body_format == "binary" and template.body in arguments:
        _file_bytes(template.body, arguments[template.body])


def file_fields(tool: Tool) -> frozenset[str]:
    """A multipart tool's files: the input's own properties whose schema says `contentEncoding:
    base64` (a file inside a nested body is not one: its schema may be a $ref)."""
    template = tool.spec.request
    properties = tool.spec.input_schema.get("properties")
    if template is None or template.body_format != "multipart" or template.body or not isinstance(properties, dict):
        return frozenset()
    return frozenset(name for name, sub in properties.items()
                     if isinstance(sub, dict) and sub.get("contentEncoding") == FILE_ENCODING)


def build(tool: Tool, arguments: dict[str, Any], credential: Credential | None = None, *,
          account_id: str = "") -> Request:
    """The HTTP request a call sends: `{field}` placeholders in the URL filled (URL-encoded), each
    param sent as its query parameter or header, the `body` field as the JSON body (or a form, a
    multipart upload, raw bytes from base64: `body_format`); the rest of
    the input goes to a JSON object body for POST/PUT/PATCH without a `body` field, and to the
    query string otherwise. An MCP server's tool becomes its `tools/call` message (what a preview
    shows; `perform` sends it through the MCP client). The arguments passed `check_arguments`
    when the call was made (a run's input never changes)."""
    if tool.spec.upstream is not None:
        return replace(_upstream_request(tool.spec.upstream, arguments, credential), account_id=account_id)
    template = tool.spec.request
    assert template is not None
    used = template.placeholders()
    filled = {name: quote(_scalar(arguments[name]), safe="") for name in used}
    url = template.fill(filled)
    headers = dict(template.headers)
    query: list[tuple[str, str]] = []
    for param in template.params:
        if param.field not in arguments:
            continue
        if param.in_ == "header":
            headers[param.name] = _joined(arguments[param.field])
        else:
            query += _query_pairs(param.name, arguments[param.field], explode=param.explode)
    rest = {key: value for key, value in arguments.items() if key not in template.fields()}
    content: Any = None
    if template.body is not None and template.body in arguments:
        content = arguments[template.body]
    elif template.body is None and template.method not in QUERY_METHODS:
        content, rest = rest, {}
    body: bytes | None = None
    shown_body: Any = None
    if content is not None and template.body_format == "form":
        body = urlencode(_form_pairs("", content)).encode()
        headers["Content-Type"] = FORM
    elif content is not None and template.body_format == "multipart":
        body, shown_body, headers["Content-Type"] = _multipart(content, file_fields(tool), template.body or "body")
    elif content is not None and template.body_format == "binary":
        body = _file_bytes(template.body or "body", content)
        named = next((name for name in headers if name.lower() == "content-type"), "Content-Type")
        headers.setdefault(named, FILE_TYPE)  # the type the tool or the caller gave, else plain bytes
        shown_body = {"content_type": headers[named], "bytes": len(body)}
    elif content is not None:
        body = jsontext.dumps(content).encode()
        headers["Content-Type"] = "application/json"
    query += [(key, _scalar(value)) for key, value in rest.items()]
    url = _with_query(url, query)
    headers.setdefault("Accept", "application/json")
    request = _with_credential(HttpRequest(method=template.method, url=url, headers=headers, body=body), credential)
    # the same URL from the template with its own query values hidden: the input's values are shown
    shown_url = _with_query(urls.PLACEHOLDER.sub(lambda match: filled[match.group(1)], urls.redacted(template.url)),
                            query)
    if credential is not None:
        shown_url = credential.apply(shown_url, {})[0]  # where the credential goes (`preview` redacts its value)
    # the headers with a credential the template itself sets hidden (`X-Api-Key: …`); those the
    # input fills are shown as the input is, the connection's as `preview` redacts them
    shown_headers = {name: sensitive.shown_header(name, value) if template.headers.get(name) == value else value
                     for name, value in request.http.headers.items()}
    return replace(request, shown_body=shown_body, shown_url=shown_url, shown_headers=shown_headers)


def _upstream_request(call: UpstreamCall, arguments: dict[str, Any], credential: Credential | None) -> Request:
    message = mcpclient.tools_call_message(call.tool, arguments, None)
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    http = HttpRequest(method="POST", url=call.url, headers=headers, body=jsontext.dumps(message).encode())
    return replace(_with_credential(http, credential), upstream=call, arguments=arguments)


def _with_credential(http: HttpRequest, credential: Credential | None) -> Request:
    """The request carrying the credential in its header or query parameter, in place of whatever
    the request itself put there."""
    if credential is None:
        return Request(http)
    url, headers = credential.apply(http.url, http.headers)
    return Request(replace(http, url=url, headers=headers), credential.secrets)


def preview(request: Request) -> Outcome:
    """What would be sent, with the credential's values replaced by a marker wherever they appear;
    of an MCP server's URL only its origin and its query's names (a key may be in its path or query);
    of an HTTP tool's URL, the values its URL template sets hidden (`?api_key=…&q=cats`), and of its
    headers, the values of those it sets that name or look like a credential (`X-Api-Key: …`)."""
    http = request.http
    body = None
    if request.shown_body is not None:
        body = request.shown_body
    elif http.body:
        body = http.body.decode() if http.headers.get("Content-Type") == FORM else json.loads(http.body)
    url = urls.redacted(http.url, path=True) if request.upstream is not None else request.shown_url or http.url
    headers = dict(http.headers) if request.shown_headers is None else request.shown_headers
    shown = {"method": http.method, "url": url, "headers": headers, "body": body}
    return Outcome(structured={"preview": redact(shown, request.secrets)})


def send(request: Request, *, timeout: float | None = None) -> Outcome:
    """Send the request within `timeout` (the vendor timeout by default); every failure becomes an
    error Outcome, and the credential never comes back in the answer."""
    config = settings()
    timeout = config.vendor_timeout_seconds if timeout is None else timeout
    try:
        if request.upstream is not None:
            return _upstream_answer(_call_upstream(request, timeout), request.secrets)
        response = outbound.send(request.http, timeout=timeout, max_bytes=config.vendor_max_response_bytes,
                                 allow_private=config.allow_private_network)
    except WorksetError as error:
        outcome = failure(error)  # an MCP server's error message could echo what it was sent
        return replace(outcome, structured=redact(outcome.structured, request.secrets))
    return _answer(response, request.secrets)


def _call_upstream(request: Request, timeout: float) -> dict[str, Any]:
    assert request.upstream is not None
    config = settings()
    # the preview's URL and headers carry the credential; the MCP client sets its own protocol headers over them
    upstream = mcpclient.Upstream(url=request.http.url, headers=request.http.headers, timeout=timeout,
                                  max_bytes=config.vendor_max_response_bytes, allow_private=config.allow_private_network,
                                  tenant=request.account_id, secrets=request.secrets)
    return mcpclient.call_tool(upstream, request.upstream.tool, request.arguments)


MCP_CONTENT_TYPES = frozenset({"text", "image", "audio", "resource_link", "resource"})


def _upstream_answer(result: dict[str, Any], secrets: tuple[str, ...]) -> Outcome:
    """An MCP server's tool result, passed on as it is (redacted) when it is one: content blocks
    of the types MCP defines, structured content an object, isError a boolean."""
    content, structured = result.get("content", []), result.get("structuredContent")
    if not isinstance(content, list) or not all(isinstance(block, dict) and block.get("type") in MCP_CONTENT_TYPES
                                                for block in content):
        return failure(VendorError("the MCP server answered content that is not a list of MCP content blocks"))
    if structured is not None and not isinstance(structured, dict):
        return failure(VendorError("the MCP server answered structuredContent that is not an object"))
    is_error = result.get("isError") is True
    passed: dict[str, Any] = {"content": content}
    if structured is not None:
        passed["structuredContent"] = structured
    return Outcome(structured=redact(passed, secrets), is_error=is_error, status=RunStatus.ended(is_error=is_error),
                   mcp=True)


def perform(request: Request, *, dry_run: bool, read_only: bool, timeout: float | None = None) -> Outcome:
    """A dry run reaches the vendor only for a tool guarded read-only (`Tool.writes`: the hints a
    person accepted, not looser ones a new version claims); any other tool, whatever its method,
    answers the preview. Everything else is sent."""
    if dry_run and not read_only:
        return preview(request)
    return send(request, timeout=timeout)


def redact(value: Any, secrets: tuple[str, ...]) -> Any:
    """`value` with every occurrence of each secret (in any string or key, raw or escaped as
    `redact_text` says) replaced by a marker."""
    return _Redactor(secrets).value(value) if secrets else value


def redact_text(text: str, secrets: tuple[str, ...], *, cut: bool = False) -> str:
    """`text` with the secrets replaced, as they are or as JSON or a URL escapes them (`\\/`,
    `\\u002b`, `%2b` or `%2B`, `+` for a space: a vendor's text may quote what it was sent in
    any of them); with `cut`, the text was cut short, so a tail that is the start of a secret (in
    one of those forms) is dropped too (a half secret is still a secret)."""
    return _Redactor(secrets).text(text, cut=cut)


class _Redactor:
    """The secrets' forms and patterns, built once per answer (not per string of it: an answer
    of many strings and a long secret, an OAuth token, would cost their product)."""

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self._ordered = sorted((secret for secret in secrets if secret), key=len, reverse=True)
        self._forms = {secret: _forms(secret) for secret in self._ordered}
        self._patterns: dict[str, re.Pattern[str]] = {}

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(key)): self.value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.value(item) for item in value]
        return value

    def text(self, text: str, *, cut: bool = False) -> str:
        for secret in self._ordered:
            for form in self._forms[secret]:
                text = text.replace(form, REDACTED)
            if "\\" in text or "%" in text or (" " in secret and "+" in text):
                if secret not in self._patterns:
                    self._patterns[secret] = re.compile(_escaped(secret))
                text = self._patterns[secret].sub(REDACTED, text)
        if cut:
            for secret in self._ordered:
                for form in self._forms[secret]:
                    for length in range(min(len(form), len(text)), 0, -1):
                        if text.endswith(form[:length]):
                            return text[:-length]
        return text


_JSON_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
               "\t": "\\t"}
_PERCENT = re.compile(r"%[0-9A-F]{2}")


def _forms(secret: str) -> tuple[str, ...]:
    """The whole forms a secret is most often quoted in: raw, URL-encoded (upper- and lower-case
    escapes), and JSON-escaped (with `/` as it is and as `\\/`)."""
    encoded = [quote(secret, safe=""), quote_plus(secret)]
    escaped = json.dumps(secret)[1:-1]
    lower = [_PERCENT.sub(lambda match: match.group().lower(), form) for form in encoded]
    return tuple(dict.fromkeys((secret, *encoded, *lower, escaped, escaped.replace("/", "\\/"))))


def _escaped(secret: str) -> str:
    """A pattern for `secret` with any of its characters, in any mix, as JSON or a URL escapes it
    (hex in either case): what `_forms` cannot list."""
    return "".join(_escaped_char(char) for char in secret)


def _escaped_char(char: str) -> str:
    forms = [re.escape(char)]
    if char in _JSON_SHORT:
        forms.append(re.escape(_JSON_SHORT[char]))
    code = ord(char)
    units = (code,) if code < 0x10000 else (0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF))
    forms.append("(?i:" + "".join(f"\\\\u{unit:04x}" for unit in units) + ")")
    forms.append("(?i:" + "".join(f"%{byte:02x}" for byte in char.encode("utf-8", "surrogatepass")) + ")")
    if char == " ":
        forms.append(r"\+")
    return f"(?:{'|'.join(forms)})"


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
            status=RunStatus.FAILED,
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


def _form_pairs(key: str, value: Any, *, nested: bool = False) -> list[tuple[str, str]]:
    """A form body's fields: an object's members as `key[member]`; an array as repeated `key`
    at the top, as `key[0]` inside an object; null as an empty value."""
    if isinstance(value, dict):
        return [pair for member, item in value.items()
                for pair in _form_pairs(f"{key}[{member}]" if key else str(member), item, nested=bool(key))]
    if isinstance(value, list):
        if not nested and all(not isinstance(item, dict | list) for item in value):
            return [(key, _scalar(item)) for item in value]
        return [pair for index, item in enumerate(value) for pair in _form_pairs(f"{key}[{index}]", item, nested=True)]
    return [(key, "" if value is None else _scalar(value))]


def _multipart(content: Any, files: frozenset[str], name: str) -> tuple[bytes, list[dict[str, Any]], str]:
    """A multipart/form-data body (RFC 7578), what a preview shows of it, and its Content-Type. Each
    field is a part: a file its decoded bytes, an array of scalars one part per item, an object
    or other array its JSON, a scalar its text, null empty. Field names are quoted as browsers do
    (", CR and LF percent-encoded), so no name can add a header or end a part."""
    fields = content.items() if isinstance(content, dict) else [(name, content)]
    parts: list[tuple[str, bytes, str | None]] = []  # (name, bytes, content type when not plain text)
    shown: list[dict[str, Any]] = []
    for key, value in fields:
        if key in files:
            data = _file_bytes(key, value)
            parts.append((key, data, FILE_TYPE))
            shown.append({"name": key, "filename": key, "content_type": FILE_TYPE, "bytes": len(data)})
            continue
        scalars = value if isinstance(value, list) and all(not isinstance(item, dict | list) for item in value) \
            else [value]
        for item in scalars:
            if isinstance(item, dict | list):
                parts.append((key, jsontext.dumps(item).encode(), "application/json"))
            else:
                parts.append((key, ("" if item is None else _scalar(item)).encode(), None))
            shown.append({"name": key, "value": item})
    boundary = f"workset-{secrets.token_hex(16)}"
    while any(boundary.encode() in data for _, data, _ in parts):  # 128 random bits: never, but be sure
        boundary = f"workset-{secrets.token_hex(16)}"
    body = bytearray()
    for key, data, kind in parts:
        quoted = key.replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")
        body += f'--{boundary}\r\nContent-Disposition: form-data; name="{quoted}"'.encode()
        body += f'; filename="{quoted}"'.encode() if kind == FILE_TYPE else b""
        body += f"\r\nContent-Type: {kind}".encode() if kind else b""
        body += b"\r\n\r\n" + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return bytes(body), shown, f"{MULTIPART}; boundary={boundary}"


def _file_bytes(name: str, value: Any) -> bytes:
    """A file field's bytes: its value is base64 (RFC 4648, standard alphabet, padded)."""
    try:
        if not isinstance(value, str):
            raise binascii.Error
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"input.{name}: a file's content is base64 (RFC 4648: A-Z a-z 0-9 + /, padded with =)",
                           field=f"input.{name}") from None


def _joined(value: Any) -> str:
    """A header's value: an array as `a,b`."""
    return ",".join(map(_scalar, value)) if isinstance(value, list) else _scalar(value)


def _query_pairs(name: str, value: Any, *, explode: bool) -> list[tuple[str, str]]:
    if isinstance(value, list) and explode:
        return [(name, _scalar(item)) for item in value]
    return [(name, _joined(value))]


def _with_query(url: str, params: list[tuple[str, str]]) -> str:
    if not params:
        return url
    parts = urlsplit(url)
    extra = urlencode(params)
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))
