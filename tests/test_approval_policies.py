"""Approval policies (issue 26 section 1): first_call for writes, every_call for destructive ones,
nothing for reads; set by a person (admin API, console), recorded with who set it, shown in
find_tool hits and tools/list; an every_call approval is never reused, a denial stands, and an
agent can never lower a policy."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest

from bench.dynamo_calls import DynamoCalls
from chalicelib.mcp.metatools import APPROVAL_META
from tests.conftest import Admin, Console, Mcp, Vendor

DELETE = {"vendor": "unleashed", "name": "delete-order"}
CREATE = {"vendor": "unleashed", "name": "create-order"}


@pytest.fixture
def tools(admin: Admin, vendor: Vendor) -> None:
    """A destructive write (MCP's default hints), a non-destructive one, and a read."""
    admin.publish(name="delete-order", description="Delete a sales order.", annotations={},
                  input_schema={"type": "object", "properties": {"order": {"type": "string"}}},
                  request={"method": "POST", "url": f"{vendor.url}/orders/delete"})
    admin.publish(name="create-order", description="Create a sales order.", annotations={"destructiveHint": False},
                  input_schema={"type": "object", "properties": {"customer": {"type": "string"}}},
                  request={"method": "POST", "url": f"{vendor.url}/orders"})
    admin.publish(name="list-orders", description="List sales orders.")


def _run(mcp: Mcp, ref: dict[str, str], **input_: Any) -> dict[str, Any]:
    return mcp.call("run_tool", {**ref, "input": input_})["structuredContent"]


def _approve(admin: Admin, run_id: str) -> Any:
    answer = admin.call("POST", f"/v1/approvals/{run_id}/approve")
    assert answer.status_code == 200, answer.body
    return answer.json_body


def _policy(admin: Admin, path: str, policy: Any) -> Any:
    return admin.call("PUT", f"{path}/approval-policy", {"policy": policy})


def test_defaults_follow_the_guard(admin: Admin, tools: None) -> None:
    answers = {name: admin.call("GET", f"/v1/tools/unleashed/{name}/approval-policy").json_body
               for name in ("delete-order", "create-order", "list-orders")}
    assert {name: (a["policy"], a["set"]) for name, a in answers.items()} == {
        "delete-order": ("every_call", None), "create-order": ("first_call", None), "list-orders": ("none", None)}


def test_every_call_asks_again_after_an_approval_and_each_call_is_its_own_run(admin: Admin, mcp: Mcp,
                                                                               vendor: Vendor, tools: None) -> None:
    # GIVEN a destructive write whose first call a person approved
    first = _run(mcp, DELETE, order="o1")
    assert first["status"] == "awaiting_approval"
    assert _approve(admin, first["run_id"])["status"] == "succeeded"
    # WHEN the agent calls it again with the same request
    second = _run(mcp, DELETE, order="o2")
    # THEN it waits again, as a new run, and only the approved call reached the vendor
    assert second["status"] == "awaiting_approval" and second["run_id"] != first["run_id"]
    assert [json.loads(r["body"]) for r in vendor.received] == [{"order": "o1"}]
    # and no standing approval was remembered for the agent
    agent_id = admin.call("GET", "/v1/agents").json_body["items"][0]["id"]
    decisions = admin.call("GET", f"/v1/agents/{agent_id}/approvals").json_body
    assert decisions["items"] == [], decisions


def test_a_denial_stands_under_every_call(admin: Admin, mcp: Mcp, vendor: Vendor, tools: None) -> None:
    run_id = _run(mcp, DELETE, order="o1")["run_id"]
    assert admin.call("POST", f"/v1/approvals/{run_id}/deny").json_body["status"] == "denied"
    later = mcp.call("run_tool", {**DELETE, "input": {"order": "o2"}})
    assert later["isError"] is True and later["structuredContent"]["error"]["code"] == "tool_denied"
    assert vendor.received == []


def test_a_person_sets_every_call_on_a_write_and_an_earlier_approval_is_no_longer_reused(
    admin: Admin, mcp: Mcp, vendor: Vendor, tools: None
) -> None:
    # GIVEN a first_call write approved once: later calls run at once
    _approve(admin, _run(mcp, CREATE, customer="a")["run_id"])
    assert _run(mcp, CREATE, customer="b") == {"orders": [{"id": 1}]}
    # WHEN a person sets every_call on it
    answer = _policy(admin, "/v1/tools/unleashed/create-order", "every_call")
    assert answer.status_code == 200 and answer.json_body["policy"] == "every_call"
    assert answer.json_body["set"]["set_by"].startswith("admin:")
    # THEN the next call waits for a person again
    assert _run(mcp, CREATE, customer="c")["status"] == "awaiting_approval"
    assert len(vendor.received) == 2


def test_a_person_lowers_a_destructive_tool_to_first_call_and_the_history_names_them(
    admin: Admin, mcp: Mcp, vendor: Vendor, tools: None
) -> None:
    assert _policy(admin, "/v1/tools/unleashed/delete-order", "first_call").status_code == 200
    _approve(admin, _run(mcp, DELETE, order="o1")["run_id"])
    assert _run(mcp, DELETE, order="o2") == {"orders": [{"id": 1}]}
    assert _policy(admin, "/v1/tools/unleashed/delete-order", None).json_body["policy"] == "every_call"
    history = admin.call("GET", "/v1/approval-policies/history").json_body["items"]
    assert [(e["name"], e["action"], e["cause"]) for e in history] == [
        ("delete-order", "approval_policy", "default"), ("delete-order", "approval_policy", "first_call")]
    assert all(e["actor"].startswith("admin:") for e in history)


def test_a_vendor_default_applies_to_its_writes_but_not_its_reads(admin: Admin, mcp: Mcp, tools: None) -> None:
    assert _policy(admin, "/v1/vendors/unleashed", "every_call").status_code == 200
    assert admin.call("GET", "/v1/tools/unleashed/create-order/approval-policy").json_body["policy"] == "every_call"
    assert admin.call("GET", "/v1/tools/unleashed/list-orders/approval-policy").json_body["policy"] == "none"
    listed = admin.call("GET", "/v1/approval-policies").json_body["items"]
    assert [(s["vendor"], s["name"], s["policy"]) for s in listed] == [("unleashed", None, "every_call")]
    # a tool's own setting is final over the vendor's default
    _policy(admin, "/v1/tools/unleashed/create-order", "first_call")
    assert admin.call("GET", "/v1/tools/unleashed/create-order/approval-policy").json_body["policy"] == "first_call"


@pytest.mark.parametrize("body", [{"policy": "none"}, {"policy": "sometimes"}, {"policy": 1}, {}, [],
                                  {"policy": "every_call", "extra": 1}])
def test_bad_policies_are_refused_and_change_nothing(admin: Admin, tools: None, body: Any) -> None:
    answer = admin.call("PUT", "/v1/tools/unleashed/create-order/approval-policy", body)
    assert answer.status_code == 400 and answer.json_body["error"]["code"] == "invalid_input"
    assert admin.call("GET", "/v1/approval-policies").json_body["items"] == []
    assert admin.call("GET", "/v1/approval-policies/history").json_body["items"] == []


def test_a_read_takes_no_policy_and_an_unknown_tool_is_not_found(admin: Admin, tools: None) -> None:
    assert _policy(admin, "/v1/tools/unleashed/list-orders", "every_call").status_code == 400
    assert _policy(admin, "/v1/tools/unleashed/nope", "every_call").status_code == 404
    assert _policy(admin, "/v1/vendors/Bad%20Vendor", "every_call").status_code == 400


def test_an_agent_key_cannot_set_a_policy(admin: Admin, mcp: Mcp, tools: None) -> None:
    answer = admin.call("PUT", "/v1/tools/unleashed/delete-order/approval-policy", {"policy": "first_call"},
                        token=mcp.key)
    assert answer.status_code == 401
    assert admin.call("GET", "/v1/approval-policies").json_body["items"] == []


def test_an_agent_cannot_lower_a_policy_through_a_vendors_default(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                                   tools: None) -> None:
    # GIVEN a person's first_call default for the vendor (its tools people published), and a
    # keyless host agents may author for
    admin.call("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": [vendor.url.removeprefix("http://")]})
    _policy(admin, "/v1/vendors/unleashed", "first_call")
    # WHEN the agent authors a destructive write of that vendor, and a person approves its first call
    acquired = mcp.call("acquire", {"vendor": "unleashed", "name": "wipe", "description": "Wipe the ledger.",
                                    "input_schema": {"type": "object"},
                                    "request": {"method": "POST", "url": f"{vendor.url}/wipe"}})
    assert acquired["isError"] is False, acquired
    _approve(admin, _run(mcp, {"vendor": "unleashed", "name": "wipe"})["run_id"])
    # THEN the vendor's default does not lower it: every call of it still asks
    assert _run(mcp, {"vendor": "unleashed", "name": "wipe"})["status"] == "awaiting_approval"
    assert len(vendor.received) == 1
    # while the person-published destructive tool follows the person's default
    _approve(admin, _run(mcp, DELETE, order="o1")["run_id"])
    assert _run(mcp, DELETE, order="o2") == {"orders": [{"id": 1}]}


def test_an_agents_arguments_cannot_carry_a_policy(admin: Admin, mcp: Mcp, vendor: Vendor, tools: None) -> None:
    answer = mcp.call("run_tool", {**DELETE, "input": {"order": "o1"}, "approval": "none"})
    assert answer["isError"] is True and answer["structuredContent"]["error"]["code"] == "invalid_input"
    waiting = _run(mcp, DELETE, order="o1", approval="none")  # an argument the tool does not take: still a wait
    assert waiting["status"] == "awaiting_approval" and vendor.received == []


def test_find_tool_hits_and_tools_list_show_the_policy(admin: Admin, mcp: Mcp, tools: None) -> None:
    hits = mcp.call("find_tool", {"query": "sales order", "limit": 5})["structuredContent"]["hits"]
    shown = {hit["name"]: hit.get("approval") for hit in hits}
    assert shown == {"delete-order": "every_call", "create-order": "first_call", "list-orders": None}
    mcp.call("promote", CREATE)
    mcp.call("promote", {"vendor": "unleashed", "name": "list-orders"})
    _policy(admin, "/v1/tools/unleashed/create-order", "every_call")
    definitions = {t["name"]: t["_meta"] for t in mcp.post("tools/list").json_body["result"]["tools"]}
    assert definitions["unleashed__create-order"][APPROVAL_META] == "every_call"
    assert APPROVAL_META not in definitions["unleashed__list-orders"]


def test_the_console_sets_a_policy_and_marks_every_call_waits(admin: Admin, console: Console, mcp: Mcp,
                                                              tools: None) -> None:
    page = console.get("/console/tools/unleashed/create-order").body.decode()
    assert 'data-policy="first_call"' in page
    assert console.post("/console/tools/unleashed/create-order/approval-policy",
                        {"policy": "every_call"}).status_code == 303
    page = console.get("/console/tools/unleashed/create-order").body.decode()
    assert 'data-policy="every_call"' in page and 'id="policy-history"' in page
    run_id = _run(mcp, CREATE, customer="a")["run_id"]
    assert 'every-call' in console.get("/console/approvals").body.decode()
    run_page = console.get(f"/console/approvals/{run_id}").body.decode()
    assert 'id="every-call"' in run_page and ">Approve</button>" in run_page and ">Deny</button>" in run_page
    # a forged form (no CSRF token) changes nothing
    console.post("/console/tools/unleashed/create-order/approval-policy", {"policy": "first_call"}, csrf="x")
    assert admin.call("GET", "/v1/tools/unleashed/create-order/approval-policy").json_body["policy"] == "every_call"


def test_the_policy_is_read_with_the_tool_so_a_write_call_costs_what_a_read_call_does(admin: Admin, mcp: Mcp,
                                                                                       tools: None) -> None:
    # GIVEN a person's policy for the write (so the read finds one)
    _policy(admin, "/v1/tools/unleashed/create-order", "first_call")
    counter = DynamoCalls().install()
    with counter.measure() as read_call:
        mcp.call("run_tool", {"vendor": "unleashed", "name": "list-orders", "input": {"customer": "a"}})
    with counter.measure() as write_call:
        waiting = mcp.call("run_tool", {**CREATE, "input": {"customer": "a"}})["structuredContent"]
    # THEN the tool and its policies are one BatchGetItem, no GetItem of the tool beside it
    assert waiting["status"] == "awaiting_approval", waiting
    assert read_call.count("BatchGetItem") == write_call.count("BatchGetItem") == 1, (read_call, write_call)
    assert "GetItem" not in write_call, write_call
    assert len(write_call) <= len(read_call), (read_call, write_call)


def test_a_vendors_default_is_named_alike_in_the_settings_and_their_history(admin: Admin, tools: None) -> None:
    # GIVEN a person's default for a vendor's writes
    _policy(admin, "/v1/vendors/unleashed", "every_call")
    # THEN the settings and the history name it the same way: a null name (no tool), never a stored marker
    [setting] = admin.call("GET", "/v1/approval-policies").json_body["items"]
    [event] = admin.call("GET", "/v1/approval-policies/history").json_body["items"]
    assert (setting["vendor"], setting["name"]) == (event["vendor"], event["name"]) == ("unleashed", None)
    assert event["cause"] == "every_call"


# --- a tool's own policy changes, however many others came after ------------------------------------

def _history_rows(page: str) -> list[str]:
    table = re.search(r'<table id="policy-history">(.*?)</table>', html.unescape(page), re.DOTALL)
    return re.findall(r"<td>(this tool|the vendor's default): ([a-z ]+)</td>", table.group(1)) if table else []


def test_a_tools_old_policy_change_is_on_its_page_after_many_others(admin: Admin, console: Console,
                                                                   tools: None) -> None:
    # GIVEN a person set create-order's policy, then 60 changes to another tool's
    assert _policy(admin, "/v1/tools/unleashed/create-order", "every_call").status_code == 200
    for turn in range(60):
        _policy(admin, "/v1/tools/unleashed/delete-order", "first_call" if turn % 2 else "every_call")
    # WHEN the person opens create-order's page
    page = console.get("/console/tools/unleashed/create-order").body.decode()
    # THEN its own change is there, and none of the other tool's
    assert _history_rows(page) == [("this tool", "every call")]


def test_a_tools_changes_page_on_past_a_bounded_read(admin: Admin, console: Console, tools: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN reads of 10 changes at a time, create-order's policy and its vendor's default set, then
    # 35 changes to another tool's
    from chalicelib.store import policies as policy_store

    monkeypatch.setattr(policy_store, "TOOL_HISTORY_READS", 1)
    monkeypatch.setattr(policy_store, "TOOL_HISTORY_PAGE_SIZE", 10)
    _policy(admin, "/v1/tools/unleashed/create-order", "first_call")
    assert _policy(admin, "/v1/vendors/unleashed", "every_call").status_code == 200
    for turn in range(35):
        _policy(admin, "/v1/tools/unleashed/delete-order", "first_call" if turn % 2 else "every_call")
    # WHEN the person follows "Older policy changes" from the tool's page
    path, seen, links = "/console/tools/unleashed/create-order", [], 0
    while path:
        answer = console.get(path)
        assert answer.status_code == 200, answer.body
        page = answer.body.decode()
        seen += _history_rows(page)
        older = re.search(r'id="older-policy-changes" href="([^"]+)"', page)
        path = html.unescape(older.group(1)).split("#")[0] if older else ""
        links += 1
        assert links < 10
    # THEN both of its changes were reached, newest first, and the links ended; each page read at
    # most 10 of the 37 changes (the last page holds the 7 oldest)
    assert seen == [("the vendor's default", "every call"), ("this tool", "first call")]
    assert links == 4


@pytest.mark.parametrize("cursor", ["x", "e30", "eyJhZ2VudF9pZCI6IHsiUyI6ICJvdGhlciJ9fQ"])
def test_a_forged_changes_cursor_is_refused(console: Console, tools: None, cursor: str) -> None:
    # a cursor is attacker-controlled text: one we did not make, or made for another partition
    answer = console.get(f"/console/tools/unleashed/create-order?changes={cursor}")
    assert answer.status_code == 400, answer.body
