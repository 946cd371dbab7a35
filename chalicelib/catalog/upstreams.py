"""MCP servers as vendors: register a remote MCP server (Streamable HTTP) under a vendor, and its
tools become that vendor's toolbox tools (`vendor__name`), version by version (`imports.apply`).

A sync reads the server's whole `tools/list` through the outbound guard, with the connection's
credential: at registration, when an admin or a person asks, and once an hour from the sweep
(through the work queue, one message per server). A call of such a tool sends `tools/call` to
the server (`vendor.build`, `mcpclient.call_tool`).

A server is hostile, and a sync says what it did: a tool Workset cannot publish as listed (over
the size a definition may be, a bad schema, a name given twice) is skipped with why, and the
others are published; a tool the store refused to write is `failed`, and the sync is remembered
`ok: false` with what failed, until a sync writes everything. Registering is not undone when the
publishing after it fails: the server stays registered with its failed sync remembered, and a
sync (`POST /v1/upstreams/{vendor}/sync`, or the hourly one) finishes the work.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from chalicelib.access import connections, credentials
from chalicelib.base import log, sensitive
from chalicelib.base.config import settings
from chalicelib.base.errors import Conflict, NotFound, VendorError, WorksetError
from chalicelib.base.text import visible
from chalicelib.base.validation import VENDOR_PATTERN, parse
from chalicelib.catalog import imports
from chalicelib.catalog.imports import MCP, Candidate, Report
from chalicelib.net import mcpclient, urls
from chalicelib.store import queues
from chalicelib.store import upstreams as upstream_store
from chalicelib.store.records import Page, Upstream
from chalicelib.tools import toolnames
from chalicelib.tools.definitions import checked_url

T = TypeVar("T")
SYNC = "sync_upstream"  # the work queue message that syncs one server
SYNC_EVERY = timedelta(hours=1)
SYNCED_BY = "sweep"  # who published the versions an hourly sync brings (never an agent)
# What does not start like a URL (`npx -y @scope/server`, `uvx x`, `/usr/bin/x`) is read as a
# command that starts a stdio server, which Workset cannot run: the refusal says how to bring it in.
# A host without its scheme (`mcp.example.com/mcp`) is told it needs one.
_URL_START = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.-]*://")
_HOST_WITHOUT_SCHEME = re.compile(r"^(localhost|\[[0-9A-Fa-f:.]+\]|[\w-]+(\.[\w-]+)+)(:\d+)?(/\S*)?$")
STDIO_REFUSAL = (
    "must be the URL of an MCP server's Streamable HTTP endpoint: Workset calls MCP servers over "
    "Streamable HTTP and cannot run a command that starts a stdio server. Serve a stdio server over "
    "HTTP with a bridge, e.g. `npx -y supergateway --stdio \"<command>\" --outputTransport streamableHttp "
    "--port 8100`, and register its endpoint (http://127.0.0.1:8100/mcp on the local stack; a public "
    "https URL for a deployed Workset)"
)
_MCP_NAME = re.compile(r"[\x21-\x7e]{1,128}")  # what Workset passes back as the server's own tool name
_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
FAILURES_KEPT = 20  # failed tools named in a remembered sync
UNFINISHED = ("the hourly sync started and did not finish (the worker stopped: a list too large to publish in "
              "time, or a fault); it is tried again an hour later, or sync it now")


class NewUpstream(BaseModel):
    """`POST /v1/upstreams`: the vendor its tools belong to, the server's MCP endpoint, and the
    connection whose credential every request to it carries."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    vendor: str = Field(pattern=VENDOR_PATTERN)
    url: str = Field(max_length=2000)
    connection: str | None = Field(default=None, max_length=64)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not _URL_START.match(value):
            if _HOST_WITHOUT_SCHEME.match(value):
                raise ValueError("must be an absolute http or https URL (begin it with https://)")
            raise ValueError(STDIO_REFUSAL)  # never the command back: its arguments may hold a key
        if "{" in value or "}" in value:
            raise ValueError("must be the server's MCP endpoint, without placeholders")
        return checked_url(value)


def register(account_id: str, payload: Any, published_by: str, now: datetime) -> tuple[Upstream, Report]:
    """Register a server and publish its tools; the server is read first, so one that cannot be
    reached (or a vendor that has a server already) registers nothing."""
    request = parse(NewUpstream, payload)
    if request.connection:
        connections.check_usable(account_id, request.connection, request.vendor, request.url, field="connection")
    if upstream_store.get(account_id, request.vendor) is not None:
        raise Conflict(f"vendor {request.vendor} has an MCP server already; sync it, or choose another vendor",
                       field="vendor")
    upstream = Upstream(account_id, request.vendor, request.url, now, connection_id=request.connection)
    revision, tools = _list_tools(upstream)
    if not upstream_store.put(upstream):
        raise Conflict(f"vendor {request.vendor} has an MCP server already; sync it, or choose another vendor",
                       field="vendor")
    return upstream, _publish(upstream, revision, tools, published_by, now)


def sync(account_id: str, vendor: str, published_by: str, now: datetime) -> Report:
    """Read the server again: new versions for changed tools, unavailable for tools it dropped.
    A failure is remembered on the server (`GET /v1/upstreams` shows it) and raised; tools the
    store refused are remembered too, and answered as `failed` lines."""
    upstream = get(account_id, vendor)
    try:
        revision, tools = _list_tools(upstream)
    except WorksetError as error:
        upstream_store.record_sync(account_id, vendor, now, {"ok": False, "message": error.message}, None)
        raise
    return _publish(upstream, revision, tools, published_by, now)


def get(account_id: str, vendor: str) -> Upstream:
    """The vendor's server; NotFound when it has none."""
    found = upstream_store.get(account_id, vendor)
    if found is None:
        raise NotFound(f"no MCP server registered for vendor {vendor}")
    return found


def list_all(account_id: str, *, limit: int, cursor: str | None) -> Page:
    """The account's servers with how their last sync went."""
    return upstream_store.list_all(account_id, limit=limit, cursor=cursor)


def queue_due(now: datetime, *, account_id: str | None = None) -> int:
    """The sweep's part: hand every server (of the fleet, or of `account_id`) not synced for
    SYNC_EVERY to the work queue (a sync waits on the server, so it never runs in the sweep
    itself). Answers how many were queued."""
    due = [{"type": SYNC, "account_id": upstream.account_id, "vendor": upstream.vendor}
           for upstream in upstream_store.list_fleet() if account_id in (None, upstream.account_id)
           and (upstream.synced_at is None or upstream.synced_at <= now - SYNC_EVERY)]
    if due:
        queues.send(settings().sweep_queue, due)
    return len(due)


def handle_sync(message: dict[str, Any], now: datetime) -> None:
    """A work queue message: sync one server. A server that fails is remembered as failed and
    tried again an hour later, not retried by the queue. The sync is remembered as started
    before it starts: one cut short (a list so large that publishing it outlasts the Lambda, a
    crash) says so, and is not handed out again by every sweep of the hour (each would cost
    another worker cut off the same way); a sync that ends overwrites it."""
    account_id, vendor = str(message["account_id"]), str(message["vendor"])
    upstream_store.record_sync(account_id, vendor, now, {"ok": False, "message": UNFINISHED}, None)
    try:
        sync(account_id, vendor, SYNCED_BY, now)
    except WorksetError as error:  # the server's fault (remembered by `sync`), or the server is gone
        log.event("upstream.sync_failed", account_id=message.get("account_id"), vendor=message.get("vendor"),
                  error_code=error.code)


def candidates(upstream: Upstream, tools: list[Any], keep_names: dict[str, str]) -> list[Candidate]:
    """A candidate per tool the server lists: its own name kept for `tools/call`, a Workset name
    slugged from it, its schemas and hints; a tool Workset cannot pass on is skipped, with why."""
    given = toolnames.Names(upstream.vendor)
    for listed_as, kept in keep_names.items():
        given.hold(kept, toolnames.words(listed_as))
    found, listed = [], set()
    for index, tool in enumerate(tools):
        own = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(own, str) or not _MCP_NAME.fullmatch(own):
            found.append(Candidate(f"#{index}", f"tool-{index}", None, "the server listed a tool without a valid name"))
            continue
        if own in listed:  # which of the two a call would reach is the server's guess: neither is published twice
            found.append(Candidate(f"#{index}", f"tool-{index}", None, f"the server listed a second tool named {own}",
                                   label=own))
            continue
        listed.add(own)
        name = keep_names.get(own) or given.give(toolnames.words(own) or ["tool"], salt=own)
        found.append(Candidate(own, name, _definition(upstream, own, name, tool), label=own))
    return found


def _publish(upstream: Upstream, revision: str, tools: list[Any], published_by: str, now: datetime) -> Report:
    heads = imports.existing(upstream.account_id, upstream.vendor)
    offered = candidates(upstream, tools, imports.known_names(heads, MCP))
    try:
        report = imports.apply(upstream.account_id, upstream.vendor, MCP, offered, heads,
                               connection=upstream.connection_id, published_by=published_by, now=now, dry_run=False,
                               attended=published_by != SYNCED_BY)
    except imports.TooManyChanges as refused:  # the vendor's day is full (`imports.MAX_VERSIONS_PER_DAY`)
        message = (f"too many changes: the server changed {refused.new} tools, and a vendor's syncs and imports "
                   f"publish at most {imports.MAX_VERSIONS_PER_DAY} new versions a day (UTC), {refused.allowed} "
                   "more today; nothing was published, and its tools stay as they are until a sync tomorrow")
        upstream_store.record_sync(upstream.account_id, upstream.vendor, now, {"ok": False, "message": message},
                                   revision)
        raise VendorError(message) from None
    except WorksetError as error:  # nothing more is known than that it failed: remembered so, and raised
        upstream_store.record_sync(upstream.account_id, upstream.vendor, now, {"ok": False, "message": error.message},
                                   revision)
        raise
    upstream_store.record_sync(upstream.account_id, upstream.vendor, now, _outcome(report), revision)
    return report


def _outcome(report: Report) -> dict[str, Any]:
    """How a sync went, as remembered: ok only when every tool offered was written or skipped with
    a reason; else what failed (at most FAILURES_KEPT of them, each with why)."""
    failures = report.failures()
    if not failures:
        return {"ok": True, "counts": report.counts()}
    return {"ok": False, "counts": report.counts(),
            "message": f"{len(failures)} of the server's tools could not be written; sync again",
            "failed": [{"name": line.name, "reason": line.reason} for line in failures[:FAILURES_KEPT]]}


def _list_tools(upstream: Upstream) -> tuple[str, list[Any]]:
    """The server's revision and every tool it lists, asked with the connection's credential (a
    header, or a query parameter: many hosted servers take their key as `?api_key=`)."""
    config = settings()
    url, headers = upstream.url, dict[str, str]()
    # a key in the URL's query (`?api_key=...`) is one too: an error quoting it back has it redacted
    secrets = sensitive.echoable(urls.credential_values(upstream.url))
    if upstream.connection_id:
        credential = credentials.credential(upstream.account_id, upstream.connection_id, upstream.url)
        (url, headers), secrets = credential.apply(url, headers), (*credential.secrets, *secrets)
    client = mcpclient.Upstream(url=url, headers=headers, timeout=config.vendor_timeout_seconds,
                                max_bytes=config.vendor_max_response_bytes, allow_private=config.allow_private_network,
                                tenant=upstream.account_id, secrets=secrets)
    return mcpclient.list_tools(client)


def _definition(upstream: Upstream, own: str, name: str, tool: dict[str, Any]) -> dict[str, Any]:
    """The ToolSpec payload of one listed tool (ToolSpec judges it: a bad schema is skipped)."""
    hints = _typed(tool, "annotations", dict) or {}
    annotations: dict[str, Any] = {hint: hints[hint] for hint in _HINTS if isinstance(hints.get(hint), bool)}
    title = visible(_typed(tool, "title", str) or _typed(hints, "title", str) or "")
    if title:
        annotations["title"] = title[:200]
    description = visible(_typed(tool, "description", str) or "").strip()
    definition = {
        "vendor": upstream.vendor, "name": name, "description": (description or title or own)[:4000],
        "input_schema": tool.get("inputSchema"), "annotations": annotations,
        "upstream": {"upstream": upstream.vendor, "url": upstream.url, "tool": own},
    }
    if (output := _typed(tool, "outputSchema", dict)) is not None:
        definition["output_schema"] = output
    return definition


def _typed(holder: dict[str, Any], key: str, kind: type[T]) -> T | None:
    """`holder[key]` when it is a `kind` (what a server sends is not to be trusted), else None."""
    value = holder.get(key)
    return value if isinstance(value, kind) else None
