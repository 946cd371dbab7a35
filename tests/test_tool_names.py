"""Tool names people can read (issue 25, goal 8): `vendor__name` up to 64 characters, words kept,
a word (not a hash) between two operations that would share a name, a hash only when nothing
else tells them apart; the 64 enforced wherever a name is published or named; names kept across
re-imports; hostile sources (unicode, nothing to slug, thousands alike) stay bounded."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

from chalicelib.base.clock import utcnow
from chalicelib.base.validation import NAME_MAX, TOOL_NAME_MAX, VENDOR_PATTERN, name_budget
from chalicelib.catalog.upstreams import candidates as upstream_candidates
from chalicelib.net import mcpclient
from chalicelib.openapi import Candidate, candidates, operations
from chalicelib.store.records import Upstream
from chalicelib.tools import toolnames
from tests.conftest import Admin, JsonHandler, Mcp, serving, tool_spec

SERVER = "http://127.0.0.1:9"
HASHED = re.compile(r"-[0-9a-f]{6}$")


def _document(paths: dict[str, Any]) -> dict[str, Any]:
    return {"openapi": "3.0.3", "info": {"title": "Acme", "version": "1"}, "servers": [{"url": SERVER}],
            "paths": paths}


def _op(operation_id: str | None = None, **fields: Any) -> dict[str, Any]:
    found = {"responses": {"200": {"description": "OK."}}, **fields}
    if operation_id is not None:
        found["operationId"] = operation_id
    return found


def _names(document: dict[str, Any], vendor: str = "acme", keep: dict[str, str] | None = None) -> dict[str, str]:
    found: list[Candidate] = candidates(document, vendor=vendor, keep_names=keep or {})
    return {candidate.key: candidate.name for candidate in found}


# Words and fitting --------------------------------------------------------------------------------

@pytest.mark.parametrize(("source", "expected"), [
    ("getPetById", ["get", "pet", "by", "id"]),
    ("HTTPServerList", ["http", "server", "list"]),
    ("repos/list-for-org", ["repos", "list", "for", "org"]),
    ("Café_Übersicht", ["cafe", "ubersicht"]),
    ("ＡＢＣ_list", ["abc", "list"]),  # fullwidth letters read as letters
    ("日本\x00🙂", []),
    ("", []),
])
def test_words_of_a_source(source: str, expected: list[str]) -> None:
    assert toolnames.words(source) == expected


def test_a_name_that_fits_keeps_every_word_even_filler() -> None:
    parts = toolnames.words("getPetByIdForTheOwner")
    assert toolnames.fit(parts, 58, vendor="acme") == parts


def test_redundant_words_go_before_any_word_is_cut() -> None:
    # GIVEN a source that says its vendor, a version, a word twice and filler, 20 characters too long
    parts = toolnames.words("acmeBillingV2ListInvoicesOfTheCustomerForBilling")
    # WHEN it is fitted to 32 characters THEN those go first, and every other word stays
    assert toolnames.fit(parts, 32, vendor="acme") == ["billing", "list", "invoices", "customer"]


def test_a_cut_keeps_the_first_and_the_last_words_and_no_filler_at_the_cut() -> None:
    # GIVEN a source whose verb comes first and whose method comes last, still too long without filler
    parts = toolnames.words("createLocalGatewayRouteTableVirtualInterfaceGroupAssociationPost")
    # WHEN it is fitted to 40 characters
    fitted = toolnames.fit(parts, 40)
    # THEN the ends stay, a run of middle words goes, the order is kept
    assert fitted[0] == "create" and fitted[-1] == "post"
    assert len("-".join(fitted)) <= 40
    assert [word for word in parts if word in fitted] == fitted
    assert toolnames.fit(toolnames.words("countItemsByStatusAndTypeOfTheSupplierWarehouse"), 30)[-1] not in \
        toolnames.FILLER


@pytest.mark.parametrize("seed", range(20))
def test_a_fitted_name_never_exceeds_its_budget(seed: int) -> None:
    # GIVEN random words of random lengths (some longer than the budget itself)
    chance = random.Random(seed)
    parts = ["".join(chance.choice("abcdefv1") for _ in range(chance.randint(1, 70)))
             for _ in range(chance.randint(1, 30))]
    for budget in (31, 40, 61):
        # WHEN they are fitted THEN the name fits, and keeps at least one word
        fitted = toolnames.fit(parts, budget, vendor="acme")
        assert fitted and len("-".join(fitted)) <= budget


# Collisions ---------------------------------------------------------------------------------------

def test_a_taken_name_gets_a_word_the_holder_does_not_share() -> None:
    # GIVEN "list-users" held by GET /users
    names = toolnames.Names("acme")
    assert names.give(["list", "users"], ["get", "users"], salt="a") == "list-users"
    # WHEN POST /users slugs alike THEN the method tells them apart; a third GET gets its path word
    assert names.give(["list", "users"], ["post", "users"], salt="b") == "list-users-post"
    assert names.give(["list", "users"], ["get", "admins"], salt="c") == "list-users-admins"


def test_filler_and_the_vendors_words_never_tell_names_apart() -> None:
    names = toolnames.Names("acme")
    names.give(["list", "things"], ["get"], salt="a")
    assert names.give(["list", "things"], ["for", "acme", "of", "post"], salt="b") == "list-things-post"


def test_names_cut_alike_are_told_apart_by_a_word_the_cut_dropped() -> None:
    # GIVEN two long sources that differ only in a middle word the cut drops
    first = toolnames.words("listCustomFieldValuesOfProjectBoardAlphaColumnsInTheWorkspaceSettingsPage")
    second = toolnames.words("listCustomFieldValuesOfProjectBoardBetaColumnsInTheWorkspaceSettingsPage")
    names = toolnames.Names("acme-long-vendor-name-for-tests")  # 31 characters: 31 left for the name
    # WHEN both are named
    one, two = names.give(first, salt="1"), names.give(second, salt="2")
    # THEN the second carries its own word, no hash, within the budget
    assert one != two and "beta" in two.split("-") and not HASHED.search(two)
    assert max(len(one), len(two)) <= names.budget == 31


def test_a_hash_only_when_no_word_tells_them_apart() -> None:
    names = toolnames.Names("acme")
    first = names.give(["get", "forecast"], salt="get_forecast")
    second = names.give(["get", "forecast"], salt="getForecast")
    assert first == "get-forecast"
    assert second == "get-forecast-" + hashlib.sha256(b"getForecast").hexdigest()[:6]


def test_thousands_of_alike_sources_stay_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN 3,000 operations with one operationId, whose paths differ in nothing but slashes (no word
    # tells them apart)
    found = [operations.Operation("get", "/x" + "/" * index, {}, (), _op("sameId"), ())
             for index in range(3000)]
    hashes = {"count": 0}
    real = toolnames.hashlib.sha256

    def counted(data: bytes) -> Any:
        hashes["count"] += 1
        return real(data)

    monkeypatch.setattr(toolnames.hashlib, "sha256", counted)
    # WHEN they are named
    named = operations.names(found, {}, "acme")
    # THEN every name is distinct, and the hashes tried grow with the operations, not their square
    assert len(set(named)) == 3000
    assert hashes["count"] <= 2 * 3000


# OpenAPI imports ----------------------------------------------------------------------------------

def test_long_operation_ids_keep_their_words() -> None:
    # GIVEN the operation, cut to `update-multiple-custom-f-6b68dc` before
    document = _document({"/fields": {"put": _op("updateMultipleCustomFieldsValues")},
                          "/runners": {"get": _op("actions/list-self-hosted-runner-groups-for-org")}})
    # WHEN it is imported THEN every word stays, and no hash
    assert _names(document) == {"PUT /fields": "update-multiple-custom-fields-values",
                                "GET /runners": "actions-list-self-hosted-runner-groups-for-org"}


def test_operations_sharing_an_operation_id_are_told_apart_by_the_path_or_a_tag() -> None:
    # GIVEN one operationId reused: on two paths, and on one path twice with only tags to tell
    document = _document({"/users": {"get": _op("list")}, "/groups": {"get": _op("list")},
                          "/items": {"get": _op("fetch", tags=["billing"])},
                          "/items/": {"get": _op("fetch", tags=["Shipping Orders"])}})
    # WHEN imported THEN the later ones carry a word of their own, never a hash
    assert _names(document) == {"GET /users": "list", "GET /groups": "list-groups",
                                "GET /items": "fetch", "GET /items/": "fetch-shipping"}


def test_without_any_word_of_its_own_an_operation_is_named_from_method_and_path() -> None:
    document = _document({"/orders/{orderId}": {"delete": _op("🙂🙂")}, "/carts": {"post": _op()}})
    assert _names(document) == {"DELETE /orders/{orderId}": "delete-orders-order-id", "POST /carts": "post-carts"}


@pytest.mark.parametrize("operation_id", [
    "A" * 1_000_000, "aB" * 200_000, "-_ ." * 10_000, "e\u0301" * 50_000, "\ud800broken", "x" * 61 + "Tail",
])
def test_hostile_operation_ids_get_names_within_the_budget(operation_id: str) -> None:
    # GIVEN an operationId of a megabyte, of separators only, of combining marks, of a lone surrogate
    document = _document({"/x": {"get": _op(operation_id)}, "/y": {"get": _op(operation_id)}})
    # WHEN it is imported THEN both operations get distinct valid names that fit beside the vendor
    names = list(_names(document).values())
    assert len(set(names)) == 2
    assert all(operations.fits("acme", name) for name in names)


def test_every_name_fits_beside_its_vendor() -> None:
    # GIVEN a vendor of 31 characters, the longest, and a 200-character operationId
    vendor = "v" * 31
    document = _document({"/x": {"get": _op("getEveryThing" * 15)}, "/y": {"get": _op("getEveryThing" * 15)}})
    # WHEN imported THEN both names fit in vendor__name's 64 characters
    for name in _names(document, vendor=vendor).values():
        assert len(f"{vendor}__{name}") <= TOOL_NAME_MAX


def test_a_reimport_never_renames_a_tool() -> None:
    # GIVEN a first import, and a name kept from the rule before issue 25 (24 characters and a hash)
    first = _document({"/pets": {"get": _op("listPets")},
                       "/runners": {"get": _op("actions/list-self-hosted-runner-groups-for-org")}})
    keep = _names(first)
    keep["GET /runners"] = "actions-list-self-hosted-4f437f"
    # WHEN the document gains, earlier in it, an operation whose name would be the same
    second = _document({"/cats": {"get": _op("listPets")}, **first["paths"]})
    again = _names(second, keep=keep)
    # THEN the existing tools keep their names, and the new one gets a word
    assert again == {"GET /cats": "list-pets-cats", "GET /pets": "list-pets",
                     "GET /runners": "actions-list-self-hosted-4f437f"}


def test_a_reimport_through_the_admin_api_keeps_names(admin: Admin) -> None:
    # GIVEN an import of two operations
    paths = {"/a": {"get": _op("listThings", summary="List things.")},
             "/b": {"get": _op("listThingsForTheWholeAccountIncludingEveryArchivedAndDeletedThing")}}
    answer = admin.call("POST", "/v1/imports/openapi", {"vendor": "acme", "document": json.dumps(_document(paths))})
    assert answer.status_code == 200, answer.body
    before = {line["key"]: line["name"] for line in answer.json_body["tools"]}
    # WHEN the document is imported again with a new operation that slugs like the first
    paths["/c"] = {"post": _op("list_things", summary="List things too.")}
    again = admin.call("POST", "/v1/imports/openapi", {"vendor": "acme", "document": json.dumps(_document(paths))})
    after = {line["key"]: line["name"] for line in again.json_body["tools"]}
    # THEN the first two keep theirs, and the new one is told apart by its method
    assert before["GET /a"] == "list-things" and len(before["GET /b"]) <= name_budget("acme")
    assert after == {**before, "POST /c": "list-things-post"}
    assert not any(HASHED.search(name) for name in after.values())


# The 64 limit, wherever a name is published or named -------------------------------------------

def test_the_admin_api_refuses_a_name_over_64_with_the_vendor(admin: Admin) -> None:
    # GIVEN vendor "unleashed": 53 characters left for a name
    assert name_budget("unleashed") == 53
    fits = admin.call("POST", "/v1/tools", tool_spec(name="x" * 53))
    over = admin.call("POST", "/v1/tools", tool_spec(name="y" * 54))
    # THEN 53 is published, 54 refused naming the field and the limit, and nothing else written
    assert fits.status_code == 201, fits.body
    assert over.status_code == 400
    assert over.json_body["error"]["field"] == "name"
    assert "65 characters" in over.json_body["error"]["message"] and "at most 64" in over.json_body["error"]["message"]
    assert [tool["name"] for tool in admin.call("GET", "/v1/tools").json_body["items"]] == ["x" * 53]


def test_the_console_forms_ask_for_the_vendor_pattern(console: Any) -> None:
    page = console.get("/console/import")
    assert f'pattern="{VENDOR_PATTERN[1:-1]}"' in page.body.decode()


@pytest.mark.parametrize(("vendor", "name", "status"), [
    ("v" * 31, "n" * 31, 201), ("v" * 31, "n" * 32, 400), ("v", "n" * NAME_MAX, 201), ("v", "n" * (NAME_MAX + 1), 400),
    ("v" * 32, "n", 400),
])
def test_vendor_and_name_limits(admin: Admin, vendor: str, name: str, status: int) -> None:
    response = admin.call("POST", "/v1/tools", tool_spec(vendor=vendor, name=name))
    assert response.status_code == status, response.body
    if status == 400:
        assert response.json_body["error"]["field"] in {"name", "vendor"}


def test_an_agent_cannot_acquire_a_tool_whose_mcp_name_is_over_64(admin: Admin, mcp: Mcp) -> None:
    # WHEN an agent authors a tool whose vendor__name would be 65 characters
    result = mcp.call("acquire", tool_spec(vendor="weather", name="w" * 56))
    # THEN it is refused naming the field, and nothing is published or promoted
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["field"] == "name"
    assert admin.call("GET", "/v1/tools").json_body["items"] == []
    assert not [name for name in mcp.tool_names() if "__" in name]


@pytest.mark.parametrize("meta", ["promote", "run_tool"])
def test_a_reference_over_64_is_refused_as_such(mcp: Mcp, meta: str) -> None:
    result = mcp.call(meta, {"vendor": "weather", "name": "w" * 56})
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["field"] == "name"
    assert "at most 64" in result["structuredContent"]["error"]["message"]


def _upstream(vendor: str = "wide") -> Upstream:
    return Upstream("account", vendor, "http://127.0.0.1:9/mcp", utcnow())


def _listed(name: str) -> dict[str, Any]:
    return {"name": name, "description": f"The {name} tool.", "inputSchema": {"type": "object"}}


def test_an_mcp_servers_long_tool_names_keep_their_words_within_64() -> None:
    # GIVEN a server listing tools with names of 128 characters (the most it may), two alike but for
    # a middle word, and one short
    long_a = "get_" + "_".join(["report"] * 3) + "_alpha_" + "_".join(f"part{index}" for index in range(20))
    long_b = long_a.replace("_alpha_", "_beta_")
    tools = [_listed(long_a[:128]), _listed(long_b[:128]), _listed("getForecast")]
    # WHEN they become candidates
    found = upstream_candidates(_upstream("a-vendor-of-twenty-chars"), tools, {})
    names = [candidate.name for candidate in found]
    # THEN each fits beside the vendor, they differ by a word, and the short one is whole
    assert all(len(f"a-vendor-of-twenty-chars__{name}") <= TOOL_NAME_MAX for name in names)
    assert len(set(names)) == 3 and names[2] == "get-forecast"
    assert not any(HASHED.search(name) for name in names)
    assert "beta" in names[1].split("-")


def test_an_mcp_servers_names_stay_as_kept() -> None:
    # GIVEN a tool named under the rule before issue 25
    kept = {"get_forecast_for_every_city_in_the_world": "get-forecast-for-every-ci-1a2b3c"}
    tools = [_listed("get_forecast_for_every_city_in_the_world"), _listed("get_forecast_for_every_city_in_the_world_2")]
    # WHEN the server is synced THEN the kept name stays, and the new tool is named by the new rule
    found = upstream_candidates(_upstream(), tools, kept)
    assert [candidate.name for candidate in found] == ["get-forecast-for-every-ci-1a2b3c",
                                                       "get-forecast-for-every-city-in-the-world-2"]


@pytest.fixture
def listing() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A handshake-era MCP server on 127.0.0.1 whose tools/list answers the list yielded."""
    tools: list[dict[str, Any]] = []

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if message["method"] == "server/discover":
                self.reply(400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "no"}})
            elif message["method"] == "notifications/initialized":
                self.reply(202, None)
            elif message["method"] == "initialize":
                self.reply(200, {"jsonrpc": "2.0", "id": message["id"],
                                 "result": {"protocolVersion": "2025-11-25", "capabilities": {}}})
            else:
                self.reply(200, {"jsonrpc": "2.0", "id": message["id"], "result": {"tools": tools}})

    mcpclient.forget_sessions()
    with serving(Handler) as base:
        yield f"{base}/mcp", tools
    mcpclient.forget_sessions()


def test_a_registered_servers_long_tool_is_published_and_promoted_within_64(
        admin: Admin, mcp: Mcp, listing: tuple[str, list[dict[str, Any]]]) -> None:
    url, tools = listing
    # GIVEN a server whose tool name is 100 characters
    own = "retrieve_the_complete_quarterly_financial_statement_summary_for_every_subsidiary_of_the_holding_group"
    tools.append(_listed(own))
    # WHEN it is registered and an agent promotes the tool
    answer = admin.call("POST", "/v1/upstreams", {"vendor": "finance", "url": url})
    assert answer.status_code == 201, answer.body
    [line] = answer.json_body["sync"]["tools"]
    mcp.call("promote", {"vendor": "finance", "name": line["name"]})
    # THEN its MCP name fits in 64, with its words and no hash
    [listed] = [name for name in mcp.tool_names() if name.startswith("finance__")]
    assert len(listed) <= TOOL_NAME_MAX and not HASHED.search(listed)
    assert listed.startswith("finance__retrieve-") and listed.endswith("-group")
