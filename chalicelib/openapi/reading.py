"""Text into a document: at most 25 MB, JSON or YAML (a safe loader, YAML 1.2's booleans), copied
into plain JSON data within a node budget and a nesting limit; then the version, which must be
OpenAPI 3.0 or 3.1.

A YAML alias repeats its anchor wherever it is used, and so does a merge key (`<<: *a`): a
36 KB document that uses a 20 KB anchor 4,000 times is 80 MB to anything that walks it (a size
check, a message, a conversion). So a YAML document is composed into its node graph first and
measured there, each alias counted as a full copy of its anchor (each node measured once, so
the measuring is linear), and refused when it would expand past `expansion_limit` of the text's
size; only then are Python objects built."""

from __future__ import annotations

import json
import math
import re
from datetime import date, datetime
from typing import Any

import yaml

from chalicelib.base.errors import InvalidInput
from chalicelib.base.jsontext import has_surrogate
from chalicelib.openapi.problems import at, cut, plain, shown

MAX_DOCUMENT_BYTES = 25 * 1024 * 1024
MAX_NODES = 5_000_000  # values in the document, a YAML alias counted each time it is used
MAX_NESTING = 200
# What a document may come to once its aliases (and, at import, its $refs) are repeated: a small
# multiple of its own size, at least enough for a small document to share a few schemas, and
# never more than the largest document read.
EXPANSION = 4
EXPANSION_FLOOR = 1024 * 1024


def expansion_limit(size: int) -> int:
    """The most bytes a document of `size` bytes may come to with its aliases (or $refs) repeated."""
    return min(MAX_DOCUMENT_BYTES, max(EXPANSION_FLOOR, EXPANSION * size))


def read_document(raw: str | bytes) -> dict[str, Any]:
    """JSON or YAML text -> the document (plain dicts/lists/str/int/float/bool/None).
    Raises InvalidInput (chalicelib.base.errors) saying what and where."""
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
    loaded = _parse_json(text) if is_json else _parse_yaml(text, expansion_limit(size))
    document = _Plain(aliases=not is_json).copy(loaded)
    if not isinstance(document, dict):
        found = "empty" if document is None else "a list" if isinstance(document, list) else "a single value"
        raise InvalidInput(f"the document must be a mapping (an OpenAPI object) at the top level; it is {found}")
    check_version(document)
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


def _parse_yaml(text: str, limit: int) -> Any:
    loader = _Loader(text)  # a safe loader (see _Loader)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure(node, limit)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise InvalidInput(f"the document is not valid YAML: {cut(error.problem or error.context or '?')}{where}") \
            from None
    except yaml.YAMLError as error:
        raise InvalidInput(f"the document is not valid YAML: {cut(str(error))}") from None
    except (ValueError, OverflowError, RecursionError):  # an integer too long, nesting in the pure-Python parser
        raise InvalidInput("the document holds a value that cannot be read (a number too long?)") from None
    finally:
        loader.dispose()


_MERGE = "tag:yaml.org,2002:merge"


def _measure(root: yaml.Node, limit: int) -> None:
    """Refuse a node graph that expands past `limit` bytes before anything is built from it. A
    node's size is about what it takes as compact JSON: its text's UTF-8 bytes and a byte of
    structure per value; an alias is the node it names, so it counts that node's whole size again,
    and a merge key counts the mappings it merges in full, as the constructor copies their pairs.
    Depth first without recursion (a chain of anchors nests without limit in a flat text), each
    node sized once. Nesting and an anchor that contains itself are `_Plain`'s to refuse: built
    from a graph, they cost no more than the graph."""
    sizes: dict[int, int] = {}  # id(node) -> bytes
    open_: set[int] = set()  # the nodes being sized: the ancestors of the one on top
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_sized = stack.pop()
        key = id(node)
        if children_sized:
            open_.discard(key)
            sizes[key] = total = 1 + sum(sizes[id(child)] for child in _children(node))
            if total > limit:
                mark = node.start_mark
                raise InvalidInput(
                    f"the document comes to more than {limit / 2**20:.3g} MB once its YAML aliases and merge keys "
                    f"are repeated (a document may expand to {EXPANSION} times its size, at least "
                    f"{EXPANSION_FLOOR >> 20} MB); use fewer aliases (the value at line {mark.line + 1} column "
                    f"{mark.column + 1})", field="document")
        elif key in open_:
            return  # an anchor that contains itself: built as one object, which _Plain refuses naming where
        elif key not in sizes:
            if isinstance(node, yaml.ScalarNode):
                sizes[key] = len(str(node.value).encode("utf-8", "surrogatepass")) + 1
            else:
                open_.add(key)
                stack.append((node, True))
                stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    """A collection node's values (a mapping's keys and values; what a merge key names, whole)."""
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for key, value in node.value for part in ((value,) if key.tag == _MERGE else (key, value))]
    return []


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
                raise self._refused(f"has the key {shown(name)} twice")
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
        return InvalidInput(f"the document {problem} ({at(tuple(self.where))})")


def check_version(document: dict[str, Any]) -> str:
    """"3.0" or "3.1"; InvalidInput for Swagger 2.0 and anything that is not OpenAPI 3.0 or 3.1."""
    if "swagger" in document:
        raise InvalidInput(f"Swagger {cut(plain(document['swagger']), 20)} is not supported: convert the document to "
                           "OpenAPI 3 first")
    found = document.get("openapi")
    if isinstance(found, str) and re.fullmatch(r"3\.[01](\.\d+)?(-[\w.]+)?", found):
        return found[:3]
    what = "no `openapi` field" if found is None else f"openapi: {shown(found)}"
    raise InvalidInput(f"not an OpenAPI 3.0 or 3.1 document: found {what} at the top level "
                       "(expected openapi: 3.0.x or 3.1.x)")

