"""The account's toolbox: what a tool definition must be, publishing versions, finding tools."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from urllib.parse import urlsplit

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from chalicelib import connections
from chalicelib.errors import InvalidInput, ToolNotFound
from chalicelib.search import VECTOR_VERSION, Document, SearchIndex, document_vector
from chalicelib.store import tools as tool_store
from chalicelib.store.base import ConditionFailed
from chalicelib.store.records import Page, ToolVersion
from chalicelib.validation import parse

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,30}$"
SAFE_METHODS = frozenset({"GET", "HEAD"})
PUBLISH_ATTEMPTS = 3


class Annotations(BaseModel):
    """MCP tool annotations; absent hints take MCP's defaults (a tool writes unless read-only)."""

    model_config = ConfigDict(extra="forbid")
    title: str | None = Field(default=None, max_length=200)
    readOnlyHint: bool | None = None
    destructiveHint: bool | None = None
    idempotentHint: bool | None = None
    openWorldHint: bool | None = None


class RequestTemplate(BaseModel):
    """How a call becomes an HTTP request: `{field}` in the URL is filled from the input."""

    model_config = ConfigDict(extra="forbid")
    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
    url: str = Field(max_length=2000)
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError("must be an absolute http or https URL")
        if "{" in (parts.netloc or ""):
            raise ValueError("placeholders may not appear in the host")
        return value

    @field_validator("headers")
    @classmethod
    def _plain_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", name) or "\n" in text or "\r" in text:
                raise ValueError(f"header {name!r} is not a valid HTTP header")
            if name.lower() == "authorization":
                raise ValueError("credentials belong in a connection, not in the tool's headers")
        return value

    def placeholders(self) -> list[str]:
        """The input fields the URL names, in order."""
        return [field for _, field, _, _ in string.Formatter().parse(self.url) if field]


class ToolSpec(BaseModel):
    """A tool definition as an admin or an agent publishes it."""

    model_config = ConfigDict(extra="forbid")
    vendor: str = Field(pattern=NAME_PATTERN)
    name: str = Field(pattern=NAME_PATTERN)
    description: str = Field(min_length=1, max_length=4000)
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    annotations: Annotations = Field(default_factory=Annotations)
    request: RequestTemplate
    connection: str | None = None

    @field_validator("input_schema", "output_schema")
    @classmethod
    def _object_schema(cls, value: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        if value is None or (info.context or {}).get("stored"):
            return value  # a stored definition was checked when it was published
        if value.get("type") != "object":
            raise ValueError("must be a JSON Schema whose root has type: object")
        try:
            jsonschema.Draft202012Validator.check_schema(value)
        except jsonschema.SchemaError as error:
            raise ValueError(f"is not a valid JSON Schema: {error.message}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ToolSpec:
        if self.annotations.readOnlyHint and self.request.method not in SAFE_METHODS:
            raise ValueError(f"annotations.readOnlyHint: a {self.request.method} tool cannot be read-only")
        properties = self.input_schema.get("properties", {})
        for field in self.request.placeholders():
            if field not in properties:
                raise ValueError(f"request.url: placeholder {{{field}}} is not a property of input_schema")
        return self

    @property
    def writes(self) -> bool:
        """A tool writes unless it is declared read-only."""
        return not self.annotations.readOnlyHint


@dataclass(frozen=True)
class Tool:
    """A published version and its parsed spec."""

    version: ToolVersion
    spec: ToolSpec

    @property
    def key(self) -> tuple[str, str]:
        """(vendor, name)."""
        return (self.spec.vendor, self.spec.name)


def parse_spec(payload: Any) -> ToolSpec:
    """Validate a tool definition; a bad one raises InvalidInput naming the field."""
    return parse(ToolSpec, payload)


def publish(account_id: str, spec: ToolSpec, published_by: str, now: datetime, *,
            agent_authored: bool = False) -> Tool:
    """Publish `spec` as a new tool or the next version of an existing one.

    A named connection must belong to the account and vendor and admit the URL's host; a tool
    an agent authors may only name a connection that is limited to hosts (so an agent cannot
    send a credential to a host of its choosing).
    """
    if spec.connection:
        connections.check_usable(account_id, spec.connection, spec.vendor, spec.request.url, field="connection",
                                 require_hosts=agent_authored)
    definition = spec.model_dump(mode="json", exclude_none=True)
    vector = document_vector(spec.vendor, spec.name, spec.description)  # once per version, not per search
    for _ in range(PUBLISH_ATTEMPTS):
        head = tool_store.get_head(account_id, spec.vendor, spec.name)
        previous = head.version if head else 0
        try:
            version = tool_store.put_version(
                account_id, spec.vendor, spec.name, definition, published_by, now, previous=previous,
                vector=vector, vector_version=VECTOR_VERSION,
            )
        except ConditionFailed:
            continue  # another publish of this tool won; publish on top of it
        return Tool(version, spec)
    raise InvalidInput(f"{spec.vendor}/{spec.name} is being published concurrently; try again")


def resolve(account_id: str, vendor: str, name: str) -> Tool:
    """The newest version of a tool; unknown tools raise ToolNotFound."""
    head = tool_store.get_head(account_id, vendor, name)
    if head is None:
        raise ToolNotFound(vendor, name)
    return _tool(head)


def resolve_version(account_id: str, vendor: str, name: str, version: int) -> Tool:
    """One published version of a tool (versions never change once published)."""
    found = tool_store.get_version(account_id, vendor, name, version)
    if found is None:
        raise ToolNotFound(vendor, name)
    return _tool(found)


def resolve_many(account_id: str, keys: list[tuple[str, str]]) -> list[Tool]:
    """The newest versions of several tools, in the order asked (unknown ones left out)."""
    heads = tool_store.get_heads(account_id, keys)
    return [_tool(heads[key]) for key in keys if key in heads]


def page(account_id: str, *, limit: int, cursor: str | None) -> Page:
    """One page of the toolbox (newest versions), ordered by vendor and name."""
    return tool_store.page_heads(account_id, limit=limit, cursor=cursor)


def using_connection(account_id: str, connection_id: str) -> list[Tool]:
    """The tools whose newest version names this connection."""
    return [tool for tool in map(_tool, tool_store.list_heads(account_id)) if tool.spec.connection == connection_id]


def versions(account_id: str, vendor: str, name: str) -> list[ToolVersion]:
    """Every version of a tool, oldest first; unknown tools raise ToolNotFound."""
    found = tool_store.list_versions(account_id, vendor, name)
    if not found:
        raise ToolNotFound(vendor, name)
    return found


@dataclass
class _CachedIndex:
    revision: int
    index: SearchIndex
    tools: dict[str, Tool]


_indexes: dict[str, _CachedIndex] = {}


def search(account_id: str, query: str, limit: int) -> list[Tool]:
    """Ranked tools for a query. A warm instance reuses its index while the toolbox is unchanged
    (one read of the toolbox's revision); a publish anywhere moves the revision on."""
    revision = tool_store.toolbox_revision(account_id)
    cached = _indexes.get(account_id)
    if cached is None or cached.revision != revision:
        tools = {f"{head.vendor}/{head.name}": _tool(head) for head in tool_store.list_heads(account_id)}
        documents = [
            Document(key=key, vendor=tool.spec.vendor, name=tool.spec.name, description=tool.spec.description,
                     vector=tool.version.vector if tool.version.vector_version == VECTOR_VERSION else None)
            for key, tool in tools.items()
        ]
        cached = _CachedIndex(revision, SearchIndex.build(documents), tools)
        _indexes[account_id] = cached
    return [cached.tools[key] for key, _ in cached.index.search(query, limit)]


def _tool(head: ToolVersion) -> Tool:
    return Tool(head, ToolSpec.model_validate(head.definition, context={"stored": True}))
