"""Pinned tools: the agent's pin/unpin meta-tools and promote(pinned), the admin API's pins, the
half-cap limit, demotion taking the pin with it, and the sweep, which never demotes a pinned tool
for idle or cap and never even reads one (pinned promotions leave the `due` index)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from bench.dynamo_calls import DynamoCalls
from chalicelib.agents import sweep
from chalicelib.agents.workingset import pin_limit
from chalicelib.base.clock import parse_iso, utcnow
from chalicelib.store import sweep as sweep_store
from tests.books import agent_state, publish_with_connection, sweep_at
from tests.conftest import Admin, Mcp, Vendor

DAY = timedelta(days=1)
FAR = 1000 * DAY  # past every idle deadline the tests make


@pytest.fixture(params=["legacy", "modern"])
def any_mcp(request: pytest.FixtureRequest, mcp: Mcp) -> Mcp:
    """The same checks in both protocol revisions."""
    mcp.modern = request.param == "modern"
    return mcp


def publish(admin: Admin, vendor: Vendor, *names: str) -> None:
    for name in names:
        admin.publish(vendor="shop", name=name, description=f"The {name} tool.", annotations={"readOnlyHint": True},
                      input_schema={"type": "object"}, request={"method": "GET", "url": f"{vendor.url}/{name}"})


def ref(name: str) -> dict[str, str]:
    return {"vendor": "shop", "name": name}


def promote(mcp: Mcp, *names: str) -> None:
    for name in names:
        assert not mcp.call("promote", ref(name))["isError"]


def working_set(admin: Admin, agent: dict[str, Any]) -> dict[str, dict[str, Any]]:
    items = admin.call("GET", f"/v1/agents/{agent['id']}/working-set").json_body["items"]
    return {item["name"]: item for item in items}


def pinned(admin: Admin, agent: dict[str, Any]) -> list[str]:
    return [name for name, item in working_set(admin, agent).items() if item["pinned"]]


def events(admin: Admin, agent: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(name, action, cause, actor), oldest first."""
    items = admin.call("GET", f"/v1/agents/{agent['id']}/history").json_body["items"]
    return [(e["name"], e["action"], e["cause"], e["actor"]) for e in reversed(items)]


def demoted(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d["name"], d["cause"]) for d in report["demoted"]]


def settings(admin: Admin, agent: dict[str, Any], **changes: Any) -> None:
    assert admin.call("PATCH", f"/v1/agents/{agent['id']}", changes).status_code == 200


def pin_api(admin: Admin, agent: dict[str, Any], name: str, method: str = "PUT") -> Any:
    return admin.call(method, f"/v1/agents/{agent['id']}/pins/shop/{name}")


# --- the agent ------------------------------------------------------------------------------------

def test_the_agent_pins_and_unpins_a_promoted_tool(admin: Admin, vendor: Vendor, agent: dict[str, Any],
                                                   any_mcp: Mcp) -> None:
    # GIVEN a promoted tool
    publish(admin, vendor, "orders")
    promote(any_mcp, "orders")
    listed = any_mcp.tool_names()
    # WHEN the agent pins it
    answer = any_mcp.call("pin", ref("orders"))
    # THEN it is pinned, counted against half the default cap, and its tool list is unchanged
    assert answer["isError"] is False
    assert answer["structuredContent"] == {"pinned": True, "pins": 1, "pin_limit": 10}
    assert pinned(admin, agent) == ["orders"]
    assert working_set(admin, agent)["orders"]["pinned_by"] == agent["id"]
    assert any_mcp.tool_names() == listed
    # AND find_tool shows it pinned beside promoted
    hit = any_mcp.call("find_tool", {"query": "orders"})["structuredContent"]["hits"][0]
    assert (hit["promoted"], hit["pinned"]) == (True, True)
    # WHEN it pins it again, then unpins it twice
    again = any_mcp.call("pin", ref("orders"))["structuredContent"]
    unpinned = any_mcp.call("unpin", ref("orders"))["structuredContent"]
    twice = any_mcp.call("unpin", ref("orders"))["structuredContent"]
    # THEN the repeats change nothing; the tool stays promoted, no longer pinned
    assert again == {"pinned": True, "pins": 1, "pin_limit": 10}
    assert unpinned == twice == {"pinned": False, "pins": 0, "pin_limit": 10}
    assert list(working_set(admin, agent)) == ["orders"] and pinned(admin, agent) == []
    assert "pinned" not in any_mcp.call("find_tool", {"query": "orders"})["structuredContent"]["hits"][0]
    # AND History has one pin and one unpin, by the agent, because it asked
    assert events(admin, agent) == [("orders", "promoted", "agent_asked", agent["id"]),
                                    ("orders", "pinned", "agent_asked", agent["id"]),
                                    ("orders", "unpinned", "agent_asked", agent["id"])]


def test_promote_pinned_promotes_and_pins_at_once(admin: Admin, vendor: Vendor, agent: dict[str, Any],
                                                  any_mcp: Mcp) -> None:
    # GIVEN two tools, one promoted already
    publish(admin, vendor, "orders", "invoices")
    promote(any_mcp, "invoices")
    # WHEN the agent promotes both with pinned: true
    fresh = any_mcp.call("promote", {**ref("orders"), "pinned": True})["structuredContent"]
    existing = any_mcp.call("promote", {**ref("invoices"), "pinned": True})["structuredContent"]
    # THEN both are in the set and pinned; the answer is promote's, with pinned
    assert (fresh["size"], fresh["pinned"], fresh["tool"]["name"]) == (2, True, "shop__orders")
    assert (existing["size"], existing["pinned"]) == (2, True)
    assert sorted(pinned(admin, agent)) == ["invoices", "orders"]
    assert events(admin, agent) == [("invoices", "promoted", "agent_asked", agent["id"]),
                                    ("orders", "promoted", "agent_asked", agent["id"]),
                                    ("orders", "pinned", "agent_asked", agent["id"]),
                                    ("invoices", "pinned", "agent_asked", agent["id"])]
    # AND a plain promote's answer is as it always was
    assert set(any_mcp.call("promote", ref("orders"))["structuredContent"]) == {"size", "tool"}


def test_pinning_a_tool_that_is_not_promoted_is_refused(admin: Admin, vendor: Vendor, agent: dict[str, Any],
                                                        any_mcp: Mcp) -> None:
    # GIVEN a tool in the toolbox, not promoted
    publish(admin, vendor, "orders")
    # WHEN the agent pins it, and pins a tool that does not exist
    refused = any_mcp.call("pin", ref("orders"))
    unknown = any_mcp.call("pin", ref("nothing"))
    # THEN both are tool errors with their codes, and nothing changed
    assert refused["isError"] is True and refused["structuredContent"]["error"]["code"] == "not_promoted"
    assert "promote it first" in refused["structuredContent"]["error"]["message"]
    assert unknown["isError"] is True and unknown["structuredContent"]["error"]["code"] == "tool_not_found"
    assert working_set(admin, agent) == {} and events(admin, agent) == []
    # AND unpinning a tool that is not promoted changes nothing (as demote does)
    assert any_mcp.call("unpin", ref("orders"))["structuredContent"]["pinned"] is False


@pytest.mark.parametrize("arguments", [{}, {"vendor": "shop"}, {"vendor": "Shop!", "name": "orders"},
                                       {"vendor": "shop", "name": "orders", "extra": 1}])
def test_bad_pin_arguments_are_invalid_input(admin: Admin, vendor: Vendor, agent: dict[str, Any], mcp: Mcp,
                                             arguments: dict[str, Any]) -> None:
    publish(admin, vendor, "orders")
    promote(mcp, "orders")
    answer = mcp.call("pin", arguments)
    assert answer["isError"] is True and answer["structuredContent"]["error"]["code"] == "invalid_input"
    assert pinned(admin, agent) == []


# --- the admin API --------------------------------------------------------------------------------

def test_the_admin_api_pins_and_unpins(admin: Admin, vendor: Vendor, agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN a promoted tool
    publish(admin, vendor, "orders")
    promote(mcp, "orders")
    # WHEN a person pins it through the admin API, twice
    first, second = pin_api(admin, agent, "orders"), pin_api(admin, agent, "orders")
    # THEN it is pinned once; the working set says so, with who and when
    assert (first.status_code, first.json_body) == (200, {"pinned": True, "changed": True, "pins": 1,
                                                          "pin_limit": 10})
    assert second.json_body["changed"] is False
    item = working_set(admin, agent)["orders"]
    assert (item["pinned"], item["pinned_by"]) == (True, "admin") and parse_iso(item["pinned_at"])
    # WHEN it unpins it, twice
    unpinned, again = pin_api(admin, agent, "orders", "DELETE"), pin_api(admin, agent, "orders", "DELETE")
    # THEN it is unpinned once and still promoted
    assert (unpinned.status_code, unpinned.json_body) == (200, {"pinned": False, "changed": True, "pins": 0,
                                                                "pin_limit": 10})
    assert again.json_body["changed"] is False
    assert working_set(admin, agent)["orders"]["pinned"] is False
    assert working_set(admin, agent)["orders"]["pinned_at"] is None
    # AND History names the admin, with the console's cause
    assert events(admin, agent)[1:] == [("orders", "pinned", "console", "admin"),
                                        ("orders", "unpinned", "console", "admin")]


def test_the_admin_api_refuses_pins_it_cannot_make(admin: Admin, other_admin: Admin, vendor: Vendor,
                                                   agent: dict[str, Any]) -> None:
    publish(admin, vendor, "orders")
    # a tool not promoted: 409 not_promoted; an unknown tool: 404; another account's agent: 404
    not_promoted = pin_api(admin, agent, "orders")
    assert (not_promoted.status_code, not_promoted.json_body["error"]["code"]) == (409, "not_promoted")
    unknown = pin_api(admin, agent, "nothing")
    assert (unknown.status_code, unknown.json_body["error"]["code"]) == (404, "tool_not_found")
    elsewhere = other_admin.call("PUT", f"/v1/agents/{agent['id']}/pins/shop/orders")
    assert elsewhere.status_code == 404
    no_token = admin.call("PUT", f"/v1/agents/{agent['id']}/pins/shop/orders", token="wsa_not-a-token")
    assert no_token.status_code == 401
    assert events(admin, agent) == []


# --- the limit ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cap", "limit"), [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (20, 10), (500, 250)])
def test_the_pin_limit_is_half_the_cap_rounded_down_and_at_least_one(cap: int, limit: int) -> None:
    assert pin_limit(cap) == limit


def test_a_pin_past_the_limit_is_refused_and_changes_nothing(admin: Admin, vendor: Vendor, mcp: Mcp) -> None:
    # GIVEN an agent with cap 4 (two pins), both pinned, and a third tool promoted
    agent = admin.create_agent("small", cap=4)
    mcp.key = agent["api_key"]
    publish(admin, vendor, "a", "b", "c", "d")
    promote(mcp, "a", "b", "c")
    for name in ("a", "b"):
        assert mcp.call("pin", ref(name))["isError"] is False
    before = (working_set(admin, agent), events(admin, agent))
    # WHEN the agent pins the third, a person pins it, and the agent promotes a fourth pinned
    by_agent = mcp.call("pin", ref("c"))
    by_person = pin_api(admin, agent, "c")
    promoted = mcp.call("promote", {**ref("d"), "pinned": True})
    # THEN each is refused with pin_limit, naming the limit, and nothing changed (d not even promoted)
    for error in (by_agent["structuredContent"]["error"], by_person.json_body["error"],
                  promoted["structuredContent"]["error"]):
        assert error["code"] == "pin_limit" and "at most 2 tools" in error["message"]
    assert by_agent["isError"] is promoted["isError"] is True and by_person.status_code == 409
    assert (working_set(admin, agent), events(admin, agent)) == before
    assert admin.call("GET", f"/v1/agents/{agent['id']}").json_body["size"] == 3
    # AND after an unpin, the pin goes through
    mcp.call("unpin", ref("a"))
    assert mcp.call("pin", ref("c"))["structuredContent"]["pins"] == 2


def test_demoting_a_pinned_tool_unpins_it(admin: Admin, vendor: Vendor, agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN two pinned tools
    publish(admin, vendor, "orders", "invoices")
    promote(mcp, "orders", "invoices")
    mcp.call("pin", ref("orders"))
    mcp.call("pin", ref("invoices"))
    # WHEN the agent demotes one and a person demotes the other
    assert mcp.call("demote", ref("orders"))["structuredContent"] == {"size": 1}
    assert admin.call("DELETE", f"/v1/agents/{agent['id']}/working-set/shop/invoices").json_body["changed"]
    # THEN both are gone, and promoted again they come back unpinned, with no pins counted
    assert working_set(admin, agent) == {}
    promote(mcp, "orders", "invoices")
    assert pinned(admin, agent) == []
    assert mcp.call("pin", ref("orders"))["structuredContent"]["pins"] == 1
    assert [e[1] for e in events(admin, agent) if e[0] == "orders"] == ["promoted", "pinned", "demoted",
                                                                         "promoted", "pinned"]


# --- the sweep ------------------------------------------------------------------------------------

def test_the_sweep_never_demotes_a_pinned_tool_for_idle(admin: Admin, vendor: Vendor, agent: dict[str, Any],
                                                         mcp: Mcp) -> None:
    # GIVEN two tools never called, one of them pinned
    publish(admin, vendor, "kept", "idle")
    promote(mcp, "kept", "idle")
    mcp.call("pin", ref("kept"))
    # WHEN the sweep runs far past the idle window
    report = sweep_at(admin, utcnow() + 22 * DAY)
    # THEN only the unpinned one is demoted for idle
    assert demoted(report) == [("idle", "idle")]
    assert list(working_set(admin, agent)) == ["kept"]
    assert demoted(sweep_at(admin, utcnow() + FAR)) == []


def test_the_cap_counts_pinned_tools_but_demotes_only_unpinned_ones(admin: Admin, vendor: Vendor, mcp: Mcp) -> None:
    # GIVEN cap 2 and four tools never called, the oldest one pinned
    agent = admin.create_agent("capped", cap=2)
    mcp.key = agent["api_key"]
    publish(admin, vendor, "pinned", "first", "second", "third")
    promote(mcp, "pinned", "first", "second", "third")
    mcp.call("pin", ref("pinned"))
    # WHEN the sweep runs a day later
    report = sweep_at(admin, utcnow() + DAY)
    # THEN the cap demotes the oldest unpinned tools until the set fits, pinned one counted
    assert demoted(report) == [("first", "cap"), ("second", "cap")]
    assert list(working_set(admin, agent)) == ["pinned", "third"]


def test_a_lowered_cap_keeps_every_pin_and_demotes_only_the_unpinned(admin: Admin, vendor: Vendor,
                                                                      mcp: Mcp) -> None:
    # GIVEN cap 4 with two pins and a third tool, all never called
    agent = admin.create_agent("lowered", cap=4)
    mcp.key = agent["api_key"]
    publish(admin, vendor, "a", "b", "c")
    promote(mcp, "a", "b", "c")
    mcp.call("pin", ref("a"))
    mcp.call("pin", ref("b"))
    # WHEN the cap drops to 1 (below twice the pins) and the sweep runs
    settings(admin, agent, cap=1)
    report = sweep_at(admin, utcnow() + DAY)
    # THEN the pins stay (the set stays above the cap) and only the unpinned tool goes
    assert demoted(report) == [("c", "cap")]
    assert sorted(pinned(admin, agent)) == ["a", "b"] and len(working_set(admin, agent)) == 2
    assert demoted(sweep_at(admin, utcnow() + 2 * DAY)) == []
    # AND a new pin is refused until the pins are under the new limit (1)
    mcp.call("promote", ref("c"))
    assert mcp.call("pin", ref("c"))["structuredContent"]["error"]["code"] == "pin_limit"
    # WHEN a pin is taken off, the cap applies to that tool again at the next sweep
    mcp.call("unpin", ref("b"))
    report = sweep_at(admin, utcnow() + 3 * DAY)
    assert sorted(demoted(report)) == [("b", "cap"), ("c", "cap")]
    assert list(working_set(admin, agent)) == ["a"]


def test_an_unpinned_tool_is_idle_from_its_last_use_as_if_never_pinned(admin: Admin, vendor: Vendor,
                                                                        agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN a pinned tool, called once while pinned
    publish(admin, vendor, "orders")
    promote(mcp, "orders")
    mcp.call("pin", ref("orders"))
    mcp.call("shop__orders", {})
    used_at = parse_iso(working_set(admin, agent)["orders"]["last_used_at"])
    # THEN the use is recorded, and the tool is still out of the due index
    assert agent["id"] not in sweep_store.due_agents(utcnow() + FAR)
    # WHEN it is unpinned
    mcp.call("unpin", ref("orders"))
    # THEN it is back in the index at its idle deadline, and the idle rule demotes it from there
    assert agent_state(agent["id"]).promotion("shop", "orders").due_at == used_at + 21 * DAY
    assert demoted(sweep_at(admin, used_at + 20 * DAY)) == []
    assert demoted(sweep_at(admin, used_at + 22 * DAY)) == [("orders", "idle")]


def test_pinned_promotions_leave_the_due_index_and_the_sweep_reads_nothing_for_them(
        admin: Admin, vendor: Vendor, agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN an agent whose only tools are pinned, and what a sweep costs with no promotion at all
    publish(admin, vendor, "a", "b")
    later = utcnow() + FAR
    counter = DynamoCalls().install()
    with counter.measure() as empty:
        assert sweep_at(admin, later)["demoted"] == []
    mcp.call("promote", {**ref("a"), "pinned": True})
    promote(mcp, "b")
    mcp.call("pin", ref("b"))
    # THEN neither promotion is in the due index at any deadline
    assert agent["id"] not in sweep_store.due_agents(later)
    assert all(p.due_at is None for p in agent_state(agent["id"]).promotions)
    # AND a sweep far past every deadline makes the same calls as one with nothing promoted
    with counter.measure() as made:
        assert sweep_at(admin, later)["demoted"] == []
    assert sorted(made) == sorted(empty)


def test_a_pin_made_after_the_sweep_read_the_agent_wins(admin: Admin, vendor: Vendor, agent: dict[str, Any],
                                                         mcp: Mcp) -> None:
    # GIVEN the sweep has read an agent whose tool is idle
    publish(admin, vendor, "orders")
    promote(mcp, "orders")
    read = agent_state(agent["id"])
    # WHEN a person pins the tool before the sweep writes
    pin_api(admin, agent, "orders")
    report = sweep.Report()
    sweep.review(read, utcnow() + FAR, report)
    # THEN the demotion is held (the guard saw the pin) and the tool stays, pinned
    assert [(h["name"], h["reason"]) for h in report.held] == [("orders", "changed_since_read")]
    assert report.demoted == [] and pinned(admin, agent) == ["orders"]


def test_a_revoked_connection_still_demotes_a_pinned_tool(admin: Admin, vendor: Vendor, agent: dict[str, Any],
                                                          mcp: Mcp) -> None:
    # GIVEN a pinned tool that calls through a connection
    publish_with_connection(admin, vendor)
    connection = admin.call("GET", "/v1/connections").json_body["items"][0]["id"]
    mcp.call("promote", {"vendor": "unleashed", "name": "list-sales-orders", "pinned": True})
    # WHEN the connection is revoked
    assert admin.call("POST", f"/v1/connections/{connection}/revoke").status_code == 200
    # THEN the tool is demoted (it cannot be called any more), pin and all
    assert working_set(admin, agent) == {}
    assert events(admin, agent)[-1][1:3] == ("demoted", "connection_revoked")
    assert mcp.call("pin", {"vendor": "unleashed", "name": "list-sales-orders"})["structuredContent"]["error"][
        "code"] == "not_promoted"


def test_one_agents_pins_are_its_own(admin: Admin, vendor: Vendor, agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN two agents with the same tool promoted, one pinned
    publish(admin, vendor, "orders")
    other = admin.create_agent("other")
    other_mcp = Mcp(mcp.client, other["api_key"])
    promote(mcp, "orders")
    promote(other_mcp, "orders")
    mcp.call("pin", ref("orders"))
    # WHEN the sweep runs past the idle window
    report = sweep_at(admin, utcnow() + 22 * DAY)
    # THEN only the other agent's copy goes
    assert [(d["agent_id"], d["name"]) for d in report["demoted"]] == [(other["id"], "orders")]
    assert pinned(admin, agent) == ["orders"]
