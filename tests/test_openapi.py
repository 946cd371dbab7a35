"""OpenAPI documents into tool definitions (chalicelib/openapi/). A document is hostile input:
each test that sends a bad or hostile one checks that the answer is InvalidInput saying what and
where (or a skipped operation with its reason), never a crash, a hang or a definition Workset
would refuse to publish."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chalicelib import openapi
from chalicelib.base.errors import InvalidInput
from chalicelib.openapi import Candidate
from chalicelib.tools import definitions
from tests.conftest import within

DOCUMENTS = Path(__file__).resolve().parent / "openapi_documents"
SERVER = "https://api.example.test/v1"
HANG_GUARD = 30.0  # seconds; a hang guard, not a speed claim (an expanded alias bomb runs for hours)


@pytest.fixture(autouse=True)
def aws() -> None:
    """Replaces conftest's fake AWS for this module: the conversion is pure (no store, no network),
    and creating the tables for each of these tests would be most of their time."""


def _petstore() -> dict[str, Any]:
    return openapi.read_document((DOCUMENTS / "petstore.yaml").read_bytes())


def _tasks() -> dict[str, Any]:
    return openapi.read_document((DOCUMENTS / "tasks.json").read_text())


def _document(paths: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """A small OpenAPI 3.0 document with an absolute server."""
    return {"openapi": "3.0.3", "info": {"title": "Acme", "version": "1"}, "servers": [{"url": SERVER}],
            "paths": paths or {}, **top}


def _operation(**fields: Any) -> dict[str, Any]:
    return {"responses": {"200": {"description": "OK."}}, **fields}


def _json_body(schema: Any, *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _form_body(schema: Any, *, required: bool = True, **media: Any) -> dict[str, Any]:
    return {"required": required, "content": {"application/x-www-form-urlencoded": {"schema": schema, **media}}}


def _candidates(document: dict[str, Any], **options: Any) -> dict[str, Candidate]:
    """The candidates by key; every definition must be one Workset publishes as it is."""
    found = openapi.candidates(document, vendor=options.pop("vendor", "acme"), **options)
    for candidate in found:
        if candidate.definition is not None:
            _assert_publishable(candidate.definition)
    return {candidate.key: candidate for candidate in found}


def _assert_publishable(definition: dict[str, Any]) -> None:
    definitions.parse_spec(definition)  # InvalidInput naming the field if Workset would refuse it


def _definition(document: dict[str, Any], key: str, **options: Any) -> dict[str, Any]:
    candidate = _candidates(document, **options)[key]
    assert candidate.reason is None and candidate.definition is not None, candidate.reason
    return candidate.definition


def _reason(document: dict[str, Any], key: str, **options: Any) -> str | None:
    candidate = _candidates(document, **options)[key]
    assert (candidate.definition is None) == (candidate.reason is not None)
    return candidate.reason


def _refused(work: Callable[[], Any], *words: str) -> str:
    with pytest.raises(InvalidInput) as caught:
        work()
    for word in words:
        assert word in caught.value.message, caught.value.message
    return caught.value.message


# Reading ----------------------------------------------------------------------------------------

def test_json_and_yaml_read_to_the_same_document() -> None:
    # GIVEN the Petstore as YAML and the same document as JSON text
    from_yaml = _petstore()
    as_json = json.dumps(from_yaml)

    # WHEN the JSON text is read
    from_json = openapi.read_document(as_json.encode())

    # THEN both give the same plain document
    assert from_json == from_yaml


def test_yaml_keeps_yes_and_no_as_text() -> None:
    # GIVEN YAML 1.1 words that PyYAML would read as booleans
    text = "openapi: 3.0.3\npaths: {}\nx-answers: [yes, no, on, off, true]\n"

    # WHEN it is read
    document = openapi.read_document(text)

    # THEN only true is a boolean (YAML 1.2): an enum of yes and no stays two strings
    assert document["x-answers"] == ["yes", "no", "on", "off", True]


def test_non_string_keys_and_dates_become_strings() -> None:
    # GIVEN YAML whose keys are numbers, booleans and null, and whose values include dates
    text = ("openapi: 3.0.3\npaths: {}\nx-keys:\n  200: ok\n  true: yes\n  1.5: half\n  null: none\n"
            "  2024-01-02: day\nx-when: 2024-01-02T03:04:05Z\n")

    # WHEN it is read
    document = openapi.read_document(text)

    # THEN every key is a string and the dates are ISO text
    assert document["x-keys"] == {"200": "ok", "true": "yes", "1.5": "half", "null": "none", "2024-01-02": "day"}
    assert document["x-when"] == "2024-01-02T03:04:05+00:00"


def test_a_yaml_syntax_error_names_its_line_and_column() -> None:
    # GIVEN YAML with a bad indentation on line 3
    text = "openapi: 3.0.3\npaths:\n  /pets:\n get: {}\n"

    # WHEN it is read THEN the refusal says where
    _refused(lambda: openapi.read_document(text), "not valid YAML", "line 4 column 2")


def test_a_json_syntax_error_names_its_line_and_column() -> None:
    # GIVEN JSON with a trailing comma on line 2
    text = '{"openapi": "3.0.3",\n "paths": {},}'

    # WHEN it is read THEN the refusal says where
    _refused(lambda: openapi.read_document(text), "not valid JSON", "line 2 column 14")


@pytest.mark.parametrize(("text", "words"), [
    ('{"openapi": "3.0.3", "x": NaN}', ["NaN", "not a JSON number"]),
    ('{"openapi": "3.0.3", "x": -Infinity}', ["-Infinity"]),
    ('{"openapi": "3.0.3", "x": [1e999]}', ["not finite", "/x/0"]),
    ('{"openapi": "3.0.3", "x": "\\ud800"}', ["surrogate", "/x"]),
    ("openapi: 3.0.3\nx: .nan\n", ["not finite", "/x"]),
    ("openapi: 3.0.3\nx: !!binary aGVsbG8=\n", ["bytes", "/x"]),
    ("openapi: 3.0.3\nx: !!set {a: null}\n", ["set", "/x"]),
    ("openapi: 3.0.3\nx: !!python/object:os.system {}\n", ["not valid YAML", "line 2"]),
    ("openapi: 3.0.3\nx: &a [1, *a]\n", ["contains itself", "/x"]),
    ("openapi: 3.0.3\nx: {1: a, '1': b}\n", ["twice", "/x"]),
    ("openapi: 3.0.3\n" + "x:\n" + "".join(f"{' ' * (i + 1)}k{i}:\n" for i in range(250)) + " " * 251 + "v\n",
     ["nested deeper than 200", "/x/k0/k1"]),
    ("- openapi: 3.0.3\n", ["mapping", "top level", "a list"]),
    ("just text", ["mapping", "top level", "a single value"]),
    ("", ["mapping", "top level", "empty"]),
    ('swagger: "2.0"\npaths: {}\n', ["Swagger 2.0 is not supported: convert the document to OpenAPI 3 first"]),
    ("info: {title: t}\npaths: {}\n", ["not an OpenAPI 3.0 or 3.1 document", "no `openapi` field"]),
    ("openapi: 3.2.0\n", ["not an OpenAPI 3.0 or 3.1 document", "'3.2.0'"]),
    ("openapi: 3.0\n", ["openapi: '3.0'"]),  # a YAML number, not the version string
])
def test_a_bad_document_is_refused_saying_what_and_where(text: str, words: list[str]) -> None:
    # GIVEN text that is no usable OpenAPI 3 document WHEN it is read THEN InvalidInput says why
    _refused(lambda: openapi.read_document(text), *words)


def test_text_that_is_not_utf8_is_refused() -> None:
    # GIVEN bytes in Latin-1
    raw = "openapi: 3.0.3\ninfo: {title: café}\n".encode("latin-1")

    # WHEN they are read THEN the refusal says where the first bad byte is
    _refused(lambda: openapi.read_document(raw), "not UTF-8", "byte 32")


def test_a_yaml_alias_bomb_is_refused_without_expanding_it() -> None:
    # GIVEN a billion laughs: nine levels of ten aliases each (10**9 strings when expanded)
    levels = ["l0: &l0 [" + ", ".join(["lol"] * 10) + "]"]
    levels += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 10)]
    text = "openapi: 3.0.3\npaths: {}\nx-bomb:\n" + "".join(f"  {line}\n" for line in levels)

    # WHEN it is read THEN it is refused, after measuring each anchor once
    message = within(HANG_GUARD, lambda: _refused(lambda: openapi.read_document(text), "more than 1 MB"))
    assert "aliases" in message


def test_shared_aliases_within_the_budget_are_read() -> None:
    # GIVEN a schema used through an alias in two places
    text = "openapi: 3.0.3\npaths: {}\nx-a: &a {type: string}\nx-b: [*a, *a]\n"

    # WHEN it is read THEN each use reads as the value
    assert openapi.read_document(text)["x-b"] == [{"type": "string"}, {"type": "string"}]


@pytest.mark.parametrize("as_text", [False, True])
def test_a_document_over_25_mb_is_refused_before_parsing(as_text: bool) -> None:
    # GIVEN a document one byte over the limit
    raw = b"{" + b" " * openapi.MAX_DOCUMENT_BYTES

    # WHEN it is read (as bytes or text) THEN it is refused by its size
    _refused(lambda: openapi.read_document(raw.decode() if as_text else raw), "the document is 25.1 MB; at most 25 MB")


# Names ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("operation_id", "name"), [
    ("getPetById", "get-pet-by-id"),
    ("HTTPServerList", "http-server-list"),
    ("repos/list-for-org", "repos-list-for-org"),
    ("  Pets.Find__All  ", "pets-find-all"),
    ("Café_Liste", "cafe-liste"),
    # longer than 31 characters: every word kept while `acme__name` fits in 64
    ("actions/list-self-hosted-runner-groups-for-org", "actions-list-self-hosted-runner-groups-for-org"),
    # over the 58 characters beside "acme": filler and the vendor's own words go first, then a middle word
    ("listTheSelfHostedRunnerGroupsOfTheAcmeOrganizationForTheEnterpriseAccount",
     "list-self-hosted-runner-organization-enterprise-account"),
    ("日本", "get-x"),  # nothing left to slug: the method and the path
])
def test_a_name_is_the_operation_id_slugged(operation_id: str, name: str) -> None:
    # GIVEN an operation with this operationId
    document = _document({"/x": {"get": _operation(operationId=operation_id)}})

    # WHEN it is converted THEN its tool name is the operationId's words, fitted to the budget
    found = _candidates(document)["GET /x"]
    assert found.name == name and found.operation_id == operation_id
    assert len(f"acme__{name}") <= 64


def test_without_an_operation_id_the_name_comes_from_method_and_path() -> None:
    # GIVEN the Petstore's inventory, which has no operationId
    # WHEN it is converted THEN the name is the slug of "get /store/inventory"
    assert _candidates(_petstore())["GET /store/inventory"].name == "get-store-inventory"


def test_names_are_unique_and_the_same_for_the_same_document() -> None:
    # GIVEN three operations whose operationIds slug alike
    document = _document({"/a": {"get": _operation(operationId="listPets"), "put": _operation(operationId="list_pets")},
                          "/b": {"get": _operation(operationId="list-pets")}})

    # WHEN it is converted twice
    first = [candidate.name for candidate in _candidates(document).values()]
    second = [candidate.name for candidate in _candidates(document).values()]

    # THEN the first keeps the slug, the later ones get a word that tells them apart (the method, the
    # path: GET /b shares the first one's method), the same each time
    assert first == ["list-pets", "list-pets-put", "list-pets-b"]
    assert first == second


def test_kept_names_are_reused_and_never_given_to_another_operation() -> None:
    # GIVEN an earlier import named GET /a "old-name", and a removed operation "list-pets"
    document = _document({"/a": {"get": _operation(operationId="fetchA")},
                          "/b": {"get": _operation(operationId="listPets")}})
    keep = {"GET /a": "old-name", "GET /gone": "list-pets"}

    # WHEN it is imported again
    found = _candidates(document, keep_names=keep)

    # THEN GET /a keeps its name, and GET /b does not take the gone operation's
    assert found["GET /a"].name == "old-name"
    assert found["GET /b"].name == "list-pets-b"


def test_operations_come_in_document_order() -> None:
    # GIVEN the Petstore WHEN it is converted THEN paths keep their order, methods get-put-post-delete
    assert list(_candidates(_petstore())) == [
        "GET /pets", "POST /pets", "GET /pets/{petId}", "PUT /pets/{petId}", "DELETE /pets/{petId}",
        "POST /pets/{petId}/photo", "GET /store/inventory", "GET /store/orders"]


# Requests ---------------------------------------------------------------------------------------

def test_path_parameters_are_required_placeholders() -> None:
    # GIVEN getPetById, whose path parameter is declared on the path item
    definition = _definition(_petstore(), "GET /pets/{petId}")

    # THEN the URL names the field, which is required; a GET without a body takes no other field
    assert definition["request"] == {"method": "GET", "url": "https://eu.petstore.example/v1/pets/{petId}"}
    assert definition["input_schema"] == {"type": "object", "properties": {"petId": {"type": "string"}},
                                          "required": ["petId"], "additionalProperties": False}


def test_a_path_parameter_with_an_unfit_name_gets_a_slugged_field() -> None:
    # GIVEN a path parameter whose name cannot be a placeholder
    document = _document({"/files/{file.name}": {"get": _operation(parameters=[
        {"name": "file.name", "in": "path", "required": True, "schema": {"type": "string"}}])}})

    # WHEN it is converted THEN the field is slugged and the URL's placeholder uses it
    definition = _definition(document, "GET /files/{file.name}")
    assert definition["request"]["url"] == f"{SERVER}/files/{{file_name}}"
    assert definition["input_schema"]["required"] == ["file_name"]


def test_an_undeclared_placeholder_becomes_a_required_string() -> None:
    # GIVEN a path whose {id} no parameter declares
    document = _document({"/orders/{id}": {"delete": _operation()}})

    # WHEN it is converted THEN the tool still fills it, from a required string field
    definition = _definition(document, "DELETE /orders/{id}")
    assert definition["input_schema"]["properties"] == {"id": {"type": "string"}}
    assert definition["input_schema"]["required"] == ["id"]


def test_query_and_header_parameters_become_params() -> None:
    # GIVEN listPets: a header parameter (by $ref, on the path item) and three query parameters
    definition = _definition(_petstore(), "GET /pets")

    # THEN each is sent under its name; arrays exploded unless the document says not
    assert definition["request"]["params"] == [
        {"field": "X-Request-Id", "name": "X-Request-Id", "in": "header"},
        {"field": "limit", "name": "limit", "in": "query", "explode": True},
        {"field": "tags", "name": "tags", "in": "query", "explode": False},
        {"field": "owner", "name": "owner", "in": "query", "explode": True},
    ]
    assert definition["input_schema"]["properties"]["X-Request-Id"] == {
        "type": "string", "format": "uuid", "description": "Correlates the call in the store's logs."}


def test_the_operation_parameter_wins_over_the_path_items() -> None:
    # GIVEN a path item and an operation that both declare the query parameter "q"
    document = _document({"/s": {"parameters": [{"name": "q", "in": "query", "schema": {"type": "integer"}}],
                                 "get": _operation(parameters=[{"name": "q", "in": "query", "required": True,
                                                                "schema": {"type": "string"}}])}})

    # WHEN it is converted THEN the operation's declaration is the one used
    definition = _definition(document, "GET /s")
    assert definition["input_schema"]["properties"] == {"q": {"type": "string"}}
    assert definition["input_schema"]["required"] == ["q"]


def test_same_named_parameters_in_two_places_get_distinct_fields() -> None:
    # GIVEN addNote: "id" in the path and "id" in the query
    definition = _definition(_tasks(), "POST /tasks/{id}/notes", base_url="https://tasks.example/")

    # THEN the later one's field carries its place
    assert definition["request"]["url"] == "https://tasks.example/api/v2/tasks/{id}/notes"
    assert definition["request"]["params"] == [{"field": "id_query", "name": "id", "in": "query", "explode": True}]


def test_literal_path_text_is_percent_encoded() -> None:
    # GIVEN a path with a space, a "#", stray braces and non-ASCII text around its placeholder
    document = _document({"/files/a b#c/{id}/{}/ü": {"get": _operation()}})

    # WHEN it is converted THEN only the placeholder stays a placeholder (and Workset publishes it)
    definition = _definition(document, "GET /files/a b#c/{id}/{}/ü")
    assert definition["request"]["url"] == f"{SERVER}/files/a%20b%23c/{{id}}/%7B%7D/%C3%BC"


def test_a_parameter_given_as_json_content_uses_its_schema() -> None:
    # GIVEN a query parameter described by `content` instead of `schema`
    document = _document({"/s": {"get": _operation(parameters=[{"name": "filter", "in": "query", "content": {
        "application/json": {"schema": {"type": "object", "properties": {"tag": {"type": "string"}}}}}}])}})

    # WHEN it is converted THEN the property has the JSON media type's schema
    properties = _definition(document, "GET /s")["input_schema"]["properties"]
    assert properties == {"filter": {"type": "object", "properties": {"tag": {"type": "string"}}}}


@pytest.mark.parametrize("name", ["Accept", "content-type", "Authorization"])
def test_headers_openapi_says_to_ignore_are_left_out(name: str) -> None:
    # GIVEN a required header OpenAPI describes elsewhere (media types, security)
    document = _document({"/s": {"get": _operation(parameters=[
        {"name": name, "in": "header", "required": True, "schema": {"type": "string"}}])}})

    # WHEN it is converted THEN the tool neither asks for it nor sends it
    definition = _definition(document, "GET /s")
    assert definition["input_schema"]["properties"] == {} and "params" not in definition["request"]


@pytest.mark.parametrize("name", ["Host", "Content-Length", "Transfer-Encoding", "Proxy-Authorization", "X Bad",
                                  "X-Line\r\nInjected"])
def test_an_unsendable_header_is_dropped_when_optional_and_skips_when_required(name: str) -> None:
    # GIVEN one operation with the header optional and one with it required
    header = {"name": name, "in": "header", "schema": {"type": "string"}}
    document = _document({"/optional": {"get": _operation(parameters=[header])},
                          "/required": {"get": _operation(parameters=[{**header, "required": True}])}})

    # WHEN it is converted
    found = _candidates(document)

    # THEN the optional one is left out; the required one skips its operation, naming it
    assert "params" not in found["GET /optional"].definition["request"]  # type: ignore[index]
    assert found["GET /required"].definition is None
    assert repr(name) in (found["GET /required"].reason or "")


def test_unfit_query_names_are_sent_as_written_from_slugged_fields() -> None:
    # GIVEN JSON:API style query names
    definition = _definition(_tasks(), "GET /tasks", base_url="https://tasks.example/")

    # THEN the field is a plain name and the wire name is kept
    assert {"field": "page_size", "name": "page[size]", "in": "query", "explode": True} in \
        definition["request"]["params"]


# Bodies -----------------------------------------------------------------------------------------

def test_an_object_body_is_flattened_into_the_input() -> None:
    # GIVEN createPet: a required body, by $ref, of an object with one required property
    definition = _definition(_petstore(), "POST /pets")

    # THEN its properties sit beside the parameters and form the rest-body; no `body`, and extra
    # fields are allowed (they go to the body)
    schema = definition["input_schema"]
    assert list(schema["properties"]) == ["X-Request-Id", "name", "tag", "born"]
    assert schema["required"] == ["name"]
    assert "additionalProperties" not in schema and "body" not in definition["request"]


def test_an_optional_object_body_carries_no_required_fields() -> None:
    # GIVEN an optional body whose object requires "name"
    document = _document({"/s": {"post": _operation(requestBody=_json_body(
        {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}, required=False))}})

    # WHEN it is converted THEN the tool can be called without it
    assert _definition(document, "POST /s")["input_schema"]["required"] == []


def test_an_allof_of_objects_is_flattened() -> None:
    # GIVEN a body that is an allOf of two object schemas (one by $ref)
    document = _document({"/s": {"post": _operation(requestBody=_json_body({"allOf": [
        {"$ref": "#/components/schemas/Named"},
        {"type": "object", "required": ["age"], "properties": {"age": {"type": "integer"}}}]}))}},
        components={"schemas": {"Named": {"type": "object", "required": ["name"],
                                          "properties": {"name": {"type": "string"}}}}})

    # WHEN it is converted THEN both parts' properties and requirements are the input's
    schema = _definition(document, "POST /s")["input_schema"]
    assert schema["properties"] == {"name": {"type": "string"}, "age": {"type": "integer"}}
    assert schema["required"] == ["name", "age"]


def test_an_array_body_is_nested_under_body() -> None:
    # GIVEN replacePet: a required body that is an array
    definition = _definition(_petstore(), "PUT /pets/{petId}")

    # THEN it is one required property named by request.body, and no other field is accepted
    assert definition["request"]["body"] == "body"
    assert definition["input_schema"]["required"] == ["petId", "body"]
    assert definition["input_schema"]["properties"]["body"]["type"] == "array"
    assert definition["input_schema"]["additionalProperties"] is False


@pytest.mark.parametrize(("method", "schema"), [
    ("post", {"type": "object", "properties": {"limit": {"type": "integer"}}}),  # clashes with a parameter
    ("post", {"oneOf": [{"type": "object"}, {"type": "array"}]}),
    ("post", {"type": "object", "minProperties": 1, "properties": {"a": {"type": "string"}}}),
    ("post", {"type": ["object", "null"], "properties": {"a": {"type": "string"}}}),
    ("post", {"type": "string"}),
    ("get", {"type": "object", "properties": {"a": {"type": "string"}}}),  # a GET sends no rest-body
    ("delete", {"type": "object", "properties": {"a": {"type": "string"}}}),
])
def test_a_body_that_cannot_be_flattened_is_nested(method: str, schema: dict[str, Any]) -> None:
    # GIVEN a body that is not a plain object, or clashes, or goes with a method without a rest-body
    document = _document({"/s": {method: _operation(
        parameters=[{"name": "limit", "in": "query", "schema": {"type": "integer"}}],
        requestBody=_json_body(schema))}})

    # WHEN it is converted THEN it is nested under "body"
    definition = _definition(document, f"{method.upper()} /s")
    assert definition["request"]["body"] == "body"
    assert set(definition["input_schema"]["properties"]) == {"limit", "body"}
    assert definition["input_schema"]["additionalProperties"] is False


def test_the_body_field_is_request_body_when_a_parameter_is_called_body() -> None:
    # GIVEN a query parameter named "body" and an array body
    document = _document({"/s": {"post": _operation(
        parameters=[{"name": "body", "in": "query", "schema": {"type": "string"}}],
        requestBody=_json_body({"type": "array", "items": {"type": "string"}}))}})

    # WHEN it is converted THEN the body goes under "request_body"
    definition = _definition(document, "POST /s")
    assert definition["request"]["body"] == "request_body"
    assert set(definition["input_schema"]["properties"]) == {"body", "request_body"}


def test_a_body_media_type_ending_in_json_is_used() -> None:
    # GIVEN updateTask, whose body is application/merge-patch+json
    definition = _definition(_tasks(), "PATCH /tasks/{task-id}", base_url="https://tasks.example/")

    # THEN it is flattened like application/json
    assert set(definition["input_schema"]["properties"]) == {"task-id", "title", "due", "subtasks"}


def test_an_optional_body_in_no_type_workset_sends_is_left_out() -> None:
    # GIVEN an optional body offered only as plain text and XML (a file upload is not left out:
    # tests/test_openapi_uploads.py)
    document = _document({"/s": {"post": _operation(requestBody={"content": {
        "text/plain": {"schema": {"type": "string"}}, "application/xml": {}}})}})

    # WHEN it is converted THEN the tool sends no body (and no body fields)
    definition = _definition(document, "POST /s")
    assert definition["input_schema"]["properties"] == {}
    assert definition["request"] == {"method": "POST", "url": f"{SERVER}/s"}


def test_a_form_body_is_flattened_and_sent_as_a_form() -> None:
    # GIVEN a body offered only as application/x-www-form-urlencoded (with a charset), Stripe style
    document = _document({"/customers": {"post": _operation(requestBody={"required": True, "content": {
        "application/x-www-form-urlencoded; charset=utf-8": {
            "schema": {"type": "object", "required": ["email"], "properties": {
                "email": {"type": "string"}, "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                "expand": {"type": "array", "items": {"type": "string"}}}},
            "encoding": {"metadata": {"style": "deepObject", "explode": True}, "expand": {"style": "form"}}}}})}})

    # WHEN it is converted
    definition = _definition(document, "POST /customers")

    # THEN its properties are the input's, as for JSON, and the request says the body is a form
    assert definition["request"] == {"method": "POST", "url": f"{SERVER}/customers", "body_format": "form"}
    assert list(definition["input_schema"]["properties"]) == ["email", "metadata", "expand"]
    assert definition["input_schema"]["required"] == ["email"]


def test_a_form_body_that_cannot_be_flattened_is_nested_and_sent_as_a_form() -> None:
    # GIVEN a form body whose property clashes with a query parameter
    document = _document({"/s": {"post": _operation(
        parameters=[{"name": "limit", "in": "query", "schema": {"type": "integer"}}],
        requestBody=_form_body({"type": "object", "properties": {"limit": {"type": "string"}}}))}})

    # WHEN it is converted THEN it goes under "body", still as a form
    definition = _definition(document, "POST /s")
    assert definition["request"]["body"] == "body" and definition["request"]["body_format"] == "form"
    assert definition["input_schema"]["properties"]["body"] == {
        "type": "object", "properties": {"limit": {"type": "string"}}}
    assert definition["input_schema"]["required"] == ["body"]


def test_json_is_preferred_when_a_form_is_offered_too() -> None:
    # GIVEN a body offered as a form first and as JSON second
    document = _document({"/s": {"post": _operation(requestBody={"required": True, "content": {
        "application/x-www-form-urlencoded": {"schema": {"type": "object", "properties": {"f": {"type": "string"}}}},
        "application/json": {"schema": {"type": "object", "properties": {"j": {"type": "string"}}}}}})}})

    # WHEN it is converted THEN the JSON schema is used and the body is sent as JSON
    definition = _definition(document, "POST /s")
    assert list(definition["input_schema"]["properties"]) == ["j"]
    assert "body_format" not in definition["request"]


def test_an_optional_form_body_is_kept() -> None:
    # GIVEN an optional form body whose object requires "name"
    document = _document({"/s": {"patch": _operation(requestBody=_form_body(
        {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}, required=False))}})

    # WHEN it is converted THEN its fields are offered, none required, and it goes as a form
    definition = _definition(document, "PATCH /s")
    assert definition["input_schema"]["properties"] == {"name": {"type": "string"}}
    assert definition["input_schema"]["required"] == []
    assert definition["request"]["body_format"] == "form"


@pytest.mark.parametrize(("body", "reason"), [
    (_form_body({"type": "object"}, encoding={"ids": {"style": "pipeDelimited"}}),
     "its form body encodes 'ids' in style 'pipeDelimited', which Workset does not send"),
    (_form_body({"type": "object"}, encoding={"ids": {"explode": False}}),
     "its form body encodes 'ids' in style 'form' without explode, which Workset does not send"),
    (_form_body({"type": "array", "items": {"type": "string"}}), "its form body is not an object of fields"),
])
def test_a_form_body_workset_would_encode_otherwise_is_skipped(body: dict[str, Any], reason: str) -> None:
    # GIVEN a form body whose encoding is one Workset's form (repeated keys, a[b]=c) does not match
    document = _document({"/s": {"post": _operation(requestBody=body)}})

    # WHEN it is converted THEN it is skipped, saying why, rather than sent another way
    assert _reason(document, "POST /s") == reason


# Schemas ----------------------------------------------------------------------------------------

def test_nullable_becomes_a_null_type() -> None:
    # GIVEN OpenAPI 3.0 nullable on a typed schema, an enum, a $ref and an untyped schema
    document = _document({"/s": {"post": _operation(requestBody=_json_body({"type": "object", "properties": {
        "a": {"type": "string", "nullable": True},
        "b": {"type": "string", "enum": ["x", "y"], "nullable": True},
        "c": {"$ref": "#/components/schemas/C", "nullable": True},
        "d": {"nullable": True, "description": "anything"},
    }}))}}, components={"schemas": {"C": {"type": "integer"}}})

    # WHEN it is converted THEN null is allowed as JSON Schema says it
    properties = _definition(document, "POST /s")["input_schema"]["properties"]
    assert properties["a"] == {"type": ["string", "null"]}
    assert properties["b"] == {"type": ["string", "null"], "enum": ["x", "y", None]}
    assert properties["c"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert properties["d"] == {"anyOf": [{"description": "anything"}, {"type": "null"}]}


def test_boolean_exclusive_bounds_become_numeric() -> None:
    # GIVEN listPets' limit: maximum 100 with exclusiveMaximum: true (OpenAPI 3.0)
    limit = _definition(_petstore(), "GET /pets")["input_schema"]["properties"]["limit"]

    # THEN it is JSON Schema's numeric form; the example is dropped
    assert limit == {"type": "integer", "minimum": 1, "exclusiveMaximum": 100,
                     "description": "How many pets to answer with."}


def test_openapi_only_keywords_are_dropped_but_properties_of_those_names_kept() -> None:
    # GIVEN a body with example, xml, externalDocs, discriminator and x- keywords, and properties
    # that happen to be called "example" and "x-tag"
    body = {"type": "object", "example": {}, "xml": {"name": "p"}, "externalDocs": {"url": "https://x"},
            "discriminator": {"propertyName": "kind"}, "x-internal": True,
            "properties": {"example": {"type": "string", "x-order": 1}, "x-tag": {"type": "string", "format": "uri",
                                                                                  "default": "a", "examples": ["b"]}}}
    document = _document({"/s": {"post": _operation(requestBody=_json_body(body))}})

    # WHEN it is converted THEN the keywords are gone and the properties stay
    assert _definition(document, "POST /s")["input_schema"]["properties"] == {
        "example": {"type": "string"}, "x-tag": {"type": "string", "format": "uri", "default": "a"}}


def test_read_only_properties_are_not_asked_for() -> None:
    # GIVEN a required readOnly id, and a required property whose $ref'd schema is readOnly
    document = _document({"/s": {"post": _operation(requestBody=_json_body({
        "type": "object", "required": ["id", "name", "created"],
        "properties": {"id": {"type": "integer", "readOnly": True}, "name": {"type": "string"},
                       "created": {"$ref": "#/components/schemas/Stamp"}}}))}},
        components={"schemas": {"Stamp": {"type": "string", "format": "date-time", "readOnly": True}}})

    # WHEN it is converted THEN neither read-only property is asked for or required
    schema = _definition(document, "POST /s")["input_schema"]
    assert schema["properties"] == {"name": {"type": "string"}} and schema["required"] == ["name"]


def test_an_openapi_3_1_document_is_already_json_schema() -> None:
    # GIVEN the Tasks document (3.1): type arrays, numeric exclusiveMinimum, examples, const
    found = _candidates(_tasks(), base_url="https://tasks.example/openapi.json")

    # THEN its schemas are kept, less examples and $comment; webhooks are not operations
    listed = found["GET /tasks"].definition["input_schema"]["properties"]  # type: ignore[index]
    assert listed == {"status": {"enum": ["open", "done"]}, "page_size": {"type": "integer", "exclusiveMinimum": 0}}
    got = found["GET /tasks/{task-id}"].definition["input_schema"]["properties"]  # type: ignore[index]
    assert got == {"task-id": {"type": "string", "const": "abc"}}
    assert list(found) == ["GET /tasks", "POST /tasks", "GET /tasks/{task-id}", "PATCH /tasks/{task-id}",
                           "POST /tasks/{id}/notes"]


def test_a_ref_with_siblings_keeps_both() -> None:
    # GIVEN a property that is a $ref with a description and a maxLength beside it (3.1 allows it)
    document = _document({"/s": {"get": _operation(parameters=[{"name": "q", "in": "query", "schema": {
        "$ref": "#/components/schemas/Text", "maxLength": 5}}])}}, components={"schemas": {"Text": {"type": "string"}}})

    # WHEN it is converted THEN both apply
    assert _definition(document, "GET /s")["input_schema"]["properties"]["q"] == {
        "maxLength": 5, "allOf": [{"type": "string"}]}


def test_refs_are_json_pointers_with_escapes() -> None:
    # GIVEN refs whose keys hold "/" (~1), "~" (~0) and a space (%20)
    document = _document({"/s": {"get": _operation(parameters=[
        {"$ref": "#/components/parameters/a~1b"},
        {"name": "t", "in": "query", "schema": {"$ref": "#/components/schemas/c~0d%20e"}}])}},
        components={"parameters": {"a/b": {"name": "ab", "in": "query", "schema": {"type": "boolean"}}},
                    "schemas": {"c~d e": {"type": "number"}}})

    # WHEN it is converted THEN both resolve
    assert _definition(document, "GET /s")["input_schema"]["properties"] == {
        "ab": {"type": "boolean"}, "t": {"type": "number"}}


def test_a_recursive_schema_goes_to_defs() -> None:
    # GIVEN createTask: a Task whose subtasks are Tasks
    definition = _definition(_tasks(), "POST /tasks", base_url="https://tasks.example/")

    # THEN the body's properties are flattened once and the recursion points into $defs
    schema = definition["input_schema"]
    assert schema["properties"]["subtasks"] == {"type": "array", "items": {"$ref": "#/$defs/Task"}}
    assert schema["$defs"]["Task"]["properties"]["subtasks"]["items"] == {"$ref": "#/$defs/Task"}
    assert "id" not in schema["$defs"]["Task"]["properties"]  # readOnly also inside $defs


def test_mutual_recursion_goes_to_defs_with_unique_names() -> None:
    # GIVEN two schemas called Node (in different places) that refer to each other
    document = _document({"/s": {"put": _operation(requestBody=_json_body({"$ref": "#/components/schemas/Node"}))}},
                         components={"schemas": {"Node": {"type": "object", "properties": {
                             "other": {"$ref": "#/x-more/Node"}}}}},
                         **{"x-more": {"Node": {"type": "object", "properties": {
                             "back": {"$ref": "#/components/schemas/Node"}}}}})

    # WHEN it is converted THEN it is publishable (checked by _candidates) and ends in $defs
    schema = _definition(document, "PUT /s")["input_schema"]
    assert "$defs" in schema and len(schema["$defs"]) >= 1
    assert all(name.startswith("Node") for name in schema["$defs"])


def _doubling(levels: int) -> dict[str, Any]:
    """A body whose schema refers to the next level twice: 2**levels copies when inlined."""
    schemas: dict[str, Any] = {f"L{i}": {"type": "object", "properties": {
        "left": {"$ref": f"#/components/schemas/L{i + 1}"}, "right": {"$ref": f"#/components/schemas/L{i + 1}"}}}
        for i in range(levels)}
    schemas[f"L{levels}"] = {"type": "string"}
    return _document({"/s": {"post": _operation(requestBody=_json_body({"$ref": "#/components/schemas/L0"}))}},
                     components={"schemas": schemas})


def test_fan_out_past_the_inline_budget_falls_back_to_defs() -> None:
    # GIVEN a body that would inline to 2**40 schemas
    document = _doubling(40)

    # WHEN it is converted THEN it is built with $defs, one entry per schema
    schema = within(HANG_GUARD, lambda: _definition(document, "POST /s"))["input_schema"]
    assert schema["properties"]["left"] == {"$ref": "#/$defs/L1"}
    assert len(schema["$defs"]) == 40


def test_small_fan_out_is_inlined() -> None:
    # GIVEN a body that inlines to 2**4 schemas WHEN it is converted THEN no $defs are needed
    schema = _definition(_doubling(4), "POST /s")["input_schema"]
    assert "$defs" not in schema and schema["properties"]["left"]["properties"]["right"]["type"] == "object"


def test_an_input_schema_over_256_kb_is_skipped() -> None:
    # GIVEN a body whose schema is 300 KB even in $defs
    big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 1000}
                                            for i in range(300)}}
    document = _document({"/s": {"post": _operation(requestBody=_json_body(big))}})

    # WHEN it is converted THEN the operation is skipped, saying the size
    assert _reason(document, "POST /s") == "its input schema is too large: 306 KB"


@pytest.mark.parametrize("ref", ["other.yaml#/components/schemas/Pet", "https://schemas.example/pet.json",
                                 "./pet.json"])
def test_a_remote_ref_skips_its_operation_and_is_never_fetched(ref: str) -> None:
    # GIVEN one operation whose body refers to another document, one whose parameter does, one without
    document = _document({"/body": {"post": _operation(requestBody=_json_body({"$ref": ref}))},
                          "/param": {"get": _operation(parameters=[{"$ref": ref}])},
                          "/fine": {"get": _operation()}})

    # WHEN it is converted (the module has no way to fetch: it is pure)
    found = _candidates(document)

    # THEN the two are skipped, naming the ref; the other is converted
    for key in ("POST /body", "GET /param"):
        assert found[key].reason == f"refers to another document ({ref}); bundle it into one document first"
    assert found["GET /fine"].definition is not None


@pytest.mark.parametrize(("paths", "components", "words"), [
    ({"/s": {"post": _operation(requestBody=_json_body({"$ref": "#/components/schemas/Missing"}))}}, {},
     ["'#/components/schemas/Missing'", "at /paths/~1s/post/requestBody/content/application~1json/schema",
      "does not resolve"]),
    ({"/s": {"get": _operation(parameters=[{"$ref": "#/components/parameters/Nope"}])}}, {},
     ["'#/components/parameters/Nope'", "at /paths/~1s/get/parameters/0", "does not resolve"]),
    ({"/s": {"post": _operation(requestBody=_json_body({"$ref": "#/components/schemas/A"}))}},
     {"schemas": {"A": {"type": "object", "properties": {"b": {"$ref": "#/components/schemas/B"}}}}},
     ["'#/components/schemas/B'", "at /components/schemas/A/properties/b", "does not resolve"]),
    ({"/s": {"get": _operation(parameters=[{"$ref": "#anchor"}])}}, {}, ["'#anchor'", "not a JSON pointer"]),
])
def test_a_local_ref_that_does_not_resolve_is_refused_saying_where(paths: dict[str, Any], components: dict[str, Any],
                                                                   words: list[str]) -> None:
    # GIVEN a document with a broken local $ref WHEN it is converted THEN InvalidInput names it and where
    document = _document(paths, components=components)
    _refused(lambda: openapi.candidates(document, vendor="acme"), *words)


def test_a_ref_loop_is_refused() -> None:
    # GIVEN parameters that refer to each other
    document = _document({"/s": {"get": _operation(parameters=[{"$ref": "#/components/parameters/A"}])}},
                         components={"parameters": {"A": {"$ref": "#/components/parameters/B"},
                                                    "B": {"$ref": "#/components/parameters/A"}}})

    # WHEN it is converted THEN it is refused instead of looping
    _refused(lambda: openapi.candidates(document, vendor="acme"), "loop")


# Skipped operations -----------------------------------------------------------------------------

@pytest.mark.parametrize(("operation", "reason"), [
    (_operation(requestBody={"required": True, "content": {"text/plain": {}, "application/xml": {}}}),
     ("no JSON, application/x-www-form-urlencoded or multipart/form-data body type (offers text/plain, "
      "application/xml)")),
    (_operation(requestBody={"required": True, "content": {"multipart/related": {}, "text/plain": {}}}),
     ("its body is a file upload (multipart/related, text/plain) in no type Workset sends: a tool sends "
      "JSON, application/x-www-form-urlencoded or multipart/form-data")),
    (_operation(parameters=[{"name": "session", "in": "cookie", "required": True, "schema": {"type": "string"}}]),
     "needs cookie parameter 'session', which Workset does not send"),
    (_operation(security=[{"oauth": ["read"]}, {"oidc": []}]),
     "needs oauth2 or openIdConnect auth, which connections do not carry yet"),
    (_operation(security=[{"digest": []}, {"query": []}]),
     "needs http digest or apiKey in query auth, which connections do not carry yet"),
    (_operation(security=[{"bearer": [], "query": []}]), "needs apiKey in query auth, which connections do not carry yet"),
    (_operation(security=[{"mtls": []}]), "needs mutualTLS auth, which connections do not carry yet"),
    (_operation(security=[{"unknown": []}]),
     "needs the undeclared scheme 'unknown' auth, which connections do not carry yet"),
    (_operation(parameters=[{"name": "filter", "in": "query", "required": True, "style": "deepObject",
                             "schema": {"type": "object"}}]),
     "needs query parameter 'filter' in style 'deepObject', which Workset does not send"),
])
def test_an_operation_workset_cannot_call_is_skipped_with_its_reason(operation: dict[str, Any], reason: str) -> None:
    # GIVEN an operation needing what Workset cannot send or receive
    document = _document({"/s": {"post": operation}}, components={"securitySchemes": {
        "oauth": {"type": "oauth2", "flows": {}}, "oidc": {"type": "openIdConnect", "openIdConnectUrl": "https://x"},
        "digest": {"type": "http", "scheme": "digest"}, "bearer": {"type": "http", "scheme": "Bearer"},
        "query": {"type": "apiKey", "in": "query", "name": "key"}, "mtls": {"type": "mutualTLS"}}})

    # WHEN it is converted THEN it is skipped, saying why
    assert _reason(document, "POST /s") == reason


@pytest.mark.parametrize("method", ["options", "trace"])
def test_methods_a_tool_cannot_send_are_skipped(method: str) -> None:
    # GIVEN an OPTIONS or TRACE operation WHEN it is converted THEN it is skipped, saying so
    assert _reason(_document({"/s": {method: _operation()}}), f"{method.upper()} /s") == (
        f"is an {method.upper()} operation; Workset sends GET, HEAD, POST, PUT, PATCH and DELETE")


@pytest.mark.parametrize("security", [
    [{"bearer": []}], [{"oauth": []}, {"bearer": []}], [{"oauth": []}, {}], [], [{"key": []}], [{"basic": []}],
    [{"bearer": [], "basic": []}]])
def test_security_a_connection_can_carry_or_none_keeps_the_operation(security: list[Any]) -> None:
    # GIVEN the document requiring OAuth, and an operation whose own security has a carriable choice
    # (a bearer token, Basic credentials or an API key in a header: a connection sends each as a header)
    document = _document({"/s": {"get": _operation(security=security)}}, security=[{"oauth": []}],
                         components={"securitySchemes": {"oauth": {"type": "oauth2", "flows": {}},
                                                         "bearer": {"type": "http", "scheme": "bearer"},
                                                         "basic": {"type": "http", "scheme": "Basic"},
                                                         "key": {"type": "apiKey", "in": "header", "name": "X-Key"}}})

    # WHEN it is converted THEN it is a tool
    assert _reason(document, "GET /s") is None


def test_the_documents_security_applies_when_the_operation_has_none() -> None:
    # GIVEN the document requiring OAuth and an operation without `security`
    document = _document({"/s": {"get": _operation()}}, security=[{"oauth": []}],
                         components={"securitySchemes": {"oauth": {"type": "oauth2", "flows": {}}}})

    # WHEN it is converted THEN it is skipped
    assert _reason(document, "GET /s") == "needs oauth2 auth, which connections do not carry yet"


def test_an_optional_cookie_is_left_out() -> None:
    # GIVEN an optional cookie parameter WHEN it is converted THEN the tool goes without it
    document = _document({"/s": {"get": _operation(parameters=[{"name": "pref", "in": "cookie",
                                                                "schema": {"type": "string"}}])}})
    assert _definition(document, "GET /s")["input_schema"]["properties"] == {}


@pytest.mark.parametrize(("include", "exclude", "reasons"), [
    (["pets"], [], {"GET /pets": None, "DELETE /pets/{petId}": "not included", "GET /store/orders": "not included"}),
    (["deletePet"], [], {"GET /pets": "not included", "DELETE /pets/{petId}": None}),
    (["/store"], [], {"GET /pets": "not included", "GET /store/orders": "needs cookie parameter 'session', which "
                                                                        "Workset does not send"}),
    ([], ["admin"], {"GET /pets": None, "DELETE /pets/{petId}": "excluded by 'admin'"}),
    (["/pets"], ["/pets/{petId}"], {"GET /pets": None, "GET /pets/{petId}": "excluded by '/pets/{petId}'"}),
])
def test_include_and_exclude_match_tags_operation_ids_and_path_prefixes(
        include: list[str], exclude: list[str], reasons: dict[str, str | None]) -> None:
    # GIVEN the Petstore WHEN it is converted with include/exclude THEN matching decides what is skipped
    found = _candidates(_petstore(), include=include, exclude=exclude)
    assert {key: found[key].reason for key in reasons} == reasons


def test_a_skipped_operation_keeps_its_name() -> None:
    # GIVEN the Petstore with everything excluded WHEN it is converted THEN names are as without exclusion
    every = [candidate.name for candidate in _candidates(_petstore()).values()]
    excluded = _candidates(_petstore(), exclude=["/"])
    assert [candidate.name for candidate in excluded.values()] == every
    assert all(candidate.definition is None for candidate in excluded.values())


# Servers ----------------------------------------------------------------------------------------

def test_server_variables_take_their_defaults() -> None:
    # GIVEN the Petstore's server https://{region}.petstore.example/{version}
    # WHEN it is converted THEN the defaults fill it
    assert _definition(_petstore(), "GET /pets")["request"]["url"] == "https://eu.petstore.example/v1/pets"


def test_a_server_variable_without_a_default_is_refused() -> None:
    # GIVEN a server variable with no default
    document = _document({"/s": {"get": _operation()}}, servers=[{"url": "https://{host}/", "variables": {
        "host": {"enum": ["a.example"]}}}])

    # WHEN it is converted THEN InvalidInput says which variable and where
    _refused(lambda: openapi.candidates(document, vendor="acme"), "{host}", "no default", "at /servers/0")


def test_the_nearest_servers_win_and_the_server_given_wins_over_all() -> None:
    # GIVEN servers on the document, a path item and an operation
    document = _document({"/a": {"servers": [{"url": "https://item.example/"}],
                                 "get": _operation(servers=[{"url": "https://operation.example/base/"}]),
                                 "put": _operation()},
                          "/b": {"get": _operation()}})

    # WHEN it is converted without and with `server`
    found = _candidates(document)
    given = _candidates(document, server="https://given.example/api/")

    # THEN the operation's beats the path item's beats the document's; the given one beats all
    urls = {key: candidate.definition["request"]["url"] for key, candidate in found.items()}  # type: ignore[index]
    assert urls == {"GET /a": "https://operation.example/base/a", "PUT /a": "https://item.example/a",
                    "GET /b": f"{SERVER}/b"}
    assert {candidate.definition["request"]["url"] for candidate in given.values()} == {  # type: ignore[index]
        "https://given.example/api/a", "https://given.example/api/b"}


def test_a_relative_server_is_resolved_against_the_documents_url() -> None:
    # GIVEN a server "/api/v3" and the URL the document was fetched from
    document = _document({"/pets": {"get": _operation()}}, servers=[{"url": "/api/v3"}])

    # WHEN it is converted THEN the server is resolved against it
    definition = _definition(document, "GET /pets", base_url="https://petstore3.example/openapi.json")
    assert definition["request"]["url"] == "https://petstore3.example/api/v3/pets"


@pytest.mark.parametrize("servers", [[{"url": "/api/v3"}], None])
def test_a_relative_server_without_a_base_url_is_refused(servers: list[Any] | None) -> None:
    # GIVEN a relative server (or none, which means "/") and no URL to resolve it against
    document = _document({"/pets": {"get": _operation()}})
    document["servers"] = servers
    if servers is None:
        del document["servers"]

    # WHEN it is converted THEN InvalidInput asks for `server`
    _refused(lambda: openapi.candidates(document, vendor="acme"), "is relative; give `server`, the API's base URL")


def test_a_relative_server_message_names_the_url() -> None:
    # GIVEN the Petstore 3 habit: servers: [{url: /api/v3}]
    document = _document({"/pets": {"get": _operation()}}, servers=[{"url": "/api/v3"}])

    # WHEN it is converted without base_url THEN the message quotes the URL and says where it is
    _refused(lambda: openapi.candidates(document, vendor="acme"),
             "the document's server URL '/api/v3' (at /servers/0) is relative; give `server`, the API's base URL")


@pytest.mark.parametrize("url", ["ftp://files.example/", "https://user:secret@api.example/", "https://api.example/?k=1"])
def test_a_server_that_is_not_a_plain_http_url_is_refused(url: str) -> None:
    # GIVEN a server that is not http(s), or carries credentials or a query
    document = _document({"/s": {"get": _operation()}}, servers=[{"url": url}])

    # WHEN it is converted THEN InvalidInput names it
    _refused(lambda: openapi.candidates(document, vendor="acme"), "at /servers/0")


# Descriptions and annotations -------------------------------------------------------------------

def test_description_joins_summary_and_description() -> None:
    # GIVEN listPets with a summary and a description, and deletePet with neither
    found = _candidates(_petstore())

    # THEN the description is both, or the operation's key
    assert found["GET /pets"].definition["description"] == (  # type: ignore[index]
        "List pets\n\nEvery pet in the store, a page at a time.")
    assert found["DELETE /pets/{petId}"].definition["description"] == "DELETE /pets/{petId}"  # type: ignore[index]


def test_a_long_description_and_title_are_cut() -> None:
    # GIVEN a 300-character summary and a 5,000-character description
    document = _document({"/s": {"get": _operation(summary="s" * 300, description="d" * 5000)}})

    # WHEN it is converted THEN they fit ToolSpec's limits
    definition = _definition(document, "GET /s")
    assert len(definition["description"]) == 4000 and definition["annotations"]["title"] == "s" * 200


@pytest.mark.parametrize(("method", "hints"), [
    ("get", {"readOnlyHint": True}), ("head", {"readOnlyHint": True}), ("post", {}),
    ("put", {"idempotentHint": True}), ("patch", {}), ("delete", {"destructiveHint": True, "idempotentHint": True}),
])
def test_annotations_follow_the_method(method: str, hints: dict[str, bool]) -> None:
    # GIVEN an operation with a summary WHEN it is converted THEN the hints follow its method
    document = _document({"/s": {method: _operation(summary="Do it")}})
    assert _definition(document, f"{method.upper()} /s")["annotations"] == {"title": "Do it", **hints}


# Bad documents ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("document", "words"), [
    ({"swagger": "2.0", "paths": {}}, ["Swagger 2.0 is not supported"]),
    ({"openapi": "4.0.0", "paths": {}}, ["not an OpenAPI 3.0 or 3.1 document", "'4.0.0'"]),
    ({"openapi": "3.0.3", "paths": ["/pets"]}, ["`paths`", "/paths", "mapping"]),
    ({"openapi": "3.0.3", "paths": {"pets": {}}}, ["'pets'", "start with '/'"]),
    ({"openapi": "3.0.3", "paths": {"/s": {"get": "list"}}}, ["at /paths/~1s/get", "not a mapping"]),
    ({"openapi": "3.0.3", "paths": {"/s": {"get": {"parameters": [{"in": "query"}]}}}},
     ["at /paths/~1s/get/parameters/0", "needs a name"]),
    ({"openapi": "3.0.3", "paths": {"/s": {"get": {"parameters": [{"name": "q", "in": "query", "schema": "string"}]}}}},
     ["at /paths/~1s/get/parameters/0/schema", "not an object"]),
    ({"openapi": "3.0.3", "paths": {"/s": {"$ref": "other.yaml#/paths/s"}}}, ["other.yaml", "bundle"]),
])
def test_a_bad_document_is_refused_by_candidates(document: dict[str, Any], words: list[str]) -> None:
    # GIVEN a document (as the API may hand it over, already parsed) WHEN converted THEN InvalidInput
    _refused(lambda: openapi.candidates(document, vendor="acme", server=SERVER), *words)


def test_converting_leaves_the_document_unchanged() -> None:
    # GIVEN the Tasks document (recursion, path item refs, flattened and nested bodies) and a copy
    document = _tasks()
    before = copy.deepcopy(document)

    # WHEN it is converted twice
    first = openapi.candidates(document, vendor="tasks", base_url="https://tasks.example/")
    second = openapi.candidates(document, vendor="tasks", base_url="https://tasks.example/")

    # THEN the document is as it was, and the same document gave the same candidates
    assert document == before
    assert first == second


def test_a_document_without_paths_has_no_candidates() -> None:
    # GIVEN a document with only components WHEN it is converted THEN there is nothing to import
    assert openapi.candidates({"openapi": "3.1.0", "components": {}}, vendor="acme") == []


def test_a_schema_nested_too_deeply_skips_its_operation() -> None:
    # GIVEN a body 90 objects deep (within the reading limit, past what a tool schema may nest)
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(90):
        schema = {"type": "object", "properties": {"a": schema}}
    document = _document({"/s": {"post": _operation(requestBody=_json_body(schema))}})

    # WHEN it is converted THEN the operation is skipped, not a crash
    assert _reason(document, "POST /s") == f"its input schema is nested deeper than {openapi.MAX_INPUT_NESTING} levels"
