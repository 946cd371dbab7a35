"""The real MCP Python SDK client, in both protocol revisions, against the served local stack."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import Vendor
from tests.e2e.conftest import CLIENT_TIMEOUT_SECONDS, Stack

pytestmark = pytest.mark.anyio
MODES = ["legacy", "2026-07-28"]
META = ["find_tool", "promote", "demote", "run_tool", "acquire", "get_run", "pin", "unpin"]


@asynccontextmanager
async def connect(stack: Stack, key: str, mode: str) -> AsyncIterator[Client]:
    # httpx's own 5 s default gave up on a first find_tool that a loaded machine answered in 5.1 s
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=CLIENT_TIMEOUT_SECONDS)
    async with http, Client(streamable_http_client(f"{stack.url}/mcp", http_client=http), mode=mode) as client:
        yield client


def publish_pair(stack: Stack, vendor: Vendor) -> str:
    """A read tool and a write tool under a vendor name of their own; answers the vendor name."""
    name = f"shop{uuid.uuid4().hex[:8]}"
    stack.publish({
        "vendor": name, "name": "list-orders", "description": f"List {name} sales orders for a customer.",
        "input_schema": {"type": "object", "properties": {"customer": {"type": "string"}},
                         "required": ["customer"]},
        "annotations": {"readOnlyHint": True},
        "request": {"method": "GET", "url": f"{vendor.url}/orders"},
    })
    stack.publish({
        "vendor": name, "name": "create-order", "description": f"Create a {name} sales order.",
        "input_schema": {"type": "object", "properties": {"customer": {"type": "string"},
                                                           "total": {"type": "number"}},
                         "required": ["customer", "total"]},
        "annotations": {"destructiveHint": False},
        "request": {"method": "POST", "url": f"{vendor.url}/customers/{{customer}}/orders"},
    })
    return name


@pytest.mark.parametrize("mode", MODES)
async def test_the_whole_working_set_flow(stack: Stack, vendor: Vendor, mode: str) -> None:
    # GIVEN a fresh agent and two tools in the toolbox
    shop = publish_pair(stack, vendor)
    agent = stack.new_agent()
    async with connect(stack, agent["api_key"], mode) as client:
        # THEN the agent starts with the meta-tools only, and is told to find before acquiring
        assert [t.name for t in (await client.list_tools()).tools] == META
        if mode == "legacy":
            instructions = client.instructions
        else:  # a version-pinned client skips the probe; ask the server itself
            discovered = await client.session.send_discover(mode)
            assert (discovered["cacheScope"], discovered["ttlMs"]) == ("private", 0)
            instructions = discovered["instructions"]
        assert "find_tool" in instructions

        # WHEN it finds the order tool
        found = await client.call_tool("find_tool", {"query": f"{shop} orders"})
        hits = found.structured_content["hits"]
        assert {(h["vendor"], h["name"], h["promoted"]) for h in hits[:2]} == {
            (shop, "list-orders", False), (shop, "create-order", False)}

        # AND promotes it, the answer carries the definition and the list grows
        promoted = await client.call_tool("promote", {"vendor": shop, "name": "list-orders"})
        assert promoted.structured_content["size"] == 1
        assert promoted.structured_content["tool"]["name"] == f"{shop}__list-orders"
        listed = (await client.list_tools()).tools
        assert [t.name for t in listed] == META + [f"{shop}__list-orders"]

        # AND calls it first-class: the vendor answers through Workset
        result = await client.call_tool(f"{shop}__list-orders", {"customer": "acme"})
        assert result.is_error is False
        assert result.structured_content == {"orders": [{"id": 1}]}
        assert vendor.received[-1]["path"] == "/orders?customer=acme"

        # AND a dry run of the write previews without reaching the vendor
        calls_before = len(vendor.received)
        preview = await client.call_tool("run_tool", {"vendor": shop, "name": "create-order",
                                                      "input": {"customer": "acme", "total": 5}, "dryRun": True})
        assert preview.structured_content["preview"]["method"] == "POST"
        assert preview.structured_content["preview"]["url"] == f"{vendor.url}/customers/acme/orders"
        assert len(vendor.received) == calls_before

        # AND run_tool without dryRun reaches the vendor without promoting
        ran = await client.call_tool("run_tool", {"vendor": shop, "name": "list-orders",
                                                  "input": {"customer": "globex"}})
        assert ran.structured_content == {"orders": [{"id": 1}]}
        assert vendor.received[-1]["path"] == "/orders?customer=globex"

        # AND demotes it: the list is back to the meta-tools, and find_tool still finds it
        demoted = await client.call_tool("demote", {"vendor": shop, "name": "list-orders"})
        assert demoted.structured_content == {"size": 0}
        listed = (await client.list_tools()).tools
        assert [t.name for t in listed] == META
        again = await client.call_tool("find_tool", {"query": f"{shop} list orders"})
        assert again.structured_content["hits"][0]["name"] == "list-orders"

    # THEN the history says who did what
    status, history = stack.admin("GET", f"/v1/agents/{agent['id']}/history")
    assert status == 200, history
    assert [(e["action"], e["cause"]) for e in history["items"]] == [
        ("demoted", "agent_asked"), ("promoted", "agent_asked")]


@pytest.mark.parametrize("mode", MODES)
async def test_tool_level_errors_are_results_not_crashes(stack: Stack, vendor: Vendor, mode: str) -> None:
    shop = publish_pair(stack, vendor)
    agent = stack.new_agent()
    async with connect(stack, agent["api_key"], mode) as client:
        missing = await client.call_tool("promote", {"vendor": "nobody", "name": "nothing"})
        assert missing.is_error is True
        assert missing.structured_content["error"]["code"] == "tool_not_found"

        bad_input = await client.call_tool("run_tool", {"vendor": shop, "name": "create-order",
                                                        "input": {"customer": "acme"}})
        assert bad_input.structured_content["error"] == {
            "code": "invalid_input", "message": "input.total is required", "field": "input.total"}

        vendor.status = 500
        failed = await client.call_tool("run_tool", {"vendor": shop, "name": "list-orders",
                                                     "input": {"customer": "acme"}})
        vendor.status = 200
        assert failed.is_error is True
        assert failed.structured_content["error"]["status"] == 500

        nothing = await client.call_tool("find_tool", {"query": "zzqx frobnicate"})
        assert nothing.structured_content["hits"] == []
        assert "acquire" in nothing.structured_content["message"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_wrong_key_cannot_connect(stack: Stack, mode: str) -> None:
    with pytest.raises(BaseException) as raised:
        async with connect(stack, "wsk_agnobody_wrong", mode) as client:
            await client.list_tools()
    error = _innermost(raised.value)
    assert isinstance(error, MCPError)
    assert "agent key" in error.error.message


def _innermost(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _post(stack: Stack, body: bytes, headers: dict[str, str], method: str = "POST") -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(f"{stack.url}/mcp", data=body if method == "POST" else None,
                                     method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, dict(response.headers), json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, dict(error.headers), json.loads(raw) if raw else None


def test_protocol_errors_over_http(stack: Stack) -> None:
    key = stack.new_agent()["api_key"]
    auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    status, _, body = _post(stack, b"{oops", auth)
    assert (status, body["error"]["code"]) == (400, -32700)

    unknown = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "nope/nothing", "params": {}}).encode()
    status, _, body = _post(stack, unknown, auth)
    assert body["error"]["code"] == -32601

    status, headers, _ = _post(stack, unknown, {"Content-Type": "application/json"})
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")

    status, _, _ = _post(stack, b"", auth, method="GET")
    assert status == 405
