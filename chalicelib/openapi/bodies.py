"""An operation's request body: which media type it goes as, and how the call sends it. JSON
when offered (`*/*` only when its schema is JSON structure), else a form
(application/x-www-form-urlencoded, `body_format: form`), else multipart/form-data
(`body_format: multipart`, each file a base64 field), else raw bytes (`body_format: binary`:
application/octet-stream, image/*, a `*/*` file..., the bytes one base64 field and their media
type a header). What none of these can carry is skipped saying why: never sent as JSON."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from chalicelib.base.errors import InvalidInput
from chalicelib.openapi.operations import Operation
from chalicelib.openapi.problems import Skip, at, cut, shown
from chalicelib.openapi.schemas import Schemas

FORM = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"
# A file in a multipart body, or a body of raw bytes: the call sends the decoded bytes (vendor.py).
FILE_FIELD = {"type": "string", "contentEncoding": "base64", "description": "The file's content, base64-encoded."}
_PLUS_JSON = re.compile(r"application/[\w.+-]+\+json")
_FORM_STYLES = ("form", "deepObject")  # what the form encoding sends: repeated keys, a[b]=c
_BYTES = frozenset({"application/octet-stream", "application/pdf", "application/zip", "application/gzip"})
_BYTE_KINDS = frozenset({"image", "audio", "video", "font"})  # image/png, audio/*, ...
_STRUCTURE = frozenset({"properties", "items", "allOf", "anyOf", "oneOf", "additionalProperties"})
_TOKEN = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"  # RFC 6838's restricted name: a media type's halves
_MEDIA = re.compile(rf"(?:{_TOKEN}|\*)/(?:{_TOKEN}|\*)")


@dataclass
class Body:
    schema: Any  # converted
    required: bool
    description: str | None
    form: bool  # sent as application/x-www-form-urlencoded, not JSON
    multipart: bool = False  # sent as multipart/form-data: each field a part, a file's bytes from base64
    media_types: tuple[str, ...] = ()  # raw bytes (body_format: binary) of one of these types; may be wildcards


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
    if kind == "binary":
        types = tuple(dict.fromkeys(_base(key) for key in content if _raw_bytes(schemas, key, content[key])))
        return Body(FILE_FIELD, required, text(body, "description"), False, media_types=types)
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


def text(node: dict[str, Any], key: str) -> str | None:
    """node[key] when it is text (a description), else None."""
    found = node.get(key)
    return found if isinstance(found, str) else None


def _sendable_media(schemas: Schemas, content: dict[str, Any]) -> tuple[str, str]:
    """The media type the body goes as, and how ("json", "form", "multipart" or "binary"): JSON
    when offered (`*/*` only for a schema of JSON structure), else multipart/form-data or raw bytes
    when no form is offered, else a form whose encoding Workset's matches; Skip saying what is
    offered otherwise."""
    media = json_media(content)
    if media is not None and (_base(media) != "*/*" or _structured(schemas, content[media])):
        return media, "json"
    form = next((key for key in content if _base(key) == FORM), None)
    multipart = next((key for key in content if _base(key) == MULTIPART), None)
    if form is None and multipart is not None:
        return multipart, "multipart"
    raw = next((key for key in content if _raw_bytes(schemas, key, content[key])), None)
    if form is None and raw is not None:
        return raw, "binary"
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


def _raw_bytes(schemas: Schemas, key: str, entry: Any) -> bool:
    """True for a media type whose body is a file's bytes as they are, and a valid media type
    (it becomes a header's value): application/octet-stream, image/png, image/*, a `*/*` without
    a JSON structure, any type whose schema is bytes."""
    base = _base(key)
    if not _MEDIA.fullmatch(base) or base.startswith("multipart/") or base.startswith("*/") != (base == "*/*"):
        return False
    if base in _BYTES or base.split("/", 1)[0] in _BYTE_KINDS or _binary(schemas, entry):
        return True
    return base == "*/*" and not _structured(schemas, entry)


def media_type_schema(types: tuple[str, ...]) -> dict[str, Any]:
    """The schema of the input field that says which of `types` the bytes are (wildcards allowed)."""
    if all("*" not in kind for kind in types):
        return {"type": "string", "enum": list(types)}
    shapes = [kind.replace("*", _TOKEN) if "*" in kind else re.sub(r"([$^.+])", r"\\\1", kind) for kind in types]
    return {"type": "string", "pattern": f"^(?:{'|'.join(shapes)})$", "maxLength": 255,
            "description": f"The file's media type: {cut(', '.join(types), 200)}."}


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
    """True for a media type entry whose schema is bytes (is_bytes)."""
    return is_bytes(_schema_of(schemas, entry))


def is_file(raw: Any) -> bool:
    """True for a multipart field that is a file's bytes: `format: binary` (OpenAPI 3.0), or
    contentMediaType without contentEncoding (3.1). `format: byte` and contentEncoding are text
    the vendor reads as base64 itself: sent as given."""
    return isinstance(raw, dict) and (raw.get("format") == "binary"
                                      or ("contentMediaType" in raw and "contentEncoding" not in raw))


def is_bytes(raw: Any) -> bool:
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
