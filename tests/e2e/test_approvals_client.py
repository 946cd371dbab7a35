"""Approvals inside the client (issue 26 section 2) with the real MCP Python SDK client (mcp 2.3.0,
its `elicitation_callback`) against the served local stack, in both revisions it speaks:

- 2026-07-28 (`basic/patterns/mrtr`): the call answers InputRequiredResult with a URL-mode
  elicitation; the SDK hands it to the callback and retries with the response and requestState;
  the retry answers the vendor's result.
- 2025-11-25 (`client/elicitation`, URL mode): the call's response stream carries
  `elicitation/create` (the SDK calls the callback and POSTs its answer), then the result when the
  person decided within the hold.

The person approves through the admin API, as the console's Approve does (the same domain call).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Vendor
from tests.e2e.conftest import Stack, start_stack, stop_stack
from tests.e2e.test_runs_client import publish_write, sent_to

pytestmark = pytest.mark.anyio
HOLD_SECONDS = 6


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("approvals"), {"WORKSET_APPROVAL_HOLD_SECONDS": str(HOLD_SECONDS)})
    for _ in range(3):  # the stack's first publish loads the search model: on a busy machine, past a 10 s read
        try:
            running.publish({"vendor": "warmup", "name": "noop", "description": "Nothing.",
                             "input_schema": {"type": "object"}, "annotations": {"readOnlyHint": True},
                             "request": {"method": "GET", "url": "http://127.0.0.1:9/x"}})
            break
        except TimeoutError:
            continue
    yield running
    stop_stack(running)


@asynccontextmanager
async def connect(stack: Stack, key: str, mode: str, callback: Any) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{stack.url}/mcp", http_client=http), mode=mode,
                            elicitation_callback=callback) as client:
        yield client


def _pending_ids(stack: Stack, shop: str) -> list[str]:
    return [item["id"] for item in stack.admin("GET", "/v1/approvals")[1]["items"] if item["vendor"] == shop]


def _approve_when_asked(stack: Stack, shop: str, decide: str = "approve") -> threading.Thread:
    """A person who opens the console and decides the first call of `shop`'s tool that waits."""

    def person() -> None:
        for _ in range(100):
            if pending := _pending_ids(stack, shop):
                stack.admin("POST", f"/v1/approvals/{pending[0]}/{decide}")
                return
            time.sleep(0.1)

    thread = threading.Thread(target=person)
    thread.start()
    return thread


async def test_a_2026_client_gets_the_url_and_its_retry_answers_the_vendors_result(held: Stack,
                                                                                 vendor: Vendor) -> None:
    shop = publish_write(held, vendor)
    agent = held.new_agent()
    asked: list[types.ElicitRequestURLParams] = []

    async def callback(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        # the person opens the URL and approves, then the client answers "accept" and retries
        run_id = params.url.rsplit("/", 1)[1]
        await anyio.to_thread.run_sync(held.admin, "POST", f"/v1/approvals/{run_id}/approve")
        return types.ElicitResult(action="accept")

    async with connect(held, agent["api_key"], "2026-07-28", callback) as client:
        result = await client.call_tool("run_tool", {"vendor": shop, "name": "create-order", "input": {"total": 5}})
    assert result.is_error is False and result.structured_content == {"orders": [{"id": 1}]}
    [params] = asked
    assert params.mode == "url" and "/console/approvals/run" in params.url
    assert len(sent_to(vendor, shop)) == 1
    runs = held.admin("GET", f"/v1/agents/{agent['id']}/runs")[1]["items"]
    assert [run["status"] for run in runs] == ["succeeded"]


async def test_a_2026_client_declining_gets_todays_awaiting_answer(held: Stack, vendor: Vendor) -> None:
    shop = publish_write(held, vendor)
    agent = held.new_agent()

    async def callback(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async with connect(held, agent["api_key"], "2026-07-28", callback) as client:
        result = await client.call_tool("run_tool", {"vendor": shop, "name": "create-order", "input": {"total": 5}})
    assert result.structured_content["status"] == "awaiting_approval"
    assert sent_to(vendor, shop) == []


async def test_a_2026_client_retry_answers_a_denial(held: Stack, vendor: Vendor) -> None:
    shop = publish_write(held, vendor)
    agent = held.new_agent()

    async def callback(context: Any, params: Any) -> types.ElicitResult:
        await anyio.to_thread.run_sync(held.admin, "POST", f"/v1/approvals/{params.url.rsplit('/', 1)[1]}/deny")
        return types.ElicitResult(action="accept")

    async with connect(held, agent["api_key"], "2026-07-28", callback) as client:
        result = await client.call_tool("run_tool", {"vendor": shop, "name": "create-order", "input": {"total": 5}})
    assert result.is_error is True and result.structured_content["error"]["code"] == "tool_denied"
    assert sent_to(vendor, shop) == []


def accepting(asked: list[Any]) -> Any:
    """An elicitation callback that keeps what it was asked and answers "accept" (the person
    decides in the console, not here)."""
    async def callback(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept")
    return callback


async def test_a_2025_client_gets_the_elicitation_then_the_result_decided_within_the_hold(held: Stack,
                                                                                        vendor: Vendor) -> None:
    shop = publish_write(held, vendor)
    agent = held.new_agent()
    asked: list[Any] = []
    callback = accepting(asked)

    async with connect(held, agent["api_key"], "legacy", callback) as client:
        person = _approve_when_asked(held, shop)
        result = await client.call_tool("run_tool", {"vendor": shop, "name": "create-order", "input": {"total": 5}})
        await anyio.to_thread.run_sync(person.join, 10)
        await anyio.sleep(0.2)  # the callback runs as the stream is read
    assert result.is_error is False and result.structured_content == {"orders": [{"id": 1}]}
    assert [(p.mode, p.elicitation_id) for p in asked] == [("url", p.url.rsplit("/", 1)[1]) for p in asked]
    assert len(asked) == 1 and len(sent_to(vendor, shop)) == 1


async def test_a_2025_client_past_the_hold_gets_todays_answer_and_get_run_finishes(held: Stack,
                                                                                 vendor: Vendor) -> None:
    shop = publish_write(held, vendor)
    agent = held.new_agent()
    asked: list[Any] = []
    callback = accepting(asked)

    async with connect(held, agent["api_key"], "legacy", callback) as client:
        result = await client.call_tool("run_tool", {"vendor": shop, "name": "create-order", "input": {"total": 5}})
        waiting = result.structured_content
        assert waiting["status"] == "awaiting_approval"
        held.admin("POST", f"/v1/approvals/{waiting['run_id']}/approve")
        got = await client.call_tool("get_run", {"run_id": waiting["run_id"]})
    assert got.structured_content["status"] == "succeeded"
    assert len(asked) == 1 and len(sent_to(vendor, shop)) == 1


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_client_without_a_callback_keeps_todays_answer(held: Stack, vendor: Vendor, mode: str) -> None:
    shop = publish_write(held, vendor)
    agent = held.new_agent()
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {agent['api_key']}"})
    async with http, Client(streamable_http_client(f"{held.url}/mcp", http_client=http), mode=mode) as client:
        result = await client.call_tool("run_tool", {"vendor": shop, "name": "create-order", "input": {"total": 5}})
    assert result.structured_content["status"] == "awaiting_approval"
    assert sent_to(vendor, shop) == []


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_typescript_sdk_client_gets_the_elicitation_then_the_result(held: Stack, vendor: Vendor) -> None:
    # the TypeScript SDK's client (tests/upstreams, @modelcontextprotocol/sdk), 2025-11-25 with URL mode
    shop = publish_write(held, vendor)
    agent = held.new_agent()
    person = _approve_when_asked(held, shop)
    script = Path(__file__).parents[1] / "upstreams" / "elicit_client.mjs"
    done = subprocess.run(["node", str(script), f"{held.url}/mcp", agent["api_key"], "run_tool",
                           json.dumps({"vendor": shop, "name": "create-order", "input": {"total": 5}})],
                          capture_output=True, text=True, timeout=90, check=False)
    person.join(10)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    [asked] = answer["asked"]
    assert asked["mode"] == "url" and asked["url"].endswith(f"/console/approvals/{asked['elicitationId']}")
    assert answer["result"]["structuredContent"] == {"orders": [{"id": 1}]}
    assert len(sent_to(vendor, shop)) == 1
