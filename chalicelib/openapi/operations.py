"""The document's operations in document order, their tool names, and include/exclude."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from chalicelib.base.errors import InvalidInput
from chalicelib.base.validation import NAME_PATTERN, VENDOR_PATTERN, name_budget
from chalicelib.openapi.problems import Skip, Where, at, shown
from chalicelib.openapi.refs import Refs
from chalicelib.tools import toolnames

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
NAME = re.compile(NAME_PATTERN)
VENDOR = re.compile(VENDOR_PATTERN)
TAGS_READ = 4
TAG_CHARS = 60  # a tag kept for search: "Linode Kubernetes Engine (LKE)" fits; a hostile one is cut
LABEL_CHARS = 128  # an operationId kept as the tool's label (as long as an MCP server's own tool name)
# Controls, and the format characters that reverse or hide text (bidi overrides and isolates,
# zero-width spaces and joiners, the BOM, the invisible tag characters that spell hidden ASCII
# for a model to read...): in a stored tag or label, each becomes a space.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
                      r"\ufff9-\ufffb\U000e0000-\U000e007f]")


def shown_path(path: str) -> str:
    """`path` with each control or hiding character (_CONTROL) percent-encoded as UTF-8: what the
    request's URL sends for it (definitions.py quotes the path), shown instead of reversed or hidden
    text. A key stored before imports did this is shown through it too (console/present.py)."""
    return _CONTROL.sub(lambda found: quote(found.group(), safe=""), path)


@dataclass(frozen=True)
class Operation:
    """An operation object and where it sits: its path item and both places in the document."""

    method: str  # lower-case, as written
    path: str
    item: dict[str, Any]  # the path item
    item_where: Where
    spec: dict[str, Any]  # the operation object
    where: Where

    @property
    def key(self) -> str:
        """`GET /pets/{id}`: the path as the request sends it (`shown_path`), so what identifies the
        operation across imports, and the report, the console and search show, hides nothing."""
        return f"{self.method.upper()} {shown_path(self.path)}"

    @property
    def operation_id(self) -> str | None:
        found = self.spec.get("operationId")
        return found if isinstance(found, str) and found else None


def listed(refs: Refs, *, limit: int) -> list[Operation]:
    """Every operation: paths in order, methods in the order of METHODS; `x-` paths left out.
    InvalidInput past `limit` operations."""
    paths = refs.root.get("paths")
    if paths is None:
        return []
    if not isinstance(paths, dict):
        raise InvalidInput("`paths` (at /paths) must be a mapping of paths to path items")
    found = []
    keys: dict[str, str] = {}  # each operation's key: the path it came from
    for path, raw_item in paths.items():
        if path.startswith("x-"):
            continue
        if not path.startswith("/"):
            raise InvalidInput(f"the path {shown(path)} (at /paths) does not start with '/'")
        try:
            item, item_where = refs.deref(raw_item, ("paths", path))
        except Skip as skip:
            raise InvalidInput(f"the path item {at(('paths', path))} {skip.reason}") from None
        if not isinstance(item, dict):
            raise InvalidInput(f"the path item {at(item_where)} is not a mapping")
        for method in METHODS:
            if method in item:
                if not isinstance(item[method], dict):
                    raise InvalidInput(f"the operation {at((*item_where, method))} is not a mapping")
                operation = Operation(method, path, item, item_where, item[method], (*item_where, method))
                if keys.setdefault(operation.key, path) != path:  # the same request written two ways
                    raise InvalidInput(f"the paths {shown(keys[operation.key])} and {shown(path)} (at /paths) are "
                                       "the same request once their hidden characters are percent-encoded")
                found.append(operation)
                if len(found) > limit:
                    raise InvalidInput(f"the document has more than {limit:,} operations; Workset reads at most "
                                       f"{limit:,} from one document: split it", field="document")
    return found


def names(operations: list[Operation], keep_names: Mapping[str, str], vendor: str) -> list[str]:
    """Tool names: a name kept from an earlier import first (and never another operation's), then
    each operation's operationId in words (or its method and path) in document order, fitted to
    `vendor__name`'s 64 characters (`toolnames`); a name taken gets a word that tells the two
    operations apart (the method, a path segment, a tag), a hash only when none does."""
    given = toolnames.Names(vendor)
    chosen: dict[str, str] = {}
    reused: set[str] = set()
    for key, name in keep_names.items():  # removed operations' names too: never given to another
        if isinstance(name, str) and fits(vendor, name) and name not in given:
            given.hold(name, _described(key))
    for operation in operations:
        kept = keep_names.get(operation.key)
        if isinstance(kept, str) and kept in given and kept not in reused:
            chosen[operation.key] = kept
            reused.add(kept)
    for operation in operations:
        if operation.key not in chosen:
            source = operation.operation_id or ""
            parts = toolnames.words(source) or toolnames.words(f"{operation.method} {operation.path}") or ["op"]
            chosen[operation.key] = given.give(parts, _qualifiers(operation), salt=source or operation.key)
    return [chosen[operation.key] for operation in operations]


def tags(operation: Operation) -> tuple[str, ...]:
    """The operation's first TAGS_READ tags as search reads them ("Issue tracker", "LiveTv"):
    strings only, control characters and runs of spaces made one space, each cut to TAG_CHARS,
    no empty or repeated one. A hostile document may list thousands, or huge ones: at most
    TAGS_READ * TAG_CHARS characters reach the stored tool."""
    found = operation.spec.get("tags")
    kept: list[str] = []
    for tag in found[:TAGS_READ] if isinstance(found, list) else ():
        clean = _one_line(tag, TAG_CHARS) if isinstance(tag, str) else ""
        if clean and clean not in kept:
            kept.append(clean)
    return tuple(kept)


def label(operation: Operation) -> str | None:
    """The operationId as the tool's origin keeps it (and the import report and search show it):
    at most LABEL_CHARS, controls and hiding characters made spaces. The name is made from the
    whole of it; a hostile document's may be megabytes, which every read of the tool would carry."""
    found = operation.operation_id
    return _CONTROL.sub(" ", found[:LABEL_CHARS]) if found is not None else None


def _one_line(text: str, limit: int) -> str:
    """`text` with controls and hiding characters made spaces, runs of spaces one, cut to `limit`."""
    return " ".join(_CONTROL.sub(" ", text[:limit * 4]).split())[:limit].strip()


def fits(vendor: str, name: str) -> bool:
    """True for a valid tool name beside `vendor` (`vendor__name` at most 64 characters)."""
    return NAME.fullmatch(name) is not None and len(name) <= name_budget(vendor)


def filtered(operation: Operation, include: Sequence[str], exclude: Sequence[str]) -> str | None:
    """Why include/exclude leave the operation out, or None."""
    for entry in exclude:
        if _matches(entry, operation):
            return f"excluded by {shown(entry)}"
    if include and not any(_matches(entry, operation) for entry in include):
        return "not included"
    return None


def _qualifiers(operation: Operation) -> list[str]:
    """Words that may tell an operation from another of the same name: its method, its path's
    segments from the last, its tags (a few of each: a hostile document may list thousands)."""
    tags = operation.spec.get("tags")
    tag_words = [word for tag in tags[:TAGS_READ] if isinstance(tag, str) for word in toolnames.words(tag)] \
        if isinstance(tags, list) else []
    return [*_described(operation.key), *tag_words]


def _described(key: str) -> list[str]:
    """"GET /pets/{petId}" -> get, id, pet, pets: the method, then the path's words from the end."""
    method, _, path = key.partition(" ")
    return [method.lower(), *reversed(toolnames.words(path))][:toolnames.QUALIFIERS]


def _matches(entry: str, operation: Operation) -> bool:
    """An entry names a tag, an operationId, or (starting with "/") a prefix of the path."""
    tags = operation.spec.get("tags")
    return ((isinstance(tags, list) and entry in tags) or entry == operation.operation_id
            or (entry.startswith("/") and operation.path.startswith(entry)))
