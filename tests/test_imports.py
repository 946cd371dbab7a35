"""Importing an OpenAPI document through the admin API, end to end: every operation's outcome,
what agents then find, promote and call (through to a local vendor, with approvals and dry
runs), re-imports that change, remove and restore operations, and bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.base.config import settings
from chalicelib.catalog.imports import VECTOR_BATCH
from tests.books import take_bodies, work
from tests.conftest import Admin, Mcp, Vendor, serving

PETSTORE = """
openapi: 3.0.3
info: {title: Petstore, version: "1"}
servers: [{url: "SERVER"}]
paths:
  /pets:
    get:
      operationId: listPets
      summary: List the pets in the store
      tags: [pets]
      parameters:
        - {name: limit, in: query, schema: {type: integer}, description: How many to answer}
        - {name: X-Trace, in: header, schema: {type: string}}
    post:
      operationId: createPet
      summary: Add a pet to the store
      tags: [pets]
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: "#/components/schemas/NewPet"}
  /pets/{petId}:
    parameters:
      - {name: petId, in: path, required: true, schema: {type: string}}
    get:
      operationId: showPetById
      summary: Info for a specific pet
      tags: [pets]
    delete:
      operationId: deletePet
      summary: Remove a pet
      tags: [admin]
  /pets/{petId}/photo:
    put:
      operationId: uploadPhoto
      summary: Upload a photo of a pet
      parameters:
        - {name: petId, in: path, required: true, schema: {type: string}}
      requestBody:
        required: true
        content:
          multipart/related:
            schema: {type: string, format: binary}
components:
  schemas:
    NewPet:
      type: object
      required: [name]
      properties:
        name: {type: string}
        tag: {type: string, nullable: true}
        id: {type: integer, readOnly: true}
"""


def _document(vendor: Vendor, text: str = PETSTORE) -> str:
    return text.replace("SERVER", vendor.url)


def _import(admin: Admin, **body: Any) -> Any:
    return admin.call("POST", "/v1/imports/openapi", {"vendor": "petstore", **body})


def _outcomes(answer: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {line["key"]: (line["name"], line["outcome"]) for line in answer["tools"]}


def _tools(admin: Admin) -> list[str]:
    return [f"{tool['vendor']}/{tool['name']}" for tool in admin.call("GET", "/v1/tools").json_body["items"]]


def test_a_dry_run_lists_every_operation_and_stores_nothing(admin: Admin, vendor: Vendor) -> None:
    # WHEN a document is imported as a dry run
    answer = _import(admin, document=_document(vendor), dry_run=True)
    # THEN every operation is listed with what would happen, the unusable one with its reason
    assert answer.status_code == 200, answer.body
    assert _outcomes(answer.json_body) == {
        "GET /pets": ("list-pets", "published"), "POST /pets": ("create-pet", "published"),
        "GET /pets/{petId}": ("show-pet-by-id", "published"), "DELETE /pets/{petId}": ("delete-pet", "published"),
        "PUT /pets/{petId}/photo": ("upload-photo", "skipped")}
    skipped = next(line for line in answer.json_body["tools"] if line["outcome"] == "skipped")
    assert "multipart/related" in skipped["reason"]
    assert answer.json_body["dry_run"] is True
    # AND nothing was stored
    assert _tools(admin) == []


def test_imported_tools_are_found_promoted_and_called_through_to_the_vendor(admin: Admin, mcp: Mcp,
                                                                             vendor: Vendor) -> None:
    # GIVEN an imported document
    assert _import(admin, document=_document(vendor)).json_body["counts"]["published"] == 4
    # WHEN an agent looks for a tool in plain words, promotes it and calls it
    hits = mcp.call("find_tool", {"query": "show info for one pet"})["structuredContent"]["hits"]
    assert hits[0]["name"] == "show-pet-by-id" and hits[0]["readOnlyHint"] is True
    mcp.call("promote", {"vendor": "petstore", "name": "list-pets"})
    result = mcp.call("petstore__list-pets", {"limit": 2, "X-Trace": "t-1"})
    # THEN the call reached the document's server with the parameters where the document put them
    assert result["isError"] is False, result
    sent = vendor.received[-1]
    assert (sent["method"], sent["path"]) == ("GET", "/pets?limit=2")
    assert sent["headers"]["X-Trace"] == "t-1"


def test_an_imported_write_waits_for_approval_and_sends_its_json_body(admin: Admin, mcp: Mcp,
                                                                      vendor: Vendor) -> None:
    _import(admin, document=_document(vendor))
    # GIVEN a write: a dry run previews it and reaches nothing
    preview = mcp.call("run_tool", {"vendor": "petstore", "name": "create-pet", "dryRun": True,
                                    "input": {"name": "Rex", "tag": None}})["structuredContent"]["preview"]
    assert (preview["method"], preview["body"]) == ("POST", {"name": "Rex", "tag": None})
    assert vendor.received == []
    # WHEN it is called, it waits for a person; approved, it is sent
    waiting = mcp.call("run_tool", {"vendor": "petstore", "name": "create-pet", "input": {"name": "Rex"}})
    run_id = waiting["structuredContent"]["run_id"]
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").json_body["status"] == "succeeded"
    # THEN the vendor got the body, and the destructive delete carries its hint
    assert json.loads(vendor.received[-1]["body"]) == {"name": "Rex"}
    delete = next(tool for tool in admin.call("GET", "/v1/tools").json_body["items"] if tool["name"] == "delete-pet")
    assert delete["annotations"] == {"destructiveHint": True, "idempotentHint": True, "title": "Remove a pet"}


def test_readonly_fields_are_not_asked_for_and_nullable_becomes_json_schema(admin: Admin, vendor: Vendor) -> None:
    _import(admin, document=_document(vendor))
    create = admin.call("GET", "/v1/tools/petstore/create-pet").json_body["versions"][-1]
    assert set(create["input_schema"]["properties"]) == {"name", "tag"}
    assert create["input_schema"]["properties"]["tag"]["type"] == ["string", "null"]
    assert create["origin"] == {"kind": "openapi", "key": "POST /pets", "label": "createPet", "tags": ["pets"]}


def test_a_reimport_publishes_only_what_changed_and_withdraws_what_left(admin: Admin, mcp: Mcp,
                                                                        vendor: Vendor) -> None:
    # GIVEN an imported document, and the same document again
    _import(admin, document=_document(vendor))
    again = _import(admin, document=_document(vendor)).json_body
    assert again["counts"] == {"published": 0, "new_version": 0, "unchanged": 4, "restored": 0, "skipped": 1,
                               "unavailable": 0, "failed": 0}
    # WHEN a version of the document changes one summary and drops one operation
    changed = _document(vendor).replace("Info for a specific pet", "Everything about one pet")
    changed = changed.replace("    delete:\n      operationId: deletePet\n      summary: Remove a pet\n"
                              "      tags: [admin]\n", "")
    answer = _import(admin, document=changed).json_body
    # THEN the changed operation has a new version, the dropped one is unavailable, not deleted
    assert _outcomes(answer)["GET /pets/{petId}"] == ("show-pet-by-id", "new_version")
    assert _outcomes(answer)["DELETE /pets/{petId}"] == ("delete-pet", "unavailable")
    assert "petstore/delete-pet" in _tools(admin)
    hit = next(hit for hit in mcp.call("find_tool", {"query": "remove a pet"})["structuredContent"]["hits"]
               if hit["name"] == "delete-pet")
    assert (hit["available"], hit["reason"]) == (False, "tool_unavailable")
    call = mcp.call("run_tool", {"vendor": "petstore", "name": "delete-pet", "input": {"petId": "1"}})
    assert call["structuredContent"]["error"]["code"] == "tool_unavailable"
    refused = mcp.post("tools/call", {"name": "promote", "arguments": {"vendor": "petstore", "name": "delete-pet"}})
    assert refused.json_body["result"]["isError"] is True
    # AND the operation coming back restores the tool as it was
    restored = _import(admin, document=_document(vendor)).json_body
    assert _outcomes(restored)["DELETE /pets/{petId}"] == ("delete-pet", "restored")
    assert mcp.call("find_tool", {"query": "remove a pet"})["structuredContent"]["hits"][0]["available"] is True


def test_include_and_exclude_pick_operations_by_tag_id_or_path(admin: Admin, vendor: Vendor) -> None:
    answer = _import(admin, document=_document(vendor), include=["pets"], exclude=["showPetById"]).json_body
    outcomes = {key: outcome for key, (_, outcome) in _outcomes(answer).items()}
    assert outcomes == {"GET /pets": "published", "POST /pets": "published", "GET /pets/{petId}": "skipped",
                        "DELETE /pets/{petId}": "skipped", "PUT /pets/{petId}/photo": "skipped"}


def test_a_name_taken_by_a_hand_authored_tool_is_skipped_not_overwritten(admin: Admin, vendor: Vendor) -> None:
    admin.publish(vendor="petstore", name="list-pets", description="Mine.")
    answer = _import(admin, document=_document(vendor)).json_body
    line = next(line for line in answer["tools"] if line["key"] == "GET /pets")
    assert line["outcome"] == "skipped" and "authored by hand" in line["reason"]
    assert admin.call("GET", "/v1/tools/petstore/list-pets").json_body["versions"][-1]["description"] == "Mine."


@pytest.fixture
def document_server(vendor: Vendor) -> Iterator[dict[str, Any]]:
    """Serves whatever `served["body"]` holds at /openapi.yaml, with `served["status"]`."""
    served: dict[str, Any] = {"body": _document(vendor).replace(vendor.url, "/api").encode(), "status": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(served["status"])
            self.send_header("Content-Length", str(len(served["body"])))
            self.end_headers()
            self.wfile.write(served["body"])

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        served["url"] = f"{url}/openapi.yaml"
        yield served


def test_a_document_fetched_by_url_resolves_its_relative_server_against_the_url(
        admin: Admin, document_server: dict[str, Any]) -> None:
    # GIVEN a document whose server URL is relative, fetched from where it is published
    answer = _import(admin, url=document_server["url"])
    assert answer.status_code == 200, answer.body
    # THEN the tools call the API next to the document
    spec = admin.call("GET", "/v1/tools/petstore/list-pets").json_body["versions"][-1]
    assert spec["request"]["url"] == document_server["url"].replace("/openapi.yaml", "/api/pets")


def test_a_url_that_answers_an_error_is_bad_input(admin: Admin, document_server: dict[str, Any]) -> None:
    document_server["status"] = 404
    answer = _import(admin, url=document_server["url"])
    assert (answer.status_code, answer.json_body["error"]["field"]) == (400, "url")
    assert "HTTP 404" in answer.json_body["error"]["message"]


@pytest.mark.parametrize(("body", "field", "message"), [
    ({"document": "openapi: 3.0.0\npaths: [unclosed"}, None, "line"),
    ({"document": "swagger: '2.0'\npaths: {}"}, None, "Swagger 2.0"),
    ({"document": "{\"openapi\": \"4.0.0\", \"paths\": {}}"}, None, "4.0.0"),
    ({"document": "openapi: 3.0.0\npaths:\n  /a:\n    get:\n      parameters: [{$ref: '#/components/parameters/x'}]\n"},
     None, "#/components/parameters/x"),
    ({}, "document", "one of the two"),
    ({"document": "x", "url": "http://127.0.0.1:9/x"}, "document", "one of the two"),
    ({"document": "openapi: 3.0.0", "vendor": "Bad Vendor"}, "vendor", "vendor"),
])
def test_a_bad_document_is_a_400_that_says_what_and_where_and_stores_nothing(
        admin: Admin, body: dict[str, Any], field: str | None, message: str) -> None:
    answer = _import(admin, **body)
    assert answer.status_code == 400, answer.body
    assert message in answer.json_body["error"]["message"]
    if field is not None:
        assert answer.json_body["error"]["field"] == field
    assert _tools(admin) == []


def test_a_connection_must_admit_the_documents_server(admin: Admin, vendor: Vendor) -> None:
    created = admin.call("POST", "/v1/connections", {"vendor": "petstore", "hosts": ["api.example.com"],
                                                     "auth": {"type": "bearer", "token": "secret-token"}})
    answer = _import(admin, document=_document(vendor), connection=created.json_body["id"])
    skipped = [line for line in answer.json_body["tools"] if line["outcome"] == "skipped"]
    assert len(skipped) == 5 and all("may only be sent to" in line["reason"] for line in skipped[:4])
    assert _tools(admin) == []


def test_a_large_import_publishes_at_once_and_its_vectors_follow_from_the_work_queue(
        admin: Admin, mcp: Mcp, vendor: Vendor, client: Client) -> None:
    # GIVEN a document with more operations than one request embeds
    paths = {f"/things/{n}": {"get": {"operationId": f"getThing{n}", "summary": f"Fetch the number {n} widget"}}
             for n in range(80)}
    paths["/weather"] = {"get": {"operationId": "forecast", "summary": "Weather forecast for a city"}}
    document = json.dumps({"openapi": "3.1.0", "info": {"title": "t", "version": "1"},
                           "servers": [{"url": vendor.url}], "paths": paths})
    # WHEN it is imported
    answer = _import(admin, document=document).json_body
    # THEN every tool is published now, searchable by its words before its vector exists, and by
    # meaning alone too (a search computes the vectors of its first few pending candidates)
    assert (answer["counts"]["published"], answer["vectors_pending"]) == (81, 81)
    assert mcp.call("find_tool", {"query": "weather forecast"})["structuredContent"]["hits"][0]["name"] == "forecast"
    by_meaning = {"query": "will it rain tomorrow in Paris"}
    assert mcp.call("find_tool", by_meaning)["structuredContent"]["hits"][0]["name"] == "forecast"
    # AND the work queue fills the vectors in, after which meaning alone still finds it
    messages = take_bodies(settings().sweep_queue)
    assert sum(len(message["tools"]) for message in messages) == 81
    assert max(len(message["tools"]) for message in messages) == VECTOR_BATCH
    work(client, messages)
    assert mcp.call("find_tool", by_meaning)["structuredContent"]["hits"][0]["name"] == "forecast"


def test_a_document_url_whose_name_resolves_privately_is_refused_without_the_address(
        admin: Admin, settings_env: Any, monkeypatch: Any) -> None:
    from chalicelib.net import outbound

    # GIVEN a deployment that calls no private address, and a name that resolves to one inside it
    settings_env(WORKSET_ALLOW_PRIVATE_NETWORK="false")
    monkeypatch.setattr(outbound, "system_resolver", lambda host, port: ["10.20.30.40"])
    # WHEN a document is imported from it
    answer = _import(admin, url="https://docs.tenant.test/openapi.json")
    # THEN it is refused, saying why, without telling the tenant the deployment's internal address
    assert answer.status_code == 400 and answer.json_body["error"]["field"] == "url"
    assert "private" in answer.json_body["error"]["message"] and "10.20.30.40" not in answer.body.decode()
    assert admin.call("GET", "/v1/tools").json_body["items"] == []
