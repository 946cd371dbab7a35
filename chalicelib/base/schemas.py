"""Tool schemas: agents and admins write them, so every one is treated as hostile.

Publishing refuses what the validator could not run safely: references that leave the schema,
`$id` and dynamic references, reference cycles that never consume the input, fan-out that applies
too many subschemas to one value, and patterns RE2 cannot compile.

The instance validator is Draft 2020-12 with these changes: its registry never retrieves (no
network, no files), every keyword that runs a regular expression runs it on RE2 (linear time,
unlike `re`), `uniqueItems` hashes a canonical form instead of comparing every pair, and each
check has a work budget, so neither a stored schema that bypassed publishing nor a large input
can stall the process.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from functools import lru_cache
from typing import Any
from urllib.parse import unquote

import re2
import referencing
import referencing.exceptions
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import best_match

Path = tuple[str | int, ...]
Keyword = Callable[[Any, Any, Any, dict[str, Any]], Any]

MAX_NESTING = 120  # keywords applied within keywords while checking one input
MAX_EXPANSION = 10_000  # subschemas applied to one value through $ref, allOf, anyOf, ... together
# Work units per check (one is 1-5 µs): a keyword costs 1 (a $ref 5), an error 1, and 1 per 8
# entries of the keyword's value and instance. 128k integers checked by 3 keywords, the largest
# input 256 KB allows, cost 420k units.
WORK_BUDGET = 1_000_000
REGEX_STEPS_PER_UNIT = 512  # RE2 is linear, but in text length times program size

# Keywords whose values hold subschemas: how they hold them, and whether the subschema is applied
# to the same value (True: a cycle through these never ends), to a part of it (False), or only
# when referenced (None).
_SUBSCHEMAS: dict[str, tuple[str, bool | None]] = {
    "$defs": ("map", None), "definitions": ("map", None),
    "allOf": ("list", True), "anyOf": ("list", True), "oneOf": ("list", True),
    "not": ("one", True), "if": ("one", True), "then": ("one", True), "else": ("one", True),
    "dependentSchemas": ("map", True),
    "properties": ("map", False), "patternProperties": ("map", False), "additionalProperties": ("one", False),
    "unevaluatedProperties": ("one", False), "propertyNames": ("one", False),
    "prefixItems": ("list", False), "items": ("one", False), "contains": ("one", False),
    "unevaluatedItems": ("one", False),
}
_ECMA_ESCAPE = re.compile(r"\\\\|\\u([0-9A-Fa-f]{4})")  # JSON Schema's \uXXXX is RE2's \x{XXXX}
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is reported to the publisher, not to stderr
_RE2_OPTIONS.max_mem = 1 << 20  # per pattern, for its program and its DFA cache (RE2's default is 8 MiB)


class SchemaUnusable(Exception):
    """The schema cannot be applied safely to this input; the message follows "input: "."""


def check_publishable(schema: dict[str, Any]) -> None:
    """Refuse (ValueError naming where) a tool schema the validator could not run safely."""
    if schema.get("type") != "object":
        raise ValueError("must be a JSON Schema whose root has type: object")
    error = best_match(_metaschema_validator().iter_errors(schema))  # recursive; every entrance reads
    if error is not None:  # JSON at most jsontext.MAX_DEPTH (64) deep: safe
        raise ValueError(f"is not a valid JSON Schema: {error.message}")
    _check_cycles(_survey(schema))


@lru_cache(maxsize=1)
def _metaschema_validator() -> Any:
    """Draft 2020-12's metaschema as one static schema: its vocabularies side by side, each
    `$dynamicRef: "#meta"` a `$ref` to the whole. For the standard dialect it accepts exactly
    what `Draft202012Validator.check_schema` accepts (tests/test_schemas.py holds them equal),
    three times faster: the dynamic scope that jsonschema tracks through every subschema was
    most of an OpenAPI import's time."""
    from jsonschema_specifications import REGISTRY

    base = "https://json-schema.org/draft/2020-12/"
    definitions: dict[str, Any] = {}
    vocabularies = []
    for part in Draft202012Validator.META_SCHEMA["allOf"]:
        vocabulary = dict(REGISTRY.contents(base + part["$ref"]))
        definitions.update(_static(vocabulary.pop("$defs", {})))
        vocabularies.append(_static(vocabulary))
    flat = {"type": ["object", "boolean"], "allOf": vocabularies, "$defs": definitions}
    return Draft202012Validator(flat, format_checker=Draft202012Validator.FORMAT_CHECKER)


def _static(node: Any) -> Any:
    """A metaschema part with its dynamic reference made static and its identifiers dropped."""
    if isinstance(node, list):
        return [_static(item) for item in node]
    if not isinstance(node, dict):
        return node
    static = {}
    for key, value in node.items():
        if key == "$dynamicRef" and value == "#meta":
            static["$ref"] = "#"
        elif key not in ("$id", "$schema", "$dynamicAnchor", "$vocabulary", "$comment"):
            static[key] = _static(value)
    return static


def best_error(schema: dict[str, Any], instance: Any) -> ValidationError | None:
    """The most relevant way `instance` fails `schema`, or None; SchemaUnusable when the schema
    cannot be applied safely (it refers outside itself, the work is too much, ...)."""
    token = _meter.set(_Meter())
    try:
        return best_match(_ToolValidator(schema, registry=_REGISTRY).iter_errors(instance))
    except referencing.exceptions.Unresolvable as error:
        ref = _shown(str(getattr(error, "ref", "")))
        raise SchemaUnusable(f"cannot be checked: the tool's schema refers to {ref}, outside itself") from None
    except re2.error as error:
        raise SchemaUnusable(f"cannot be checked: the tool's schema has a pattern RE2 refuses ({_reason(error)})") \
            from None
    except RecursionError:  # the nesting guard should come first; this is the backstop
        raise SchemaUnusable(_TOO_DEEP) from None
    finally:
        _meter.reset(token)


# Publishing -------------------------------------------------------------------------------------

def _survey(schema: dict[str, Any]) -> dict[Path, list[Path]]:
    """Check every subschema the validator could reach, through keywords and through `$ref`;
    answer the in-place edges between them."""
    in_place: dict[Path, list[Path]] = {}
    pending: list[tuple[Path, Any]] = [((), schema)]
    while pending:
        path, node = pending.pop()
        if path in in_place:
            continue
        in_place[path] = []
        if not isinstance(node, dict):
            continue  # true or false
        _check_keywords(node, path)
        if "$ref" in node:
            target = _resolve(schema, node["$ref"], path)
            in_place[path].append(target[0])
            pending.append(target)
        for keyword, (shape, same_value) in _SUBSCHEMAS.items():
            for key, subschema in _held(node.get(keyword), shape):
                child = (*path, keyword, *key)
                if same_value:
                    in_place[path].append(child)
                pending.append((child, subschema))
    return in_place


def _held(value: Any, shape: str) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    if shape == "one" and value is not None:
        yield (), value
    elif shape == "list" and isinstance(value, list):
        yield from (((index,), item) for index, item in enumerate(value))
    elif shape == "map" and isinstance(value, dict):
        yield from (((name,), item) for name, item in value.items())


def _check_keywords(node: dict[str, Any], path: Path) -> None:
    if "$id" in node:
        raise ValueError(f"$id {_at(path)} is not allowed in a tool schema: it changes what references point at")
    for keyword in ("$dynamicRef", "$recursiveRef"):
        if keyword in node:
            raise ValueError(f"{keyword} {_at(path)} is not supported in a tool schema; use a local $ref")
    patterns = [(node["pattern"], (*path, "pattern"))] if isinstance(node.get("pattern"), str) else []
    if isinstance(node.get("patternProperties"), dict):
        patterns += [(pattern, (*path, "patternProperties", pattern)) for pattern in node["patternProperties"]]
    for pattern, where in patterns:
        try:
            _compiled(pattern)
        except re2.error as error:
            raise ValueError(f"pattern {_shown(pattern)} {_at(where)} cannot be used: {_reason(error)} (patterns "
                             "run on RE2, which has no backreferences or lookaround)") from None


def _resolve(schema: dict[str, Any], ref: Any, path: Path) -> tuple[Path, Any]:
    """Where a `$ref` points, read as the validator reads it; only "#" and "#/..." are local."""
    if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
        raise ValueError(f"$ref {_shown(ref)} {_at(path)} is not a local reference: use '#' or a JSON pointer "
                         "'#/...' into this schema")
    node: Any = schema
    target: Path = ()
    for raw in unquote(ref[2:]).split("/") if ref != "#" else ():
        segment = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list) and raw.isascii() and raw.isdigit() and int(raw) < len(node):
            key: str | int = int(raw)
        elif isinstance(node, dict) and segment in node:
            key = segment
        else:
            raise ValueError(f"$ref {_shown(ref)} {_at(path)} does not resolve inside this schema")
        node, target = node[key], (*target, key)
    if not isinstance(node, dict | bool):
        raise ValueError(f"$ref {_shown(ref)} {_at(path)} does not point at a schema")  # noqa: TRY004 - a bad document
    return target, node


def _check_cycles(in_place: dict[Path, list[Path]]) -> None:
    """Refuse a cycle of in-place edges (the validator would recurse forever on any input), and
    in-place fan-out past MAX_EXPANSION (allOf: [$ref a, $ref a] nested doubles at each level)."""
    expansion: dict[Path, int] = {}  # subschemas applied to one value from here, itself included
    for start, edges in in_place.items():
        if start in expansion:
            continue
        stack, open_ = [(start, iter(edges))], {start}
        while stack:
            path, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                open_.discard(path)
                expansion[path] = min(1 + sum(expansion[each] for each in in_place[path]), MAX_EXPANSION + 1)
                if expansion[path] > MAX_EXPANSION:
                    raise ValueError(f"applies more than {MAX_EXPANSION} subschemas to one value {_at(path)}")
            elif child in open_:
                raise ValueError(f"a reference cycle {_at(child)} never consumes the input")
            elif child not in expansion:
                open_.add(child)
                stack.append((child, iter(in_place[child])))


def _at(path: Path) -> str:
    if not path:
        return "at the root"
    pointer = "/" + "/".join(str(part).replace("~", "~0").replace("/", "~1") for part in path)
    return f"at {pointer if len(pointer) <= 200 else pointer[:197] + '...'}"


def _shown(text: Any) -> str:
    return repr(text if not isinstance(text, str) or len(text) <= 120 else text[:117] + "...")


def _reason(error: re2.error) -> str:
    reason = error.args[0] if error.args else "invalid"
    return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)


# Validating -------------------------------------------------------------------------------------

_TOO_DEEP = "is nested too deeply to check against the tool's schema"


class _Meter:
    """One check's allowance: work units left, and how deeply keywords are nested now (a guard
    well before Python's recursion limit, which inside jsonschema's Rust maps is a panic)."""

    def __init__(self) -> None:
        self.left = WORK_BUDGET
        self.depth = 0

    def charge(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            raise SchemaUnusable("is too large or complex to check against the tool's schema")

    def enter(self, units: int) -> None:
        self.charge(units)
        if self.depth >= MAX_NESTING:
            raise SchemaUnusable(_TOO_DEEP)
        self.depth += 1


_meter: ContextVar[_Meter] = ContextVar("schema_meter")  # set by best_error, the only way in


def _width(value: Any) -> int:
    return len(value) if isinstance(value, dict | list) else 0


def _metered(name: str, keyword: Keyword) -> Keyword:
    """Charge a keyword before it runs, and each error it yields (errors cost more than checks)."""
    base = 5 if name in ("$ref", "$dynamicRef") else 1  # a lookup and a new resolver

    def run(validator: Any, value: Any, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
        meter = _meter.get()
        meter.enter(base + (_width(value) + _width(instance)) // 8)
        try:
            for error in keyword(validator, value, instance, schema) or ():
                meter.charge(1)
                yield error
        finally:
            meter.depth -= 1

    return run


@lru_cache(maxsize=128)  # building a validator takes ~12 µs; compiling its patterns is the cost
def _compiled(pattern: str) -> Any:
    return re2.compile(_ECMA_ESCAPE.sub(lambda m: f"\\x{{{m[1]}}}" if m[1] else m[0], pattern), _RE2_OPTIONS)


def _search(pattern: str, text: str) -> bool:
    """`re.search` semantics, as jsonschema has, on RE2."""
    compiled = _compiled(pattern)
    _meter.get().charge(len(text) * compiled.programsize // REGEX_STEPS_PER_UNIT)
    return compiled.search(text) is not None


def _listed(names: list[Any]) -> str:
    return f"{', '.join(repr(name) for name in names)} {'was' if len(names) == 1 else 'were'}"


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any,
                        schema: dict[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if _search(pattern, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, allowed: Any, instance: Any,
                           schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    patterns = list(schema.get("patternProperties", {}))
    extras = [key for key in instance
              if key not in schema.get("properties", {}) and not any(_search(p, key) for p in patterns)]
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras and patterns:
        verb = "does" if len(extras) == 1 else "do"
        yield ValidationError(f"{', '.join(map(repr, sorted(extras)))} {verb} not match any of the regexes: "
                              f"{', '.join(map(repr, sorted(patterns)))}")
    elif not allowed and extras:
        yield ValidationError(f"Additional properties are not allowed ({_listed(sorted(extras, key=str))} unexpected)")


def _unevaluated_properties(validator: Any, unevaluated: Any, instance: Any,
                            schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_keys(validator, instance, schema)
    failing = [key for key in instance if key not in evaluated
               and not _valid(validator, instance[key], unevaluated)]
    if failing and unevaluated is False:
        yield ValidationError(f"Unevaluated properties are not allowed ({_listed(sorted(failing, key=str))} "
                              "unexpected)")
    elif failing:
        yield ValidationError(f"Unevaluated properties are not valid under the given schema ({_listed(failing)} "
                              "unevaluated and invalid)")


def _evaluated_keys(validator: Any, instance: dict[str, Any], schema: Any) -> set[str]:
    """jsonschema's find_evaluated_property_keys_by_schema, with patterns on RE2."""
    if not isinstance(schema, dict):
        return set()
    meter = _meter.get()
    meter.enter(1)
    try:
        return _evaluated_here(validator, instance, schema)
    finally:
        meter.depth -= 1


def _evaluated_here(validator: Any, instance: dict[str, Any], schema: dict[str, Any]) -> set[str]:
    keys: set[str] = set()
    for keyword in ("$ref", "$dynamicRef"):
        if keyword in schema:
            found = validator._resolver.lookup(schema[keyword])
            keys |= _evaluated_keys(validator.evolve(schema=found.contents, _resolver=found.resolver), instance,
                                    found.contents)
    if isinstance(schema.get("properties"), dict):
        keys |= schema["properties"].keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if keyword in schema:
            keys |= {key for key, value in instance.items() if _valid(validator, value, schema[keyword])}
    for pattern in schema.get("patternProperties", {}):
        keys |= {key for key in instance if _search(pattern, key)}
    for name, subschema in schema.get("dependentSchemas", {}).items():
        if name in instance:
            keys |= _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _valid(validator, instance, subschema):
                keys |= _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if _valid(validator, instance, schema["if"]):
            keys |= _evaluated_keys(validator, instance, schema["if"])
            keys |= _evaluated_keys(validator, instance, schema.get("then"))
        else:
            keys |= _evaluated_keys(validator, instance, schema.get("else"))
    return keys


def _valid(validator: Any, instance: Any, subschema: Any) -> bool:
    return next(validator.descend(instance, subschema), None) is None


def _unique_items(validator: Any, unique: Any, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    # jsonschema compares every pair of objects: 124 s for 10,000 small ones. One hash each instead.
    if unique and validator.is_type(instance, "array") and len({_canonical(item) for item in instance}) < len(instance):
        yield ValidationError(f"{instance!r} has non-unique elements")


def _canonical(value: Any) -> Any:
    """A hashable form equal exactly when JSON Schema calls two values equal (1 == 1.0, true != 1)."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, dict):
        return ("object", frozenset((key, _canonical(item)) for key, item in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_canonical(item) for item in value))
    return (type(value).__name__, value)


def _refuse_retrieval(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]  # no network, no files


_REGISTRY: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]
_ToolValidator = validators.extend(Draft202012Validator, {
    name: _metered(name, keyword) for name, keyword in {
        **Draft202012Validator.VALIDATORS,
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "unevaluatedProperties": _unevaluated_properties,
        "uniqueItems": _unique_items,
    }.items()
})
