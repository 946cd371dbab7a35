"""Bringing tools from where they already are: the operations of an OpenAPI document and the
tools of an MCP server become one vendor's toolbox tools, version by version.

Each source gives candidates keyed by what they are at the source (an operation such as
`GET /pets/{id}`, an MCP tool's own name). `apply` compares them with the vendor's tools that
came from the same source before:

    a key not seen before                  -> published (version 1)
    the same definition                    -> unchanged (restored, if it was unavailable)
    a changed definition                   -> new_version
    a key the source no longer has         -> unavailable: kept, never deleted; find_tool says so
                                              and a call is a clear error, until it comes back
    what the source cannot express as a    -> skipped, with the reason
    tool (or Workset refuses to publish)
    a version the store refused to write   -> failed, with the reason (the others are written)

A vendor's tools get at most MAX_VERSIONS_PER_DAY new versions a UTC day, from its imports and
its server's syncs together: an import or sync that would pass it writes nothing and says how many
more the day allows (TooManyChanges).

The writes are batched (`tool_store.put_versions`). Search vectors cost about 15 ms a tool: a
small import computes them at once, a large one hands them to the work queue in batches, and
search ranks those tools by their words until the vectors arrive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from chalicelib.access import connections
from chalicelib.base import log
from chalicelib.base.config import settings
from chalicelib.base.errors import Busy, InvalidInput, QuotaExceeded, WorksetError
from chalicelib.base.validation import VENDOR_PATTERN, parse
from chalicelib.catalog.indexes import INLINE_VECTORS
from chalicelib.net import outbound
from chalicelib.net.outbound import HttpRequest
from chalicelib.store import daycounts, queues
from chalicelib.store import tools as tool_store
from chalicelib.store.base import ConditionFailed, WriteRefused
from chalicelib.store.records import ToolVersion
from chalicelib.store.tools import NewVersion
from chalicelib.tools import guards
from chalicelib.tools.definitions import ToolSpec
from chalicelib.tools.guards import Guard

OPENAPI, MCP = "openapi", "mcp"  # the kinds of source
VECTORS = "vectors"  # the work queue message that computes a batch of imported tools' vectors
VECTOR_BATCH = 16  # tools per message: at most ~3 s of embedding on a full core (long descriptions cost ~0.2 s each)
VECTORS_OVERDUE = timedelta(minutes=15)  # a queued vector not there by then was lost: a re-import queues it again
# New versions a vendor's tools may get in a UTC day, from its OpenAPI imports and its MCP server's
# syncs together: past it, an import or a sync publishes nothing (and says so) until the next day.
# A server lists at most 2,000 tools (`mcpclient.list_tools`), so this lets a registration and two
# complete changes of the largest server through in one day; a server that changes every tool at
# every hourly sync, or a document imported again and again, would otherwise add versions without
# end (each up to 320 KB, stored twice). `apply` counts the new versions before it writes them,
# where the stored count leaves room (`daycounts.count`): two imports at once cannot both pass it.
# One cut short after counting leaves its count (the day's cap is reached sooner, never passed).
MAX_VERSIONS_PER_DAY = 6000
PUBLISHED, NEW_VERSION, UNCHANGED, RESTORED, SKIPPED, UNAVAILABLE, FAILED = (
    "published", "new_version", "unchanged", "restored", "skipped", "unavailable", "failed")


@dataclass(frozen=True)
class Candidate:
    """One tool a source offers: `definition` is a ToolSpec payload, or None with the `reason`
    it cannot be a tool. `label` is what people call it at the source (an operationId); `tags`
    how the source groups it (OpenAPI tags, bounded), kept in the origin for search."""

    key: str
    name: str
    definition: dict[str, Any] | None
    reason: str | None = None
    label: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Line:
    """What happened to one candidate (or to a tool whose key left the source)."""

    key: str
    name: str
    outcome: str
    version: int | None = None
    reason: str | None = None
    label: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The answer's shape: absent fields left out."""
        return {field: value for field, value in self.__dict__.items() if value is not None}


@dataclass(frozen=True)
class Report:
    """An import's answer: a line per candidate and per tool that became unavailable. A dry run
    that would publish new versions also says how many more the vendor's day allowed when it was
    checked (`day_allows`), so a person sees before Publish whether it would be refused."""

    vendor: str
    dry_run: bool
    lines: list[Line]
    vectors_pending: int = 0
    day_allows: int | None = None  # a dry run's: new versions the vendor's day had room for (None: none to publish)

    def counts(self) -> dict[str, int]:
        """How many lines of each outcome."""
        counts = dict.fromkeys((PUBLISHED, NEW_VERSION, UNCHANGED, RESTORED, SKIPPED, UNAVAILABLE, FAILED), 0)
        for line in self.lines:
            counts[line.outcome] += 1
        return counts

    def new_versions(self) -> int:
        """The new versions it publishes (or would): what counts against the vendor's day."""
        return sum(line.outcome in (PUBLISHED, NEW_VERSION) for line in self.lines)

    def over_day(self) -> bool:
        """A dry run whose publishing would be refused as past the day's cap (TooManyChanges)."""
        return self.day_allows is not None and self.new_versions() > self.day_allows

    def failures(self) -> list[Line]:
        """The lines the store refused to write: an import that has any did not do all it said."""
        return [line for line in self.lines if line.outcome == FAILED]

    def to_dict(self) -> dict[str, Any]:
        """The JSON answer."""
        day = {"day_allows": self.day_allows} if self.dry_run else {}
        return {"vendor": self.vendor, "dry_run": self.dry_run, "counts": self.counts(),
                "vectors_pending": self.vectors_pending, **day, "tools": [line.to_dict() for line in self.lines]}


class TooManyChanges(QuotaExceeded):
    """The source brought more new versions than the vendor's day has room for
    (MAX_VERSIONS_PER_DAY): none was written."""

    def __init__(self, vendor: str, new: int, allowed: int) -> None:
        super().__init__(f"too many changes: this would publish {new} new versions of {vendor}'s tools, and a "
                         f"vendor's imports and syncs publish at most {MAX_VERSIONS_PER_DAY} a day (UTC), "
                         f"{allowed} more today; nothing was published, and its tools stay as they are")
        self.new, self.allowed = new, allowed


@dataclass(frozen=True)
class _Planned:
    """A candidate that will be written, and the line it gets once it is."""

    line: Line
    new: NewVersion | None = None  # a version to publish
    head: ToolVersion | None = None  # an unavailable head to restore


def existing(account_id: str, vendor: str) -> dict[str, ToolVersion]:
    """The vendor's tools now, by name (one query, read once per import)."""
    return {head.name: head for head in tool_store.list_vendor_heads(account_id, vendor)}


def known_names(heads: dict[str, ToolVersion], kind: str) -> dict[str, str]:
    """Key at the source -> tool name, for the tools that came from this kind of source (so that
    a re-import keeps every tool's name)."""
    return {head.origin["key"]: head.name for head in heads.values() if _from(head, kind)}  # type: ignore[index]


def apply(account_id: str, vendor: str, kind: str, candidates: Sequence[Candidate], heads: dict[str, ToolVersion],
          *, connection: str | None, published_by: str, now: datetime, dry_run: bool,
          attended: bool = True) -> Report:
    """Publish what changed, restore what came back, mark unavailable what left the source; with
    `dry_run`, answer the same lines and how many more new versions the day allows (one read when
    there are any), and write nothing. `heads` are the vendor's tools
    (`existing`). `attended`: a person started this (an unattended sync's new tools are held to
    `guards.UNREVIEWED`). The new versions are counted against the vendor's day before any is
    written: past MAX_VERSIONS_PER_DAY (a source that grows without end) is TooManyChanges, and
    nothing is written; those the store then refused are given back (never one it may have
    written: a fault costs the day slots, never its cap)."""
    checked = _ConnectionCheck(account_id, connection, vendor)
    planned = [_plan(candidate, heads.get(candidate.name), kind, connection, checked, attended)
               for candidate in candidates]
    new = sum(plan.new is not None for plan in planned)
    keys = {candidate.key for candidate in candidates}
    gone = [head for head in heads.values() if _from(head, kind) and head.origin["key"] not in keys  # type: ignore[index]
            and not head.unavailable]
    lines = [plan.line for plan in planned] + [
        Line(head.origin["key"], head.name, UNAVAILABLE, head.version, f"no longer offered by the {_source(kind)}")  # type: ignore[index]
        for head in gone]
    day = f"{now:%Y-%m-%d}"
    if dry_run:  # what publishing would do, and whether the day's cap has room for it now (not counted)
        allows = max(MAX_VERSIONS_PER_DAY - daycounts.counted(account_id, vendor, day), 0) if new else None
        return Report(vendor, True, lines, day_allows=allows)
    from chalicelib.search.documents import VECTOR_VERSION

    # unchanged tools still without a vector well after they were published (their queue message
    # was lost): queued again
    stale = [head for plan in planned if plan.line.outcome in (UNCHANGED, RESTORED)
             and (head := heads[plan.line.name]).vector_version != VECTOR_VERSION
             and head.published_at < now - VECTORS_OVERDUE]
    if new and not daycounts.count(account_id, vendor, day, new, MAX_VERSIONS_PER_DAY):
        raise TooManyChanges(vendor, new, max(MAX_VERSIONS_PER_DAY - daycounts.counted(account_id, vendor, day), 0))
    written, pending, unsure = _write(account_id, planned, stale, published_by, now)
    # refused by the store (`failed`) or lost to a concurrent publish: not counted; but a write the
    # store may have made (no answer said) stays counted, so the day never holds more than its cap
    unwritten = new - sum(line.outcome in (PUBLISHED, NEW_VERSION) for line in written) - unsure
    if unwritten > 0:
        _give_back(account_id, vendor, day, unwritten)
    if gone:
        _mark(account_id, gone, f"no longer offered by the {_source(kind)} (as of {now:%Y-%m-%d %H:%M} UTC)")
    return Report(vendor, False, written + lines[len(planned):], vectors_pending=pending)


def _give_back(account_id: str, vendor: str, day: str, unwritten: int) -> None:
    """Give the day back what was not written, if the store lets it: one that fails leaves the
    slots counted (the day's cap reached sooner, never passed), and the import goes on to mark
    what the source dropped and answer what it wrote."""
    try:
        daycounts.give_back(account_id, vendor, day, unwritten)
    except Exception as error:  # noqa: BLE001 - any store failure: only slots are lost
        log.failure("imports.give_back_failed", error, account_id=account_id, vendor=vendor, unwritten=unwritten)


def fill_vectors(message: dict[str, Any]) -> None:
    """A work queue message: compute and store the search vectors of a batch of imported
    versions (raises while the store fails, so SQS tries again)."""
    from chalicelib.search.documents import VECTOR_VERSION, document_vectors

    account_id = str(message["account_id"])
    wanted = [(str(vendor), str(name), int(version)) for vendor, name, version in message["tools"]]
    versions = [found for found in tool_store.get_versions(account_id, wanted) if found.vector_version != VECTOR_VERSION]
    if not versions:
        return
    vectors = document_vectors([(v.vendor, v.name, v.definition.get("description", "")) for v in versions])
    tool_store.set_vectors(account_id, list(zip(versions, vectors)), VECTOR_VERSION)


def _plan(candidate: Candidate, head: ToolVersion | None, kind: str, connection: str | None,
          checked: _ConnectionCheck, attended: bool) -> _Planned:
    line = Line(candidate.key, candidate.name, SKIPPED, reason=candidate.reason, label=candidate.label)
    if candidate.definition is None:
        return _Planned(line)
    origin = {"kind": kind, "key": candidate.key, **({"label": candidate.label} if candidate.label else {}),
              **({"tags": list(candidate.tags)} if candidate.tags else {})}
    if head is not None and not _from(head, kind, candidate.key):
        return _Planned(replace(line, reason=f"the name {candidate.name} is taken by another tool of the vendor "
                                             f"({_describe(head)})"))
    try:
        spec = parse(ToolSpec, {**candidate.definition, **({"connection": connection} if connection else {})})
        checked(spec)
    except InvalidInput as refused:
        return _Planned(replace(line, reason=refused.message))
    definition = spec.model_dump(mode="json", exclude_none=True)
    if head is not None and head.definition == definition and head.origin == origin:
        if head.unavailable:
            return _Planned(replace(line, outcome=RESTORED, version=head.version, reason=None), head=head)
        return _Planned(replace(line, outcome=UNCHANGED, version=head.version, reason=None))
    previous = head.version if head is not None else 0
    outcome = NEW_VERSION if head is not None else PUBLISHED
    # the source wrote these hints, not a person (even when a person started the import): looser
    # ones are held to the head's guard until a person accepts them
    guard, _ = guards.for_new_version(Guard.declared(definition.get("annotations")), head, previous + 1,
                                      by_person=False, attended=attended)
    return _Planned(replace(line, outcome=outcome, version=previous + 1, reason=None),
                    new=NewVersion(spec.vendor, spec.name, definition, previous, origin=origin, guard=guard.stored()))


class _ConnectionCheck:
    """`connections.check_usable` once per distinct origin and header set, not once per tool."""

    def __init__(self, account_id: str, connection: str | None, vendor: str) -> None:
        self._account_id, self._connection, self._vendor = account_id, connection, vendor
        self._passed: set[tuple[str, tuple[str, ...], tuple[str, ...]]] = set()

    def __call__(self, spec: ToolSpec) -> None:
        if self._connection is None:
            return
        parts = urlsplit(spec.url)
        seen = (f"{parts.scheme}://{parts.netloc}", tuple(sorted(name.lower() for name in spec.header_names)),
                tuple(sorted(spec.query_names)))
        if seen not in self._passed:
            connections.check_usable(self._account_id, self._connection, self._vendor, spec.url,
                                     field="connection", headers=spec.header_names, query=spec.query_names)
            self._passed.add(seen)


def _write(account_id: str, planned: list[_Planned], stale: list[ToolVersion], published_by: str,
           now: datetime) -> tuple[list[Line], int, int]:
    """Write the plan: versions in batches (a batch that lost a race to another publish falls back
    to one tool at a time), then restorations. Answers the lines as written, how many vectors
    the work queue will compute (for the new versions, when there are many, and for `stale`), and
    how many of the versions answered as not written the store may have written after all."""
    from chalicelib.search.documents import VECTOR_VERSION, document_vectors

    news = [plan.new for plan in planned if plan.new is not None]
    inline = len(news) <= INLINE_VECTORS
    if inline and news:
        vectors = document_vectors([(new.vendor, new.name, new.definition["description"]) for new in news])
        news = [replace(new, vector=vector, vector_version=VECTOR_VERSION) for new, vector in zip(news, vectors)]
    lost, failed, unsure = _put(account_id, news, published_by, now)
    restore = [plan.head for plan in planned if plan.head is not None]
    if restore:
        _mark(account_id, restore, None)
    queued = [] if inline else [(new.vendor, new.name, new.previous + 1) for new in news
                                if new.name not in lost and new.name not in failed]
    queued += [(head.vendor, head.name, head.version) for head in stale]
    _queue_vectors(account_id, queued)
    lines = [replace(plan.line, outcome=SKIPPED, version=None,
                     reason="another publish of this tool happened during the import; import again")
             if plan.line.name in lost else
             replace(plan.line, outcome=FAILED, version=None, reason=failed[plan.line.name])
             if plan.line.name in failed else plan.line for plan in planned]
    return lines, len(queued), len(unsure)


def _put(account_id: str, news: list[NewVersion], published_by: str,
         now: datetime) -> tuple[set[str], dict[str, str], set[str]]:
    """Publish in the store's batches, one transaction each (`version_batches`: a batch that
    fails wrote nothing, those before it stand); answers the names that lost a race to a
    concurrent publish, those the store would not write, with why, and of both those it may have
    written after all (its answer left the outcome unknown: `maybe_written`). A batch the store
    refuses is written again one tool at a time, so one tool it refuses never costs the others; a
    batch the store is too busy for fails whole (trying each of its tools would only wait longer)."""
    lost: set[str] = set()
    failed: dict[str, str] = {}
    unsure: set[str] = set()
    for batch in tool_store.version_batches(news):
        try:
            tool_store.put_versions(account_id, batch, published_by, now)
        except Busy as busy:
            failed.update((new.name, _unwritten(busy)) for new in batch)
            if busy.maybe_written:
                unsure.update(new.name for new in batch)
        except (ConditionFailed, WriteRefused) as batch_refused:
            # a batch whose write may have been made: a tool then "lost" may have lost to it
            maybe = isinstance(batch_refused, WriteRefused) and batch_refused.maybe_written
            for new in batch:
                try:
                    tool_store.put_version(account_id, new, published_by, now)
                except ConditionFailed:
                    lost.add(new.name)
                    if maybe:
                        unsure.add(new.name)
                except (WriteRefused, Busy) as refused:
                    failed[new.name] = _unwritten(refused)
                    if maybe or refused.maybe_written:
                        unsure.add(new.name)
    return lost, failed, unsure


def _unwritten(refused: WriteRefused | Busy) -> str:
    """Why a version is answered as failed: not written, or not known to be (import it again)."""
    return f"{'perhaps not' if refused.maybe_written else 'not'} written: {refused.message}"


def _mark(account_id: str, heads: list[ToolVersion], reason: str | None) -> None:
    """Mark heads unavailable (or available again); a head that moved meanwhile is left as it is."""
    try:
        tool_store.set_unavailable(account_id, heads, reason)
    except ConditionFailed:
        for head in heads:
            try:
                tool_store.set_unavailable(account_id, [head], reason)
            except ConditionFailed:
                pass


def _queue_vectors(account_id: str, tools: list[tuple[str, str, int]]) -> None:
    if not tools:
        return
    queues.send(settings().sweep_queue, [{"type": VECTORS, "account_id": account_id,
                                          "tools": tools[start:start + VECTOR_BATCH]}
                                         for start in range(0, len(tools), VECTOR_BATCH)])


def _from(head: ToolVersion, kind: str, key: str | None = None) -> bool:
    origin = head.origin or {}
    return origin.get("kind") == kind and (key is None or origin.get("key") == key)


def _describe(head: ToolVersion) -> str:
    origin = head.origin
    return f"from {_source(origin['kind'])} {origin['key']}" if origin else "authored by hand"


def _source(kind: str) -> str:
    return {OPENAPI: "OpenAPI document", MCP: "MCP server"}.get(kind, kind)


# OpenAPI ----------------------------------------------------------------------------------------

FETCH_TIMEOUT_SECONDS = 10.0


class OpenApiImport(BaseModel):
    """`POST /v1/imports/openapi`: the document as text (JSON or YAML) or as a JSON object, or
    the `url` it is fetched from; `server` overrides the document's server URL."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    vendor: str = Field(pattern=VENDOR_PATTERN)
    document: str | dict[str, Any] | None = None
    url: str | None = Field(default=None, max_length=2000)
    server: str | None = Field(default=None, max_length=2000)
    connection: str | None = Field(default=None, max_length=64)
    include: list[str] = Field(default_factory=list, max_length=500)
    exclude: list[str] = Field(default_factory=list, max_length=500)
    dry_run: bool = False

    @model_validator(mode="after")
    def _one_source(self) -> OpenApiImport:
        if (self.document is None) == (self.url is None):
            raise ValueError("document: give the document or its url, one of the two")
        return self


def import_openapi(account_id: str, payload: Any, published_by: str, now: datetime) -> Report:
    """One tool per operation of an OpenAPI 3 document (see the module's docstring); bad input
    or a bad document is InvalidInput saying what and where, and writes nothing."""
    from chalicelib import openapi
    from chalicelib.openapi.schemas import json_size

    request = parse(OpenApiImport, payload)
    if isinstance(request.document, dict):  # JSON in the request's body: no aliases, and at most its size
        document, size = request.document, json_size(request.document)
    else:
        raw = request.document if request.document is not None else _fetch(request.url or "")
        size = len(raw.encode("utf-8", "surrogatepass")) if isinstance(raw, str) else len(raw)
        document = openapi.read_document(raw)
    heads = existing(account_id, request.vendor)
    found = openapi.candidates(document, vendor=request.vendor, base_url=request.url, server=request.server,
                               include=request.include, exclude=request.exclude,
                               keep_names=known_names(heads, OPENAPI), budget=openapi.expansion_limit(size))
    offered = [Candidate(item.key, item.name, item.definition, item.reason, item.operation_id, item.tags)
               for item in found]
    return apply(account_id, request.vendor, OPENAPI, offered, heads, connection=request.connection,
                 published_by=published_by, now=now, dry_run=request.dry_run)


def _fetch(url: str) -> bytes:
    """The document at `url`, through the outbound guard (at most MAX_DOCUMENT_BYTES)."""
    from chalicelib.openapi import MAX_DOCUMENT_BYTES

    try:
        response = outbound.send(HttpRequest("GET", url, {"Accept": "application/json, application/yaml, */*"}),
                                 timeout=FETCH_TIMEOUT_SECONDS, max_bytes=MAX_DOCUMENT_BYTES,
                                 allow_private=settings().allow_private_network)
    except WorksetError as error:
        raise InvalidInput(f"url: the document could not be fetched: {error.message}", field="url") from None
    if response.status != 200:
        raise InvalidInput(f"url: fetching the document answered HTTP {response.status}", field="url")
    if response.truncated:
        raise InvalidInput(f"url: the document is larger than {MAX_DOCUMENT_BYTES // 2**20} MB", field="url")
    return response.body
