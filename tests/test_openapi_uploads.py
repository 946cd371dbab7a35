"""Imported documents as their vendors mean them (issue 28, goal 8): overlapping `oneOf`
alternatives accept what the vendor accepts, an operation's callbacks do not keep the call out,
a multipart upload is published with its files as base64 fields (optional body or not), a body
of raw bytes (`*/*` without a JSON structure, image/*, ...) is one base64 field with its media
type, never untyped JSON, and a file body no call can send is skipped saying why. Calls through to a vendor: tests/test_openapi_upload_calls.py. The documents are written for these tests
(tests/openapi_documents/canvas.yaml and small ones below); hostile ones too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chalicelib import openapi
from chalicelib.base.errors import InvalidInput
from chalicelib.base.validation import check_instance
from chalicelib.tools import definitions
from tests.conftest import within

DOCUMENTS = Path(__file__).resolve().parent / "openapi_documents"
SERVER = "https://api.example.test/v1"
HANG_GUARD = 30.0  # seconds; a hang guard, not a speed claim
TOKEN = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
UPLOAD = "in no type Workset sends: a tool sends JSON, application/x-www-form-urlencoded or multipart/form-data"


@pytest.fixture(autouse=True)
def aws() -> None:
    """Replaces conftest's fake AWS: the conversion and the argument check are pure."""


def _canvas() -> dict[str, openapi.Candidate]:
    document = openapi.read_document((DOCUMENTS / "canvas.yaml").read_bytes())
    return _candidates(document)


def _candidates(document: dict[str, Any]) -> dict[str, openapi.Candidate]:
    """The candidates by key; every definition one that Workset publishes as it is."""
    found = openapi.candidates(document, vendor="canvas")
    for candidate in found:
        if candidate.definition is not None:
            definitions.parse_spec(candidate.definition)
    return {candidate.key: candidate for candidate in found}


def _definition(candidates: dict[str, openapi.Candidate], key: str) -> dict[str, Any]:
    candidate = candidates[key]
    assert candidate.reason is None and candidate.definition is not None, candidate.reason
    return candidate.definition


def _document(paths: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"openapi": "3.0.3", "info": {"title": "Acme", "version": "1"}, "servers": [{"url": SERVER}],
            "paths": paths, **top}


def _operation(**fields: Any) -> dict[str, Any]:
    return {"responses": {"200": {"description": "OK."}}, **fields}


def _keywords(node: Any) -> set[str]:
    """Every key in a JSON value, at any depth."""
    found: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found |= item.keys()
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


# Overlapping oneOf ------------------------------------------------------------------------------

@pytest.mark.parametrize("arguments", [
    {"kind": "circle", "fill": {"r": 10, "g": 20, "b": 30}},  # RGB, and so also RGBA: both alternatives
    {"kind": "circle", "fill": {"r": 10, "g": 20, "b": 30, "a": 0.5}},
    {"kind": "square", "fill": {"r": 0, "g": 0, "b": 0}, "stroke": {"r": 255, "g": 255, "b": 255}},
    {"kind": "square", "fill": {"r": 0, "g": 0, "b": 0}, "stroke": "none"},
])
def test_a_value_matching_overlapping_one_of_alternatives_is_accepted(arguments: dict[str, Any]) -> None:
    # GIVEN drawShape, whose colours are oneOf an RGB and an RGBA object (every RGB value is both)
    schema = _definition(_canvas(), "POST /shapes")["input_schema"]

    # WHEN a colour the vendor accepts is checked THEN it is accepted
    check_instance(schema, arguments)


@pytest.mark.parametrize(("arguments", "field"), [
    ({"kind": "circle", "fill": "red"}, "input.fill"),
    ({"kind": "circle", "fill": {"r": 300, "g": 0, "b": 0}}, "input.fill"),
    ({"kind": "circle", "fill": {"r": 1, "g": 2, "b": 3}, "stroke": "dotted"}, "input.stroke"),
])
def test_a_value_matching_no_one_of_alternative_is_refused_naming_its_field(arguments: dict[str, Any],
                                                                             field: str) -> None:
    # GIVEN drawShape
    schema = _definition(_canvas(), "POST /shapes")["input_schema"]

    # WHEN a colour that is neither RGB nor RGBA is checked THEN it is refused, naming the field
    with pytest.raises(InvalidInput) as refused:
        check_instance(schema, arguments)
    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}: ")


def test_the_published_schema_says_any_of_where_the_document_says_one_of() -> None:
    # GIVEN drawShape WHEN it is converted THEN its schema says what Workset checks: anyOf, no oneOf
    schema = _definition(_canvas(), "POST /shapes")["input_schema"]
    assert "oneOf" not in _keywords(schema)
    assert len(schema["properties"]["fill"]["anyOf"]) == 2


def test_one_of_beside_any_of_keeps_both_conditions() -> None:
    # GIVEN a body field that must be (a string or an integer) and (an integer or a boolean)
    document = _document({"/s": {"post": _operation(requestBody={"required": True, "content": {"application/json": {
        "schema": {"type": "object", "required": ["v"], "properties": {"v": {
            "anyOf": [{"type": "string"}, {"type": "integer"}],
            "oneOf": [{"type": "integer"}, {"type": "boolean"}]}}}}}})}})
    schema = _definition(_candidates(document), "POST /s")["input_schema"]

    # WHEN values are checked THEN only one meeting both conditions is accepted
    check_instance(schema, {"v": 5})
    for refused in ("x", True):
        with pytest.raises(InvalidInput, match=r"^input\.v: "):
            check_instance(schema, {"v": refused})


def test_deep_overlapping_one_of_is_checked_within_bounds() -> None:
    # GIVEN seven levels of oneOf, each of three identical alternatives referring to the next:
    # read literally, a matching value matches 3^7 ways and is refused; a failing one tries them all
    levels = 7
    schemas: dict[str, Any] = {f"L{level}": {"oneOf": [{"$ref": f"#/components/schemas/L{level + 1}"}] * 3}
                               for level in range(levels)}
    schemas[f"L{levels}"] = {"type": "integer", "minimum": 0}
    document = _document({"/s": {"post": _operation(requestBody={"required": True, "content": {"application/json": {
        "schema": {"type": "object", "required": ["v"], "properties": {"v": {"$ref": "#/components/schemas/L0"}}}}}})}},
        components={"schemas": schemas})

    # WHEN it is imported
    schema = within(HANG_GUARD, lambda: _definition(_candidates(document), "POST /s"))["input_schema"]

    # THEN a value the innermost schema takes is accepted, and one it does not is refused
    within(HANG_GUARD, lambda: check_instance(schema, {"v": 7}))
    with pytest.raises(InvalidInput, match=r"^input\.v"):
        within(HANG_GUARD, lambda: check_instance(schema, {"v": -1}))


# Callbacks --------------------------------------------------------------------------------------

def test_an_operation_with_callbacks_is_imported_and_its_callbacks_ignored() -> None:
    # GIVEN startRender, whose callback describes what the vendor later posts to callback_url
    definition = _definition(_canvas(), "POST /renders")

    # THEN the call is published as the JSON call it is; nothing of the callback reaches the tool
    assert definition["request"] == {"method": "POST", "url": "https://canvas.example.test/v1/renders"}
    assert set(definition["input_schema"]["properties"]) == {"callback_url", "scale"}
    assert definition["input_schema"]["required"] == ["callback_url"]
    text = json.dumps(definition)
    assert "renderDone" not in text and "RenderResult" not in text and "Received" not in text


def test_huge_and_broken_callbacks_do_not_stop_the_import() -> None:
    # GIVEN an operation with thousands of callbacks, deeply nested ones and ones whose $refs do
    # not resolve (the callbacks are never read, so none of this is the call's problem)
    nested: dict[str, Any] = {"post": _operation()}
    for _ in range(40):
        nested = {"post": _operation(callbacks={"again": {"{$request.body#/url}": nested}})}
    callbacks = {f"cb{index}": {"{$request.body#/url}": {"post": _operation(requestBody={
        "$ref": f"#/components/requestBodies/missing{index}"})}} for index in range(5_000)}
    callbacks["deep"] = {"{$request.body#/url}": nested}
    document = _document({"/s": {"post": _operation(
        requestBody={"required": True, "content": {"application/json": {"schema": {
            "type": "object", "properties": {"url": {"type": "string"}}}}}},
        callbacks=callbacks)}})

    # WHEN it is imported THEN the operation is published with its own input only
    definition = within(HANG_GUARD, lambda: _definition(_candidates(document), "POST /s"))
    assert set(definition["input_schema"]["properties"]) == {"url"}
    assert "callbacks" not in json.dumps(definition)


# Bodies that are files --------------------------------------------------------------------------

def test_an_optional_multipart_upload_is_published_with_its_file_as_base64() -> None:
    # GIVEN uploadTexture, whose multipart body (a file and a caption) is not marked required
    definition = _definition(_canvas(), "PUT /layers/{layer}/texture")

    # THEN it is published as a multipart call whose file is a base64 field beside the caption
    assert definition["request"] == {"method": "PUT", "url": "https://canvas.example.test/v1/layers/{layer}/texture",
                                     "body_format": "multipart"}
    properties = definition["input_schema"]["properties"]
    assert set(properties) == {"layer", "file", "caption"}
    assert properties["file"]["contentEncoding"] == "base64" and properties["file"]["type"] == "string"
    assert "base64" in properties["file"]["description"]
    assert properties["caption"] == {"type": "string"}
    assert definition["input_schema"]["required"] == ["layer"]


def test_a_multipart_file_keeps_its_description_and_says_base64() -> None:
    # GIVEN a required multipart body whose file is a $ref with a description
    document = _document({"/s": {"post": _operation(requestBody={"required": True, "content": {
        "multipart/form-data": {"schema": {"type": "object", "required": ["doc"], "properties": {
            "doc": {"$ref": "#/components/schemas/Doc"}}}}}})}},
        components={"schemas": {"Doc": {"type": "string", "format": "binary", "description": "A PDF."}}})

    # WHEN it is converted THEN the file field says both
    definition = _definition(_candidates(document), "POST /s")
    assert definition["input_schema"]["properties"]["doc"] == {
        "type": "string", "contentEncoding": "base64", "description": "A PDF. (The file's content, base64-encoded.)"}
    assert definition["input_schema"]["required"] == ["doc"]


def test_a_multipart_field_the_vendor_reads_as_base64_is_sent_as_given() -> None:
    # GIVEN a multipart body with a file (3.1: contentMediaType) and base64 text (format byte, contentEncoding)
    document = _document({"/s": {"post": _operation(requestBody={"required": True, "content": {
        "multipart/form-data": {"schema": {"type": "object", "properties": {
            "photo": {"type": "string", "contentMediaType": "image/png"},
            "signature": {"type": "string", "format": "byte"},
            "token": {"$ref": "#/components/schemas/Token"}}}}}})}},
        components={"schemas": {"Token": {"type": "string", "contentEncoding": "base64"}}})

    # WHEN it is converted THEN only the file is decoded by the call; the text is the vendor's to decode
    properties = _definition(_candidates(document), "POST /s")["input_schema"]["properties"]
    assert properties["photo"]["contentEncoding"] == "base64"
    assert properties["signature"] == {"type": "string", "format": "byte"}
    assert properties["token"] == {"type": "string"}  # vendor.py decodes a contentEncoding field: not this one


@pytest.mark.parametrize(("body", "words"), [
    ({"type": "object", "properties": {"files": {"type": "array", "items": {"type": "string", "format": "binary"}}}},
     "sends several files in 'files'"),
    ({"type": "object", "properties": {"limit": {"type": "string", "format": "binary"}}},
     "not an object of fields beside the parameters"),  # clashes with the query parameter
    ({"type": "string", "format": "binary"}, "its multipart body is not an object of fields"),
])
def test_a_multipart_body_a_call_cannot_send_is_skipped_saying_why(body: dict[str, Any], words: str) -> None:
    # GIVEN multipart bodies that are not one object of single fields
    document = _document({"/s": {"post": _operation(
        parameters=[{"name": "limit", "in": "query", "schema": {"type": "integer"}}],
        requestBody={"content": {"multipart/form-data": {"schema": body}}})}})

    # WHEN it is converted THEN it is skipped, saying why
    candidate = _candidates(document)["POST /s"]
    assert candidate.definition is None
    assert candidate.reason is not None and words in candidate.reason


@pytest.mark.parametrize("method", ["get", "delete", "head"])
def test_a_multipart_body_on_a_method_without_a_body_of_fields_is_skipped_saying_so(method: str) -> None:
    # GIVEN a GET, DELETE or HEAD whose multipart body is a plain object of fields (no clash with a parameter)
    document = _document({"/s": {method: _operation(requestBody={"required": True, "content": {
        "multipart/form-data": {"schema": {"type": "object", "properties": {
            "caption": {"type": "string"}, "file": {"type": "string", "format": "binary"}}}}}})}})

    # WHEN it is converted
    candidate = _candidates(document)[f"{method.upper()} /s"]

    # THEN it is skipped for its method, not for a body that is not an object of fields (it is one)
    assert candidate.definition is None
    assert candidate.reason == (f"is a {method.upper()} operation with a multipart/form-data body; Workset sends a "
                                "multipart body only with POST, PUT or PATCH")


def test_a_star_body_of_bytes_is_published_as_raw_bytes_with_a_media_type_field() -> None:
    # GIVEN replaceImage, whose required `*/*` body is `format: binary`
    definition = _definition(_canvas(), "PUT /layers/{layer}/image")

    # THEN it is not an untyped JSON body: the bytes are one base64 field, their type another,
    # sent as the Content-Type header
    assert definition["request"] == {
        "method": "PUT", "url": "https://canvas.example.test/v1/layers/{layer}/image", "body": "body",
        "body_format": "binary", "params": [{"field": "content_type", "name": "Content-Type", "in": "header"}]}
    properties = definition["input_schema"]["properties"]
    assert properties["body"]["contentEncoding"] == "base64"
    assert definition["input_schema"]["required"] == ["layer", "content_type", "body"]
    # AND the type field takes a media type, and nothing that would add a header
    check_instance(definition["input_schema"], {"layer": "a", "body": "AA==", "content_type": "image/png"})
    for bad in ("image", "image/png\r\nX-Injected: 1", "*/*", "a/b c"):
        with pytest.raises(InvalidInput, match=r"^input\.content_type: "):
            check_instance(definition["input_schema"], {"layer": "a", "body": "AA==", "content_type": bad})


def test_a_star_body_with_a_json_structure_is_sent_as_json() -> None:
    # GIVEN updateSettings, whose `*/*` body is an object of fields
    definition = _definition(_canvas(), "PATCH /layers/{layer}/settings")

    # THEN it is published as a JSON body: the fields flattened into the input beside the path's
    assert set(definition["input_schema"]["properties"]) == {"layer", "opacity", "visible"}
    assert "body_format" not in definition["request"]


@pytest.mark.parametrize(("content", "required", "header", "type_schema"), [
    ({"*/*": {}}, True, None, {"pattern": f"^(?:{TOKEN}/{TOKEN})$"}),  # no schema: a file of any type
    ({"*/*": {"schema": {"type": "string"}}}, True, None, {"pattern": f"^(?:{TOKEN}/{TOKEN})$"}),
    ({"*/*": {"schema": {"$ref": "#/components/schemas/File"}}}, False, None, {"pattern": f"^(?:{TOKEN}/{TOKEN})$"}),
    ({"image/png": {"schema": {"type": "string", "format": "binary"}}}, False, "image/png", None),
    ({"application/octet-stream": {}}, True, "application/octet-stream", None),
    ({"image/*": {}, "text/plain": {}}, True, None, {"pattern": f"^(?:image/{TOKEN})$"}),
    ({"image/png": {}, "image/svg+xml": {}}, True, None, {"enum": ["image/png", "image/svg+xml"]}),
    ({"text/csv": {"schema": {"type": "string", "format": "binary"}}}, False, "text/csv", None),
    ({"application/vnd.acme.archive": {"schema": {"type": "string", "contentEncoding": "base64"}}}, False,
     "application/vnd.acme.archive", None),
    ({"multipart/related": {}, "application/pdf": {}}, True, "application/pdf", None),
])
def test_a_raw_byte_body_is_published_whether_or_not_required(content: dict[str, Any], required: bool,
                                                               header: str | None, type_schema: Any) -> None:
    # GIVEN a body that is bytes of some type, required or not
    document = _document({"/s": {"post": _operation(requestBody={"required": required, "content": content})}},
                         components={"schemas": {"File": {"type": "string", "format": "binary"}}})

    # WHEN it is converted
    definition = _definition(_candidates(document), "POST /s")

    # THEN its bytes are one base64 field, and their type a fixed header or a field the caller fills
    assert definition["request"]["body_format"] == "binary" and definition["request"]["body"] == "body"
    assert definition["input_schema"]["properties"]["body"]["contentEncoding"] == "base64"
    assert definition["request"].get("headers") == ({"Content-Type": header} if header else None)
    if type_schema is not None:
        assert definition["request"]["params"] == [{"field": "content_type", "name": "Content-Type", "in": "header"}]
        shown = definition["input_schema"]["properties"]["content_type"]
        assert {key: shown[key] for key in type_schema} == type_schema
    assert ("body" in definition["input_schema"]["required"]) is required


@pytest.mark.parametrize("content", [
    {"multipart/mixed": {"schema": {"type": "object"}}},
    {"image/png\r\nX-Injected: 1": {}},  # a hostile media type never becomes a header
    {"multipart/related": {}, "text/plain": {}},
])
def test_a_file_body_no_call_can_send_is_skipped_saying_why(content: dict[str, Any]) -> None:
    # GIVEN a file body in no type a call sends, required or not
    for required in (True, False):
        document = _document({"/s": {"post": _operation(requestBody={"required": required, "content": content})}})

        # WHEN it is converted THEN it is skipped, naming what the body offers
        candidate = _candidates(document)["POST /s"]
        assert candidate.definition is None
        assert candidate.reason == f"its body is a file upload ({', '.join(content)}) {UPLOAD}"


def test_json_offered_beside_a_file_type_is_used() -> None:
    # GIVEN a body offered both as JSON and as multipart
    document = _document({"/s": {"post": _operation(requestBody={"required": True, "content": {
        "multipart/form-data": {"schema": {"type": "object", "properties": {"file": {"type": "string",
                                                                                       "format": "binary"}}}},
        "application/json": {"schema": {"type": "object", "properties": {"url": {"type": "string"}}}}}})}})

    # WHEN it is converted THEN the tool sends the JSON one
    definition = _definition(_candidates(document), "POST /s")
    assert set(definition["input_schema"]["properties"]) == {"url"}
