"""Imported tools through the real MCP Python SDK client, in both revisions, against the served
local stack: an OpenAPI document's operation calling a local vendor, and an MCP server's tool
(the SDK's own server) called through Workset."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.conftest import Vendor
from tests.e2e.conftest import Stack
from tests.e2e.test_mcp_client import MODES, connect
from tests.upstream_servers import sdk_url_fixture  # noqa: F401

pytestmark = pytest.mark.anyio


def _document(vendor: Vendor) -> str:
    return json.dumps({
        "openapi": "3.1.0", "info": {"title": "Orders", "version": "1"}, "servers": [{"url": vendor.url}],
        "paths": {"/customers/{customer}/orders": {"get": {
            "operationId": "listCustomerOrders", "summary": "List the sales orders of one customer",
            "parameters": [{"name": "customer", "in": "path", "required": True, "schema": {"type": "string"}},
                           {"name": "status", "in": "query", "schema": {"type": "string"}}]}}},
    })


@pytest.mark.parametrize("mode", MODES)
async def test_an_imported_operation_is_found_promoted_and_called(stack: Stack, vendor: Vendor, mode: str) -> None:
    # GIVEN a document imported under a vendor of its own
    shop = f"orders{uuid.uuid4().hex[:8]}"
    status, answer = stack.admin("POST", "/v1/imports/openapi", {"vendor": shop, "document": _document(vendor)})
    assert status == 200 and answer["counts"]["published"] == 1, answer
    agent = stack.new_agent()
    async with connect(stack, agent["api_key"], mode) as client:
        # WHEN the agent finds it, promotes it and calls it first-class
        # (the stack is shared: other tests imported the same operation under other vendors)
        hits = (await client.call_tool("find_tool", {"query": f"{shop} sales orders of a customer"})).structured_content
        assert (hits["hits"][0]["vendor"], hits["hits"][0]["name"]) == (shop, "list-customer-orders")
        await client.call_tool("promote", {"vendor": shop, "name": "list-customer-orders"})
        assert f"{shop}__list-customer-orders" in [tool.name for tool in (await client.list_tools()).tools]
        result = await client.call_tool(f"{shop}__list-customer-orders", {"customer": "acme", "status": "open"})
    # THEN the vendor got the request the document describes
    assert result.is_error is False
    assert vendor.received[-1]["path"] == "/customers/acme/orders?status=open"


@pytest.mark.parametrize("mode", MODES)
async def test_an_mcp_servers_tool_is_called_through_workset(stack: Stack, sdk_url: str, mode: str) -> None:
    # GIVEN the SDK's own server registered as a vendor
    weather = f"weather{uuid.uuid4().hex[:8]}"
    status, answer = stack.admin("POST", "/v1/upstreams", {"vendor": weather, "url": sdk_url})
    assert status == 201, answer
    agent = stack.new_agent()
    async with connect(stack, agent["api_key"], mode) as client:
        # WHEN an agent promotes its forecast tool and calls it
        await client.call_tool("promote", {"vendor": weather, "name": "get-forecast"})
        result = await client.call_tool(f"{weather}__get-forecast", {"city": "Lyon"})
    # THEN the server's structured answer reaches the agent as the server gave it
    assert result.is_error is False
    assert result.structured_content == {"city": "Lyon", "temperature_c": 21.5, "conditions": "sunny"}
