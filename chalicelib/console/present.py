"""How the console says things: times, hints, who promoted a tool, why it moved, where an
imported tool came from, what an import did, and the token footprint of a working set. Plain
functions; the templates use them as filters."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chalicelib.base.causes import Cause, PromotedBy
from chalicelib.base.clock import iso, utcnow
from chalicelib.catalog.imports import MCP, NEW_VERSION, OPENAPI
from chalicelib.mcp.metatools import META_TOOLS, tool_definition
from chalicelib.net import urls
from chalicelib.oauth.documents import identified_by
from chalicelib.openapi.operations import shown_path
from chalicelib.store.records import ToolVersion
from chalicelib.tools import definitions, guards
from chalicelib.tools.definitions import Tool
from chalicelib.tools.guards import Guard

PROMOTED_BY_LABELS = {PromotedBy.AGENT.value: "the agent", PromotedBy.PUBLISH.value: "a publish",
                      PromotedBy.CONSOLE.value: "the console"}
OUTCOME_LABELS = {NEW_VERSION: "new version"}  # the others read as they are (published, skipped, ...)
BYTES_PER_TOKEN = 4  # a rough rule for English and JSON; shown as an estimate
_UNITS = ((365 * 86400, "year"), (30 * 86400, "month"), (86400, "day"), (3600, "hour"), (60, "minute"))


def ago(moment: datetime | None, now: datetime | None = None) -> str:
    """`3 hours ago`, `in 20 days`, `just now`."""
    if moment is None:
        return "never"
    seconds = ((now or utcnow()) - moment).total_seconds()
    span = abs(seconds)
    if span < 60:
        return "just now"
    count, unit = next((round(span / size), unit) for size, unit in _UNITS if span >= size)
    phrase = f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{phrase} ago" if seconds > 0 else f"in {phrase}"


def exact(moment: datetime | None) -> str:
    """`2026-11-30 07:00:00 UTC` (what the hover shows)."""
    if moment is None:
        return ""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def cause_label(value: str) -> str:
    """The History card's words for a cause (`the agent asked`, ...)."""
    try:
        return Cause(value).label
    except ValueError:
        return value


def promoted_by_label(value: str) -> str:
    """`the agent`, `a publish`, `the console`."""
    return PROMOTED_BY_LABELS.get(value, value)


def hints(annotations: dict[str, Any] | None) -> list[str]:
    """A tool's hints in words, from its definition's annotations; a tool writes unless it is
    read-only, and a write is destructive unless it says otherwise (MCP's defaults)."""
    notes = annotations or {}
    read_only = bool(notes.get("readOnlyHint"))
    words = ["read-only" if read_only else "writes"]
    if not read_only and notes.get("destructiveHint") is not False:
        words.append("destructive")
    if notes.get("idempotentHint"):
        words.append("idempotent")
    if notes.get("openWorldHint"):
        words.append("open world")
    return words


def enforced(version: ToolVersion) -> dict[str, Any]:
    """A version's annotations with the hints Workset enforces for it (its guard) in place of
    looser ones it claims."""
    return Guard.of_version(version).shown(version.definition.get("annotations"))


def pending(version: ToolVersion) -> bool:
    """True while the version claims looser hints than Workset enforces (a person may accept them)."""
    return guards.pending(Guard.declared(version.definition.get("annotations")), Guard.of_version(version))


def origin(head: ToolVersion) -> str:
    """Where an imported tool came from: `OpenAPI GET /pets/{id}`, `MCP server forecast`; ``
    for a tool published by hand."""
    found = head.origin or {}
    if found.get("kind") == OPENAPI:  # a key stored before imports encoded hidden characters: encoded here
        return f"OpenAPI {shown_path(str(found.get('key', '')))}"
    if found.get("kind") == MCP:
        return f"MCP server {head.vendor}"
    return ""


def outcome(value: str) -> str:
    """An import line's outcome in words (`new version`)."""
    return OUTCOME_LABELS.get(value, value)


def counted(counts: dict[str, int] | None) -> str:
    """`2 published, 1 skipped` (outcomes that happened), or `no tools`."""
    said = [f"{count} {outcome(name)}" for name, count in (counts or {}).items() if count]
    return ", ".join(said) or "no tools"


def first_line(text: str, limit: int = 160) -> str:
    """A description's first line, cut to fit a table cell."""
    return definitions.first_line(text, limit)


def pretty(value: Any) -> str:
    """JSON for a <pre> block."""
    return json.dumps(value, indent=2, ensure_ascii=False)


@dataclass(frozen=True)
class Footprint:
    """The bytes of tool definitions an agent's tools/list carries (the meta-tools, then the
    promoted tools), against listing the whole toolbox instead; tokens are estimated from bytes."""

    meta_bytes: int
    promoted_bytes: int
    toolbox_bytes: int
    meta_tools: int
    promoted: int
    toolbox_tools: int

    @property
    def working_set_bytes(self) -> int:
        """What this agent's tools/list carries."""
        return self.meta_bytes + self.promoted_bytes

    @property
    def spared_bytes(self) -> int:
        """What listing the whole toolbox would carry beyond it (negative while the toolbox is
        smaller than the meta-tools' overhead)."""
        return self.toolbox_bytes - self.working_set_bytes


def tokens(size: int) -> int:
    """An estimate of the tokens `size` bytes of JSON cost."""
    return round(size / BYTES_PER_TOKEN)


def footprint(promoted: list[Tool], toolbox: Iterable[Tool]) -> Footprint:
    """The working set's tools/list against every toolbox tool listed first-class."""
    metas = [meta.definition for meta in META_TOOLS.values()]
    everything = [tool_definition(tool) for tool in toolbox]
    return Footprint(_size(metas), _size([tool_definition(tool) for tool in promoted]), _size(everything),
                     len(metas), len(promoted), len(everything))


def definition_bytes(*definitions: dict[str, Any]) -> int:
    """The JSON size of tool definitions listed together, as the footprint counts them."""
    return _size(list(definitions))


def _size(definitions: list[dict[str, Any]]) -> int:
    return len(json.dumps(definitions, separators=(",", ":")).encode())


FILTERS = {"ago": ago, "exact": exact, "iso": iso, "cause": cause_label, "promoted_by": promoted_by_label,
           "hints": hints, "first_line": first_line, "pretty": pretty, "tokens": tokens, "origin": origin,
           "outcome": outcome, "counted": counted, "enforced": enforced, "pending": pending,
           "identified_by": identified_by, "shown_definition": definitions.shown, "shown_url": urls.redacted}
