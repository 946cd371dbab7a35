"""The /mcp endpoint through the Chalice test client: both revisions, the meta-tools, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import LEGACY, Admin, Mcp, Vendor, tool_spec

META = ["find_tool", "promote", "demote", "run_tool", "acquire", "get_run", "pin", "unpin"]


@pytest.fixture(params=["legacy", "modern"])
def any_mcp(request: pytest.FixtureRequest, mcp: Mcp) -> Mcp:
    """The same checks in both protocol revisions."""
    mcp.modern = request.param == "modern"
    return mcp


def test_initialize_echoes_a_supported_version_and_gives_instructions(mcp: Mcp) -> None:
    result = mcp.post("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                     "clientInfo": {"name": "t", "version": "1"}}).json_body["result"]
    assert result["protocolVersion"] == "2025-06-18"
    assert "find_tool" in result["instructions"] and "acquire" in result["instructions"]


def test_initialized_notification_gets_202(mcp: Mcp) -> None:
    body = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    response = mcp.post("notifications/initialized", raw=body.encode())
    assert response.status_code == 202
    assert response.body == b""


def test_discover_answers_versions_ttl_and_private_cache_scope(mcp: Mcp) -> None:
    mcp.modern = True
    result = mcp.post("server/discover").json_body["result"]
    assert result["supportedVersions"][0] == "2026-07-28"
    assert "2025-11-25" in result["supportedVersions"]
    assert (result["cacheScope"], result["ttlMs"], result["resultType"]) == ("private", 0, "complete")


def test_tools_list_is_meta_tools_then_promoted_in_promotion_order(admin: Admin, any_mcp: Mcp) -> None:
    # GIVEN three tools, promoted b, a, c
    for name in ["a-tool", "b-tool", "c-tool"]:
        admin.publish(name=name)
    for name in ["b-tool", "a-tool", "c-tool"]:
        any_mcp.call("promote", {"vendor": "unleashed", "name": name})
    # WHEN the list is read
    names = any_mcp.tool_names()
    # THEN meta-tools come first, then the promoted tools in promotion order
    assert names == META + ["unleashed__b-tool", "unleashed__a-tool", "unleashed__c-tool"]


def test_modern_tools_list_carries_ttl_and_private_scope(any_mcp: Mcp) -> None:
    result = any_mcp.post("tools/list").json_body["result"]
    if any_mcp.modern:
        assert (result["ttlMs"], result["cacheScope"], result["resultType"]) == (0, "private", "complete")
    else:
        assert "ttlMs" not in result and "resultType" not in result


def test_listed_tool_has_the_newest_versions_schema_and_annotations(admin: Admin, mcp: Mcp) -> None:
    admin.publish()
    mcp.call("promote", {"vendor": "unleashed", "name": "list-sales-orders"})
    admin.publish(description="Version two.", annotations={"readOnlyHint": True, "idempotentHint": True})
    tools = {t["name"]: t for t in mcp.post("tools/list").json_body["result"]["tools"]}
    listed = tools["unleashed__list-sales-orders"]
    assert listed["description"] == "Version two."
    assert listed["annotations"] == {"readOnlyHint": True, "idempotentHint": True}
    assert listed["inputSchema"] == tool_spec()["input_schema"]


def test_promote_answers_size_and_definition_and_repeats_change_nothing(admin: Admin, any_mcp: Mcp) -> None:
    admin.publish()
    ref = {"vendor": "unleashed", "name": "list-sales-orders"}
    first = any_mcp.call("promote", ref)
    again = any_mcp.call("promote", ref)
    assert first["structuredContent"]["size"] == 1
    assert first["structuredContent"]["tool"]["name"] == "unleashed__list-sales-orders"
    assert again["structuredContent"] == first["structuredContent"]
    assert json.loads(first["content"][0]["text"]) == first["structuredContent"]
    history = admin.call("GET", f"/v1/agents/{_agent_id(admin)}/history").json_body["items"]
    assert [(e["action"], e["cause"]) for e in history] == [("promoted", "agent_asked")]


def test_demote_answers_size_and_a_repeat_changes_nothing(admin: Admin, any_mcp: Mcp) -> None:
    admin.publish()
    ref = {"vendor": "unleashed", "name": "list-sales-orders"}
    any_mcp.call("promote", ref)
    assert any_mcp.call("demote", ref)["structuredContent"] == {"size": 0}
    assert any_mcp.call("demote", ref)["structuredContent"] == {"size": 0}
    assert any_mcp.tool_names() == META
    history = admin.call("GET", f"/v1/agents/{_agent_id(admin)}/history").json_body["items"]
    assert [e["action"] for e in history] == ["demoted", "promoted"]


@pytest.mark.parametrize("meta", ["promote", "demote", "run_tool"])
def test_unknown_tool_is_tool_not_found(any_mcp: Mcp, meta: str) -> None:
    result = any_mcp.call(meta, {"vendor": "nobody", "name": "nothing"})
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "tool_not_found"


def test_first_class_call_of_an_unknown_tool_is_an_unknown_tool_error(any_mcp: Mcp) -> None:
    # MCP's rule for a name that is not in the list: a JSON-RPC error, -32602
    response = any_mcp.post("tools/call", {"name": "nobody__nothing", "arguments": {}})
    assert response.json_body["error"]["code"] == -32602
    assert "run_tool" in response.json_body["error"]["message"]


def test_find_tool_ranks_hits_with_promoted_flag_and_hints(admin: Admin, mcp: Mcp) -> None:
    # GIVEN an order tool (promoted) and an unrelated write tool
    admin.publish()
    admin.publish(vendor="notion", name="create-page", description="Create a page in a Notion workspace.",
                  annotations={"destructiveHint": False},
                  request={"method": "POST", "url": "http://127.0.0.1:9/pages"})
    mcp.call("promote", {"vendor": "unleashed", "name": "list-sales-orders"})
    # WHEN the agent searches
    hits = mcp.call("find_tool", {"query": "Unleashed sales orders"})["structuredContent"]["hits"]
    notion = mcp.call("find_tool", {"query": "notion page"})["structuredContent"]["hits"]
    # THEN each hit says whether it is promoted, what it may do and what it takes (the first, its schema)
    assert hits[0] == {"vendor": "unleashed", "name": "list-sales-orders", "promoted": True,
                       "readOnlyHint": True, "destructiveHint": False,
                       "description": "List sales orders in Unleashed, filtered by customer.",
                       "input": "customer*: string, page: integer",
                       "input_schema": tool_spec()["input_schema"], "available": True}
    assert notion[0]["name"] == "create-page"
    assert (notion[0]["promoted"], notion[0]["readOnlyHint"]) == (False, False)


def test_find_tool_finds_demoted_tools(admin: Admin, mcp: Mcp) -> None:
    admin.publish()
    ref = {"vendor": "unleashed", "name": "list-sales-orders"}
    mcp.call("promote", ref)
    mcp.call("demote", ref)
    hits = mcp.call("find_tool", {"query": "order"})["structuredContent"]["hits"]
    assert [(h["name"], h["promoted"]) for h in hits] == [("list-sales-orders", False)]


def test_find_tool_without_hits_points_at_acquire(admin: Admin, mcp: Mcp) -> None:
    admin.publish()
    result = mcp.call("find_tool", {"query": "zzqx frobnicate"})
    assert result["isError"] is False
    assert result["structuredContent"]["hits"] == []
    assert "acquire" in result["structuredContent"]["message"]


def test_find_tool_sees_a_tool_published_after_the_index_was_built(admin: Admin, mcp: Mcp) -> None:
    admin.publish()
    mcp.call("find_tool", {"query": "orders"})
    admin.publish(vendor="stripe", name="list-invoices", description="List Stripe invoices.")
    hits = mcp.call("find_tool", {"query": "invoices"})["structuredContent"]["hits"]
    assert hits[0]["name"] == "list-invoices"


@pytest.mark.parametrize(
    ("meta", "arguments", "field"),
    [
        ("find_tool", {}, "query"),
        ("find_tool", {"query": "x", "limit": 0}, "limit"),
        ("promote", {"vendor": "UPPER", "name": "x"}, "vendor"),
        ("demote", {"vendor": "a"}, "name"),
        ("run_tool", {"vendor": "a", "name": "b", "input": "text"}, "input"),
    ],
)
def test_bad_meta_tool_arguments_are_isError_naming_the_field(any_mcp: Mcp, meta: str, arguments: dict,
                                                               field: str) -> None:
    result = any_mcp.call(meta, arguments)
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "invalid_input"
    assert result["structuredContent"]["error"]["field"] == field


def test_call_of_a_promoted_tool_reaches_the_vendor_and_sets_last_used(admin: Admin, mcp: Mcp,
                                                                        vendor: Vendor) -> None:
    # GIVEN a promoted read tool pointing at the local vendor
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/customers/{{customer}}/orders"})
    mcp.call("promote", {"vendor": "unleashed", "name": "list-sales-orders"})
    # WHEN the agent calls it first-class
    result = mcp.call("unleashed__list-sales-orders", {"customer": "ACME Ltd/NZ", "page": 2})
    # THEN the vendor got the request and its JSON is the structured result
    assert result["isError"] is False
    assert result["structuredContent"] == {"orders": [{"id": 1}]}
    assert vendor.received[0]["path"] == "/customers/ACME%20Ltd%2FNZ/orders?page=2"
    items = admin.call("GET", f"/v1/agents/{_agent_id(admin)}/working-set").json_body["items"]
    assert items[0]["last_used_at"] is not None


def test_run_tool_does_not_promote_and_does_not_mark_use(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    result = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders",
                                   "input": {"customer": "acme"}})
    assert result["structuredContent"] == {"orders": [{"id": 1}]}
    assert vendor.received[0]["path"] == "/orders?customer=acme"
    assert mcp.tool_names() == META


def test_first_class_call_validates_input_naming_the_field(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    mcp.call("promote", {"vendor": "unleashed", "name": "list-sales-orders"})
    missing = mcp.call("unleashed__list-sales-orders", {})
    wrong = mcp.call("unleashed__list-sales-orders", {"customer": "a", "page": "two"})
    assert missing["structuredContent"]["error"]["field"] == "input.customer"
    assert wrong["structuredContent"]["error"]["field"] == "input.page"
    assert vendor.received == []


def _post_raw(mcp: Mcp, body: bytes, headers: dict[str, str]) -> Any:
    """POST /mcp with exactly these headers (Mcp.post always adds a Content-Type and a key)."""
    return mcp.client.http.post("/mcp", headers={"MCP-Protocol-Version": LEGACY, **headers}, body=body)


@pytest.mark.parametrize("content_type", [None, "application/json", "application/json; charset=utf-8"])
def test_bad_json_is_parse_error_400(mcp: Mcp, content_type: str | None) -> None:
    # GIVEN a body that is no JSON, sent with the content type (or none: Chalice then assumes JSON)
    headers = {"Authorization": f"Bearer {mcp.key}"} | ({"Content-Type": content_type} if content_type else {})
    # WHEN it is posted
    response = _post_raw(mcp, b"{not json", headers)
    # THEN it is a parse error, not a refused content type
    assert response.status_code == 400
    assert response.json_body["error"]["code"] == -32700


def test_no_authorization_header_is_401_with_a_bearer_challenge(mcp: Mcp) -> None:
    # GIVEN a well-formed request that carries no Authorization header at all
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
    # WHEN it is posted
    response = _post_raw(mcp, body, {"Content-Type": "application/json"})
    # THEN it is refused with a Bearer challenge naming the resource metadata, and no token error
    # (RFC 6750 3.1: `invalid_token` only when a token was sent)
    challenge = response.headers["WWW-Authenticate"]
    assert response.status_code == 401
    assert challenge.startswith("Bearer resource_metadata=") and "invalid_token" not in challenge


def test_unknown_method_is_method_not_found(any_mcp: Mcp) -> None:
    response = any_mcp.post("tools/frobnicate")
    assert response.json_body["error"]["code"] == -32601
    assert response.status_code == (404 if any_mcp.modern else 200)


@pytest.mark.parametrize("key", ["", "wsk_nobody_secret", "not-a-key"])
def test_missing_or_wrong_key_is_401_with_www_authenticate(mcp: Mcp, key: str) -> None:
    response = mcp.post("tools/list", key=key or "x")
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_tampered_key_of_a_real_agent_is_401(mcp: Mcp) -> None:
    response = mcp.post("tools/list", key=mcp.key[:-2] + "xx")
    assert response.status_code == 401


def test_get_is_405(mcp: Mcp) -> None:
    response = mcp.client.http.get("/mcp", headers={"Authorization": f"Bearer {mcp.key}"})
    assert response.status_code == 405


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({"MCP-Protocol-Version": "2025-11-25"}, -32020),
        ({"Mcp-Method": "tools/call"}, -32020),
    ],
)
def test_modern_header_mismatch_is_400(mcp: Mcp, headers: dict, code: int) -> None:
    mcp.modern = True
    response = mcp.post("tools/list", headers=headers)
    assert response.status_code == 400
    assert response.json_body["error"]["code"] == code


def test_modern_unsupported_version_is_32022_with_supported_list(mcp: Mcp) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2099-01-01",
        "io.modelcontextprotocol/clientCapabilities": {}}}}
    response = mcp.post("tools/list", raw=json.dumps(body).encode(),
                        headers={"MCP-Protocol-Version": "2099-01-01", "Mcp-Method": "tools/list"})
    assert response.status_code == 400
    error = response.json_body["error"]
    assert error["code"] == -32022
    assert error["data"] == {"supported": ["2026-07-28"], "requested": "2099-01-01"}


def test_foreign_origin_is_refused(mcp: Mcp) -> None:
    response = mcp.post("tools/list", headers={"Origin": "https://evil.example"})
    assert response.status_code == 403


def test_one_agent_does_not_see_anothers_working_set(admin: Admin, mcp: Mcp) -> None:
    admin.publish()
    other = Mcp(mcp.client, admin.create_agent("other")["api_key"])
    mcp.call("promote", {"vendor": "unleashed", "name": "list-sales-orders"})
    assert other.tool_names() == META
    hit = other.call("find_tool", {"query": "orders"})["structuredContent"]["hits"][0]
    assert hit["promoted"] is False


def _agent_id(admin: Admin) -> str:
    return admin.call("GET", "/v1/agents").json_body["items"][0]["id"]


def test_oversized_mcp_body_is_413(mcp: Mcp) -> None:
    response = mcp.post("tools/call", {"name": "find_tool", "arguments": {"query": "x" * 300_000}})
    assert response.status_code == 413


@pytest.mark.parametrize("any_mcp", ["legacy", "modern"], indirect=True)
def test_tools_list_comes_in_pages_no_larger_than_the_budget(any_mcp: Mcp, admin: Admin,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an agent that promoted tools whose definitions together outgrow a page
    from chalicelib.mcp import server

    monkeypatch.setattr(server, "LIST_PAGE_BYTES", 12_000)
    wide = {"type": "object", "properties": {f"field{i}": {"type": "string", "description": "x" * 300}
                                             for i in range(20)}}
    for index in range(5):
        admin.publish(name=f"wide-{index}", input_schema=wide, request={"method": "GET", "url": "http://127.0.0.1:9/w"})
        assert any_mcp.post("tools/call", {"name": "promote", "arguments": {
            "vendor": "unleashed", "name": f"wide-{index}"}}).status_code == 200
    # WHEN a client follows nextCursor
    pages, cursor = [], None
    while True:
        result = any_mcp.post("tools/list", {"cursor": cursor} if cursor else {}).json_body["result"]
        pages.append(result["tools"])
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    # THEN every tool comes once, in the list's order, and a page passes the budget by one tool at most
    names = [tool["name"] for page in pages for tool in page]
    assert names[-5:] == [f"unleashed__wide-{index}" for index in range(5)] and len(names) == len(set(names))
    assert len(pages) > 1
    for page in pages:
        assert len(json.dumps(page[:-1])) <= 12_000


@pytest.mark.parametrize("cursor", ["x", "tools-from-", "tools-from--1", "tools-from-1e3", 5, "tools-from-\u0661"])
def test_a_tools_list_cursor_this_server_did_not_give_is_invalid_params(mcp: Mcp, cursor: Any) -> None:
    answer = mcp.post("tools/list", {"cursor": cursor}).json_body
    assert answer["error"]["code"] == -32602 and "cursor" in answer["error"]["message"]


def test_a_cursor_past_a_list_that_shrank_is_an_empty_last_page(mcp: Mcp) -> None:
    result = mcp.post("tools/list", {"cursor": "tools-from-999"}).json_body["result"]
    assert result["tools"] == [] and "nextCursor" not in result
