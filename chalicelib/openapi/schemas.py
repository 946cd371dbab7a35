"""The document's schemas as JSON Schema 2020-12 (OpenAPI 3.0's nullable and boolean exclusive
bounds rewritten, `oneOf` read as `anyOf`, OpenAPI-only keywords and read-only properties
dropped), each `$ref` converted
once however many operations share it; and the Inliner, which builds one input schema from them,
inlining references within a budget and keeping the rest (and every cycle) in `$defs`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from chalicelib.base.errors import InvalidInput
from chalicelib.openapi.problems import Skip, Where, at, remote
from chalicelib.openapi.refs import MAX_HOPS, Refs

INLINE_NODES = 2_000  # schema objects inlined into one input schema before it falls back to $defs
INLINE_DEPTH = 32  # schema objects inlined inside each other, likewise
_DROPPED = frozenset({"example", "examples", "xml", "externalDocs", "discriminator", "nullable", "$id", "$schema",
                      "$anchor", "$dynamicAnchor", "$dynamicRef", "$recursiveRef", "$recursiveAnchor", "$comment",
                      "$defs", "definitions"})  # $defs: every reference is inlined or re-homed, so none point there
_SHAPES = {"properties": "map", "patternProperties": "map", "dependentSchemas": "map", "allOf": "list",
           "anyOf": "list", "oneOf": "list", "prefixItems": "list", **dict.fromkeys((
               "items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
               "unevaluatedProperties", "unevaluatedItems"), "one")}  # keywords whose values hold subschemas


@dataclass(frozen=True)
class Link:
    """A `$ref` in a converted schema, inlined or pointed into $defs when an input schema is built."""

    ref: str
    remote: bool = False


class Overflow(Exception):
    """Inlining passed the budget: the operation's schema is built again with $defs."""


class Schemas:
    """The document's schemas, each converted once. Converted schemas keep their references as
    Link; the DFS over them marks the target of each back edge as cyclic, so every cycle has a
    member that goes to $defs and inlining ends."""

    def __init__(self, refs: Refs) -> None:
        self.refs = refs
        self._converted: dict[str, Any] = {}
        self._inline: dict[int, Any] = {}  # id of a schema in the document (shared parameters) -> converted
        self._edges: dict[str, list[str]] = {}
        self._found: list[str] = []  # the references met while converting one target
        self._explored: set[str] = set()
        self._cyclic: set[str] = set()
        self._sizes: dict[str, int] = {}  # ref -> JSON size of its $defs entry

    def schema(self, raw: Any, where: Where) -> Any:
        """A schema of the document as JSON Schema 2020-12, its references as Link (memoised)."""
        key = id(raw)  # the document outlives this object and is not changed meanwhile
        if key not in self._inline:
            self._inline[key] = self._convert(raw, where)
        return self._inline[key]

    def referenced(self, ref: str) -> Any:
        """What a reference points at, converted (once)."""
        if ref not in self._converted:
            raw, where = self.refs.target(ref, ())  # resolved when its Link was made
            self._found = []
            self._converted[ref] = self._convert(raw, where)
            self._edges[ref] = self._found
        return self._converted[ref]

    def resolved(self, node: Any) -> Any:
        """A converted schema with the references it starts with followed (once each, also when
        recursive: its inside goes to $defs); a reference to another document skips the operation."""
        for _ in range(MAX_HOPS):
            if not isinstance(node, Link):
                break
            if node.remote:
                raise Skip(remote(node.ref))
            node = self.referenced(node.ref)
        return node

    def defs_bytes(self, schemas: list[Any]) -> int:
        """The JSON size of what these converted schemas refer to, each reference once: their $defs."""
        pending, seen, total = [link.ref for link in _links(schemas) if not link.remote], set(), 0
        while pending:
            ref = pending.pop()
            if ref not in seen:
                seen.add(ref)
                if ref not in self._sizes:
                    self._sizes[ref] = json_size(Inliner(self, use_defs=True).build(self.referenced(ref)))
                total += self._sizes[ref]
                pending += self._edges[ref]
        return total

    def cyclic(self, ref: str) -> bool:
        """True for a reference that cannot be inlined: inlining it would meet it again."""
        if ref not in self._explored:
            self._explore(ref)
        return ref in self._cyclic

    def _explore(self, start: str) -> None:
        self.referenced(start)
        self._explored.add(start)
        stack, open_ = [(start, iter(self._edges[start]))], {start}
        while stack:
            ref, edges = stack[-1]
            following = next(edges, None)
            if following is None:
                stack.pop()
                open_.discard(ref)
            elif following in open_:
                self._cyclic.add(following)
            elif following not in self._explored:
                self.referenced(following)
                self._explored.add(following)
                open_.add(following)
                stack.append((following, iter(self._edges[following])))

    def _convert(self, raw: Any, where: Where) -> Any:
        if isinstance(raw, bool):
            return raw
        if not isinstance(raw, dict):
            raise InvalidInput(f"the schema {at(where)} is not an object")
        node: Any = self._keywords(raw, where)
        if "$ref" in raw:  # siblings (3.1 allows them; 3.0 documents write them anyway) join through allOf
            link = self._link(raw["$ref"], where)
            node = _all_of(node, first=link) if node else link
        return _nullable(node) if raw.get("nullable") is True else node

    def _keywords(self, raw: dict[str, Any], where: Where) -> dict[str, Any]:
        properties = raw.get("properties")
        hidden = {name for name, sub in properties.items() if self._read_only(sub, (*where, "properties", name))} \
            if isinstance(properties, dict) else set()  # a request does not send what the API only returns
        node: dict[str, Any] = {}
        for key, value in raw.items():
            if key in _DROPPED or key.startswith("x-") or key == "$ref":
                continue
            if key == "properties" and hidden:
                value = {name: sub for name, sub in value.items() if name not in hidden}
            elif key == "required" and not isinstance(value, list):
                continue  # `required: true` on a property (Swagger's habit) is no JSON Schema
            elif key == "required" and hidden:
                value = [name for name in value if name not in hidden]
                if not value:
                    continue
            node[key] = _each(key, value, lambda sub, step: self._convert(sub, (*where, *step)))
        for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
            if isinstance(node.get(flag), bool) and node.pop(flag) and bound in node:  # 3.0: a flag on the bound
                node[flag] = node.pop(bound)
        return _any_of(node)

    def _read_only(self, raw: Any, where: Where) -> bool:
        for _ in range(MAX_HOPS):
            if not isinstance(raw, dict):
                return False
            if raw.get("readOnly") is True:
                return True
            ref = raw.get("$ref")
            if not isinstance(ref, str) or not ref.startswith("#"):
                return False
            raw, where = self.refs.target(ref, where)
        return False

    def _link(self, ref: Any, where: Where) -> Link:
        if isinstance(ref, str) and not ref.startswith("#"):
            return Link(ref, remote=True)  # the operations that reach it are skipped
        self.refs.target(ref, where)  # a local reference that does not resolve is the document's fault: now
        self._found.append(ref)
        return Link(ref)


class Inliner:
    """Builds one operation's input schema: references inlined, except those on a cycle (and every
    one when `use_defs`), which go to $defs once each. Inlining is budgeted (Overflow past it)."""

    def __init__(self, schemas: Schemas, *, use_defs: bool) -> None:
        self.schemas, self.use_defs = schemas, use_defs
        self.nodes = self.depth = 0
        self._names: dict[str, str] = {}  # ref -> its name in $defs
        self._pending: list[str] = []

    def build(self, node: Any) -> Any:
        """A converted schema with its references inlined or pointed into $defs."""
        if isinstance(node, Link):
            return self._follow(node)
        if not isinstance(node, dict):
            return node
        self.nodes, self.depth = self.nodes + 1, self.depth + 1
        if not self.use_defs and (self.nodes > INLINE_NODES or self.depth > INLINE_DEPTH):
            raise Overflow
        try:
            return {key: _each(key, value, lambda sub, _: self.build(sub)) for key, value in node.items()}
        finally:
            self.depth -= 1

    def defs(self) -> dict[str, Any]:
        """The $defs the built schemas point into; built one at a time, so a long chain of
        references does not recurse."""
        built: dict[str, Any] = {}
        for ref in self._pending:  # grows while it is read: a definition may point at more
            built[self._names[ref]] = self.build(self.schemas.referenced(ref))
        return built

    def _follow(self, link: Link) -> Any:
        if link.remote:
            raise Skip(remote(link.ref))
        if self.use_defs or self.schemas.cyclic(link.ref):
            return {"$ref": f"#/$defs/{self._def_name(link.ref)}"}
        return self.build(self.schemas.referenced(link.ref))

    def _def_name(self, ref: str) -> str:
        if ref not in self._names:
            last = unquote(ref.rsplit("/", 1)[-1]).replace("~1", "/").replace("~0", "~")
            base = re.sub(r"[^A-Za-z0-9_.-]+", "_", last)[:60] or "schema"
            name, number, used = base, 1, set(self._names.values())
            while name in used:
                number += 1
                name = f"{base}_{number}"
            self._names[ref] = name
            self._pending.append(ref)
        return self._names[ref]


def json_size(value: Any) -> int:
    """Bytes of `value` as compact UTF-8 JSON."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


def _each(key: str, value: Any, convert: Callable[[Any, Where], Any]) -> Any:
    """`value` with `convert(subschema, where)` applied to each subschema it holds, by keyword."""
    shape = _SHAPES.get(key)
    if shape == "map" and isinstance(value, dict):
        return {name: convert(sub, (key, name)) for name, sub in value.items()}
    if shape == "list" and isinstance(value, list):
        return [convert(sub, (key, index)) for index, sub in enumerate(value)]
    return convert(value, (key,)) if shape == "one" else value


def _links(node: Any) -> Iterator[Link]:
    """The references in converted schemas (not those inside what they point at)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Link):
            yield item
        elif isinstance(item, dict | list):
            stack.extend(item.values() if isinstance(item, dict) else item)


def _any_of(node: dict[str, Any]) -> dict[str, Any]:
    """`oneOf` as `anyOf`. Vendors write oneOf for "one of these shapes", and the shapes overlap
    (an RGB colour is a valid RGBA one when alpha is optional; a discriminator, which JSON Schema
    does not read, is what tells them apart at the vendor). Enforced literally, oneOf refuses a
    value that fits two alternatives although the vendor takes it; as anyOf, the published schema
    says what Workset checks: the value fits at least one, and one that fits none is refused. A
    node with its own anyOf keeps both conditions (both must hold): the second joins allOf."""
    if not isinstance(node.get("oneOf"), list):
        return node
    node = dict(node)
    alternatives = node.pop("oneOf")
    if "anyOf" not in node:
        return {**node, "anyOf": alternatives}
    return _all_of(node, last={"anyOf": alternatives})


def _all_of(node: dict[str, Any], *, first: Any = None, last: Any = None) -> dict[str, Any]:
    """`node` with `first` and `last` joined to its allOf. A hostile document's allOf may be no
    list (5, null): the node then stays as it is, no JSON Schema, and the schema check skips the
    operation saying so (spreading it would raise, and fail the whole import)."""
    found = node.get("allOf", [])
    if not isinstance(found, list):
        return node
    return {**node, "allOf": [*([first] if first is not None else []), *found, *([last] if last is not None else [])]}


def _nullable(node: Any) -> Any:
    """OpenAPI 3.0's `nullable: true` as JSON Schema: "null" among the types, or anyOf with null."""
    kind = node.get("type") if isinstance(node, dict) else None
    if not isinstance(kind, str | list) or any(key in node for key in ("allOf", "anyOf", "oneOf")):
        return {"anyOf": [node, {"type": "null"}]}
    kinds = [kind] if isinstance(kind, str) else kind
    node = {**node, "type": kinds if "null" in kinds else [*kinds, "null"]}
    if isinstance(node.get("enum"), list) and None not in node["enum"]:
        node["enum"] = [*node["enum"], None]
    return node
