"""A find_tool hit, cheap to read: what an agent needs to choose a tool and call it, bounded.

Every hit carries its vendor and name, whether it is promoted, the hints Workset enforces, the
description's first sentence and a one-line summary of its input:

    owner*: string, repo*: string, state: open|closed|all, labels: [string], body: {title*: string, …+3}

(`*` marks a required field; enums, nested objects and long lists are trimmed). Only the first
hit also carries its input schema, whole when it is small, else without its prose; promote
answers any tool's full definition.

Tool definitions are written by agents and vendors, so every piece has a bound that holds
whatever the definition holds (4,000-character descriptions, thousands of properties, `$ref`
loops, deep nesting, control and wide characters): the summary visits at most MAX_NODES schema
nodes and is at most SUMMARY_CHARS characters and SUMMARY_BYTES bytes, the description
DESCRIPTION_CHARS and DESCRIPTION_BYTES, the first hit's schema TOP_SCHEMA_BYTES. Nothing here
raises on a schema of any shape.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from chalicelib.base import jsontext
from chalicelib.base.errors import ConnectionNotInScope, ToolUnavailable
from chalicelib.store.records import AgentState
from chalicelib.tools.definitions import Tool

DESCRIPTION_CHARS = 160
SUMMARY_CHARS = 320
# and as JSON text (UTF-8, escapes included), so wide characters cannot multiply an answer's size:
# five hits at their bounds, the first with its schema, stay under 12 KB
DESCRIPTION_BYTES = 320
SUMMARY_BYTES = 480
FIELD_CHARS = 120  # one top-level field's part of the summary
NAME_CHARS = 40
ENUM_SHOWN = 6
ENUM_VALUE_CHARS = 24
NESTED_FIELDS = 4
MAX_DEPTH = 2  # objects inside objects shown with their fields; deeper ones are `{…}`
MAX_NODES = 300
MAX_LEVEL = 12  # steps down through refs, anyOf and items: a chain of them ends here
REQUIRED_SCAN = 200  # a `required` list is read this far
TOP_SCHEMA_BYTES = 5_500
LEAN_NOTE = "descriptions dropped to fit; promote for the full schema"

# keywords a lean schema keeps: what validation reads, not what people read
_STRUCTURAL = frozenset({
    "type", "properties", "required", "items", "prefixItems", "enum", "const", "anyOf", "oneOf", "allOf",
    "additionalProperties", "$ref", "$defs", "definitions", "format", "pattern", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems", "uniqueItems",
    "multipleOf", "minProperties", "maxProperties", "not", "if", "then", "else", "dependentRequired",
    "contentEncoding",  # a file field's base64: what the caller must send, not a note for people
})
_NAMED = frozenset({"properties", "$defs", "definitions", "patternProperties", "dependentRequired"})
_ABBREVIATIONS = frozenset({"e.g.", "i.e.", "etc.", "vs.", "approx.", "incl.", "no.", "ca.", "cf."})
_SENTENCE_END = re.compile(r"[.!?](?=\s)|[。！？]")  # a full stop before a space, or a CJK one
_SPACE = re.compile(r"\s+")


def hit(state: AgentState, tool: Tool, *, first: bool = False, approval: str | None = None) -> dict[str, Any]:
    """One find_tool hit for this agent; `first` adds the input schema (bounded, see top_schema);
    a write's `approval` is its approval policy (`first_call` or `every_call`: how often a call
    waits for a person)."""
    spec, guard = tool.spec, tool.guard
    promotion = state.promotion(spec.vendor, spec.name)
    answer: dict[str, Any] = {
        "vendor": spec.vendor,
        "name": spec.name,
        "promoted": promotion is not None,
        "readOnlyHint": guard.read_only,  # as Workset enforces them
        "destructiveHint": guard.destructive,
        "description": _fit(first_sentence(spec.description), DESCRIPTION_BYTES),
        "input": _fit(input_summary(spec.input_schema), SUMMARY_BYTES),
        "available": True,
    }
    if approval is not None and guard.writes:
        answer["approval"] = approval
    if first and (schema := top_schema(spec.input_schema)) is not None:
        answer["input_schema"] = schema[0]  # enough to run_tool it at once, without a promote
        if schema[1]:
            answer["input_schema_note"] = LEAN_NOTE
    if promotion is not None and promotion.pinned:
        answer["pinned"] = True  # only on pinned hits: a pinned tool is an ordinary promoted one otherwise
    if tool.version.unavailable:
        answer.update(available=False, reason=ToolUnavailable.code, unavailable=_fit(tool.version.unavailable, 200))
    elif spec.connection and not state.may_use(spec.connection):
        answer.update(available=False, reason=ConnectionNotInScope.code)
    return answer


def first_sentence(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """A description's first sentence (or first paragraph, if it has no sentence end), on one line
    and cut at a word to at most `limit` characters (an ellipsis marks the cut)."""
    text = _clean(text[: limit * 8]).strip()
    paragraph = re.split(r"\n\s*\n", text, maxsplit=1)[0]
    end = len(paragraph)
    for match in _SENTENCE_END.finditer(paragraph):
        word = paragraph[: match.end()].rsplit(None, 1)[-1].lower()
        if word not in _ABBREVIATIONS:
            end = match.end()
            break
    return _cut(_SPACE.sub(" ", paragraph[:end]).strip(), limit)


def input_summary(schema: Any) -> str:
    """The input's fields on one line: required ones first (marked `*`), each with its type."""
    root = schema if isinstance(schema, dict) else {}
    budget = [MAX_NODES]
    fields, total = _fields(root, SUMMARY_CHARS // 4)
    if not fields and any(key in root for key in ("$ref", "allOf", "anyOf", "oneOf")):
        return _cut(_type(root, root, 0, 0, budget, frozenset()), SUMMARY_CHARS)  # fields behind a ref or a combination
    parts: list[str] = []
    used = 0
    for index, (name, node, required) in enumerate(fields):
        part = _cut(f"{_name(name)}{'*' if required else ''}: {_type(node, root, 1, 0, budget, frozenset())}",
                    FIELD_CHARS)
        if used + len(part) + 2 > SUMMARY_CHARS or budget[0] <= 0:
            break
        parts.append(part)
        used += len(part) + 2
    if len(parts) < total:
        parts.append(f"…+{total - len(parts)} more")
    return ", ".join(parts) or "(none)"


def top_schema(schema: Any) -> tuple[Any, bool] | None:
    """The first hit's input schema: (schema, False) whole when it is at most TOP_SCHEMA_BYTES,
    (lean copy, True) without its prose when that fits, else None."""
    if _size(schema) <= TOP_SCHEMA_BYTES:
        return schema, False
    lean = _lean(schema, 0)
    return (lean, True) if _size(lean) <= TOP_SCHEMA_BYTES else None


def _fields(node: dict[str, Any], limit: int) -> tuple[list[tuple[str, Any, bool]], int]:
    """At most `limit` of an object's fields, required ones first, and how many it has."""
    properties = node.get("properties")
    if not isinstance(properties, dict):
        return [], 0
    listed = node.get("required")
    names = listed[:REQUIRED_SCAN] if isinstance(listed, list) else []
    required = dict.fromkeys(name for name in names if isinstance(name, str) and name in properties)
    chosen = [(name, properties[name], True) for name in list(required)[:limit]]
    for name, child in properties.items():
        if len(chosen) >= limit:
            break
        if name not in required:
            chosen.append((str(name), child, False))
    return chosen, len(properties)


def _type(node: Any, root: dict[str, Any], depth: int, level: int, budget: list[int], seen: frozenset[str]) -> str:
    """A schema node as a short type: string, int|null, a|b|c, [string], {a*: string, …+2}.
    `depth` counts objects shown inside objects; `level` every step down (refs and anyOf too)."""
    budget[0] -= 1
    if budget[0] <= 0 or level > MAX_LEVEL:
        return "…"
    if not isinstance(node, dict):
        return "any"
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = _resolve(root, ref)
        if target is None:
            return "any"
        if ref in seen or depth > MAX_DEPTH:
            return "{…}"
        return _type(target, root, depth, level + 1, budget, seen | {ref})
    if isinstance(node.get("enum"), list) and node["enum"]:
        values = node["enum"]
        listed = "|".join(_literal(value) for value in values[:ENUM_SHOWN])
        return listed + (f"|…+{len(values) - ENUM_SHOWN}" if len(values) > ENUM_SHOWN else "")
    if "const" in node:
        return _literal(node["const"])
    for key in ("anyOf", "oneOf", "allOf"):
        options = node.get(key)
        if isinstance(options, list) and options:
            shown = [_type(option, root, depth, level + 1, budget, seen) for option in options[:4]]
            kept = list(dict.fromkeys(kind for kind in shown if kind != "null")) or ["null"]
            return ("&" if key == "allOf" else "|").join(kept) + ("|…" if len(options) > 4 else "")
    kind = node.get("type")
    kinds = [kind] if isinstance(kind, str) else [k for k in kind if isinstance(k, str)] if isinstance(kind, list) else []
    if "array" in kinds or "items" in node:
        items = node.get("items")
        return f"[{_type(items, root, depth, level + 1, budget, seen) if isinstance(items, dict) else 'any'}]"
    if "object" in kinds or isinstance(node.get("properties"), dict):
        return _object(node, root, depth, level, budget, seen)
    kept = [_clean(k)[:16] for k in kinds[:4] if k != "null"]
    return "|".join(kept) if kept else ("null" if kinds else "any")


def _object(node: dict[str, Any], root: dict[str, Any], depth: int, level: int, budget: list[int],
            seen: frozenset[str]) -> str:
    fields, total = _fields(node, NESTED_FIELDS)
    if not fields:
        return "object"
    if depth >= MAX_DEPTH:
        return "{…}"
    shown = [f"{_name(name)}{'*' if required else ''}: {_type(child, root, depth + 1, level + 1, budget, seen)}"
             for name, child, required in fields]
    if total > len(fields):
        shown.append(f"…+{total - len(fields)}")
    return "{" + ", ".join(shown) + "}"


def _resolve(root: dict[str, Any], ref: str) -> dict[str, Any] | None:
    """A local `#/...` pointer into the schema, or None (remote, malformed or missing)."""
    if not ref.startswith("#/") or len(ref) > 500:
        return None
    node: Any = root
    for part in ref[2:].split("/")[:8]:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, dict) else None


def _lean(node: Any, depth: int) -> Any:
    """A copy of a schema with only its structural keywords (no descriptions, titles, examples)."""
    if depth > 64:
        return {}
    if isinstance(node, list):
        return [_lean(item, depth + 1) for item in node]
    if not isinstance(node, dict):
        return node
    lean: dict[str, Any] = {}
    for key, value in node.items():
        if key in _NAMED and isinstance(value, dict):
            lean[key] = {name: _lean(child, depth + 1) for name, child in value.items()}
        elif key in _STRUCTURAL:
            lean[key] = _lean(value, depth + 1)
    return lean


def _literal(value: Any) -> str:
    text = value if isinstance(value, str) else jsontext.dumps(value)[:ENUM_VALUE_CHARS * 2]
    return _cut(_clean(text).replace("\n", " "), ENUM_VALUE_CHARS)


def _name(name: Any) -> str:
    return _cut(_clean(str(name)).replace("\n", " "), NAME_CHARS)


def _clean(text: str) -> str:
    """Text without control, format or unassigned characters (line breaks kept)."""
    return "".join(ch for ch in text if ch == "\n" or not unicodedata.category(ch).startswith("C"))


def _cut(text: str, limit: int) -> str:
    """`text` cut at a word to at most `limit` characters, an ellipsis marking the cut."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"


def _fit(text: str, limit: int) -> str:
    """`text` cut at a word until its JSON text is at most `limit` bytes."""
    while (size := _size(text) - 2) > limit:
        text = _cut(text, max(1, min(len(text) - 1, len(text) * limit // size)))
    return text


def _size(value: Any) -> int:
    return len(jsontext.dumps(value).encode())
