"""What a tool definition is: the model an admin, an agent or an MCP server's sync publishes
(`ToolSpec`, its request template and annotations), the checks every definition passes before it
is stored, and `Tool`, a stored version with its parsed definition. Publishing and finding tools
is `toolbox`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from chalicelib.base import sensitive
from chalicelib.base.errors import InvalidInput, ToolUnavailable
from chalicelib.base.text import HIDDEN
from chalicelib.base.validation import NAME_PATTERN, VENDOR_PATTERN, check_tool_name, parse
from chalicelib.net import outbound, urls
from chalicelib.store.records import ToolVersion
from chalicelib.tools.guards import Guard, pending

SAFE_METHODS = frozenset({"GET", "HEAD"})
# Sizes as the store writes a definition (JSON with its default spacing, non-ASCII escaped): a
# tool's version and its head each carry the whole definition, in a DynamoDB item of at most
# 400 KB. One schema of a tool (input or output) is at most MAX_SCHEMA_BYTES, as OpenAPI imports
# build them; the whole definition at most MAX_DEFINITION_BYTES.
MAX_SCHEMA_BYTES = 256 * 1024
MAX_DEFINITION_BYTES = 320 * 1024


def stored_size(value: Any) -> int:
    """Bytes of `value` as the store writes it (pynamodb's JSONAttribute: `json.dumps`)."""
    return len(json.dumps(value))

PLACEHOLDER = urls.PLACEHOLDER  # `{field}` in a request's URL
STRAY_BRACE = re.compile(r"[{}]")
URL_SAFE = "/:@!$&'()*+,;=-._~%{}?"  # characters a URL's path and query keep as they are


def shown(definition: dict[str, Any]) -> dict[str, Any]:
    """A stored definition as a person is shown it: an MCP server's URL with its query's values
    hidden (`urls.redacted`), as a key may be one of them."""
    upstream = definition.get("upstream")
    if not isinstance(upstream, dict) or not isinstance(upstream.get("url"), str):
        return definition
    return {**definition, "upstream": {**upstream, "url": urls.redacted(upstream["url"])}}


def _shown_as_read(value: str | None, info: ValidationInfo) -> str | None:
    if value is not None and not _stored(info) and HIDDEN.search(value):
        raise ValueError("holds characters that hide or reorder text (controls, bidi overrides, invisible tag "
                         "characters): what an agent's model reads must be what a person sees")
    return value


def first_line(text: str, limit: int) -> str:
    """A description's first line, cut to `limit` characters (an ellipsis marks the cut)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


class Annotations(BaseModel):
    """MCP tool annotations; absent hints take MCP's defaults (a tool writes unless read-only)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    title: str | None = Field(default=None, max_length=200)
    readOnlyHint: bool | None = None
    destructiveHint: bool | None = None
    idempotentHint: bool | None = None
    openWorldHint: bool | None = None

    @field_validator("title")
    @classmethod
    def _visible_title(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _shown_as_read(value, info)


class Param(BaseModel):
    """An input field sent as a query parameter or a header under its own name on the wire (an
    array as `name=a&name=b` when `explode`, else `a,b`)."""

    model_config = ConfigDict(extra="forbid", defer_build=True, populate_by_name=True, serialize_by_alias=True)
    field: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=200)
    in_: Literal["query", "header"] = Field(alias="in")
    explode: bool = True

    @field_validator("name")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not re.fullmatch(r"[\x21-\x7e]+", value):
            raise ValueError("a parameter's name is printable ASCII without spaces")
        return value


FILE_ENCODING = "base64"  # a multipart tool's file: a top-level input property with this contentEncoding


class RequestTemplate(BaseModel):
    """How a call becomes an HTTP request: `{field}` in the URL's path or query is filled from the
    input; each of `params` sends a field as a query parameter or header; `body` names the field
    whose value is the whole body. The other fields form an object body for POST, PUT and PATCH
    (unless `body` is named) and go to the query string otherwise. A body is JSON, or with
    `body_format: form` a form (objects as `a[b]=c`, arrays as repeated keys, or `a[0][b]=c`
    inside objects, as Stripe and Twilio read them), or with `body_format: multipart` a
    multipart/form-data upload (a top-level field whose schema says `contentEncoding: base64` is
    a file: its decoded bytes are the part), or with `body_format: binary` raw bytes: `body`
    names the field holding them in base64, and Content-Type (a header or a param) says their
    type, application/octet-stream when nothing does. Whatever publishes must run, so everything a
    call would trip on is refused here."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
    url: str = Field(max_length=2000)
    headers: dict[str, str] = Field(default_factory=dict, max_length=50)
    params: list[Param] = Field(default_factory=list, max_length=200)
    body: str | None = Field(default=None, min_length=1, max_length=200)
    # the body as application/x-www-form-urlencoded, multipart/form-data or raw bytes (vendor.py), not JSON
    body_format: Literal["form", "multipart", "binary"] | None = None

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str, info: ValidationInfo) -> str:
        if _stored(info):
            return value
        return checked_url(value)

    @field_validator("headers")
    @classmethod
    def _plain_headers(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if _stored(info):
            return value
        seen: set[str] = set()
        for name, text in value.items():
            _check_header_name(name, seen)
            if not HEADER_VALUE.fullmatch(text):
                raise ValueError(f"header {name!r}: a value is printable ASCII, at most 1000 characters")
        return value

    @model_validator(mode="after")
    def _distinct_params(self, info: ValidationInfo) -> RequestTemplate:
        if _stored(info):
            return self
        headers = {name.lower() for name in self.headers}
        for param in self.params:
            if param.in_ == "header":
                try:
                    _check_header_name(param.name, headers)
                except ValueError as error:
                    raise ValueError(f"request.params: {error}") from None
        return self

    @model_validator(mode="after")
    def _binary_body_named(self) -> RequestTemplate:
        if self.body_format == "binary" and not self.body:
            raise ValueError("request.body: a binary body is one field of base64: name it in request.body")
        return self

    def header_names(self) -> list[str]:
        """Every header the tool sets: its fixed headers and those its input fills."""
        return [*self.headers, *(param.name for param in self.params if param.in_ == "header")]

    def fields(self) -> list[str]:
        """The input fields the request places by name: URL placeholders, params, the body."""
        return [*self.placeholders(), *(param.field for param in self.params), *([self.body] if self.body else [])]

    def placeholders(self) -> list[str]:
        """The input fields the URL names, in order."""
        return PLACEHOLDER.findall(self.url)

    def path_placeholders(self) -> list[str]:
        """The input fields named in the URL's path (a value there may not be a dot segment)."""
        return PLACEHOLDER.findall(self.url.split("?", 1)[0])

    def fill(self, values: dict[str, str]) -> str:
        """The URL with each `{field}` replaced by its (already encoded) value."""
        return PLACEHOLDER.sub(lambda match: values[match.group(1)], self.url)

    def pasted_secrets(self) -> tuple[str, ...]:
        """The credentials this template itself sends, as a vendor's answer could quote them back:
        the value of each literal header that names or looks like one (`sensitive.hidden_header`),
        with its words (`sensitive.echoed_parts`), and the literal values of the URL's query
        parameters named like one (`urls.credential_values`); each of `sensitive.ECHO_MIN_CHARS` or
        more. What the input fills (a param, a `{field}`) is the agent's own, never among them."""
        headers = [part for name, value in self.headers.items() if sensitive.hidden_header(name, value)
                   for part in sensitive.echoed_parts(value)]
        return sensitive.echoable([*headers, *urls.credential_values(self.url)])


HEADER_VALUE = re.compile(r"[\x20-\x7e]{0,1000}")


def _check_header_name(name: str, seen: set[str]) -> None:
    """A header a tool may set (added to `seen`, lower case): a valid name, once, and neither a
    credential nor one the HTTP client sets."""
    lowered = name.lower()
    if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", name):
        raise ValueError(f"header {name!r} is not a valid HTTP header name")
    if lowered in seen:
        raise ValueError(f"header {name!r} is given twice")
    seen.add(lowered)
    if lowered == "authorization":
        raise ValueError("credentials belong in a connection, not in the tool's headers")
    if outbound.is_client_header(name):
        raise ValueError(f"header {name!r} is set by Workset's HTTP client and cannot be templated")


class UpstreamCall(BaseModel):
    """A tool an MCP server serves: `tools/call` of its own name `tool` at the server's `url`.
    Only syncing a registered upstream publishes these (`upstreams.py`)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    upstream: str = Field(pattern=VENDOR_PATTERN)
    url: str = Field(max_length=2000)
    tool: str = Field(min_length=1, max_length=128)


def _stored(info: ValidationInfo) -> bool:
    """A stored definition was checked when it was published (and may predate newer checks)."""
    return bool((info.context or {}).get("stored"))


def checked_url(value: str) -> str:
    """An absolute http(s) URL that `http.client` can send: no spaces or control characters, no
    credentials or fragment, a valid port, placeholders only as `{field}` in the path or query;
    a non-ASCII host becomes its IDNA form and non-ASCII path or query text is percent-encoded."""
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in value):
        raise ValueError("must not contain spaces or control characters (percent-encode them)")
    if "\\" in value:
        raise ValueError("must not contain a backslash (a browser reads it as /)")
    try:
        parts = urlsplit(value)
    except ValueError:
        raise ValueError("is not a URL (check the brackets around an IPv6 host)") from None
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError("must be an absolute http or https URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry credentials (put them in a connection)")
    if parts.fragment or "#" in value:
        raise ValueError("must not have a fragment")
    if "{" in parts.netloc or "}" in parts.netloc:
        raise ValueError("placeholders may not appear in the host or port")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise ValueError("has a port that is not a number from 1 to 65535") from None
    if parts.port == 0:
        raise ValueError("has a port that is not a number from 1 to 65535")
    if STRAY_BRACE.search(PLACEHOLDER.sub("", value)):
        raise ValueError("placeholders are {field}, a plain name of an input property (letters, digits, _ and -)")
    try:
        host = parts.hostname.encode("idna").decode("ascii") if not parts.hostname.isascii() else parts.hostname
    except UnicodeError:
        raise ValueError("has a host name that cannot be encoded for DNS") from None
    netloc = host if ":" not in host else f"[{host}]"
    netloc += f":{parts.port}" if parts.port else ""
    path, query = (quote(piece, safe=URL_SAFE) for piece in (parts.path, parts.query))
    normalized = urlunsplit((parts.scheme, netloc, path, query, ""))
    urls.parse(normalized, template=True)  # read as every URL is: a browser would go where Python sends
    return normalized


def _admits_text(schema: Any) -> bool:
    """False only for a schema whose `type` rules out a string (absent, the field is unchecked here)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    return kind is None or kind == "string" or (isinstance(kind, list) and "string" in kind)


def _authoring_schema(schema: dict[str, Any]) -> None:
    """The JSON Schema a person or an agent authors against: `request` is required (only syncing
    an MCP server publishes a tool without one)."""
    request = schema["properties"]["request"]
    schema["properties"]["request"] = next(choice for choice in request.pop("anyOf") if "$ref" in choice)
    schema["required"] = [*schema.get("required", []), "request"]


class ToolSpec(BaseModel):
    """A tool definition as an admin or an agent publishes it, or as syncing an MCP server does."""

    model_config = ConfigDict(extra="forbid", defer_build=True, json_schema_extra=_authoring_schema)
    vendor: str = Field(pattern=VENDOR_PATTERN)
    name: str = Field(pattern=NAME_PATTERN)
    description: str = Field(min_length=1, max_length=4000)
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    annotations: Annotations = Field(default_factory=Annotations)
    request: RequestTemplate | None = None
    upstream: SkipJsonSchema[UpstreamCall | None] = None
    connection: str | None = None

    @field_validator("description")
    @classmethod
    def _visible_description(cls, value: str, info: ValidationInfo) -> str:
        return _shown_as_read(value, info) or value

    @field_validator("input_schema", "output_schema")
    @classmethod
    def _object_schema(cls, value: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        if value is None or (info.context or {}).get("stored"):
            return value  # a stored definition was checked when it was published
        if (size := stored_size(value)) > MAX_SCHEMA_BYTES:  # before the checks, whose work grows with it
            raise ValueError(f"is {size / 1024:,.0f} KB as JSON; a tool's schema is at most "
                             f"{MAX_SCHEMA_BYTES // 1024} KB")
        from chalicelib.base import schemas  # jsonschema and RE2: loaded by the first publish or call, not at import

        schemas.check_publishable(value)
        return value

    @model_validator(mode="after")
    def _fits(self, info: ValidationInfo) -> ToolSpec:
        if (info.context or {}).get("stored"):
            return self
        size = stored_size(self.model_dump(mode="json", exclude_none=True))
        if size > MAX_DEFINITION_BYTES:
            raise ValueError(f"the definition is {size / 1024:,.0f} KB as JSON; a tool's definition is at most "
                             f"{MAX_DEFINITION_BYTES // 1024} KB")
        return self

    @model_validator(mode="after")
    def _mcp_name(self) -> ToolSpec:
        check_tool_name(self.vendor, self.name)  # a stored definition too: no host could call it
        return self

    @model_validator(mode="after")
    def _consistent(self) -> ToolSpec:
        if self.request is None and self.upstream is None:
            raise ValueError("request: is required")
        if self.request is not None and self.upstream is not None:
            raise ValueError("upstream: a tool makes an HTTP request or calls an MCP server, not both")
        if self.request is None:
            return self
        if self.annotations.readOnlyHint and self.request.method not in SAFE_METHODS:
            raise ValueError(f"annotations.readOnlyHint: a {self.request.method} tool cannot be read-only")
        properties = self.input_schema.get("properties", {})
        required = self.input_schema.get("required", [])
        for field in self.request.placeholders():
            if field not in properties:
                raise ValueError(f"request.url: placeholder {{{field}}} is not a property of input_schema")
            if field not in required:
                raise ValueError(f"request.url: placeholder {{{field}}} must be a required property of input_schema")
        placed = self.request.fields()
        for field in placed[len(self.request.placeholders()):]:
            if field not in properties:
                raise ValueError(f"request: field {field!r} is not a property of input_schema")
        if len(set(placed)) < len(placed):
            raise ValueError("request: each input field goes to one place (the path, one param, or the body)")
        return self

    @model_validator(mode="after")
    def _bytes_as_text(self, info: ValidationInfo) -> ToolSpec:
        """Bytes travel in the input as base64 text (vendor.py decodes them): a binary body's field,
        or a multipart file (a property with contentEncoding base64), must admit a string, or every
        call that gives it is refused."""
        if self.request is None or _stored(info):
            return self  # a stored definition was checked when it was published
        properties = self.input_schema.get("properties", {})
        if self.request.body_format == "binary" and not _admits_text(properties.get(self.request.body)):
            raise ValueError(f"request.body: a binary body is base64 text: input_schema.properties."
                             f"{self.request.body} must admit a string")
        if self.request.body_format == "multipart" and not self.request.body and isinstance(properties, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and sub.get("contentEncoding") == FILE_ENCODING and not _admits_text(sub):
                    raise ValueError(f"input_schema.properties.{name}: a file (contentEncoding {FILE_ENCODING}) is "
                                     "base64 text: its type must admit a string")
        return self

    @property
    def url(self) -> str:
        """Where a call goes: the vendor URL template, or the upstream MCP server."""
        return self.upstream.url if self.upstream is not None else self.request.url  # type: ignore[union-attr]

    @property
    def pasted_secrets(self) -> tuple[str, ...]:
        """The credentials the definition itself carries (`RequestTemplate.pasted_secrets`; of an
        MCP server's URL, its credential-named query values): no answer may echo them."""
        if self.request is not None:
            return self.request.pasted_secrets()
        return sensitive.echoable(urls.credential_values(self.upstream.url if self.upstream is not None else ""))

    @property
    def header_names(self) -> list[str]:
        """The headers the tool itself sets (an upstream tool sets none)."""
        return self.request.header_names() if self.request is not None else []

    @property
    def query_names(self) -> list[str]:
        """The query parameters the tool itself may send: its URL's, its query params, and the input
        fields it places nowhere else when those go to the query string (`vendor.build`)."""
        if self.request is None:
            return []
        names = [name for name, _ in parse_qsl(urlsplit(self.request.url).query, keep_blank_values=True)]
        names += [param.name for param in self.request.params if param.in_ == "query"]
        if self.request.method in ("GET", "HEAD", "DELETE") or self.request.body is not None:
            placed = set(self.request.fields())
            names += [name for name in self.input_schema.get("properties", {}) if name not in placed]
        return names


@dataclass(frozen=True)
class Tool:
    """A published version and its parsed spec."""

    version: ToolVersion
    spec: ToolSpec

    @property
    def key(self) -> tuple[str, str]:
        """(vendor, name)."""
        return (self.spec.vendor, self.spec.name)

    @property
    def guard(self) -> Guard:
        """The hints Workset enforces for this version (never looser than a person accepted)."""
        return Guard.of_version(self.version)

    @property
    def writes(self) -> bool:
        """A tool writes unless its guard is read-only, whatever its definition now claims."""
        return self.guard.writes

    @property
    def declared(self) -> Guard:
        """The hints the definition claims."""
        return Guard.declared(self.version.definition.get("annotations"))

    @property
    def pending(self) -> bool:
        """True while the definition claims looser hints than a person accepted."""
        return pending(self.declared, self.guard)

    def check_available(self) -> None:
        """Raise ToolUnavailable when the tool's source no longer offers it."""
        if self.version.unavailable:
            raise ToolUnavailable(self.spec.vendor, self.spec.name, self.version.unavailable)


def parse_spec(payload: Any) -> ToolSpec:
    """Validate a tool definition; a bad one raises InvalidInput naming the field. A tool of an
    MCP server is published only by syncing the server, never by hand."""
    if isinstance(payload, dict) and "upstream" in payload:
        raise InvalidInput("upstream: a tool of an MCP server is published by registering the server "
                           "(POST /v1/upstreams), not by hand", field="upstream")
    return parse(ToolSpec, payload)
