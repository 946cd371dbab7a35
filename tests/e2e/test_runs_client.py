"""Runs a person can trust, through the real MCP SDK client against the served local stack:
approvals, get_run, denial, expiry, dry-run redaction, revoked connections, acquire, and the
refusal of cloud-metadata URLs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import Vendor
from tests.e2e.conftest import Stack, start_stack, stop_stack
from tests.e2e.test_mcp_client import MODES, connect

pytestmark = pytest.mark.anyio
SECRET = "tok_live_" + uuid.uuid4().hex


def publish_write(stack: Stack, vendor: Vendor, connection: str | None = None, shop: str | None = None) -> str:
    """A write tool under a vendor name of its own; answers the vendor name."""
    shop = shop or f"shop{uuid.uuid4().hex[:8]}"
    spec: dict[str, Any] = {
        "vendor": shop, "name": "create-order", "description": f"Create a {shop} order.",
        "input_schema": {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]},
        "annotations": {"destructiveHint": False},
        "request": {"method": "POST", "url": f"{vendor.url}/{shop}/orders"},
    }
    if connection:
        spec["connection"] = connection
    stack.publish(spec)
    return shop


def connect_vendor(stack: Stack, shop: str) -> str:
    status, connection = stack.admin("POST", "/v1/connections",
                                     {"vendor": shop, "auth": {"type": "bearer", "token": SECRET}})
    assert status == 201, connection
    return connection["id"]


def sent_to(vendor: Vendor, shop: str) -> list[dict[str, Any]]:
    return [r for r in vendor.received if r["path"].startswith(f"/{shop}/")]


@pytest.mark.parametrize("mode", MODES)
async def test_approval_flow(stack: Stack, vendor: Vendor, mode: str) -> None:
    shop = publish_write(stack, vendor)
    agent = stack.new_agent()
    async with connect(stack, agent["api_key"], mode) as client:
        await client.call_tool("promote", {"vendor": shop, "name": "create-order"})
        # the first call waits for a person; the vendor sees nothing
        first = await client.call_tool(f"{shop}__create-order", {"total": 10})
        assert first.is_error is False
        waiting = first.structured_content
        assert waiting["status"] == "awaiting_approval" and waiting["approval_url"].endswith(waiting["run_id"])
        assert sent_to(vendor, shop) == []
        # a person approves through /v1; get_run returns the vendor's answer
        status, approved = stack.admin("POST", f"/v1/approvals/{waiting['run_id']}/approve")
        assert (status, approved["status"]) == (200, "succeeded")
        got = await client.call_tool("get_run", {"run_id": waiting["run_id"]})
        assert got.structured_content == {"run_id": waiting["run_id"], "status": "succeeded",
                                          "result": {"orders": [{"id": 1}]}}
        # the second call runs at once, and still after demote + promote
        second = await client.call_tool(f"{shop}__create-order", {"total": 11})
        assert second.structured_content == {"orders": [{"id": 1}]}
        await client.call_tool("demote", {"vendor": shop, "name": "create-order"})
        await client.call_tool("promote", {"vendor": shop, "name": "create-order"})
        third = await client.call_tool(f"{shop}__create-order", {"total": 12})
        assert third.structured_content == {"orders": [{"id": 1}]}
        assert len(sent_to(vendor, shop)) == 3


@pytest.mark.parametrize("mode", MODES)
async def test_deny(stack: Stack, vendor: Vendor, mode: str) -> None:
    shop = publish_write(stack, vendor)
    agent = stack.new_agent()
    async with connect(stack, agent["api_key"], mode) as client:
        waiting = (await client.call_tool("run_tool", {"vendor": shop, "name": "create-order",
                                                       "input": {"total": 1}})).structured_content
        status, denied = stack.admin("POST", f"/v1/approvals/{waiting['run_id']}/deny")
        assert (status, denied["status"]) == (200, "denied")
        got = await client.call_tool("get_run", {"run_id": waiting["run_id"]})
        assert got.structured_content["status"] == "denied"
        assert sent_to(vendor, shop) == []


@pytest.mark.parametrize("mode", MODES)
async def test_dry_run_of_a_write_previews_with_the_secret_redacted(stack: Stack, vendor: Vendor,
                                                                    mode: str) -> None:
    shop = f"shop{uuid.uuid4().hex[:8]}"
    connection = connect_vendor(stack, shop)
    publish_write(stack, vendor, connection, shop)
    agent = stack.new_agent()
    async with connect(stack, agent["api_key"], mode) as client:
        result = await client.call_tool("run_tool", {"vendor": shop, "name": "create-order",
                                                     "input": {"total": 3}, "dryRun": True})
        preview = result.structured_content["preview"]
        assert preview["headers"]["Authorization"] == "[redacted]"
        assert SECRET not in str(result.model_dump())
        assert sent_to(vendor, shop) == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_revoked_connection(stack: Stack, vendor: Vendor, mode: str) -> None:
    shop = f"shop{uuid.uuid4().hex[:8]}"
    connection = connect_vendor(stack, shop)
    stack.publish({"vendor": shop, "name": "list-orders", "description": "List orders.",
                   "input_schema": {"type": "object"}, "annotations": {"readOnlyHint": True},
                   "connection": connection, "request": {"method": "GET", "url": f"{vendor.url}/{shop}/orders"}})
    agent = stack.new_agent()
    async with connect(stack, agent["api_key"], mode) as client:
        ok = await client.call_tool("run_tool", {"vendor": shop, "name": "list-orders", "input": {}})
        assert ok.is_error is False
        assert sent_to(vendor, shop)[-1]["headers"]["Authorization"] == f"Bearer {SECRET}"
        stack.admin("POST", f"/v1/connections/{connection}/revoke")
        refused = await client.call_tool("run_tool", {"vendor": shop, "name": "list-orders", "input": {}})
        assert refused.is_error is True
        assert refused.structured_content["error"]["code"] == "connection_revoked"
        assert len(sent_to(vendor, shop)) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_acquire_then_call_first_class_and_through_run_tool(stack: Stack, vendor: Vendor, mode: str) -> None:
    shop = f"shop{uuid.uuid4().hex[:8]}"
    agent = stack.new_agent()
    allow_host(stack, vendor.url.removeprefix("http://"))
    async with connect(stack, agent["api_key"], mode) as client:
        acquired = await client.call_tool("acquire", {
            "vendor": shop, "name": "list-stock", "description": "List stock levels.",
            "input_schema": {"type": "object", "properties": {"sku": {"type": "string"}}},
            "annotations": {"readOnlyHint": True},
            "request": {"method": "GET", "url": f"{vendor.url}/{shop}/stock"}})
        assert acquired.structured_content == {"vendor": shop, "name": "list-stock", "version": 1, "size": 1}
        assert f"{shop}__list-stock" in [t.name for t in (await client.list_tools()).tools]
        first_class = await client.call_tool(f"{shop}__list-stock", {"sku": "A"})
        by_name = await client.call_tool("run_tool", {"vendor": shop, "name": "list-stock", "input": {"sku": "B"}})
        assert first_class.structured_content == by_name.structured_content == {"orders": [{"id": 1}]}
        assert [r["path"] for r in sent_to(vendor, shop)] == [f"/{shop}/stock?sku=A", f"/{shop}/stock?sku=B"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_cloud_metadata_url_is_refused(stack: Stack, mode: str) -> None:
    shop = f"shop{uuid.uuid4().hex[:8]}"
    agent = stack.new_agent()
    steal = {"vendor": shop, "name": "steal", "description": "Read instance credentials.",
             "input_schema": {"type": "object"}, "annotations": {"readOnlyHint": True},
             "request": {"method": "GET", "url": "http://169.254.169.254/latest/meta-data/iam/"}}
    async with connect(stack, agent["api_key"], mode) as client:
        # an agent may not author a tool for a host no person allowed
        refused = await client.call_tool("acquire", steal)
        assert refused.structured_content["error"]["code"] == "host_not_allowed"
        # and even where a person allowed it by mistake, the outbound guard refuses the address
        kept = stack.admin("GET", "/v1/account")[1]["allowed_hosts"]
        allow_host(stack, "169.254.169.254")
        try:
            await client.call_tool("acquire", steal)
            result = await client.call_tool("run_tool", {"vendor": shop, "name": "steal", "input": {}})
        finally:
            stack.admin("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": kept})
        assert result.is_error is True
        assert result.structured_content["error"]["code"] == "forbidden_destination"


def allow_host(stack: Stack, entry: str) -> None:
    """Add `entry` to the account's keyless hosts (keeping what other tests added)."""
    status, account = stack.admin("GET", "/v1/account")
    assert status == 200, account
    status, saved = stack.admin("PUT", "/v1/account/allowed-hosts",
                                {"allowed_hosts": [*account["allowed_hosts"], entry]})
    assert status == 200, saved


@pytest.fixture(scope="module")
def short_wait_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose approvals wait one second."""
    running = start_stack(Path(tmp_path_factory.mktemp("short-wait")), {"WORKSET_APPROVAL_TTL_SECONDS": "1"})
    yield running
    stop_stack(running)


@pytest.mark.parametrize("mode", MODES)
async def test_expiry(short_wait_stack: Stack, vendor: Vendor, mode: str) -> None:
    shop = publish_write(short_wait_stack, vendor)
    agent = short_wait_stack.new_agent()
    async with connect(short_wait_stack, agent["api_key"], mode) as client:
        waiting = (await client.call_tool("run_tool", {"vendor": shop, "name": "create-order",
                                                       "input": {"total": 1}})).structured_content
        await anyio.sleep(1.5)  # let the one-second wait run out (no assertion is made about time itself)
        got = await client.call_tool("get_run", {"run_id": waiting["run_id"]})
        assert got.structured_content["status"] == "expired"
        status, _ = short_wait_stack.admin("POST", f"/v1/approvals/{waiting['run_id']}/approve")
        assert status == 409
        assert sent_to(vendor, shop) == []

