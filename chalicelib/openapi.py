"""OpenAPI 3.x documents into tool definitions, one per operation. Pure: no store, no network.

A document comes from whoever describes an API, so it is read as hostile: at most 25 MB, a node
budget and a nesting limit that a YAML alias bomb meets before it is expanded, local `$ref`s
resolved and converted once each however many operations share them (GitHub's 12 MB description
has 1,000+), an inline budget per operation against fan-out, recursive schemas kept in `$defs`
instead of inlined forever, and nothing fetched: a reference to another document skips its
operation. An operation Workset cannot call as described still becomes a Candidate, with the
reason instead of a definition, so an import can say what it left out.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from urllib.parse import quote, unquote, urljoin, urlsplit

import yaml

from chalicelib.errors import InvalidInput
from chalicelib.jsontext import MAX_DEPTH, has_surrogate
from chalicelib.outbound import is_client_header
from chalicelib.toolbox import NAME_PATTERN, PLACEHOLDER

MAX_DOCUMENT_BYTES = 25 * 1024 * 1024
MAX_NODES = 5_000_000  # values in the document, a YAML alias counted each time it is used
MAX_NESTING = 200
INLINE_NODES = 2_000  # schema objects inlined into one input schema before it falls back to $defs
INLINE_DEPTH = 32  # schema objects inlined inside each other, likewise
INLINE_BYTES = 64 * 1024
MAX_INPUT_BYTES = 256 * 1024
MAX_INPUT_NESTING = MAX_DEPTH - 1  # the admin API reads a definition, its input_schema one level down, as JSON
# The security schemes a connection can carry today: (type, scheme or `in`), lower-case.
CARRIABLE_AUTH = frozenset({("http", "bearer"), ("apikey", "header")})
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

Where = tuple[str | int, ...]  # a place in the document, as the parts of a JSON pointer
_SENDABLE = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})  # RequestTemplate's methods
_NO_REST_BODY = frozenset({"GET", "HEAD", "DELETE"})
_IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})  # OpenAPI: described elsewhere
_PLACES = ("path", "query", "header", "cookie")
_MAX_HOPS = 32  # $refs followed in a row
_NAME = re.compile(NAME_PATTERN)
_HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")
_PARAM_NAME = re.compile(r"[\x21-\x7e]{1,200}")  # what RequestTemplate's params send: printable ASCII
_MAX_PARAMS = 200
_PLUS_JSON = re.compile(r"application/[\w.+-]+\+json")
_PATH_SAFE = "/:@!$&'()*+,;=-._~%?"  # a path's literal text keeps these; braces outside placeholders are encoded
_DROPPED = frozenset({"example", "examples", "xml", "externalDocs", "discriminator", "nullable", "$id", "$schema",
                      "$anchor", "$dynamicAnchor", "$dynamicRef", "$recursiveRef", "$recursiveAnchor", "$comment",
                      "$defs", "definitions"})  # $defs: every reference is inlined or re-homed, so none point there
_SHAPES = {"properties": "map", "patternProperties": "map", "dependentSchemas": "map", "allOf": "list",
           "anyOf": "list", "oneOf": "list", "prefixItems": "list", **dict.fromkeys((
               "items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
               "unevaluatedProperties", "unevaluatedItems"), "one")}  # keywords whose values hold subschemas
_FLATTENABLE = frozenset({"type", "properties", "required", "additionalProperties", "title", "description", "allOf"})
_ABSENT: Any = object()


@dataclass(frozen=True)
class Candidate:
    """One operation of the document: its definition, or why it has none."""

    key: str  # identifies the operation across imports: "GET /pets/{petId}"
    operation_id: str | None
    name: str  # the tool name; given also when skipped
    definition: dict[str, Any] | None  # a ToolSpec payload; None when skipped
    reason: str | None  # why skipped


class _Skip(Exception):
    """The operation cannot become a tool; `reason` says why, for the import's report."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Overflow(Exception):
    """Inlining passed the budget: the operation's schema is built again with $defs."""


# Reading ----------------------------------------------------------------------------------------

def read_document(raw: str | bytes) -> dict[str, Any]:
    """JSON or YAML text -> the document (plain dicts/lists/str/int/float/bool/None).
    Raises InvalidInput (chalicelib.errors) saying what and where."""
    size = len(raw) if isinstance(raw, bytes | bytearray) else len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_DOCUMENT_BYTES:
        raise InvalidInput(f"the document is {math.ceil(size * 10 / 2**20) / 10:g} MB; "
                           f"at most {MAX_DOCUMENT_BYTES >> 20} MB")
    if isinstance(raw, bytes | bytearray):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as error:
            raise InvalidInput(f"the document is not UTF-8 text (at byte {error.start})") from None
    text = raw.lstrip("\ufeff")
    is_json = text.lstrip().startswith("{")
    loaded = _parse_json(text) if is_json else _parse_yaml(text)
    document = _Plain(aliases=not is_json).copy(loaded)
    if not isinstance(document, dict):
        found = "empty" if document is None else "a list" if isinstance(document, list) else "a single value"
        raise InvalidInput(f"the document must be a mapping (an OpenAPI object) at the top level; it is {found}")
    _check_version(document)
    return document


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise InvalidInput(f"the document is not valid JSON: {error.msg} at line {error.lineno} "
                           f"column {error.colno}") from None
    except RecursionError:
        raise InvalidInput(f"the document is nested deeper than {MAX_NESTING} levels") from None
    except ValueError:  # an integer longer than Python will read
        raise InvalidInput("the document holds a number too long to read") from None


def _no_constant(name: str) -> Any:
    raise InvalidInput(f"the document holds {name}, which is not a JSON number")


_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc]
    """Safe YAML with YAML 1.2's booleans: `on`, `off`, `yes` and `no` stay text (an enum [yes, no]
    is two strings, a property named `on` keeps its name)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))


def _parse_yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # a safe loader (see _Loader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise InvalidInput(f"the document is not valid YAML: {_cut(error.problem or error.context or '?')}{where}") \
            from None
    except yaml.YAMLError as error:
        raise InvalidInput(f"the document is not valid YAML: {_cut(str(error))}") from None
    except (ValueError, OverflowError, RecursionError):  # an integer too long, nesting in the pure-Python parser
        raise InvalidInput("the document holds a value that cannot be read (a number too long?)") from None


class _Plain:
    """Copies a parsed value into plain JSON data, within the node budget and the nesting limit.
    A YAML alias is one object however often it is used: its size is measured once and its copy
    shared, so a billion laughs is refused after a few thousand steps, not a billion."""

    def __init__(self, *, aliases: bool) -> None:
        self.seen: dict[int, tuple[Any, int, int]] | None = {} if aliases else None  # JSON has no aliases
        self.open: set[int] = set()
        self.where: list[str | int] = []

    def copy(self, value: Any) -> Any:
        return self._value(value, 0)[0]

    def _value(self, value: Any, depth: int) -> tuple[Any, int, int]:
        """(copy, values in it, levels of containers in it)."""
        if not isinstance(value, dict | list | tuple):
            return self._scalar(value), 1, 0
        key = id(value)
        if self.seen is not None:
            if key in self.open:
                raise self._refused("contains itself (a YAML alias inside its own anchor)")
            if key in self.seen:
                if depth + self.seen[key][2] > MAX_NESTING:
                    raise self._refused(f"is nested deeper than {MAX_NESTING} levels")
                return self.seen[key]
            self.open.add(key)
        if depth >= MAX_NESTING:
            raise self._refused(f"is nested deeper than {MAX_NESTING} levels")
        copied = self._dict(value, depth) if isinstance(value, dict) else self._list(value, depth)
        if self.seen is not None:
            self.open.discard(key)
            self.seen[key] = copied
        return copied

    def _dict(self, value: dict[Any, Any], depth: int) -> tuple[Any, int, int]:
        out: dict[str, Any] = {}
        nodes, height = 1, 1
        for raw_key, item in value.items():
            name = self._key(raw_key)
            if name in out:
                raise self._refused(f"has the key {_shown(name)} twice")
            self.where.append(name)
            out[name], count, levels = self._value(item, depth + 1)
            self.where.pop()
            nodes, height = self._counted(nodes + count), max(height, levels + 1)
        return out, nodes, height

    def _list(self, value: list[Any] | tuple[Any, ...], depth: int) -> tuple[Any, int, int]:
        out: list[Any] = []
        nodes, height = 1, 1
        for index, item in enumerate(value):
            self.where.append(index)
            copied, count, levels = self._value(item, depth + 1)
            self.where.pop()
            out.append(copied)
            nodes, height = self._counted(nodes + count), max(height, levels + 1)
        return out, nodes, height

    def _counted(self, nodes: int) -> int:
        if nodes > MAX_NODES:
            raise self._refused(f"holds more than {MAX_NODES:,} values (a YAML alias counts each time it is used)")
        return nodes

    def _key(self, key: Any) -> str:
        if isinstance(key, bool) or key is None:
            return json.dumps(key)  # true, false, null: as JSON would spell them
        if isinstance(key, int | float | datetime | date):
            return key.isoformat() if isinstance(key, date) else str(key)
        if isinstance(key, str):
            return str(self._scalar(key))
        raise self._refused("has a key that is not text")

    def _scalar(self, value: Any) -> Any:
        if isinstance(value, str):
            if has_surrogate(value):
                raise self._refused("holds a lone UTF-16 surrogate, which is not text")
            return value
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int | float):
            try:
                if math.isfinite(float(value)):
                    return value
            except OverflowError:
                pass
            raise self._refused("holds a number that is not finite")
        if isinstance(value, datetime | date):
            return value.isoformat()
        raise self._refused(f"holds {type(value).__name__} data, which JSON cannot carry")

    def _refused(self, problem: str) -> InvalidInput:
        return InvalidInput(f"the document {problem} ({_at(tuple(self.where))})")


def _check_version(document: dict[str, Any]) -> str:
    """"3.0" or "3.1"; InvalidInput for Swagger 2.0 and anything that is not OpenAPI 3.0 or 3.1."""
    if "swagger" in document:
        raise InvalidInput(f"Swagger {_cut(str(document['swagger']), 20)} is not supported: convert the document to "
                           "OpenAPI 3 first")
    found = document.get("openapi")
    if isinstance(found, str) and re.fullmatch(r"3\.[01](\.\d+)?(-[\w.]+)?", found):
        return found[:3]
    what = "no `openapi` field" if found is None else f"openapi: {_shown(found)}"
    raise InvalidInput(f"not an OpenAPI 3.0 or 3.1 document: found {what} at the top level "
                       "(expected openapi: 3.0.x or 3.1.x)")


# Candidates -------------------------------------------------------------------------------------

def candidates(document: dict[str, Any], *, vendor: str, base_url: str | None = None, server: str | None = None,
               include: Sequence[str] = (), exclude: Sequence[str] = (),
               keep_names: Mapping[str, str] = {}) -> list[Candidate]:
    """One Candidate per operation, in document order (paths in order, methods in the order get, put,
    post, delete, options, head, patch, trace). Raises InvalidInput for a bad document (not OpenAPI
    3.x, Swagger 2.0, a local $ref that does not resolve, a relative server URL with no base_url or
    server to resolve it against...)."""
    _check_version(document)
    if not _NAME.fullmatch(vendor):
        raise InvalidInput(f"vendor {_shown(vendor)} must match {NAME_PATTERN}", field="vendor")
    schemas = _Schemas(document)
    operations = _operations(schemas)
    builder = _Builder(schemas, vendor=vendor, base_url=base_url, server=server)
    found = []
    for operation, name in zip(operations, _names(operations, keep_names), strict=True):
        definition, reason = None, _filtered(operation, include, exclude)
        if reason is None:
            try:
                definition = builder.definition(operation, name)
            except _Skip as skip:
                reason = skip.reason
        found.append(Candidate(operation.key, operation.operation_id, name, definition, reason))
    return found


@dataclass(frozen=True)
class _Operation:
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


def _operations(schemas: _Schemas) -> list[_Operation]:
    paths = schemas.root.get("paths")
    if paths is None:
        return []
    if not isinstance(paths, dict):
        raise InvalidInput("`paths` (at /paths) must be a mapping of paths to path items")
    found = []
    for path, raw_item in paths.items():
        if path.startswith("x-"):
            continue
        if not path.startswith("/"):
            raise InvalidInput(f"the path {_shown(path)} (at /paths) does not start with '/'")
        try:
            item, item_where = schemas.deref(raw_item, ("paths", path))
        except _Skip as skip:
            raise InvalidInput(f"the path item {_at(('paths', path))} {skip.reason}") from None
        if not isinstance(item, dict):
            raise InvalidInput(f"the path item {_at(item_where)} is not a mapping")
        for method in METHODS:
            if method in item:
                if not isinstance(item[method], dict):
                    raise InvalidInput(f"the operation {_at((*item_where, method))} is not a mapping")
                found.append(_Operation(method, path, item, item_where, item[method], (*item_where, method)))
    return found


def _names(operations: list[_Operation], keep_names: Mapping[str, str]) -> list[str]:
    """Tool names: a name kept from an earlier import first (and never another operation's), then
    each operation's slug in document order, hashed when taken or too long."""
    reserved = {name for name in keep_names.values() if isinstance(name, str) and _NAME.fullmatch(name)}
    names: dict[str, str] = {}
    given: set[str] = set()
    for operation in operations:
        kept = keep_names.get(operation.key)
        if kept in reserved and kept not in given:
            names[operation.key] = kept
            given.add(kept)
    taken = reserved | given
    for operation in operations:
        if operation.key not in names:
            names[operation.key] = name = _fresh_name(operation.operation_id or f"{operation.method} {operation.path}",
                                                      taken)
            taken.add(name)
    return [names[operation.key] for operation in operations]


def _fresh_name(source: str, taken: set[str]) -> str:
    slug = _slug(source)
    if slug and len(slug) <= 31 and slug not in taken:
        return slug
    head = slug[:24].rstrip("-") or "op"
    for attempt in range(len(taken) + 1):  # another hash while taken (two operations with one operationId)
        salted = source if attempt == 0 else f"{source}#{attempt}"
        name = f"{head}-{hashlib.sha256(salted.encode('utf-8', 'surrogatepass')).hexdigest()[:6]}"
        if name not in taken:
            return name
    raise AssertionError("unreachable: more attempts than names taken")


def _slug(text: str) -> str:
    """getPetById -> get-pet-by-id; HTTPServer -> http-server; anything else than [a-z0-9] -> "-"."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", text)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", text)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _filtered(operation: _Operation, include: Sequence[str], exclude: Sequence[str]) -> str | None:
    for entry in exclude:
        if _matches(entry, operation):
            return f"excluded by {_shown(entry)}"
    if include and not any(_matches(entry, operation) for entry in include):
        return "not included"
    return None


def _matches(entry: str, operation: _Operation) -> bool:
    """An entry names a tag, an operationId, or (starting with "/") a prefix of the path."""
    tags = operation.spec.get("tags")
    return ((isinstance(tags, list) and entry in tags) or entry == operation.operation_id
            or (entry.startswith("/") and operation.path.startswith(entry)))


# Schemas ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Link:
    """A `$ref` in a converted schema, inlined or pointed into $defs when an input schema is built."""

    ref: str
    remote: bool = False


class _Schemas:
    """The document's references, each resolved and converted once however many operations use it.
    Converted schemas keep their references as _Link; the DFS over them marks the target of each
    back edge as cyclic, so every cycle has a member that goes to $defs and inlining ends."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self._targets: dict[str, tuple[Any, Where]] = {}
        self._converted: dict[str, Any] = {}
        self._inline: dict[int, Any] = {}  # id of a schema in the document (shared parameters) -> converted
        self._edges: dict[str, list[str]] = {}
        self._found: list[str] = []  # the references met while converting one target
        self._explored: set[str] = set()
        self._cyclic: set[str] = set()
        self._sizes: dict[str, int] = {}  # ref -> JSON size of its $defs entry

    def target(self, ref: Any, where: Where) -> tuple[Any, Where]:
        """What a local `$ref` points at, and where; InvalidInput naming it when it does not resolve."""
        if not isinstance(ref, str):
            raise InvalidInput(f"a $ref {_at(where)} is not a string")
        if ref not in self._targets:
            self._targets[ref] = self._resolve(ref, where)
        return self._targets[ref]

    def _resolve(self, ref: str, where: Where) -> tuple[Any, Where]:
        if ref != "#" and not ref.startswith("#/"):
            raise InvalidInput(f"the $ref {_shown(ref)} {_at(where)} is not a JSON pointer such as "
                               "'#/components/schemas/Pet'")
        node, path = self.root, []
        for raw in unquote(ref[2:]).split("/") if ref != "#" else ():
            step = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and step in node:
                node = node[step]
                path.append(step)
            elif isinstance(node, list) and step.isascii() and step.isdigit() and int(step) < len(node):
                node = node[int(step)]
                path.append(int(step))
            else:
                raise InvalidInput(f"the $ref {_shown(ref)} {_at(where)} does not resolve in this document")
        return node, tuple(path)

    def deref(self, node: Any, where: Where) -> tuple[Any, Where]:
        """A parameter, request body, path item or security scheme, its `$ref`s followed."""
        for _ in range(_MAX_HOPS):
            if not (isinstance(node, dict) and "$ref" in node):
                return node, where
            if isinstance(node["$ref"], str) and not node["$ref"].startswith("#"):
                raise _Skip(_remote(node["$ref"]))
            node, where = self.target(node["$ref"], where)
        raise InvalidInput(f"the $refs {_at(where)} go round in a loop")

    def schema(self, raw: Any, where: Where) -> Any:
        """A schema of the document as JSON Schema 2020-12, its references as _Link (memoised)."""
        key = id(raw)  # the document outlives this object and is not changed meanwhile
        if key not in self._inline:
            self._inline[key] = self._convert(raw, where)
        return self._inline[key]

    def referenced(self, ref: str) -> Any:
        """What a reference points at, converted (once)."""
        if ref not in self._converted:
            raw, where = self._targets[ref]  # resolved when its _Link was made
            self._found = []
            self._converted[ref] = self._convert(raw, where)
            self._edges[ref] = self._found
        return self._converted[ref]

    def defs_bytes(self, schemas: list[Any]) -> int:
        """The JSON size of what these converted schemas refer to, each reference once: their $defs."""
        pending, seen, total = [link.ref for link in _links(schemas) if not link.remote], set(), 0
        while pending:
            ref = pending.pop()
            if ref not in seen:
                seen.add(ref)
                if ref not in self._sizes:
                    self._sizes[ref] = _json_size(_Inliner(self, use_defs=True).build(self.referenced(ref)))
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
            raise InvalidInput(f"the schema {_at(where)} is not an object")
        node: Any = self._keywords(raw, where)
        if "$ref" in raw:  # siblings (3.1 allows them; 3.0 documents write them anyway) join through allOf
            link = self._link(raw["$ref"], where)
            node = {**node, "allOf": [link, *node.get("allOf", [])]} if node else link
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
        return node

    def _read_only(self, raw: Any, where: Where) -> bool:
        for _ in range(_MAX_HOPS):
            if not isinstance(raw, dict):
                return False
            if raw.get("readOnly") is True:
                return True
            ref = raw.get("$ref")
            if not isinstance(ref, str) or not ref.startswith("#"):
                return False
            raw, where = self.target(ref, where)
        return False

    def _link(self, ref: Any, where: Where) -> _Link:
        if isinstance(ref, str) and not ref.startswith("#"):
            return _Link(ref, remote=True)  # the operations that reach it are skipped
        self.target(ref, where)  # a local reference that does not resolve is the document's fault: now
        self._found.append(ref)
        return _Link(ref)


def _each(key: str, value: Any, convert: Callable[[Any, Where], Any]) -> Any:
    """`value` with `convert(subschema, where)` applied to each subschema it holds, by keyword."""
    shape = _SHAPES.get(key)
    if shape == "map" and isinstance(value, dict):
        return {name: convert(sub, (key, name)) for name, sub in value.items()}
    if shape == "list" and isinstance(value, list):
        return [convert(sub, (key, index)) for index, sub in enumerate(value)]
    return convert(value, (key,)) if shape == "one" else value


def _links(node: Any) -> Iterator[_Link]:
    """The references in converted schemas (not those inside what they point at)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, _Link):
            yield item
        elif isinstance(item, dict | list):
            stack.extend(item.values() if isinstance(item, dict) else item)


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


class _Inliner:
    """Builds one operation's input schema: references inlined, except those on a cycle (and every
    one when `use_defs`), which go to $defs once each. Inlining is budgeted (_Overflow past it)."""

    def __init__(self, schemas: _Schemas, *, use_defs: bool) -> None:
        self.schemas, self.use_defs = schemas, use_defs
        self.nodes = self.depth = 0
        self._names: dict[str, str] = {}  # ref -> its name in $defs
        self._pending: list[str] = []

    def build(self, node: Any) -> Any:
        if isinstance(node, _Link):
            return self._follow(node)
        if not isinstance(node, dict):
            return node
        self.nodes, self.depth = self.nodes + 1, self.depth + 1
        if not self.use_defs and (self.nodes > INLINE_NODES or self.depth > INLINE_DEPTH):
            raise _Overflow
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

    def _follow(self, link: _Link) -> Any:
        if link.remote:
            raise _Skip(_remote(link.ref))
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


# Operations -------------------------------------------------------------------------------------

@dataclass
class _Param:
    name: str  # on the wire
    place: str  # path, query or header
    field: str  # in the input
    required: bool
    schema: Any  # converted
    description: str | None
    explode: bool = True


@dataclass
class _Body:
    schema: Any  # converted
    required: bool
    description: str | None


@dataclass
class _Flat:
    """A JSON object body's properties, merged into the input (the rest-body)."""

    properties: dict[str, Any]
    required: list[str]
    additional: Any = _ABSENT


@dataclass
class _Fields:
    """Input property names: each used once, each fit to fill a URL placeholder."""

    taken: set[str] = field(default_factory=set)

    def claim(self, wanted: str, suffix: str) -> str:
        base = wanted if PLACEHOLDER.fullmatch(f"{{{wanted}}}") else _field_slug(wanted)
        name, number = base, 2
        if name in self.taken:
            name = f"{base[:63 - len(suffix)]}_{suffix}"
        while name in self.taken:
            name, number = f"{base[:56]}_{number}", number + 1
        self.taken.add(name)
        return name


def _field_slug(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_")[:64] or "param"
    return slug if re.match(r"[A-Za-z_]", slug) else f"p_{slug}"[:64]


class _Builder:
    """Turns operations into ToolSpec payloads; raises _Skip for what Workset cannot call."""

    def __init__(self, schemas: _Schemas, *, vendor: str, base_url: str | None, server: str | None) -> None:
        self.schemas, self.vendor, self.base_url, self.server = schemas, vendor, base_url, server
        self._servers: dict[int, str] = {}

    def definition(self, operation: _Operation, name: str) -> dict[str, Any]:
        try:
            return self._definition(operation, name)
        except RecursionError:  # a schema nested near MAX_NESTING, converted a few frames per level
            raise _Skip("its schemas are nested too deeply to convert") from None

    def _definition(self, operation: _Operation, name: str) -> dict[str, Any]:
        method = operation.method.upper()
        if method not in _SENDABLE:
            raise _Skip(f"is an {method} operation; Workset sends GET, HEAD, POST, PUT, PATCH and DELETE")
        if operation.spec.get("callbacks"):
            raise _Skip("has callbacks (the API calls back a URL); Workset cannot receive them")
        self._check_security(operation)
        fields = _Fields()
        params = self._parameters(operation, fields)
        request: dict[str, Any] = {"method": method, "url": self._url(operation, params)}
        input_schema, body_field = self._input_schema(method, params, self._body(operation), fields)
        if sent := [_wire(param) for param in params if param.place != "path"]:
            request["params"] = sent
        if len(sent) > _MAX_PARAMS:
            raise _Skip(f"has {len(sent)} query and header parameters; a tool sends at most {_MAX_PARAMS}")
        if body_field:
            request["body"] = body_field
        return {"vendor": self.vendor, "name": name, "description": _description(operation),
                "input_schema": input_schema, "annotations": _annotations(operation, method), "request": request}

    def _check_security(self, operation: _Operation) -> None:
        """Skip only when every alternative needs a scheme a connection cannot carry ({} is anonymous)."""
        alternatives = operation.spec.get("security", self.schemas.root.get("security"))
        if not isinstance(alternatives, list) or not alternatives:
            return
        missing: list[str] = []
        for requirement in alternatives:
            if not isinstance(requirement, dict) or not requirement:
                return
            kinds = [self._scheme(name) for name in requirement]
            if all(kind in CARRIABLE_AUTH for kind, _ in kinds):
                return
            missing += [label for kind, label in kinds if kind not in CARRIABLE_AUTH]
        raise _Skip(f"needs {' or '.join(dict.fromkeys(missing))} auth, which connections do not carry yet")

    def _scheme(self, name: str) -> tuple[tuple[str, str], str]:
        """((type, detail), label) of a named security scheme."""
        components = self.schemas.root.get("components")
        schemes = components.get("securitySchemes") if isinstance(components, dict) else None
        scheme, _ = self.schemas.deref(schemes.get(name) if isinstance(schemes, dict) else None,
                                       ("components", "securitySchemes", name))
        if not isinstance(scheme, dict) or not isinstance(scheme.get("type"), str):
            return ("undeclared", name), f"the undeclared scheme {_shown(name)}"
        kind = scheme["type"]
        detail = str(scheme.get("scheme" if kind == "http" else "in", "")).lower()
        label = f"http {detail}" if kind == "http" else f"apiKey in {detail}" if kind == "apiKey" else kind
        return (kind.lower(), detail if kind in ("http", "apiKey") else ""), _cut(label, 60)

    def _parameters(self, operation: _Operation, fields: _Fields) -> list[_Param]:
        """Path item and operation parameters (the operation's win on the same name and place),
        each with its input field; placeholders the document forgot to declare as strings."""
        merged: dict[tuple[str, str], tuple[dict[str, Any], Where]] = {}
        for owner, where in ((operation.item, operation.item_where), (operation.spec, operation.where)):
            listed = owner.get("parameters", [])
            if not isinstance(listed, list):
                raise InvalidInput(f"parameters {_at((*where, 'parameters'))} must be a list")
            for index, raw in enumerate(listed):
                param, at = self.schemas.deref(raw, (*where, "parameters", index))
                if not (isinstance(param, dict) and isinstance(param.get("name"), str) and param.get("in") in _PLACES):
                    raise InvalidInput(f"the parameter {_at(at)} needs a name and `in` (path, query, header, cookie)")
                name = param["name"].lower() if param["in"] == "header" else param["name"]  # headers ignore case
                merged[(name, param["in"])] = (param, at)
        placeholders = re.findall(r"\{([^{}]+)\}", operation.path)
        params = [param for raw, at in merged.values() if (param := self._parameter(raw, at, placeholders, fields))]
        declared = {param.name for param in params if param.place == "path"}
        params += [_Param(name, "path", fields.claim(name, "path"), True, {"type": "string"}, None)
                   for name in dict.fromkeys(placeholders) if name not in declared]
        return params

    def _parameter(self, raw: dict[str, Any], at: Where, placeholders: list[str], fields: _Fields) -> _Param | None:
        name, place = raw["name"], raw["in"]
        required = place == "path" or raw.get("required") is True
        if (place == "path" and name not in placeholders) or (place == "header" and name.lower() in _IGNORED_HEADERS):
            return None  # nothing to fill; or a header OpenAPI says to ignore
        problem = _unsendable(name, place, raw)
        if problem and required:
            raise _Skip(problem)
        if problem:
            return None  # optional: the tool goes without it
        description = raw.get("description") if isinstance(raw.get("description"), str) else None
        return _Param(name, place, fields.claim(name, place), required, self._parameter_schema(raw, at), description,
                      raw.get("explode", True) is not False)

    def _parameter_schema(self, raw: dict[str, Any], at: Where) -> Any:
        if "schema" in raw:
            return self.schemas.schema(raw["schema"], (*at, "schema"))
        content: dict[str, Any] = raw["content"] if isinstance(raw.get("content"), dict) else {}
        media = _json_media(content)
        if media is not None and isinstance(content[media], dict) and "schema" in content[media]:
            return self.schemas.schema(content[media]["schema"], (*at, "content", media, "schema"))
        return {"type": "string"}

    def _body(self, operation: _Operation) -> _Body | None:
        if "requestBody" not in operation.spec:
            return None
        body, at = self.schemas.deref(operation.spec["requestBody"], (*operation.where, "requestBody"))
        content = body.get("content", {}) if isinstance(body, dict) else None
        if not isinstance(content, dict):
            raise InvalidInput(f"the request body {_at(at)} needs `content`, a mapping of media types")
        required = body.get("required") is True
        media = _json_media(content)
        if media is None and required:
            raise _Skip(f"no JSON body type (offers {_cut(', '.join(content), 100) or 'none'})")
        if media is None:
            return None  # optional and not JSON: the tool sends none
        schema = content[media].get("schema", {}) if isinstance(content[media], dict) else {}
        description = body.get("description") if isinstance(body.get("description"), str) else None
        return _Body(self.schemas.schema(schema, (*at, "content", media, "schema")), required, description)

    def _input_schema(self, method: str, params: list[_Param], body: _Body | None,
                      fields: _Fields) -> tuple[dict[str, Any], str | None]:
        """The input schema (inlined; with $defs past the inline budget) and the nested body's field."""
        flat = self._flat(body.schema) if body is not None and method not in _NO_REST_BODY else None
        if flat is not None and flat.properties.keys() & fields.taken:
            flat = None  # a body property would shadow a parameter: nest the body instead
        body_field = None
        if body is not None and flat is None:
            body_field = fields.claim("request_body" if "body" in fields.taken else "body", "2")
        # Every schema the input refers to appears at least once, inlined or in $defs: known before
        # building, this spares building what would only be refused.
        least = self.schemas.defs_bytes([param.schema for param in params] + ([body.schema] if body else []))
        if least > MAX_INPUT_BYTES:
            raise _Skip(f"its input schema is too large: {math.ceil(least / 1024)} KB")
        schema: dict[str, Any] | None = None
        if least <= INLINE_BYTES:
            try:
                schema = self._assemble(_Inliner(self.schemas, use_defs=False), params, body, flat, body_field)
            except _Overflow:
                pass
        if schema is None or _json_size(schema) > INLINE_BYTES or _nesting(schema) > MAX_INPUT_NESTING:
            schema = self._assemble(_Inliner(self.schemas, use_defs=True), params, body, flat, body_field)
        if (size := _json_size(schema)) > MAX_INPUT_BYTES:
            raise _Skip(f"its input schema is too large: {math.ceil(size / 1024)} KB")
        if _nesting(schema) > MAX_INPUT_NESTING:
            raise _Skip(f"its input schema is nested deeper than {MAX_INPUT_NESTING} levels")
        return schema, body_field

    def _assemble(self, inliner: _Inliner, params: list[_Param], body: _Body | None, flat: _Flat | None,
                  body_field: str | None) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param in params:
            properties[param.field] = _described(inliner.build(param.schema), param.description)
            required += [param.field] if param.required else []
        if flat is not None and body is not None:
            properties.update((name, inliner.build(sub)) for name, sub in flat.properties.items())
            required += flat.required if body.required else []
        elif body is not None and body_field is not None:
            properties[body_field] = _described(inliner.build(body.schema), body.description)
            required += [body_field] if body.required else []
        schema: dict[str, Any] = {"type": "object", "properties": properties, "required": list(dict.fromkeys(required))}
        if flat is None:
            schema["additionalProperties"] = False  # no rest-body: an unknown field would go nowhere
        elif flat.additional is not _ABSENT:
            schema["additionalProperties"] = inliner.build(flat.additional)
        if defs := inliner.defs():
            schema["$defs"] = defs
        return schema

    def _flat(self, node: Any, depth: int = 0) -> _Flat | None:
        """The body's properties when it is a plain object (or an allOf of them), else None."""
        for _ in range(_MAX_HOPS):
            if not isinstance(node, _Link):
                break
            if node.remote:
                raise _Skip(_remote(node.ref))
            node = self.schemas.referenced(node.ref)  # once, also when it is recursive: its inside goes to $defs
        if not isinstance(node, dict) or depth > 8 or not node.keys() <= _FLATTENABLE:
            return None
        if node.get("type", "object") not in ("object", ["object"]) or not node.keys() & {"type", "properties", "allOf"}:
            return None
        properties, required, parts = node.get("properties", {}), node.get("required", []), node.get("allOf", [])
        if not (isinstance(properties, dict) and isinstance(required, list) and isinstance(parts, list)):
            return None
        flat = _Flat(dict(properties), [name for name in required if isinstance(name, str)],
                     node.get("additionalProperties", _ABSENT) if not parts else _ABSENT)
        for part in parts:  # in an allOf, each part's additionalProperties would judge the others: dropped
            inner = self._flat(part, depth + 1)
            if inner is None or inner.properties.keys() & flat.properties.keys():
                return None
            flat.properties.update(inner.properties)
            flat.required += inner.required
        return flat

    def _url(self, operation: _Operation, params: list[_Param]) -> str:
        """The server and the path, each path parameter's placeholder named by its field."""
        fields = {param.name: param.field for param in params if param.place == "path"}
        path = "".join(f"{{{fields[piece[1:-1]]}}}" if piece[1:-1] in fields and piece.startswith("{")
                       else quote(piece, safe=_PATH_SAFE) for piece in re.split(r"(\{[^{}]+\})", operation.path))
        url = self._server(operation).rstrip("/") + path
        if len(url) > 2000:
            raise _Skip("its URL is longer than 2,000 characters")
        return url

    def _server(self, operation: _Operation) -> str:
        if self.server is not None:
            return self._absolute(self.server, f"the server {_shown(self.server)} given")
        for owner, where in ((operation.spec, operation.where), (operation.item, operation.item_where),
                             (self.schemas.root, ())):
            servers = owner.get("servers")
            if isinstance(servers, list) and servers:
                key = id(servers[0])
                if key not in self._servers:
                    self._servers[key] = self._server_url(servers[0], (*where, "servers", 0))
                return self._servers[key]
        return self._absolute("/", "the document names no server, so its URL '/'")

    def _server_url(self, server: Any, where: Where) -> str:
        if not (isinstance(server, dict) and isinstance(server.get("url"), str)):
            raise InvalidInput(f"the server {_at(where)} has no url")
        variables = server.get("variables") if isinstance(server.get("variables"), dict) else {}

        def default(match: re.Match[str]) -> str:
            found = variables.get(match.group(1))  # type: ignore[union-attr]
            if not (isinstance(found, dict) and isinstance(found.get("default"), str)):
                raise InvalidInput(f"the server URL {_at(where)} uses {{{_cut(match.group(1), 40)}}}, "
                                   "which has no default value")
            return str(found["default"])

        url = re.sub(r"\{([^{}]*)\}", default, server["url"])
        return self._absolute(url, f"the document's server URL {_shown(url)} ({_at(where)})")

    def _absolute(self, url: str, what: str) -> str:
        try:
            if not urlsplit(url).scheme:
                if self.base_url is None:
                    raise InvalidInput(f"{what} is relative; give `server`, the API's base URL")
                url = urljoin(self.base_url, url)
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError:
            raise InvalidInput(f"{what} is not a valid URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"{what} is not an http or https URL")
        if parts.username is not None or parts.query or parts.fragment or "#" in url:
            raise InvalidInput(f"{what} must be a plain base URL (no credentials, query or fragment)")
        if "{" in url or "}" in url:
            raise InvalidInput(f"{what} has a {{variable}} left in it")
        return url


def _unsendable(name: str, place: str, raw: dict[str, Any]) -> str | None:
    """Why Workset cannot send this parameter, or None."""
    if place == "cookie":
        return f"needs cookie parameter {_shown(name)}, which Workset does not send"
    if place == "header" and not _HEADER_NAME.fullmatch(name):
        return f"needs header {_shown(name)}, which is not a valid HTTP header name"
    if place == "header" and is_client_header(name):
        return f"needs header {_shown(name)}, which only Workset's HTTP client sets"
    if place == "query" and not _PARAM_NAME.fullmatch(name):
        return f"needs query parameter {_shown(name)}, whose name is not printable ASCII (at most 200 characters)"
    if place == "query" and raw.get("style", "form") != "form":
        return f"needs query parameter {_shown(name)} in style {_shown(raw['style'])}, which Workset does not send"
    return None


def _json_media(content: dict[str, Any]) -> str | None:
    """The content's JSON media type: application/json, else application/*+json, else */*."""
    ranked = []
    for index, key in enumerate(content):
        base = key.split(";", 1)[0].strip().lower()
        rank = 0 if base == "application/json" else 1 if _PLUS_JSON.fullmatch(base) else 2 if base == "*/*" else None
        if rank is not None:
            ranked.append((rank, index, key))
    return min(ranked)[2] if ranked else None


def _wire(param: _Param) -> dict[str, Any]:
    entry: dict[str, Any] = {"field": param.field, "name": param.name, "in": param.place}
    if param.place == "query":
        entry["explode"] = param.explode
    return entry


def _described(schema: Any, description: str | None) -> Any:
    if description is None or schema is False:
        return schema
    return {**(schema if isinstance(schema, dict) else {}), "description": description}


def _description(operation: _Operation) -> str:
    texts = (operation.spec.get("summary"), operation.spec.get("description"))
    return ("\n\n".join(text.strip() for text in texts if isinstance(text, str) and text.strip())
            or operation.key)[:4000]


def _annotations(operation: _Operation, method: str) -> dict[str, Any]:
    notes: dict[str, Any] = {}
    summary = operation.spec.get("summary")
    if isinstance(summary, str) and summary.strip():
        notes["title"] = summary.strip()[:200]
    if method in ("GET", "HEAD"):
        notes["readOnlyHint"] = True
    if method == "DELETE":
        notes["destructiveHint"] = True
    if method in ("PUT", "DELETE"):
        notes["idempotentHint"] = True
    return notes


def _remote(ref: str) -> str:
    return f"refers to another document ({_cut(ref, 120)}); bundle it into one document first"


def _nesting(value: Any) -> int:
    """Levels of objects and arrays inside each other."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


def _at(where: Where) -> str:
    pointer = "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in where)
    return f"at {_cut(pointer, 80)}" if pointer else "at the top level"


def _shown(value: Any) -> str:
    return repr(_cut(value if isinstance(value, str) else str(value), 60))


def _cut(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
