"""Issue 26, "History names who decided": each decision on a run waiting for a person (approve,
deny, from the console or the admin API, or the wait's expiry) is one event in the agent's
History, written in the decision's own transaction, naming who decided, the tool, the run and the
policy it was asked under."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from markupsafe import escape

from bench.dynamo_calls import DynamoCalls
from chalicelib.base.clock import utcnow
from chalicelib.calls import run_ends, runs
from chalicelib.identity import accounts
from tests.conftest import Admin, Console, Mcp, Vendor
from tests.faults import ALWAYS, Faults

CREATE = {"vendor": "unleashed", "name": "create-order"}  # a write: first_call
DELETE = {"vendor": "unleashed", "name": "delete-order"}  # destructive: every_call


@pytest.fixture
def tools(admin: Admin, vendor: Vendor) -> None:
    admin.publish(name="create-order", description="Create a sales order.", annotations={"destructiveHint": False},
                  input_schema={"type": "object", "properties": {"customer": {"type": "string"}}},
                  request={"method": "POST", "url": f"{vendor.url}/orders"})
    admin.publish(name="delete-order", description="Delete a sales order.", annotations={},
                  input_schema={"type": "object", "properties": {"order": {"type": "string"}}},
                  request={"method": "POST", "url": f"{vendor.url}/orders/delete"})


def _wait(mcp: Mcp, ref: dict[str, str], **input_: Any) -> str:
    answer = mcp.call("run_tool", {**ref, "input": input_})["structuredContent"]
    assert answer["status"] == "awaiting_approval", answer
    return str(answer["run_id"])


def _agent_id(admin: Admin) -> str:
    return str(admin.call("GET", "/v1/agents").json_body["items"][0]["id"])


def _decisions(admin: Admin) -> list[dict[str, Any]]:
    events = admin.call("GET", f"/v1/agents/{_agent_id(admin)}/history").json_body["items"]
    return [event for event in events if "run_id" in event]


def _account_id(admin: Admin) -> str:
    return accounts.authenticate_admin(admin.token)


def test_an_approval_through_the_admin_api_names_the_tokens_label_the_tool_run_and_policy(
        admin: Admin, mcp: Mcp, tools: None) -> None:
    run_id = _wait(mcp, CREATE, customer="acme")
    assert _decisions(admin) == []
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").json_body["status"] == "succeeded"
    [event] = _decisions(admin)
    label = accounts.admin_actor(admin.token)
    assert (event["action"], event["actor"], event["run_id"], event["vendor"], event["name"], event["cause"]) == (
        "approved", label, run_id, "unleashed", "create-order", "first_call")
    # the label tells tokens apart without being one
    assert admin.token not in str(event)


def test_a_denial_in_the_console_is_in_the_history_card_as_this_call_only(admin: Admin, console: Console,
                                                                            mcp: Mcp, tools: None) -> None:
    run_id = _wait(mcp, DELETE, order="o1")
    assert console.post(f"/console/approvals/{run_id}/deny", {"back": "/console/approvals"}).status_code == 303
    [event] = _decisions(admin)
    assert (event["action"], event["cause"], event["run_id"]) == ("denied", "every_call", run_id)
    assert event["actor"].startswith("admin:")  # the console session's signer
    page = console.get(f"/console/agents/{_agent_id(admin)}").body.decode()
    card = page[page.index('id="history"'):]
    assert "denied" in card and event["actor"] in card and run_id in card and "this call only" in card


def test_a_wait_that_expires_is_in_history_as_nobody_deciding(admin: Admin, mcp: Mcp, tools: None,
                                                              settings_env: Any) -> None:
    settings_env(WORKSET_APPROVAL_TTL_SECONDS="0")
    run_id = mcp.call("run_tool", {**CREATE, "input": {"customer": "a"}})["structuredContent"]["run_id"]
    assert mcp.call("get_run", {"run_id": run_id})["structuredContent"]["status"] == "expired"
    mcp.call("get_run", {"run_id": run_id})  # looking again records nothing more
    [event] = _decisions(admin)
    assert (event["action"], event["actor"], event["run_id"], event["cause"]) == (
        "expired", "nobody", run_id, "first_call")


def test_the_sweep_records_an_expired_wait_once(admin: Admin, mcp: Mcp, tools: None, settings_env: Any) -> None:
    settings_env(WORKSET_APPROVAL_TTL_SECONDS="0")
    run_id = mcp.call("run_tool", {**DELETE, "input": {"order": "o1"}})["structuredContent"]["run_id"]
    later = utcnow() + timedelta(seconds=5)
    assert run_ends.sweep_runs(later)["expired"] == 1
    run_ends.sweep_runs(later + timedelta(seconds=5))
    [event] = _decisions(admin)
    assert (event["action"], event["run_id"], event["cause"]) == ("expired", run_id, "every_call")


def test_concurrent_approvals_make_exactly_one_event(admin: Admin, mcp: Mcp, vendor: Vendor, tools: None) -> None:
    run_id = _wait(mcp, CREATE, customer="acme")
    codes: list[int] = []

    def approve() -> None:
        codes.append(admin.call("POST", f"/v1/approvals/{run_id}/approve").status_code)

    threads = [threading.Thread(target=approve) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert sorted(codes) == [200, 409, 409]
    assert [event["action"] for event in _decisions(admin)] == ["approved"]
    assert len(vendor.received) == 1


def test_an_in_client_retry_racing_the_console_still_makes_one_event(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                                     tools: None, settings_env: Any) -> None:
    from chalicelib.mcp.approvals import INPUT_KEY

    settings_env(WORKSET_APPROVAL_HOLD_SECONDS="5")
    mcp.call("promote", CREATE)
    mcp.modern = True
    mcp.capabilities = {"elicitation": {"url": {}}}
    first = mcp.post("tools/call", {"name": "unleashed__create-order", "arguments": {"customer": "acme"}})
    state = first.json_body["result"]["requestState"]
    run_id = admin.call("GET", "/v1/approvals").json_body["items"][0]["id"]
    answers: list[Any] = []

    def retry() -> None:
        answers.append(mcp.post("tools/call", {"name": "unleashed__create-order", "arguments": {"customer": "acme"},
                                               "requestState": state,
                                               "inputResponses": {INPUT_KEY: {"action": "accept"}}}))

    threads = [threading.Thread(target=retry) for _ in range(2)]
    for thread in threads:
        thread.start()
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").status_code == 200
    for thread in threads:
        thread.join(15)
    assert [a.status_code for a in answers] == [200, 200], [a.json_body for a in answers]
    [event] = _decisions(admin)
    assert (event["action"], event["run_id"]) == ("approved", run_id)
    assert len(vendor.received) == 1


def test_a_store_fault_leaves_neither_the_decision_nor_its_event(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                                 tools: None, faults: Faults) -> None:
    run_id = _wait(mcp, CREATE, customer="acme")
    faults.fail("TransactWriteItems", times=ALWAYS)
    assert admin.call("POST", f"/v1/approvals/{run_id}/deny").status_code >= 500
    faults.armed.clear()
    assert _decisions(admin) == []
    assert admin.call("GET", "/v1/approvals").json_body["items"][0]["id"] == run_id  # still waiting
    # a lost answer: the transaction applied; its retry under the same token records nothing twice
    faults.lose_answer("TransactWriteItems")
    admin.call("POST", f"/v1/approvals/{run_id}/deny")
    faults.armed.clear()
    assert [event["action"] for event in _decisions(admin)] == ["denied"]
    assert vendor.received == []


def test_a_decider_label_with_markup_is_escaped_in_the_console(admin: Admin, console: Console, mcp: Mcp,
                                                               tools: None) -> None:
    run_id = _wait(mcp, CREATE, customer="acme")
    hostile = '<img src=x onerror="alert(1)">'
    runs.deny(_account_id(admin), run_id, hostile, utcnow())
    page = console.get(f"/console/agents/{_agent_id(admin)}").body.decode()
    assert hostile not in page
    start = page.index('id="history"')
    card = page[start:page.index("</section>", start)]
    assert str(escape(hostile)) in card  # named in History, as text: Jinja's own escaping


def test_the_event_rides_in_the_decisions_own_transaction(admin: Admin, mcp: Mcp, tools: None,
                                                           faults: Faults) -> None:
    run_id = _wait(mcp, CREATE, customer="a")
    bodies = faults.watch("TransactWriteItems")
    admin.call("POST", f"/v1/approvals/{run_id}/approve")
    decision = next(body for body in bodies if run_id in str(body) and "approved" in str(body))
    tables = [next(iter(item.values()))["TableName"] for item in decision["TransactItems"]]
    assert any(table.endswith("history") for table in tables), tables
    assert any(table.endswith("runs") for table in tables), tables


def test_a_decision_and_its_event_cost_one_transaction(admin: Admin, mcp: Mcp, tools: None) -> None:
    """DynamoDB calls per decision: approve (admin API) reads the account, the run, the tool and
    writes one TransactWriteItems holding the run, the standing decision, the lease and the event;
    the event adds an item to that transaction, never a call."""
    approve_id = _wait(mcp, CREATE, customer="a")
    deny_id = _wait(mcp, DELETE, order="o1")
    counter = DynamoCalls().install()
    with counter.measure() as approve:
        admin.call("POST", f"/v1/approvals/{approve_id}/approve")
    with counter.measure() as deny:
        admin.call("POST", f"/v1/approvals/{deny_id}/deny")
    assert [event["action"] for event in _decisions(admin)] == ["denied", "approved"]
    assert approve.count("TransactWriteItems") == 2, approve  # the decision (+event), then the run's end
    assert deny.count("TransactWriteItems") == 1, deny
    assert "PutItem" not in approve + deny  # the event is never a write of its own
    assert len(approve) <= APPROVE_CALLS and len(deny) <= DENY_CALLS, (approve, deny)


# measured 2026-12-03: approve 3 GetItem, TransactWriteItems (decision + event), the run's execution
# (GetItem, Query, TransactWriteItems for its end, Query, UpdateItem announced, GetItem answer) = 10;
# deny 3 GetItem, TransactWriteItems (decision + event), GetItem, Query, UpdateItem announced = 7
APPROVE_CALLS = 10
DENY_CALLS = 7
