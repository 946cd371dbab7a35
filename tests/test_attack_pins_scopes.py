"""Pins and connection scopes, tried as an attacker would (issue 24's wider pass): an agent with its
own key, a second agent of the same account, another account, a browser without the session's
token, a revoked agent, a revoked connection, a tool its source withdrew. Each test sends the
hostile thing, then checks what must be unchanged: the pins and their count, the working set and
its History, the due index, the stored scope, no vendor request, no run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.access import connections
from chalicelib.agents import workingset
from chalicelib.base.causes import Cause
from chalicelib.base.clock import utcnow
from chalicelib.base.errors import PinLimit
from chalicelib.net import mcpclient
from chalicelib.store import tools as tool_store
from chalicelib.store.models import AGENT_SK, AgentSettingsItem
from tests.books import agent_state, sweep_at
from tests.conftest import Admin, Console, JsonHandler, Mcp, Vendor, serving

DAY = timedelta(days=1)
FAR = 1000 * DAY


def publish(admin: Admin, vendor: Vendor, *names: str, **extra: Any) -> None:
    for name in names:
        admin.publish(vendor="shop", name=name, description=f"The {name} tool.", annotations={"readOnlyHint": True},
                      input_schema={"type": "object"}, request={"method": "GET", "url": f"{vendor.url}/{name}"},
                      **extra)


def ref(name: str) -> dict[str, str]:
    return {"vendor": "shop", "name": name}


def promote(mcp: Mcp, *names: str) -> None:
    for name in names:
        assert mcp.call("promote", ref(name))["isError"] is False


def error_of(result: dict[str, Any]) -> dict[str, Any]:
    assert result["isError"] is True, result
    return result["structuredContent"]["error"]


def working_set(admin: Admin, agent_id: str) -> dict[str, dict[str, Any]]:
    items = admin.call("GET", f"/v1/agents/{agent_id}/working-set").json_body["items"]
    return {item["name"]: item for item in items}


def pinned(admin: Admin, agent_id: str) -> list[str]:
    return sorted(name for name, item in working_set(admin, agent_id).items() if item["pinned"])


def events(admin: Admin, agent_id: str) -> list[tuple[str, str, str, str]]:
    """(name, action, cause, actor), oldest first."""
    items = admin.call("GET", f"/v1/agents/{agent_id}/history").json_body["items"]
    return [(e["name"], e["action"], e["cause"], e["actor"]) for e in reversed(items)]


def counted_pins(agent_id: str) -> int:
    """The pin count the store keeps on the agent (what the limit's condition reads)."""
    return int(AgentSettingsItem.get(agent_id, AGENT_SK).pins or 0)


def books(admin: Admin, agent_id: str) -> tuple[list[str], int, int]:
    """(the pinned tools, the stored pin count, the size the agent is counted at), which must agree."""
    return pinned(admin, agent_id), counted_pins(agent_id), admin.call("GET", f"/v1/agents/{agent_id}").json_body[
        "size"]


def connection(admin: Admin, vendor: Vendor, vendor_name: str = "shop", token: str = "sk_live_0123456789abcdef") -> str:
    body = {"vendor": vendor_name, "auth": {"type": "bearer", "token": token},
            "hosts": [vendor.url.removeprefix("http://")]}
    response = admin.call("POST", "/v1/connections", body)
    assert response.status_code == 201, response.body
    return response.json_body["id"]


def scope(admin: Admin, agent_id: str, connections: Any) -> Any:
    return admin.call("PATCH", f"/v1/agents/{agent_id}", {"connections": connections})


def stored_scope(admin: Admin, agent_id: str) -> Any:
    return admin.call("GET", f"/v1/agents/{agent_id}").json_body["connections"]


def runs_of(admin: Admin, agent_id: str) -> list[dict[str, Any]]:
    return admin.call("GET", f"/v1/agents/{agent_id}/runs").json_body["items"]


# --- pins: the limit, and races around it ---------------------------------------------------------

def test_two_pins_racing_for_the_last_place_leave_exactly_one(admin: Admin, vendor: Vendor, mcp: Mcp) -> None:
    # GIVEN an agent with cap 2 (one pin) and two promoted tools, read by two requests at once
    agent = admin.create_agent("racer", cap=2)
    mcp.key = agent["api_key"]
    publish(admin, vendor, "a", "b")
    promote(mcp, "a", "b")
    first, second = agent_state(agent["id"]), agent_state(agent["id"])
    # WHEN both pin a different tool, each judging the limit on its own (stale) read
    workingset.pin(first, "shop", "a", cause=Cause.AGENT_ASKED, actor=agent["id"], now=utcnow())
    with pytest.raises(PinLimit):
        workingset.pin(second, "shop", "b", cause=Cause.AGENT_ASKED, actor=agent["id"], now=utcnow())
    # THEN the store's count held the limit: one pin, counted once, one pin event
    assert books(admin, agent["id"]) == (["a"], 1, 2)
    assert [e[1] for e in events(admin, agent["id"])].count("pinned") == 1


def test_a_promote_pinned_racing_a_pin_cannot_pass_the_limit(admin: Admin, vendor: Vendor, mcp: Mcp) -> None:
    # GIVEN cap 2 (one pin), one tool promoted, and two requests that read the agent at once
    agent = admin.create_agent("racer", cap=2)
    mcp.key = agent["api_key"]
    publish(admin, vendor, "a", "b")
    promote(mcp, "a")
    first, second = agent_state(agent["id"]), agent_state(agent["id"])
    # WHEN one pins `a` and the other promotes `b` pinned, both on their stale reads
    workingset.pin(first, "shop", "a", cause=Cause.AGENT_ASKED, actor=agent["id"], now=utcnow())
    with pytest.raises(PinLimit):
        workingset.promote(second, "shop", "b", by=workingset.PromotedBy.AGENT, actor=agent["id"], now=utcnow(),
                           pinned=True)
    # THEN `b` was not even promoted, and the books agree
    assert books(admin, agent["id"]) == (["a"], 1, 1)
    assert "b" not in working_set(admin, agent["id"])


def test_an_unpin_racing_a_demotion_leaves_the_books_agreeing(admin: Admin, vendor: Vendor,
                                                               agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN two pinned tools, and a person's demotion that read the agent before the agent unpinned
    publish(admin, vendor, "a", "b")
    mcp.call("promote", {**ref("a"), "pinned": True})
    mcp.call("promote", {**ref("b"), "pinned": True})
    read_pinned = agent_state(agent["id"])
    assert mcp.call("unpin", ref("a"))["isError"] is False
    # WHEN the demotion writes on its stale read (it saw `a` pinned)
    change = workingset.demote(read_pinned, "shop", "a", cause=Cause.CONSOLE, actor="admin", now=utcnow())
    # THEN it is demoted, and the pin count was moved back once only (by the unpin)
    assert change.changed is True
    assert books(admin, agent["id"]) == (["b"], 1, 1)
    # WHEN an unpin writes on a read made before `b` was demoted
    read_before = agent_state(agent["id"])
    assert mcp.call("demote", ref("b"))["isError"] is False
    unpinned = workingset.unpin(read_before, "shop", "b", cause=Cause.CONSOLE, actor="admin", now=utcnow())
    # THEN it changes nothing, and the books still agree (no pin, nothing counted, empty set)
    assert unpinned.changed is False
    assert books(admin, agent["id"]) == ([], 0, 0)
    # AND the pin limit is whole again: both tools pin once promoted
    mcp.call("promote", {**ref("a"), "pinned": True})
    mcp.call("promote", {**ref("b"), "pinned": True})
    assert books(admin, agent["id"]) == (["a", "b"], 2, 2)


def test_an_unpinned_tool_is_back_in_the_due_index_and_a_pinned_one_is_not(admin: Admin, vendor: Vendor,
                                                                           agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN a promoted tool, pinned
    publish(admin, vendor, "a")
    promote(mcp, "a")
    mcp.call("pin", ref("a"))
    # THEN the promotion is out of the due index, and a sweep far past every deadline keeps it
    assert agent_state(agent["id"]).promotion("shop", "a").due_at is None
    assert sweep_at(admin, utcnow() + FAR)["demoted"] == []
    # WHEN it is unpinned
    mcp.call("unpin", ref("a"))
    # THEN the due index and the idle rule agree on its deadline
    promotion = agent_state(agent["id"]).promotion("shop", "a")
    assert promotion.due_at == promotion.promoted_at + 21 * DAY
    assert [d["name"] for d in sweep_at(admin, promotion.promoted_at + 22 * DAY)["demoted"]] == ["a"]


def test_the_pinned_set_is_bounded_when_the_cap_falls(admin: Admin, vendor: Vendor, mcp: Mcp) -> None:
    # GIVEN an agent with cap 6 (three pins), three pinned and three more promoted and used
    agent = admin.create_agent("wide", cap=6)
    mcp.key = agent["api_key"]
    publish(admin, vendor, "a", "b", "c", "d", "e", "f")
    for name in ("a", "b", "c"):
        mcp.call("promote", {**ref(name), "pinned": True})
    promote(mcp, "d", "e", "f")
    # WHEN the cap falls to 1 and the agent tries to pin more and to promote more pinned
    admin.call("PATCH", f"/v1/agents/{agent['id']}", {"cap": 1})
    refused = [mcp.call("pin", ref("d")), mcp.call("promote", {**ref("d"), "pinned": True})]
    # THEN both are refused at the new limit, and the sweep brings the set down to the pins
    assert [error_of(answer)["code"] for answer in refused] == ["pin_limit", "pin_limit"]
    sweep_at(admin, utcnow() + DAY)
    assert sorted(working_set(admin, agent["id"])) == ["a", "b", "c"]
    assert books(admin, agent["id"]) == (["a", "b", "c"], 3, 3)


# --- pins: whose set, which tool ------------------------------------------------------------------

def test_an_agent_cannot_pin_or_unpin_in_another_agents_set(admin: Admin, client: Client, vendor: Vendor,
                                                            agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN the tool promoted and pinned for one agent only
    publish(admin, vendor, "orders")
    mcp.call("promote", {**ref("orders"), "pinned": True})
    other = admin.create_agent("other")
    intruder = Mcp(client, other["api_key"])
    before = (working_set(admin, agent["id"]), events(admin, agent["id"]))
    # WHEN the second agent pins and unpins that tool (its arguments name no agent)
    pin = intruder.call("pin", ref("orders"))
    unpin = intruder.call("unpin", ref("orders"))
    # THEN the pin is not_promoted for it, the unpin changes nothing, and the first agent's set stands
    assert error_of(pin)["code"] == "not_promoted"
    assert unpin["structuredContent"] == {"pinned": False, "pins": 0, "pin_limit": 10}
    assert (working_set(admin, agent["id"]), events(admin, agent["id"])) == before
    assert working_set(admin, other["id"]) == {} and events(admin, other["id"]) == []


@pytest.mark.parametrize("arguments", [
    {"vendor": "SHOP", "name": "orders"}, {"vendor": "shop", "name": "Orders"}, {"vendor": "shöp", "name": "orders"},
    {"vendor": "shop", "name": "orders\n"}, {"vendor": "shop", "name": "ord__ers"}, {"vendor": "shop__orders"},
    {"vendor": "shop#orders", "name": "x"}, {"vendor": "shop", "name": "orders", "agent": "ag0"},
    {"vendor": "shop", "name": "o" * 62}, {"vendor": "shop", "name": "orders\u200b"},
])
@pytest.mark.parametrize("meta", ["pin", "unpin"])
def test_names_that_are_not_the_tool_pin_nothing(admin: Admin, vendor: Vendor, agent: dict[str, Any], mcp: Mcp,
                                                 meta: str, arguments: dict[str, Any]) -> None:
    # GIVEN one promoted tool, pinned for the unpin case
    publish(admin, vendor, "orders")
    mcp.call("promote", {**ref("orders"), "pinned": meta == "unpin"})
    before = (working_set(admin, agent["id"]), events(admin, agent["id"]), counted_pins(agent["id"]))
    # WHEN the agent names it with another case, script, separator, key character or an extra field
    answer = mcp.call(meta, arguments)
    # THEN it is invalid input and nothing changed
    assert error_of(answer)["code"] == "invalid_input"
    assert (working_set(admin, agent["id"]), events(admin, agent["id"]), counted_pins(agent["id"])) == before


@pytest.mark.parametrize(("vendor_name", "name"), [("SHOP", "orders"), ("shop", "ORDERS"), ("shop%23x", "orders"),
                                                   ("shop", "orders%0A"), ("sh", "op#orders"), ("shop", "x" * 2000)])
def test_the_admin_api_pins_only_the_tool_it_names(admin: Admin, vendor: Vendor, agent: dict[str, Any], mcp: Mcp,
                                                   vendor_name: str, name: str) -> None:
    publish(admin, vendor, "orders")
    promote(mcp, "orders")
    answer = admin.call("PUT", f"/v1/agents/{agent['id']}/pins/{vendor_name}/{name}")
    assert answer.status_code in (400, 404) and answer.json_body["error"]["code"] in ("invalid_input",
                                                                                        "tool_not_found")
    assert pinned(admin, agent["id"]) == [] and counted_pins(agent["id"]) == 0


def test_a_revoked_agent_cannot_pin_or_unpin(admin: Admin, vendor: Vendor, agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN an agent with one pinned and one unpinned tool, then revoked
    publish(admin, vendor, "a", "b")
    mcp.call("promote", {**ref("a"), "pinned": True})
    promote(mcp, "b")
    assert admin.call("POST", f"/v1/agents/{agent['id']}/revoke").status_code == 200
    before = (working_set(admin, agent["id"]), events(admin, agent["id"]))
    # WHEN its old key pins and unpins
    answers = [mcp.post("tools/call", {"name": name, "arguments": ref(tool)}) for name, tool in
               (("pin", "b"), ("unpin", "a"))]
    # THEN both are unauthorized and nothing changed
    assert [answer.status_code for answer in answers] == [401, 401]
    assert (working_set(admin, agent["id"]), events(admin, agent["id"])) == before


def test_the_console_cannot_pin_in_another_accounts_agent_nor_without_the_token(
        console: Console, admin: Admin, other_admin: Admin, vendor: Vendor, client: Client) -> None:
    # GIVEN another account's agent with the same tool promoted
    publish(other_admin, vendor, "orders")
    foreign = other_admin.create_agent("foreign")
    other_admin.call("POST", f"/v1/agents/{foreign['id']}/working-set", ref("orders"))
    # WHEN a person of the first account posts the pin and unpin forms at that agent, and one without the token
    posted = [console.post(f"/console/agents/{foreign['id']}/pin", ref("orders")),
              console.post(f"/console/agents/{foreign['id']}/unpin", ref("orders")),
              console.post(f"/console/agents/{foreign['id']}/pin", ref("orders"), csrf="")]
    # THEN the first two are not found, the last forbidden, and the foreign agent's set is as it was
    assert [answer.status_code for answer in posted] == [404, 404, 403]
    assert pinned(other_admin, foreign["id"]) == [] and [e[1] for e in events(other_admin, foreign["id"])] == [
        "promoted"]


def test_pins_are_in_history_with_their_actor(admin: Admin, console: Console, vendor: Vendor,
                                              agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN a tool pinned by the agent, unpinned by the console, pinned by the admin API
    publish(admin, vendor, "orders")
    mcp.call("promote", {**ref("orders"), "pinned": True})
    console.post(f"/console/agents/{agent['id']}/unpin", ref("orders"))
    admin.call("PUT", f"/v1/agents/{agent['id']}/pins/shop/orders")
    # THEN History holds each with who did it and why
    assert events(admin, agent["id"]) == [("orders", "promoted", "agent_asked", agent["id"]),
                                          ("orders", "pinned", "agent_asked", agent["id"]),
                                          ("orders", "unpinned", "console", "admin"),
                                          ("orders", "pinned", "console", "admin")]


# --- pins: tools that cannot be called ------------------------------------------------------------



def test_a_tool_whose_connection_was_revoked_cannot_be_promoted_or_pinned_again(admin: Admin, vendor: Vendor,
                                                                                 agent: dict[str, Any],
                                                                                 mcp: Mcp) -> None:
    # GIVEN a pinned tool whose connection a person revokes (the revocation demotes it, pin and all)
    publish(admin, vendor, "orders", connection=connection(admin, vendor))
    mcp.call("promote", {**ref("orders"), "pinned": True})
    connection_id = admin.call("GET", "/v1/connections").json_body["items"][0]["id"]
    assert admin.call("POST", f"/v1/connections/{connection_id}/revoke").status_code == 200
    assert working_set(admin, agent["id"]) == {}
    history = events(admin, agent["id"])
    # WHEN the agent promotes it again pinned, or plainly, and a person promotes it for the agent
    again = [mcp.call("promote", {**ref("orders"), "pinned": True}), mcp.call("promote", ref("orders"))]
    by_person = admin.call("POST", f"/v1/agents/{agent['id']}/working-set", ref("orders"))
    # THEN each is refused as connection_revoked: the revocation's demotion stands, no pin, no event
    assert [error_of(answer)["code"] for answer in again] == ["connection_revoked", "connection_revoked"]
    assert (by_person.status_code, by_person.json_body["error"]["code"]) == (409, "connection_revoked")
    assert working_set(admin, agent["id"]) == {} and events(admin, agent["id"]) == history
    assert books(admin, agent["id"]) == ([], 0, 0)
    # AND once a person gives the connection a new secret, the tool promotes and pins again
    replaced = admin.call("PUT", f"/v1/connections/{connection_id}/auth",
                          {"auth": {"type": "bearer", "token": "sk_live_new_0123456789"}})
    assert replaced.status_code == 200, replaced.body
    assert mcp.call("promote", {**ref("orders"), "pinned": True})["structuredContent"]["pinned"] is True


def test_a_promoted_tool_whose_connection_is_revoked_cannot_be_pinned_to_outlive_it(
        admin: Admin, vendor: Vendor, agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN a promoted tool whose connection is revoked, and no sweep yet to demote it
    publish(admin, vendor, "orders", connection=connection(admin, vendor))
    promote(mcp, "orders")
    connection_id = admin.call("GET", "/v1/connections").json_body["items"][0]["id"]
    connections.revoke(agent_state(agent["id"]).agent.account_id, connection_id, utcnow())
    # WHEN the agent pins it before the sweep comes, and a person pins it
    by_agent = mcp.call("pin", ref("orders"))
    by_person = admin.call("PUT", f"/v1/agents/{agent['id']}/pins/shop/orders")
    # THEN both are refused, and the next sweep demotes it for its connection
    assert error_of(by_agent)["code"] == "connection_revoked"
    assert (by_person.status_code, by_person.json_body["error"]["code"]) == (409, "connection_revoked")
    report = sweep_at(admin, utcnow() + timedelta(minutes=5))
    assert [(d["name"], d["cause"]) for d in report["demoted"]] == [("orders", "connection_revoked")]
    assert books(admin, agent["id"]) == ([], 0, 0)




def test_a_tool_its_source_withdrew_cannot_be_pinned(admin: Admin, vendor: Vendor, agent: dict[str, Any],
                                                     mcp: Mcp) -> None:
    # GIVEN a promoted tool its source then withdrew (an import or an MCP server no longer offers it)
    publish(admin, vendor, "orders", "kept")
    promote(mcp, "orders")
    mcp.call("promote", {**ref("kept"), "pinned": True})
    account_id = agent_state(agent["id"]).agent.account_id
    tool_store.set_unavailable(account_id, [tool_store.get_head(account_id, "shop", name) for name in
                                            ("orders", "kept")], "the source no longer offers it")
    history = events(admin, agent["id"])
    # WHEN the agent pins it, and a person pins it
    by_agent = mcp.call("pin", ref("orders"))
    by_person = admin.call("PUT", f"/v1/agents/{agent['id']}/pins/shop/orders")
    # THEN both are refused as tool_unavailable and nothing changed
    assert error_of(by_agent)["code"] == "tool_unavailable"
    assert (by_person.status_code, by_person.json_body["error"]["code"]) == (410, "tool_unavailable")
    assert events(admin, agent["id"]) == history and books(admin, agent["id"]) == (["kept"], 1, 2)
    # AND a pin made before the withdrawal stays (the tool comes back if the source restores it),
    # while unpinning it still works
    assert mcp.call("unpin", ref("kept"))["structuredContent"]["pinned"] is False
    assert books(admin, agent["id"]) == ([], 0, 2)


# --- scopes: what a person may store --------------------------------------------------------------

@pytest.mark.parametrize("size", [101, 10_000])
def test_a_scope_of_too_many_ids_is_refused_before_any_is_looked_up(admin: Admin, vendor: Vendor,
                                                                     agent: dict[str, Any], size: int) -> None:
    from bench.dynamo_calls import DynamoCalls

    mine = connection(admin, vendor)
    assert scope(admin, agent["id"], [mine]).status_code == 200
    counter = DynamoCalls().install()
    with counter.measure() as made:
        response = scope(admin, agent["id"], [f"cn{index:016x}" for index in range(size)])
    assert response.status_code == 400 and response.json_body["error"]["field"] == "connections"
    assert stored_scope(admin, agent["id"]) == [mine]
    assert len(made) <= 3  # the token and the agent at most: no read per id


def test_a_scope_is_stored_whole_or_not_at_all(admin: Admin, other_admin: Admin, vendor: Vendor,
                                               agent: dict[str, Any]) -> None:
    # GIVEN a scope of one connection, and another account's connection
    mine, second = connection(admin, vendor), connection(admin, vendor, token="sk_second_0123456789")
    foreign = connection(other_admin, vendor)
    assert scope(admin, agent["id"], [mine]).status_code == 200
    # WHEN a person sets a scope naming a good id then the foreign one, or a good id among bad ones
    for bad in ([second, foreign], [second, "cn" + "0" * 16], [second, second.upper()], [second, ""]):
        response = scope(admin, agent["id"], bad)
        # THEN it is refused naming the field, and the stored scope is unchanged
        assert response.status_code == 400 and response.json_body["error"]["field"].startswith("connections")
        assert stored_scope(admin, agent["id"]) == [mine]
    # AND duplicates are stored once; an empty list is a scope of no connection at all
    assert scope(admin, agent["id"], [second] * 100).json_body["connections"] == [second]
    assert scope(admin, agent["id"], []).json_body["connections"] == []


def test_another_account_cannot_change_or_read_an_agents_scope(admin: Admin, other_admin: Admin, vendor: Vendor,
                                                               agent: dict[str, Any]) -> None:
    mine = connection(admin, vendor)
    assert scope(admin, agent["id"], [mine]).status_code == 200
    foreign = connection(other_admin, vendor)
    assert scope(other_admin, agent["id"], "all").status_code == 404
    assert scope(other_admin, agent["id"], [foreign]).status_code == 404
    assert other_admin.call("GET", f"/v1/agents/{agent['id']}").status_code == 404
    assert stored_scope(admin, agent["id"]) == [mine]


def test_the_console_scope_form_needs_the_token_and_the_account(console: Console, admin: Admin, other_admin: Admin,
                                                                vendor: Vendor, agent: dict[str, Any]) -> None:
    # GIVEN an agent limited to one connection, and another account's agent
    mine = connection(admin, vendor)
    assert scope(admin, agent["id"], [mine]).status_code == 200
    foreign_agent = other_admin.create_agent("foreign")
    foreign = connection(other_admin, vendor)
    assert scope(other_admin, foreign_agent["id"], [foreign]).status_code == 200
    # WHEN the form is posted without the token, at the foreign agent, and naming the foreign connection
    forged = console.post(f"/console/agents/{agent['id']}/connections", {"scope": "all"}, csrf="forged")
    elsewhere = console.post(f"/console/agents/{foreign_agent['id']}/connections", {"scope": "all"})
    smuggled = console.post(f"/console/agents/{agent['id']}/connections", {"scope": "some", f"use_{foreign}": "on"})
    # THEN each is refused and both scopes are as they were
    assert [forged.status_code, elsewhere.status_code, smuggled.status_code] == [403, 404, 400]
    assert stored_scope(admin, agent["id"]) == [mine]
    assert stored_scope(other_admin, foreign_agent["id"]) == [foreign]


# --- scopes: what an agent outside its scope reaches ----------------------------------------------

def test_an_out_of_scope_tool_reaches_nothing_first_class_by_run_tool_or_in_a_dry_run(
        admin: Admin, vendor: Vendor, agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN a read tool and a write tool on one connection, both promoted, the agent limited to another
    first, second = connection(admin, vendor), connection(admin, vendor, token="sk_second_0123456789")
    publish(admin, vendor, "orders", connection=first)
    admin.publish(vendor="shop", name="refund", description="Refund an order.", annotations={"destructiveHint": True},
                  input_schema={"type": "object"}, request={"method": "POST", "url": f"{vendor.url}/refund"},
                  connection=first)
    promote(mcp, "orders", "refund")
    assert scope(admin, agent["id"], [second]).status_code == 200
    # WHEN it calls each first-class, through run_tool, and as a dry run both ways
    answers = [mcp.call("shop__orders", {}), mcp.call("shop__refund", {}),
               mcp.call("shop__orders", {"dryRun": True}), mcp.call("shop__refund", {"dryRun": True})]
    answers += [mcp.call("run_tool", {**ref(name), "dryRun": dry}) for name in ("orders", "refund")
                for dry in (False, True)]
    # THEN every one is connection_not_in_scope: no vendor request, no run, no use recorded
    assert {error_of(answer)["code"] for answer in answers} == {"connection_not_in_scope"}
    assert vendor.received == [] and runs_of(admin, agent["id"]) == []
    assert all(item["last_used_at"] is None for item in working_set(admin, agent["id"]).values())
    # AND find_tool marks both unavailable for this agent
    hits = mcp.call("find_tool", {"query": "orders refund"})["structuredContent"]["hits"]
    assert {(hit["name"], hit["available"], hit.get("reason")) for hit in hits} == {
        ("orders", False, "connection_not_in_scope"), ("refund", False, "connection_not_in_scope")}


def test_one_agents_scope_leaves_another_agent_of_the_account_as_it_was(admin: Admin, client: Client,
                                                                        vendor: Vendor, agent: dict[str, Any],
                                                                        mcp: Mcp) -> None:
    # GIVEN two agents and a read tool on a connection; the first is limited to no connection
    publish(admin, vendor, "orders", connection=connection(admin, vendor))
    other = admin.create_agent("other")
    assert scope(admin, agent["id"], []).status_code == 200
    # WHEN both call it
    refused = mcp.call("run_tool", ref("orders"))
    served = Mcp(client, other["api_key"]).call("run_tool", ref("orders"))
    # THEN only the limited one is refused; the other is served, and its scope is still all
    assert error_of(refused)["code"] == "connection_not_in_scope"
    assert served["isError"] is False and len(vendor.received) == 1
    assert stored_scope(admin, other["id"]) == "all"


def test_an_agent_cannot_move_its_own_tool_onto_a_connection_outside_its_scope(admin: Admin, vendor: Vendor,
                                                                               agent: dict[str, Any],
                                                                               mcp: Mcp) -> None:
    # GIVEN the agent authored a tool on connection `first`, then a person limited it to `second`
    first, second = connection(admin, vendor), connection(admin, vendor, token="sk_second_0123456789")
    spec = {"vendor": "shop", "name": "mine", "description": "My orders.", "annotations": {"readOnlyHint": True},
            "input_schema": {"type": "object"}, "request": {"method": "GET", "url": f"{vendor.url}/mine"}}
    assert mcp.call("acquire", {**spec, "connection": first})["isError"] is False
    assert scope(admin, agent["id"], [second]).status_code == 200
    versions = admin.call("GET", "/v1/tools/shop/mine").json_body["versions"]
    # WHEN it publishes a new version of its own tool on `first` again, and calls the old one
    republished = mcp.call("acquire", {**spec, "description": "My orders, again.", "connection": first})
    called = mcp.call("shop__mine", {})
    # THEN both are refused: no new version, no vendor request
    assert error_of(republished)["code"] == error_of(called)["code"] == "connection_not_in_scope"
    assert admin.call("GET", "/v1/tools/shop/mine").json_body["versions"] == versions
    assert vendor.received == []
    # AND a version on `second`, which is in its scope, goes through and runs
    assert mcp.call("acquire", {**spec, "connection": second})["isError"] is False
    assert mcp.call("shop__mine", {})["isError"] is False and len(vendor.received) == 1


def test_a_waiting_run_of_a_connection_taken_out_of_scope_is_not_run_by_the_console_approval(
        admin: Admin, console: Console, vendor: Vendor, agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN a write waiting for a person, then the agent's scope narrowed to exclude its connection
    first, second = connection(admin, vendor), connection(admin, vendor, token="sk_second_0123456789")
    admin.publish(vendor="shop", name="refund", description="Refund an order.", annotations={"destructiveHint": True},
                  input_schema={"type": "object"}, request={"method": "POST", "url": f"{vendor.url}/refund"},
                  connection=first)
    run_id = mcp.call("run_tool", ref("refund"))["structuredContent"]["run_id"]
    assert scope(admin, agent["id"], [second]).status_code == 200
    # WHEN a person approves it in the console
    console.post(f"/console/approvals/{run_id}/approve")
    # THEN it ended failed, out of scope, and the vendor saw nothing
    run = admin.call("GET", f"/v1/runs/{run_id}").json_body
    assert run["status"] == "failed" and run["error"]["error"]["code"] == "connection_not_in_scope"
    assert vendor.received == []




@pytest.mark.parametrize("with_connection", [True, False])
def test_a_waiting_run_of_an_agent_revoked_meanwhile_is_not_run(admin: Admin, vendor: Vendor, agent: dict[str, Any],
                                                                mcp: Mcp, with_connection: bool) -> None:
    # GIVEN a write waiting for a person (carrying a connection's credential, or keyless), then the
    # agent is revoked
    extra = {"connection": connection(admin, vendor)} if with_connection else {}
    admin.publish(vendor="shop", name="refund", description="Refund an order.", annotations={"destructiveHint": True},
                  input_schema={"type": "object"}, request={"method": "POST", "url": f"{vendor.url}/refund"},
                  **extra)
    run_id = mcp.call("run_tool", ref("refund"))["structuredContent"]["run_id"]
    assert admin.call("POST", f"/v1/agents/{agent['id']}/revoke").status_code == 200
    # WHEN a person approves it (the approvals list still shows it)
    answer = admin.call("POST", f"/v1/approvals/{run_id}/approve")
    # THEN it ends failed, agent_revoked: the vendor saw nothing, and no lease is left
    assert answer.status_code == 200, answer.body
    assert answer.json_body["status"] == "failed"
    assert answer.json_body["error"]["error"]["code"] == "agent_revoked"
    assert vendor.received == []
    assert agent_state(agent["id"]).leases == {}


# --- scopes: an MCP server's tools ----------------------------------------------------------------

@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    """A handshake-era MCP server listing one write tool; it records each method it is sent."""
    methods: list[str] = []
    tools = [{"name": "wipe", "description": "Wipe it.", "inputSchema": {"type": "object"},
              "annotations": {"readOnlyHint": False, "destructiveHint": True}},
             {"name": "look", "description": "Look at it.", "inputSchema": {"type": "object"},
              "annotations": {"readOnlyHint": True}}]

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            methods.append(message["method"])
            if message["method"] == "server/discover":
                self.reply(400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "no"}})
            elif message["method"] == "notifications/initialized":
                self.reply(202, None)
            else:
                value = {"initialize": {"protocolVersion": "2025-11-25", "capabilities": {}},
                         "tools/list": {"tools": tools},
                         "tools/call": {"content": [{"type": "text", "text": "done"}]}}[message["method"]]
                self.reply(200, {"jsonrpc": "2.0", "id": message["id"], "result": value})

    mcpclient.forget_sessions()
    with serving(Handler) as base:
        yield f"{base}/mcp", methods
    mcpclient.forget_sessions()


def test_an_mcp_servers_tools_are_out_of_reach_when_its_connection_is_out_of_scope(
        admin: Admin, agent: dict[str, Any], mcp: Mcp, server: tuple[str, list[str]]) -> None:
    # GIVEN an MCP server registered with a connection, and the agent limited to another connection
    url, methods = server
    host = url.split("/")[2]
    made = [admin.call("POST", "/v1/connections", {"vendor": "ops", "hosts": [host],
                                                   "auth": {"type": "bearer", "token": f"tok-{index}-0123456789"}})
            for index in range(2)]
    upstream, other = (answer.json_body["id"] for answer in made)
    registered = admin.call("POST", "/v1/upstreams", {"vendor": "ops", "url": url, "connection": upstream})
    assert registered.status_code == 201, registered.body
    assert scope(admin, agent["id"], [other]).status_code == 200
    synced = list(methods)
    # WHEN the agent calls its tools, writes and reads, for real and as dry runs
    answers = [mcp.call("run_tool", {"vendor": "ops", "name": name, "dryRun": dry})
               for name in ("wipe", "look") for dry in (False, True)]
    # THEN each is connection_not_in_scope, no run waits for a person, and the server heard nothing new
    assert {error_of(answer)["code"] for answer in answers} == {"connection_not_in_scope"}
    assert runs_of(admin, agent["id"]) == [] and methods == synced
