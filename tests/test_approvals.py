"""Runs and approvals: a write waits for a person on its first call, then runs without asking."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from chalicelib.base.clock import SKEW_ALLOWANCE, utcnow
from chalicelib.calls import runs
from chalicelib.identity import accounts
from chalicelib.store import agents as agent_store
from tests.conftest import Admin, Mcp, Vendor

ORDER = {"vendor": "unleashed", "name": "create-order"}


@pytest.fixture
def write_tool(admin: Admin, vendor: Vendor) -> dict[str, Any]:
    admin.publish(name="create-order", description="Create a sales order.", annotations={"destructiveHint": False},
                  input_schema={"type": "object", "properties": {"customer": {"type": "string"}}},
                  request={"method": "POST", "url": f"{vendor.url}/orders"})
    return ORDER


def _agent_id(admin: Admin) -> str:
    return admin.call("GET", "/v1/agents").json_body["items"][0]["id"]


def _call(mcp: Mcp, **input_: Any) -> dict[str, Any]:
    return mcp.call("run_tool", {**ORDER, "input": input_ or {"customer": "acme"}})


def test_first_call_of_a_write_waits_and_the_vendor_sees_nothing(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                                  write_tool: dict) -> None:
    # WHEN the agent calls a write tool it was never approved for
    result = _call(mcp)
    # THEN it waits for a person, which is not a failure, and nothing reached the vendor
    assert result["isError"] is False
    answer = result["structuredContent"]
    assert answer["status"] == "awaiting_approval"
    assert answer["approval_url"] == f"http://127.0.0.1:8000/console/approvals/{answer['run_id']}"
    assert vendor.received == []
    pending = admin.call("GET", "/v1/approvals?status=pending").json_body["items"]
    assert [(p["id"], p["status"], p["input"]) for p in pending] == [
        (answer["run_id"], "awaiting_approval", {"customer": "acme"})]


def test_approve_executes_once_and_get_run_returns_the_vendors_answer(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                                       write_tool: dict) -> None:
    run_id = _call(mcp)["structuredContent"]["run_id"]
    approved = admin.call("POST", f"/v1/approvals/{run_id}/approve")
    assert approved.status_code == 200
    assert approved.json_body["status"] == "succeeded"
    assert len(vendor.received) == 1
    got = mcp.call("get_run", {"run_id": run_id})["structuredContent"]
    assert got == {"run_id": run_id, "status": "succeeded", "result": {"orders": [{"id": 1}]}}
    assert admin.call("GET", "/v1/approvals").json_body["items"] == []


def test_after_approval_later_calls_run_at_once_even_after_demote_promote_and_a_new_description(
    admin: Admin, mcp: Mcp, vendor: Vendor, write_tool: dict
) -> None:
    # GIVEN an approved write tool in the working set
    mcp.call("promote", ORDER)
    run_id = mcp.call("unleashed__create-order", {"customer": "a"})["structuredContent"]["run_id"]
    admin.call("POST", f"/v1/approvals/{run_id}/approve")
    # WHEN it is demoted, promoted again and republished as version 2 with the same request
    mcp.call("demote", ORDER)
    mcp.call("promote", ORDER)
    admin.publish(name="create-order", description="Create a sales order (v2).",
                  annotations={"destructiveHint": False, "idempotentHint": False},
                  input_schema={"type": "object", "properties": {"customer": {"type": "string"}, "note": {}}},
                  request={"method": "POST", "url": f"{vendor.url}/orders"})
    result = mcp.call("unleashed__create-order", {"customer": "b", "note": "v2"})
    # THEN it runs at once against the newest version
    assert result["structuredContent"] == {"orders": [{"id": 1}]}
    assert [json.loads(r["body"]) for r in vendor.received] == [{"customer": "a"}, {"customer": "b", "note": "v2"}]


def test_deny_ends_the_run_and_the_vendor_sees_nothing(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                       write_tool: dict) -> None:
    run_id = _call(mcp)["structuredContent"]["run_id"]
    denied = admin.call("POST", f"/v1/approvals/{run_id}/deny")
    assert denied.json_body["status"] == "denied"
    assert mcp.call("get_run", {"run_id": run_id})["structuredContent"]["status"] == "denied"
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").status_code == 409
    assert vendor.received == []
    # and the "no" stands: a later call is refused at once, without asking again
    later = _call(mcp)
    assert later["isError"] is True and later["structuredContent"]["error"]["code"] == "tool_denied"
    assert vendor.received == []


def test_a_wait_nobody_decides_expires(admin: Admin, mcp: Mcp, vendor: Vendor, write_tool: dict,
                                       settings_env) -> None:
    # GIVEN approvals that wait no time at all
    settings_env(WORKSET_APPROVAL_TTL_SECONDS="0")
    run_id = _call(mcp)["structuredContent"]["run_id"]
    # THEN the run is expired, cannot be approved, and holds nothing in flight
    assert mcp.call("get_run", {"run_id": run_id})["structuredContent"]["status"] == "expired"
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").status_code == 409
    assert vendor.received == []
    state = agent_store.load_state(_agent_id(admin))
    assert state is not None and state.leases == {}


def test_two_approvals_at_once_call_the_vendor_once(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                    write_tool: dict) -> None:
    # GIVEN a waiting run and two people approving it at the same moment
    run_id = _call(mcp)["structuredContent"]["run_id"]
    account_id = accounts.authenticate_admin(admin.token)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def approve() -> None:
        barrier.wait()
        try:
            outcomes.append(runs.approve(account_id, run_id, "admin", utcnow()).status)
        except Exception as error:  # noqa: BLE001 - the loser's conflict is the point of the test
            outcomes.append(type(error).__name__)

    threads = [threading.Thread(target=approve) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN exactly one approval executed it, and the vendor was called once
    assert sorted(outcomes) == ["Conflict", "succeeded"]
    assert len(vendor.received) == 1


def test_dry_run_of_a_write_never_asks(admin: Admin, mcp: Mcp, vendor: Vendor, write_tool: dict) -> None:
    result = mcp.call("run_tool", {**ORDER, "input": {"customer": "a"}, "dryRun": True})
    assert result["structuredContent"]["preview"]["method"] == "POST"
    assert admin.call("GET", "/v1/approvals").json_body["items"] == []
    assert vendor.received == []


def test_a_waiting_run_keeps_the_agent_in_flight_until_decided(admin: Admin, mcp: Mcp, write_tool: dict) -> None:
    run_id = _call(mcp)["structuredContent"]["run_id"]
    state = agent_store.load_state(_agent_id(admin))
    assert state is not None and state.in_flight(utcnow())
    admin.call("POST", f"/v1/approvals/{run_id}/deny")
    state = agent_store.load_state(_agent_id(admin))
    assert state is not None and not state.in_flight(utcnow())


def test_a_run_that_never_ends_is_out_of_flight_once_its_lease_expires(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                                        monkeypatch) -> None:
    # GIVEN a read run whose Lambda dies after the run started (the vendor call never returns)
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})

    def dies(*args: Any, **kwargs: Any) -> None:
        raise SystemExit("the Lambda died mid-run")

    monkeypatch.setattr("chalicelib.calls.vendor.perform", dies)
    with pytest.raises(SystemExit):
        mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders", "input": {"customer": "a"}})
    state = agent_store.load_state(_agent_id(admin))
    assert state is not None
    (run_id, expiry), = state.leases.items()
    # THEN it is in flight until its lease expires and the clock skew allowance has passed too
    now = utcnow()
    assert state.in_flight(now)
    lease_end = now + timedelta(seconds=expiry - now.timestamp())
    assert state.in_flight(lease_end + timedelta(seconds=1))  # a judge whose clock runs ahead
    assert runs.get_for_account(accounts.authenticate_admin(admin.token), run_id,
                                lease_end + timedelta(seconds=1)).status == "running"
    later = lease_end + SKEW_ALLOWANCE + timedelta(seconds=1)
    assert not state.in_flight(later)
    # AND the run is recorded as expired the first time anyone looks after that
    account_id = accounts.authenticate_admin(admin.token)
    assert runs.get_for_account(account_id, run_id, later).status == "expired"
    after = agent_store.load_state(_agent_id(admin))
    assert after is not None and after.leases == {}


def test_another_agents_run_is_not_found(admin: Admin, mcp: Mcp, write_tool: dict, other_admin: Admin) -> None:
    run_id = _call(mcp)["structuredContent"]["run_id"]
    other = Mcp(mcp.client, admin.create_agent("other")["api_key"])
    result = other.call("get_run", {"run_id": run_id})
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "run_not_found"
    assert other_admin.call("GET", f"/v1/runs/{run_id}").status_code == 404
    assert other_admin.call("POST", f"/v1/approvals/{run_id}/approve").status_code == 404
    assert admin.call("GET", f"/v1/runs/{run_id}").json_body["status"] == "awaiting_approval"


def test_every_call_is_a_run_listed_for_its_agent(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    result = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders", "input": {"customer": "a"}})
    run_id = result["_meta"]["io.workset/runId"]
    listed = admin.call("GET", f"/v1/agents/{_agent_id(admin)}/runs").json_body["items"]
    assert [(r["id"], r["status"]) for r in listed] == [(run_id, "succeeded")]
    assert admin.call("GET", f"/v1/runs/{run_id}").json_body["result"] == {"orders": [{"id": 1}]}
    state = agent_store.load_state(_agent_id(admin))
    assert state is not None and state.leases == {}


def test_an_approval_records_which_admin_token_decided_it(admin: Admin, mcp: Mcp, write_tool: dict) -> None:
    from chalicelib.store import accounts as account_store
    from tests.conftest import Console

    # GIVEN a second admin token of the same account, and a console signed in with it
    second = "wsa_second_" + "x" * 24
    account_id = accounts.authenticate_admin(admin.token)
    account_store.add_admin_token(account_id, accounts.hash_token(second), utcnow())
    console = Console(admin.client)
    assert console.sign_in(second).status_code == 303
    # WHEN the first token approves one run through the API, and the console denies another
    first_run = _call(mcp, customer="a")["structuredContent"]["run_id"]
    second_run = _call(mcp, customer="b")["structuredContent"]["run_id"]
    approved = admin.call("POST", f"/v1/approvals/{first_run}/approve").json_body
    assert console.post(f"/console/approvals/{second_run}/deny").status_code == 303
    denied = admin.call("GET", f"/v1/runs/{second_run}").json_body
    # THEN each run names the token that decided it: its hash's first digits, never the token
    assert approved["decided_by"] == "admin:" + accounts.hash_token(admin.token)[:12]
    assert denied["decided_by"] == "admin:" + accounts.hash_token(second)[:12]
    assert admin.token not in str(approved) and second not in str(denied)
