"""The document's operations in document order, their tool names, and include/exclude."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib.errors import InvalidInput
from chalicelib.openapi.problems import Skip, Where, at, shown
from chalicelib.openapi.refs import Refs
from chalicelib.validation import NAME_PATTERN

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
NAME = re.compile(NAME_PATTERN)


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
        return f"{self.method.upper()} {self.path}"

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
                found.append(Operation(method, path, item, item_where, item[method], (*item_where, method)))
                if len(found) > limit:
                    raise InvalidInput(f"the document has more than {limit:,} operations; Workset reads at most "
                                       f"{limit:,} from one document: split it", field="document")
    return found


def names(operations: list[Operation], keep_names: Mapping[str, str]) -> list[str]:
    """Tool names: a name kept from an earlier import first (and never another operation's), then
    each operation's slug in document order, hashed when taken or too long."""
    reserved = {name for name in keep_names.values() if isinstance(name, str) and NAME.fullmatch(name)}
    chosen: dict[str, str] = {}
    given: set[str] = set()
    for operation in operations:
        kept = keep_names.get(operation.key)
        if kept in reserved and kept not in given:
            chosen[operation.key] = kept
            given.add(kept)
    taken = reserved | given
    tried: dict[str, int] = {}  # source -> hashes of it already taken (so many operations sharing one stay linear)
    for operation in operations:
        if operation.key not in chosen:
            chosen[operation.key] = name = _fresh_name(operation.operation_id or f"{operation.method} {operation.path}",
                                                       taken, tried)
            taken.add(name)
    return [chosen[operation.key] for operation in operations]


def filtered(operation: Operation, include: Sequence[str], exclude: Sequence[str]) -> str | None:
    """Why include/exclude leave the operation out, or None."""
    for entry in exclude:
        if _matches(entry, operation):
            return f"excluded by {shown(entry)}"
    if include and not any(_matches(entry, operation) for entry in include):
        return "not included"
    return None


def _fresh_name(source: str, taken: set[str], tried: dict[str, int]) -> str:
    slug = _slug(source)
    if slug and len(slug) <= 31 and slug not in taken:
        return slug
    head = slug[:24].rstrip("-") or "op"
    # Another hash while taken (operations sharing one operationId). Names only join `taken`, so the
    # attempts an earlier operation of the same source spent are taken still: start after them.
    start = tried.get(source, 0)
    for attempt in range(start, start + len(taken) + 1):
        salted = source if attempt == 0 else f"{source}#{attempt}"
        name = f"{head}-{hashlib.sha256(salted.encode('utf-8', 'surrogatepass')).hexdigest()[:6]}"
        if name not in taken:
            tried[source] = attempt + 1
            return name
    raise AssertionError("unreachable: more attempts than names taken")


def _slug(text: str) -> str:
    """getPetById -> get-pet-by-id; HTTPServer -> http-server; anything else than [a-z0-9] -> "-"."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", text)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", text)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _matches(entry: str, operation: Operation) -> bool:
    """An entry names a tag, an operationId, or (starting with "/") a prefix of the path."""
    tags = operation.spec.get("tags")
    return ((isinstance(tags, list) and entry in tags) or entry == operation.operation_id
            or (entry.startswith("/") and operation.path.startswith(entry)))
