"""The 2026-07-28 tasks extension: a client that declares it gets the wait on a person as a task."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.base.errors import StoreUnavailable
from chalicelib.mcp import tasks
from tests.conftest import Admin, Mcp, Vendor
from tests.upstream_servers import forecast_server, sdk_server

TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


@pytest.fixture
def write_tool(admin: Admin, vendor: Vendor) -> None:
    admin.publish(name="create-order", description="Create an order.", annotations={"destructiveHint": False},
                  input_schema={"type": "object"}, request={"method": "POST", "url": f"{vendor.url}/orders"})


def _call(mcp: Mcp) -> dict[str, Any]:
    return mcp.post("tools/call", {"name": "run_tool", "arguments": {
        "vendor": "unleashed", "name": "create-order", "input": {}}}).json_body["result"]


def test_a_declaring_client_gets_a_task_and_polls_it_to_the_result(admin: Admin, mcp: Mcp, write_tool: None,
                                                                   vendor: Vendor) -> None:
    # GIVEN a modern client that declares the tasks extension
    mcp.modern, mcp.capabilities = True, TASKS
    # WHEN a write waits for a person
    created = _call(mcp)
    # THEN the answer is a working task, and tasks/get follows it to the vendor's answer
    assert (created["resultType"], created["status"]) == ("task", "working")
    assert "approve" in created["statusMessage"]
    polled = mcp.post("tasks/get", {"taskId": created["taskId"]}).json_body["result"]
    assert (polled["status"], polled["resultType"]) == ("working", "complete")
    admin.call("POST", f"/v1/approvals/{created['taskId']}/approve")
    done = mcp.post("tasks/get", {"taskId": created["taskId"]}).json_body["result"]
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"] == {"orders": [{"id": 1}]}
    assert done["result"]["isError"] is False
    assert len(vendor.received) == 1


def test_a_denied_task_is_cancelled(admin: Admin, mcp: Mcp, write_tool: None) -> None:
    mcp.modern, mcp.capabilities = True, TASKS
    created = _call(mcp)
    admin.call("POST", f"/v1/approvals/{created['taskId']}/deny")
    assert mcp.post("tasks/get", {"taskId": created["taskId"]}).json_body["result"]["status"] == "cancelled"


@pytest.mark.parametrize("modern", [False, True])
def test_clients_that_do_not_declare_it_get_the_plain_answer(mcp: Mcp, write_tool: None, modern: bool) -> None:
    mcp.modern = modern
    answer = _call(mcp)
    assert answer["structuredContent"]["status"] == "awaiting_approval"
    assert "resultType" not in answer or answer["resultType"] == "complete"


def test_another_agents_task_is_unknown(admin: Admin, mcp: Mcp, write_tool: None) -> None:
    mcp.modern, mcp.capabilities = True, TASKS
    created = _call(mcp)
    other = Mcp(mcp.client, admin.create_agent("other")["api_key"], modern=True, capabilities=TASKS)
    response = other.post("tasks/get", {"taskId": created["taskId"]})
    assert response.json_body["error"]["code"] == -32602


def test_discover_advertises_the_extension(mcp: Mcp) -> None:
    mcp.modern = True
    capabilities = mcp.post("server/discover").json_body["result"]["capabilities"]
    assert "io.modelcontextprotocol/tasks" in capabilities["extensions"]


def test_a_completed_task_answers_an_mcp_servers_tool_result_as_the_call_itself_does(admin: Admin,
                                                                                     mcp: Mcp) -> None:
    # GIVEN a write tool of a registered MCP server, called by a client that declares tasks
    mcp.modern, mcp.capabilities = True, TASKS
    with sdk_server(forecast_server()) as url:
        assert admin.call("POST", "/v1/upstreams", {"vendor": "weather", "url": url}).status_code == 201
        mcp.call("promote", {"vendor": "weather", "name": "create-note"})
        note = {"name": "weather__create-note", "arguments": {"title": "t", "body": "b"}}
        created = mcp.post("tools/call", note).json_body["result"]
        admin.call("POST", f"/v1/approvals/{created['taskId']}/approve")
        # WHEN the task is polled once the person approved
        done = mcp.post("tasks/get", {"taskId": created["taskId"]}).json_body["result"]
        # THEN its result is the server's own, as a call that needs no person gets it
        direct = mcp.post("tools/call", note).json_body["result"]
    assert done["status"] == "completed" and direct["content"][0]["text"].startswith("created note")
    assert done["result"]["content"] == direct["content"]
    assert done["result"].get("structuredContent") == direct.get("structuredContent")


def test_a_store_fault_on_tasks_get_is_not_taken_for_an_unknown_task(admin: Admin, mcp: Mcp, write_tool: None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a working task, and a store that fails when tasks/get reads its run
    mcp.modern, mcp.capabilities = True, TASKS
    created = _call(mcp)

    def failing(*args: Any) -> Any:
        raise StoreUnavailable("DynamoDB is failing")

    with monkeypatch.context() as patched:
        patched.setattr(tasks.runs, "get_for_agent", failing)
        answer = mcp.post("tasks/get", {"taskId": created["taskId"]})
    # THEN the client is not told the task is unknown (it would stop polling a task that still waits)
    assert answer.json_body["error"]["code"] != -32602, answer.json_body
    assert mcp.post("tasks/get", {"taskId": created["taskId"]}).json_body["result"]["status"] == "working"
