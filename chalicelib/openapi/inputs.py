"""An operation's input schema. Each parameter is a property; the body, JSON or else a form
(application/x-www-form-urlencoded, sent with `body_format: form`) or else multipart/form-data
(`body_format: multipart`, its files as base64 fields), is flattened into the input as its
rest-body when it is a plain object (or an allOf of them) and nested under one field otherwise
(a multipart body only flattened). References are inlined within a budget, else kept in $defs; the result is held to a
size and a nesting limit."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from chalicelib.definitions import MAX_SCHEMA_BYTES, PLACEHOLDER
from chalicelib.errors import InvalidInput
from chalicelib.jsontext import MAX_DEPTH
from chalicelib.openapi.operations import Operation
from chalicelib.openapi.problems import Skip, at, cut, shown
from chalicelib.openapi.schemas import Inliner, Overflow, Schemas, json_size

INLINE_BYTES = 64 * 1024
MAX_INPUT_BYTES = MAX_SCHEMA_BYTES  # one place: what a published tool's schema may be
MAX_INPUT_NESTING = MAX_DEPTH - 1  # the admin API reads a definition, its input_schema one level down, as JSON
FORM = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"
# A file in a multipart body: the call sends the decoded bytes as the part (vendor.FILE_ENCODING).
FILE_FIELD = {"type": "string", "contentEncoding": "base64", "description": "The file's content, base64-encoded."}
_NO_REST_BODY = frozenset({"GET", "HEAD", "DELETE"})
_PLUS_JSON = re.compile(r"application/[\w.+-]+\+json")
_FORM_STYLES = ("form", "deepObject")  # what the form encoding sends: repeated keys, a[b]=c
_FLATTENABLE = frozenset({"type", "properties", "required", "additionalProperties", "title", "description", "allOf"})
_ABSENT: Any = object()
_BYTES = frozenset({"application/octet-stream", "application/pdf", "application/zip", "application/gzip"})
_BYTE_KINDS = frozenset({"image", "audio", "video", "font"})  # image/png, audio/*, ...
_STRUCTURE = frozenset({"properties", "items", "allOf", "anyOf", "oneOf", "additionalProperties"})


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
class Body:
    schema: Any  # converted
    required: bool
    description: str | None
    form: bool  # sent as application/x-www-form-urlencoded, not JSON
    multipart: bool = False  # sent as multipart/form-data: each field a part, a file's bytes from base64


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


def read_body(schemas: Schemas, operation: Operation) -> Body | None:
    """The operation's request body; None when it has none, or an optional one in no media type
    Workset sends (Skip when such a body is required, or is a file upload: multipart or bytes)."""
    if "requestBody" not in operation.spec:
        return None
    body, where = schemas.refs.deref(operation.spec["requestBody"], (*operation.where, "requestBody"))
    content = body.get("content", {}) if isinstance(body, dict) else None
    if not isinstance(content, dict):
        raise InvalidInput(f"the request body {at(where)} needs `content`, a mapping of media types")
    required = body.get("required") is True
    try:
        media, kind = _sendable_media(schemas, content)
    except Skip:
        if required or _uploads(schemas, content):
            raise  # an optional upload still has the file as its point: no tool that cannot send it
        return None  # optional: the tool sends none
    raw = content[media].get("schema", {}) if isinstance(content[media], dict) else {}
    schema = schemas.schema(raw, (*where, "content", media, "schema"))
    if kind != "json" and not _may_be_object(schemas.resolved(schema)):
        raise Skip(f"its {kind} body is not an object of fields")
    return Body(schema, required, text(body, "description"), kind == "form", kind == "multipart")


def json_media(content: dict[str, Any]) -> str | None:
    """The content's JSON media type: application/json, else application/*+json, else */*."""
    ranked = []
    for index, key in enumerate(content):
        base = _base(key)
        rank = 0 if base == "application/json" else 1 if _PLUS_JSON.fullmatch(base) else 2 if base == "*/*" else None
        if rank is not None:
            ranked.append((rank, index, key))
    return min(ranked)[2] if ranked else None


def input_schema(schemas: Schemas, method: str, params: list[Param], body: Body | None,
                 fields: Fields) -> tuple[dict[str, Any], str | None]:
    """The input schema (inlined; with $defs past the inline budget) and the nested body's field."""
    flat = _flat(schemas, body.schema) if body is not None and method not in _NO_REST_BODY else None
    if flat is not None and flat.properties.keys() & fields.taken:
        flat = None  # a body property would shadow a parameter: nest the body instead
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


def text(node: dict[str, Any], key: str) -> str | None:
    """node[key] when it is text (a description), else None."""
    found = node.get(key)
    return found if isinstance(found, str) else None


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


def _sendable_media(schemas: Schemas, content: dict[str, Any]) -> tuple[str, str]:
    """The media type the body goes as, and how ("json", "form" or "multipart"): JSON when offered
    (`*/*` only for a schema of JSON structure), else a form whose encoding Workset's matches, else
    multipart/form-data; Skip saying what is offered otherwise."""
    media = json_media(content)
    if media is not None and (_base(media) != "*/*" or _structured(schemas, content[media])):
        return media, "json"
    form = next((key for key in content if _base(key) == FORM), None)
    multipart = next((key for key in content if _base(key) == MULTIPART), None)
    if form is None and multipart is not None:
        return multipart, "multipart"
    if form is None and _uploads(schemas, content):
        raise Skip(f"its body is a file upload ({cut(', '.join(content), 100)}) in no type Workset sends: a tool "
                   f"sends JSON, {FORM} or {MULTIPART}")
    if form is None:
        raise Skip(f"no JSON, {FORM} or {MULTIPART} body type (offers {cut(', '.join(content), 100) or 'none'})")
    encoding = content[form].get("encoding") if isinstance(content[form], dict) else None
    for name, entry in encoding.items() if isinstance(encoding, dict) else ():
        style = entry.get("style", "form") if isinstance(entry, dict) else "form"
        if style not in _FORM_STYLES or (isinstance(entry, dict) and entry.get("explode") is False):
            raise Skip(f"its form body encodes {shown(name)} in style {shown(style)}"
                       f"{' without explode' if style in _FORM_STYLES else ''}, which Workset does not send")
    return form, "form"


def _multipart(schemas: Schemas, flat: _Flat | None) -> _Flat:
    """A multipart body's fields, each file (`format: binary`, or encoded content) a base64 string
    that the call decodes into the part's bytes (vendor.py). Only an object of fields flattened
    into the input: the call finds its files among the input's own properties."""
    if flat is None:
        raise Skip(f"its {MULTIPART} body is not an object of fields beside the parameters (a field shares a "
                   "parameter's name, or the body is not a plain object)")
    properties = {}
    for name, sub in flat.properties.items():
        resolved = schemas.resolved(sub)
        if _is_bytes(resolved):
            told = resolved.get("description")
            properties[name] = {**FILE_FIELD, **({"description": f"{told.strip()} ({FILE_FIELD['description']})"}
                                                 if isinstance(told, str) and told.strip() else {})}
        elif isinstance(resolved, dict) and _is_bytes(schemas.resolved(resolved.get("items"))):
            raise Skip(f"its {MULTIPART} body sends several files in {shown(name)}; a tool sends one file a field")
        else:
            properties[name] = sub
    return _Flat(properties, flat.required, flat.additional)


def _uploads(schemas: Schemas, content: dict[str, Any]) -> bool:
    """True when the body offered is a file: multipart, a type of bytes (application/octet-stream,
    image/*, ...), `*/*` without a JSON structure, or a schema of `format: binary` or encoded
    content. Sending any of these as JSON would send what the vendor does not expect."""
    for key, entry in content.items():
        base = _base(key)
        if base.startswith("multipart/") or base in _BYTES or base.split("/", 1)[0] in _BYTE_KINDS:
            return True
        if base == "*/*" and not _structured(schemas, entry):
            return True
        if _binary(schemas, entry):
            return True
    return False


def _structured(schemas: Schemas, entry: Any) -> bool:
    """True for a media type entry whose schema describes JSON structure: an object or an array,
    or alternatives or parts (allOf, anyOf, oneOf) of them. An absent schema, a string or bytes
    is not: a `*/*` body without one is what an upload of any file type looks like."""
    raw = _schema_of(schemas, entry)
    if not isinstance(raw, dict) or _binary(schemas, entry):
        return False
    kind = raw.get("type")
    kinds = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()
    return bool(kinds & {"object", "array"}) or (not kinds and bool(raw.keys() & _STRUCTURE))


def _binary(schemas: Schemas, entry: Any) -> bool:
    """True for a media type entry whose schema is bytes (_is_bytes)."""
    return _is_bytes(_schema_of(schemas, entry))


def _is_bytes(raw: Any) -> bool:
    """True for a schema of bytes: `format: binary` or `byte` (OpenAPI 3.0), or contentEncoding or
    contentMediaType (3.1)."""
    return isinstance(raw, dict) and (raw.get("format") in ("binary", "byte")
                                      or bool(raw.keys() & {"contentEncoding", "contentMediaType"}))


def _schema_of(schemas: Schemas, entry: Any) -> Any:
    """A media type entry's schema, its reference followed (None when absent or unresolvable:
    the conversion says what is wrong with it)."""
    raw = entry.get("schema") if isinstance(entry, dict) else None
    try:
        return schemas.refs.deref(raw, ())[0] if raw is not None else None
    except (Skip, InvalidInput):
        return None


def _may_be_object(node: Any) -> bool:
    """False for a schema whose type rules out an object (a form's fields come from an object)."""
    kind = node.get("type") if isinstance(node, dict) else None
    return kind is None or kind == "object" or (isinstance(kind, list) and "object" in kind)


def _base(media: str) -> str:
    return media.split(";", 1)[0].strip().lower()


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
