"""An operation's input schema. Each parameter is a property; the body (bodies.py) is flattened
into the input as its rest-body when it is a plain object (or an allOf of them) and nested under
one field otherwise (a multipart body only flattened: its files are found among the input's own
fields). References are inlined within a budget, else kept in $defs; the result is held to a size
and a nesting limit."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from chalicelib.base.jsontext import MAX_DEPTH
from chalicelib.openapi.bodies import FILE_FIELD, MULTIPART, Body, is_file
from chalicelib.openapi.problems import Skip, shown
from chalicelib.openapi.schemas import Inliner, Overflow, Schemas, json_size
from chalicelib.tools.definitions import MAX_SCHEMA_BYTES, PLACEHOLDER

INLINE_BYTES = 64 * 1024
MAX_INPUT_BYTES = MAX_SCHEMA_BYTES  # one place: what a published tool's schema may be
MAX_INPUT_NESTING = MAX_DEPTH - 1  # the admin API reads a definition, its input_schema one level down, as JSON
_NO_REST_BODY = frozenset({"GET", "HEAD", "DELETE"})
_FLATTENABLE = frozenset({"type", "properties", "required", "additionalProperties", "title", "description", "allOf"})
_ABSENT: Any = object()


@dataclass
class Param:
    name: str  # on the wire
    place: str  # path, query or header
    field: str  # in the input
    required: bool
    schema: Any  # converted
    description: str | None
    explode: bool = True


@dataclass
class _Flat:
    """An object body's properties, merged into the input (the rest-body)."""

    properties: dict[str, Any]
    required: list[str]
    additional: Any = _ABSENT


@dataclass
class Fields:
    """Input property names: each used once, each fit to fill a URL placeholder."""

    taken: set[str] = field(default_factory=set)

    def claim(self, wanted: str, suffix: str) -> str:
        """A free field for `wanted`: itself when fit and free, else slugged, else with `_suffix`."""
        base = wanted if PLACEHOLDER.fullmatch(f"{{{wanted}}}") else _field_slug(wanted)
        name, number = base, 2
        if name in self.taken:
            name = f"{base[:63 - len(suffix)]}_{suffix}"
        while name in self.taken:
            name, number = f"{base[:56]}_{number}", number + 1
        self.taken.add(name)
        return name


def input_schema(schemas: Schemas, method: str, params: list[Param], body: Body | None,
                 fields: Fields) -> tuple[dict[str, Any], str | None]:
    """The input schema (inlined; with $defs past the inline budget) and the nested body's field."""
    flat = _flat(schemas, body.schema) if body is not None and method not in _NO_REST_BODY else None
    if flat is not None and flat.properties.keys() & fields.taken:
        flat = None  # a body property would shadow a parameter: nest the body instead
    if body is not None and body.multipart and method in _NO_REST_BODY:
        # its fields would go to the query string (vendor.build), and a nested body carries no file
        raise Skip(f"is a {method} operation with a {MULTIPART} body; Workset sends a multipart body only with "
                   "POST, PUT or PATCH")
    if body is not None and body.multipart:
        flat = _multipart(schemas, flat)
    body_field = None
    if body is not None and flat is None:
        body_field = fields.claim("request_body" if "body" in fields.taken else "body", "2")
    # Every schema the input refers to appears at least once, inlined or in $defs: known before
    # building, this spares building what would only be refused.
    least = schemas.defs_bytes([param.schema for param in params] + ([body.schema] if body else []))
    if least > MAX_INPUT_BYTES:
        raise _too_large(least)

    def assembled(use_defs: bool) -> dict[str, Any]:
        return _assemble(Inliner(schemas, use_defs=use_defs), params, body, flat, body_field)

    schema: dict[str, Any] | None = None
    if least <= INLINE_BYTES:
        try:
            schema = assembled(use_defs=False)
        except Overflow:
            pass
    if schema is None or json_size(schema) > INLINE_BYTES or _nesting(schema) > MAX_INPUT_NESTING:
        schema = assembled(use_defs=True)
    if (size := json_size(schema)) > MAX_INPUT_BYTES:
        raise _too_large(size)
    if _nesting(schema) > MAX_INPUT_NESTING:
        raise Skip(f"its input schema is nested deeper than {MAX_INPUT_NESTING} levels")
    return schema, body_field


def _assemble(inliner: Inliner, params: list[Param], body: Body | None, flat: _Flat | None,
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


def _flat(schemas: Schemas, node: Any, depth: int = 0) -> _Flat | None:
    """The body's properties when it is a plain object (or an allOf of them), else None."""
    node = schemas.resolved(node)
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
        inner = _flat(schemas, part, depth + 1)
        if inner is None or inner.properties.keys() & flat.properties.keys():
            return None
        flat.properties.update(inner.properties)
        flat.required += inner.required
    return flat


def _multipart(schemas: Schemas, flat: _Flat | None) -> _Flat:
    """A multipart body's fields, each file (bodies.is_file) a base64 string
    that the call decodes into the part's bytes (vendor.py). Only an object of fields flattened
    into the input: the call finds its files among the input's own properties."""
    if flat is None:
        raise Skip(f"its {MULTIPART} body is not an object of fields beside the parameters (a field shares a "
                   "parameter's name, or the body is not a plain object)")
    properties = {}
    for name, sub in flat.properties.items():
        resolved = schemas.resolved(sub)
        if is_file(resolved):
            told = resolved.get("description")
            properties[name] = {**FILE_FIELD, **({"description": f"{told.strip()} ({FILE_FIELD['description']})"}
                                                 if isinstance(told, str) and told.strip() else {})}
        elif isinstance(resolved, dict) and is_file(schemas.resolved(resolved.get("items"))):
            raise Skip(f"its {MULTIPART} body sends several files in {shown(name)}; a tool sends one file a field")
        elif isinstance(resolved, dict) and "contentEncoding" in resolved:
            # base64 text the vendor decodes itself: without the keyword, the call sends it as given
            properties[name] = {key: value for key, value in resolved.items() if key != "contentEncoding"}
        else:
            properties[name] = sub
    return _Flat(properties, flat.required, flat.additional)


def _described(schema: Any, description: str | None) -> Any:
    if description is None or schema is False:
        return schema
    return {**(schema if isinstance(schema, dict) else {}), "description": description}


def _too_large(size: int) -> Skip:
    return Skip(f"its input schema is too large: {math.ceil(size / 1024)} KB")


def _nesting(value: Any) -> int:
    """Levels of objects and arrays inside each other."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _field_slug(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_")[:64] or "param"
    return slug if re.match(r"[A-Za-z_]", slug) else f"p_{slug}"[:64]
