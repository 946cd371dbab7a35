"""Announcements through the real MCP SDK client: `ToolListChanged` on the HTTP response for a
2025-11-25 client, and `client.listen()` for a 2026-07-28 client."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.conftest import Stack

pytestmark = pytest.mark.anyio


def publish_tools(stack: Stack, *names: str) -> str:
    shop = f"shop{uuid.uuid4().hex[:8]}"
    for name in names:
        stack.publish({"vendor": shop, "name": name, "description": f"The {name} tool.",
                       "input_schema": {"type": "object"}, "annotations": {"readOnlyHint": True},
                       "request": {"method": "GET", "url": "http://127.0.0.1:9/x"}})
    return shop


def sweep_later(stack: Stack, days: int = 22) -> dict[str, Any]:
    now = (datetime.now(UTC) + timedelta(days=days)).isoformat().replace("+00:00", "Z")
    status, report = stack.admin("POST", "/v1/sweep", {"now": now})
    assert status == 200, report
    return report


def _is_list_changed(message: Any) -> bool:
    root = getattr(message, "root", message)
    return getattr(root, "method", None) == "notifications/tools/list_changed"


async def test_legacy_client_hears_its_own_promote_and_a_sweep_demotion(stack: Stack) -> None:
    shop = publish_tools(stack, "a")
    agent = stack.new_agent()
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        if _is_list_changed(message):
            heard.append(message)

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {agent['api_key']}"})
    async with http, Client(streamable_http_client(f"{stack.url}/mcp", http_client=http), mode="legacy",
                            message_handler=on_message) as client:
        await client.call_tool("promote", {"vendor": shop, "name": "a"})
        assert len(heard) == 1  # delivered before call_tool returned
        report = sweep_later(stack)
        assert any(d["agent_id"] == agent["id"] for d in report["demoted"])
        await client.list_tools()  # the next call carries the sweep's change
        assert len(heard) == 2
        await client.list_tools()
        assert len(heard) == 2  # once


async def _listen_while(stack: Stack, agent: dict[str, Any], action: Any) -> list[Any]:
    """Listen on a 2026-07-28 client of `agent` while `action` runs, once the stack says the
    listen has read the working set (behind a buffered gateway the acknowledgement arrives only
    with the close, so the client cannot tell); answer the events until the close."""
    events: list[Any] = []
    key = agent["api_key"]

    def act_once_listening() -> None:
        stack.running.wait_for(f"LISTENING {agent['id']}")
        action()

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{stack.url}/mcp", http_client=http),
                            mode="2026-07-28") as client, anyio.create_task_group() as group:
        group.start_soon(anyio.to_thread.run_sync, act_once_listening)
        async with client.listen(tools_list_changed=True) as subscription:
            async for event in subscription:
                events.append(event)
    return events


async def test_modern_listen_yields_a_promote_by_another_client_of_the_same_agent(stack: Stack) -> None:
    shop = publish_tools(stack, "a")
    agent = stack.new_agent()


    async def promote_from_another_client() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {agent['api_key']}"})
        async with http, Client(streamable_http_client(f"{stack.url}/mcp", http_client=http),
                                mode="2026-07-28") as other:
            await other.call_tool("promote", {"vendor": shop, "name": "a"})

    events = await _listen_while(stack, agent, lambda: anyio.run(promote_from_another_client))
    assert [type(e).__name__ for e in events] == ["ToolsListChanged"]


async def test_modern_listen_yields_a_sweep_demotion(stack: Stack) -> None:
    shop = publish_tools(stack, "a")
    agent = stack.new_agent()
    stack.admin("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": shop, "name": "a"})
    events = await _listen_while(stack, agent, lambda: sweep_later(stack))
    assert [type(e).__name__ for e in events] == ["ToolsListChanged"]


async def test_modern_listen_hears_nothing_of_another_agents_change(stack: Stack) -> None:
    shop = publish_tools(stack, "a")
    mine, theirs = stack.new_agent(), stack.new_agent()
    events = await _listen_while(stack, mine, lambda: stack.admin(
        "POST", f"/v1/agents/{theirs['id']}/working-set", {"vendor": shop, "name": "a"}))
    assert events == []
