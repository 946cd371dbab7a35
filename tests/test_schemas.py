"""Tool schemas are hostile: references that fetch, cycles, catastrophic patterns, quadratic
keywords. Each test sends the hostile thing and checks what must be unchanged (nothing stored, no
request to the local server, an answer instead of a crash or a hang)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from chalicelib.base import schemas
from chalicelib.base.errors import InvalidInput
from chalicelib.base.validation import check_instance
from tests.conftest import Admin, Mcp, Vendor, tool_spec, within

HANG_GUARD = 30.0  # seconds; a hang guard, not a speed claim (Python's re would run for hours)
CATASTROPHIC = "^(a+)+$"
EVIL_TEXT = "a" * 40 + "!"


def _object(**keywords: Any) -> dict[str, Any]:
    return {"type": "object", **keywords}


def _with_customer(customer: dict[str, Any], **keywords: Any) -> dict[str, Any]:
    return _object(properties={"customer": customer}, required=["customer"], **keywords)


def _publish(admin: Admin, input_schema: dict[str, Any], **overrides: Any) -> Any:
    return admin.call("POST", "/v1/tools", tool_spec(input_schema=input_schema, **overrides))


def _assert_refused(admin: Admin, response: Any, *words: str) -> None:
    assert response.status_code == 400, response.body
    error = response.json_body["error"]
    assert (error["code"], error["field"]) == ("invalid_input", "input_schema")
    assert error["message"].startswith("input_schema: ")
    for word in words:
        assert word in error["message"], error["message"]
    assert admin.call("GET", "/v1/tools").json_body["items"] == []


def _doubling_refs(levels: int) -> dict[str, Any]:
    """Each level applies the next one twice to the same value: 2**levels subschemas."""
    defs: dict[str, Any] = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
                            for i in range(levels)}
    defs[f"d{levels}"] = {"type": "string"}
    return _object(properties={"a": {"$ref": "#/$defs/d0"}}, **{"$defs": defs})


# References at publish --------------------------------------------------------------------------

def test_a_remote_ref_is_refused_at_publish_and_never_fetched(admin: Admin, vendor: Vendor) -> None:
    # GIVEN an input schema whose property refers to a local HTTP server
    hostile = _with_customer({"$ref": f"{vendor.url}/schema.json"})
    # WHEN it is published
    response = _publish(admin, hostile)
    # THEN it is refused naming where, nothing is stored, and the server heard nothing
    _assert_refused(admin, response, f"$ref '{vendor.url}/schema.json' at /properties/customer",
                    "is not a local reference")
    assert vendor.received == []


@pytest.mark.parametrize(
    ("ref", "problem"),
    [
        ("file:///etc/passwd", "is not a local reference"),
        ("other.json", "is not a local reference"),
        ("#customer", "is not a local reference"),
        ("#/nowhere", "does not resolve inside this schema"),
        ("#/properties/customer/type", "does not point at a schema"),
    ],
)
def test_a_ref_that_is_not_a_local_schema_is_refused(admin: Admin, ref: str, problem: str) -> None:
    # GIVEN a reference to a file, to another document, to an anchor, to nothing, to a string
    hostile = _object(properties={"customer": {"type": "string"}, "other": {"$ref": ref}})
    # WHEN it is published
    response = _publish(admin, hostile)
    # THEN it is refused naming the reference and where it stands
    _assert_refused(admin, response, f"$ref {ref!r} at /properties/other", problem)


@pytest.mark.parametrize(
    ("hostile", "where"),
    [
        (_object(**{"$ref": "#"}), "the root"),
        (_object(properties={"customer": {"$ref": "#/properties/customer"}}), "/properties/customer"),
        (_with_customer({"$ref": "#/$defs/a"}, **{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [
            {"$ref": "#/$defs/a"}]}}}), "/$defs/"),
        (_with_customer({"anyOf": [{"type": "string"}, {"$ref": "#/properties/customer"}]}), "/properties/customer"),
        (_with_customer({"oneOf": [{"not": {"$ref": "#/properties/customer"}}]}), "/properties/customer"),
        (_with_customer({"if": {"type": "string"}, "then": {"$ref": "#/$defs/x"}},
                        **{"$defs": {"x": {"else": {"$ref": "#/properties/customer"}}}}), "/"),
        (_object(dependentSchemas={"customer": {"$ref": "#"}}), "the root"),
    ],
)
def test_a_reference_cycle_that_never_consumes_the_input_is_refused(admin: Admin, hostile: dict[str, Any],
                                                                     where: str) -> None:
    # GIVEN a schema that applies itself to the same value through $ref, allOf, anyOf, oneOf, not,
    # if/then/else or dependentSchemas (the validator would recurse until it crashed)
    # WHEN it is published
    response = _publish(admin, hostile)
    # THEN it is refused naming the cycle
    _assert_refused(admin, response, "a reference cycle at", where, "never consumes the input")


@pytest.mark.parametrize(
    ("keyword", "value"),
    [("$id", "http://127.0.0.1:9/base/"), ("$dynamicRef", "#meta"), ("$recursiveRef", "#")],
)
def test_keywords_that_move_references_are_refused(admin: Admin, keyword: str, value: str) -> None:
    # GIVEN a subschema that would change where references resolve, or resolve them dynamically
    hostile = _with_customer({"type": "string", keyword: value})
    # WHEN it is published
    response = _publish(admin, hostile)
    # THEN it is refused naming the keyword and where
    _assert_refused(admin, response, f"{keyword} at /properties/customer")


def test_a_local_ref_publishes_and_validates_the_input(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    # GIVEN a tool whose property refers to a definition in the same schema
    schema = _with_customer({"$ref": "#/$defs/customer"},
                            **{"$defs": {"customer": {"type": "string", "minLength": 2}}})
    assert _publish(admin, schema, request={"method": "GET", "url": f"{vendor.url}/orders"}).status_code == 201
    call = {"vendor": "unleashed", "name": "list-sales-orders"}
    # WHEN it is called with input the definition refuses, then with input it accepts
    refused = mcp.call("run_tool", {**call, "input": {"customer": "x"}})
    accepted = mcp.call("run_tool", {**call, "input": {"customer": "c1"}})
    # THEN the first is invalid_input naming the field and the second reaches the vendor, once
    assert refused["isError"] is True
    assert refused["structuredContent"]["error"]["code"] == "invalid_input"
    assert refused["structuredContent"]["error"]["field"] == "input.customer"
    assert accepted["isError"] is False
    assert len(vendor.received) == 1


def test_a_recursive_schema_that_consumes_the_input_publishes(admin: Admin) -> None:
    # GIVEN a tree: each node's children are nodes (the recursion walks down the input)
    node = {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}
    schema = _object(properties={"customer": {"type": "string"}, "tree": {"$ref": "#/$defs/node"}},
                     **{"$defs": {"node": node}})
    # WHEN it is published
    response = _publish(admin, schema)
    # THEN it is accepted
    assert response.status_code == 201, response.body


def test_refs_that_multiply_the_work_on_one_value_are_refused(admin: Admin) -> None:
    # GIVEN twenty levels that each apply the next one twice: a million checks of the same value
    hostile = _doubling_refs(20)
    # WHEN it is published
    response = _publish(admin, hostile)
    # THEN it is refused
    _assert_refused(admin, response, "subschemas to one value")


# References in the validator, bypassing publish --------------------------------------------------

@pytest.mark.parametrize(
    "hostile",
    [
        lambda url: _object(properties={"a": {"$ref": f"{url}/schema.json"}}),
        lambda url: _object(properties={"a": {"$id": f"{url}/base/", "$ref": "other.json"}}),
        lambda url: _object(properties={"a": {"$ref": "file:///etc/passwd"}}),
    ],
    ids=["absolute", "relative-to-id", "file"],
)
def test_the_validator_never_retrieves_a_reference(vendor: Vendor, hostile: Callable[[str], dict[str, Any]]) -> None:
    # GIVEN a stored schema that bypassed the publish checks and refers outside itself
    schema = hostile(vendor.url)
    # WHEN an input is checked against it
    with pytest.raises(InvalidInput) as refused:
        check_instance(schema, {"a": "x"})
    # THEN the answer is invalid_input about the input as a whole, and nothing was fetched
    assert refused.value.field == "input"
    assert "outside itself" in refused.value.message
    assert vendor.received == []


@pytest.mark.parametrize(
    "hostile",
    [_object(**{"$ref": "#"}), {"unevaluatedProperties": False, "$ref": "#"},
     _object(properties={"a": {"$ref": "#/$defs/x"}}, **{"$defs": {"x": {"not": {"$ref": "#/$defs/x"}}}})],
)
def test_a_cycle_that_bypassed_publish_is_invalid_input_not_a_crash(hostile: dict[str, Any]) -> None:
    # GIVEN a stored schema that recurses on the same value forever
    # WHEN an input is checked against it
    with pytest.raises(InvalidInput) as refused:
        within(HANG_GUARD, lambda: check_instance(hostile, {"a": 1}))
    # THEN the recursion ends as invalid_input
    assert refused.value.field == "input"
    assert "nested too deeply" in refused.value.message


def test_a_deeply_nested_input_under_a_recursive_schema_is_invalid_input() -> None:
    # GIVEN a recursive schema and an input nested 5,000 levels deep
    schema = _object(properties={"a": {"$ref": "#"}})
    deep: dict[str, Any] = {}
    for _ in range(5000):
        deep = {"a": deep}
    # WHEN it is checked
    with pytest.raises(InvalidInput) as refused:
        check_instance(schema, deep)
    # THEN the answer is invalid_input, not a RecursionError
    assert (refused.value.field, refused.value.message) == (
        "input", "input: is nested too deeply to check against the tool's schema")


def test_work_past_the_budget_is_invalid_input() -> None:
    # GIVEN a stored schema that bypassed publish and applies 2**30 subschemas to one value
    hostile = _doubling_refs(30)
    # WHEN an input is checked against it
    with pytest.raises(InvalidInput) as refused:
        within(HANG_GUARD, lambda: check_instance(hostile, {"a": "x"}))
    # THEN the check stops at its budget
    assert refused.value.message == "input: is too large or complex to check against the tool's schema"


# Patterns ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (_with_customer({"type": "string", "pattern": r"^(a)\1$"}), "at /properties/customer/pattern"),
        (_with_customer({"type": "string", "pattern": r"^(?!admin)"}), "at /properties/customer/pattern"),
        (_object(properties={"customer": {"type": "string"}}, patternProperties={r"(?<=x)y": {}}),
         "at /patternProperties/(?<=x)y"),
    ],
    ids=["backreference", "lookahead", "lookbehind-in-property-names"],
)
def test_a_pattern_re2_cannot_run_is_refused_at_publish(admin: Admin, schema: dict[str, Any], where: str) -> None:
    # GIVEN a pattern that needs backtracking
    # WHEN it is published
    response = _publish(admin, schema)
    # THEN it is refused naming the pattern's place
    _assert_refused(admin, response, where, "RE2")


def test_a_catastrophic_pattern_answers_invalid_input_without_hanging(admin: Admin, mcp: Mcp) -> None:
    # GIVEN a published tool whose pattern backtracks exponentially under Python's re
    assert _publish(admin, _with_customer({"type": "string", "pattern": CATASTROPHIC})).status_code == 201
    # WHEN it is called with the input that triggers the backtracking, in a worker thread
    result = within(HANG_GUARD, lambda: mcp.call("run_tool", {
        "vendor": "unleashed", "name": "list-sales-orders", "input": {"customer": EVIL_TEXT}}))
    # THEN it answers invalid_input naming the field
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "invalid_input"
    assert result["structuredContent"]["error"]["field"] == "input.customer"


@pytest.mark.parametrize(
    ("schema", "valid"),
    [
        (_object(patternProperties={CATASTROPHIC: {"type": "string"}}), True),
        (_object(patternProperties={CATASTROPHIC: True}, additionalProperties=False), False),
        (_object(patternProperties={CATASTROPHIC: True}, unevaluatedProperties=False), False),
        (_object(propertyNames={"pattern": CATASTROPHIC}), False),
    ],
    ids=["patternProperties", "additionalProperties", "unevaluatedProperties", "propertyNames"],
)
def test_patterns_on_property_names_run_on_re2(schema: dict[str, Any], valid: bool) -> None:
    # GIVEN a schema matching property names against a catastrophic pattern
    # WHEN an input whose property name triggers the backtracking is checked, in a worker thread
    answer = within(HANG_GUARD, lambda: schemas.best_error(schema, {EVIL_TEXT: 1}))
    # THEN it answers (the name does not match) instead of hanging
    assert (answer is None) is valid


@pytest.mark.parametrize(
    ("pattern", "value", "valid"),
    [
        ("^[a-z]+$", "abc", True),
        ("^[a-z]+$", "ABC", False),
        ("[0-9]", "ab1c", True),  # search, not a full match, as JSON Schema says
        (r"^[\u0041-\u005a]+$", "ABC", True),  # ECMA-262's \uXXXX escapes keep working
        ("^a$", "a\n", False),  # $ is the end of the text, as in ECMA-262 (Python's re differs)
    ],
)
def test_patterns_keep_json_schema_semantics(pattern: str, value: str, valid: bool) -> None:
    # GIVEN a pattern on a field
    schema = _with_customer({"type": "string", "pattern": pattern})
    # WHEN a value is checked
    answer = schemas.best_error(schema, {"customer": value})
    # THEN it is valid exactly when the pattern is found in it
    assert (answer is None) is valid


def test_a_pattern_too_costly_for_the_text_is_invalid_input() -> None:
    # GIVEN a published-size pattern with a large program (RE2 is linear in the text, times the
    # program: 45 s for this one over 200 KB) and a 200 KB string
    pattern = "(?:" + "|".join(f"a[ab]{{{i}}}c" for i in range(1, 300)) + ")"
    schemas.check_publishable(_with_customer({"type": "string", "pattern": pattern}))
    text = "".join(random.Random(1).choice("ab") for _ in range(200_000))
    # WHEN the string is checked
    with pytest.raises(InvalidInput) as refused:
        within(HANG_GUARD, lambda: check_instance(_with_customer({"type": "string", "pattern": pattern}),
                                                   {"customer": text}))
    # THEN the work budget refuses it before running
    assert "too large or complex" in refused.value.message


# uniqueItems ------------------------------------------------------------------------------------

def test_unique_items_over_ten_thousand_objects_answers_without_hanging() -> None:
    # GIVEN 10,000 distinct small objects (jsonschema compares every pair: 124 s measured)
    schema = _object(properties={"xs": {"type": "array", "uniqueItems": True}})
    items = [{"id": index, "tags": ["a", index]} for index in range(10_000)]
    # WHEN they are checked
    answer = within(HANG_GUARD, lambda: schemas.best_error(schema, {"xs": items}))
    # THEN they are valid
    assert answer is None


@pytest.mark.parametrize(
    "items",
    [
        [1, 1.0],
        [1, True],
        [0, False],
        [{"a": 1, "b": [2]}, {"b": [2.0], "a": 1}],
        [[1, 2], [2, 1]],
        ["1", 1],
        [None, None],
        [{"a": None}, {}],
    ],
)
def test_unique_items_follows_json_schema_equality(items: list[Any]) -> None:
    # GIVEN an array (numbers equal across int and float, booleans never numbers, key order
    # irrelevant, array order relevant)
    schema = _object(properties={"xs": {"type": "array", "uniqueItems": True}})
    # WHEN it is checked
    ours = schemas.best_error(schema, {"xs": items})
    # THEN the verdict is jsonschema's own
    theirs = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors({"xs": items}))
    assert (ours is None) == (theirs is None)


# Ordinary schemas answer as before --------------------------------------------------------------

@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        (_with_customer({"type": "string"}, additionalProperties=False), {"customer": "c", "extra": 1}),
        (_object(properties={"a": {"type": "string"}}, patternProperties={"^x-": {"type": "integer"}},
                 additionalProperties=False), {"a": "1", "x-b": 2, "y": 3}),
        (_object(patternProperties={"^x-": {"type": "integer"}}), {"x-b": "two"}),
        (_object(allOf=[{"properties": {"a": True}}], unevaluatedProperties=False), {"a": 1, "b": 2}),
        (_object(**{"if": {"required": ["a"]}, "then": {"properties": {"b": True}}}, unevaluatedProperties=False),
         {"a": 1, "b": 2, "c": 3}),
        (_object(patternProperties={"^x-": True}, unevaluatedProperties={"type": "string"}), {"x-a": 1, "b": 2}),
        (_with_customer({"type": "string", "pattern": "^c[0-9]+$"}), {"customer": "d1"}),
        (_with_customer({"type": "string"}), {}),
    ],
)
def test_the_validator_answers_as_jsonschema_on_ordinary_schemas(schema: dict[str, Any],
                                                                  instance: dict[str, Any]) -> None:
    # GIVEN an ordinary schema and an input it refuses
    # WHEN both validators check it
    ours = schemas.best_error(schema, instance)
    theirs = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(instance))
    # THEN they report the same problem at the same place
    assert ours is not None and theirs is not None
    assert (ours.message, list(ours.absolute_path)) == (theirs.message, list(theirs.absolute_path))


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"minimum": "x"}}},
    {"type": "object", "required": "a"},
    {"type": "object", "properties": {"a": {"type": "nope"}}},
    {"type": "object", "items": {"$defs": {"x": {"enum": 3}}}},
    {"type": "object", "pattern": "("},
    {"type": "object", "$defs": {"a": {"$ref": 3}}},
    {"type": "object", "dependentRequired": {"a": [1]}},
    {"type": "object", "prefixItems": {}},
    {"type": "object", "unevaluatedProperties": 3},
    {"type": "object", "contentSchema": []},
    {"type": "object", "allOf": [{"not": {"anyOf": [{"if": {"maxLength": -1}}]}}]},
    {"type": "object", "properties": {"a": {"type": ["string", "null"], "enum": ["x", None]}},
     "patternProperties": {"^x": {"format": "date"}}, "$defs": {"n": {"$ref": "#/$defs/n"}}},
])
def test_the_static_metaschema_judges_exactly_as_jsonschemas_own(schema: dict) -> None:
    # GIVEN jsonschema's own check of a schema against Draft 2020-12's metaschema
    from jsonschema import Draft202012Validator, SchemaError
    from jsonschema.exceptions import best_match

    from chalicelib.base.schemas import _metaschema_validator

    try:
        Draft202012Validator.check_schema(schema)
        expected = None
    except SchemaError as error:
        expected = error.message
    # WHEN the static metaschema that publishing uses judges it
    found = best_match(_metaschema_validator().iter_errors(schema))
    # THEN both accept it, or both refuse it for the same reason
    assert (found.message if found else None) == expected
