"""Pinned tools in the console: the Pin/Unpin buttons on each working-set row (CSRF like every
form), the pin marker, the half-cap limit shown on the page, and History."""

from __future__ import annotations

import re
from typing import Any

from tests.conftest import Admin, Mcp, Vendor
from tests.test_console import Console, rows, text

TOOL = {"vendor": "shop", "name": "orders"}


def publish(admin: Admin, vendor: Vendor, *names: str) -> None:
    for name in names:
        admin.publish(vendor="shop", name=name, description=f"The {name} tool.", annotations={"readOnlyHint": True},
                      input_schema={"type": "object"}, request={"method": "GET", "url": f"{vendor.url}/{name}"})


def promote(admin: Admin, agent: dict[str, Any], *names: str) -> None:
    for name in names:
        answer = admin.call("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": "shop", "name": name})
        assert answer.status_code == 201, answer.body


def pinned(admin: Admin, agent: dict[str, Any]) -> list[str]:
    items = admin.call("GET", f"/v1/agents/{agent['id']}/working-set").json_body["items"]
    return [item["name"] for item in items if item["pinned"]]


def row(page: str, tool: str) -> str:
    """The working-set row of `tool` (vendor__name), as HTML."""
    found = re.search(rf'<tr data-tool="{tool}".*?</tr>', page, re.DOTALL)
    assert found, tool
    return found.group(0)


def test_pin_and_unpin_from_the_agent_page(console: Console, admin: Admin, vendor: Vendor,
                                           agent: dict[str, Any]) -> None:
    # GIVEN two promoted tools, each row with a Pin button and no marker
    publish(admin, vendor, "orders", "invoices")
    promote(admin, agent, "orders", "invoices")
    page = text(console.get(f"/console/agents/{agent['id']}"))
    assert ">Pin</button>" in row(page, "shop__orders") and rows(page, "pinned") == []
    # WHEN a person pins one
    answer = console.post(f"/console/agents/{agent['id']}/pin", TOOL)
    # THEN it is pinned, the page says so, marks the row, offers Unpin, and shows the idle rule spares it
    assert answer.status_code == 303 and "done=pinned" in answer.headers["Location"]
    assert pinned(admin, agent) == ["orders"]
    page = text(console.get(f"/console/agents/{agent['id']}?done=pinned&tool=shop__orders"))
    assert "Pinned <code>shop__orders</code>: the sweep never demotes it." in page
    assert rows(page, "pinned") == ["shop__orders"]
    pinned_row = row(page, "shop__orders")
    assert 'class="badge pin-marker"' in pinned_row and ">Unpin</button>" in pinned_row
    assert ">Pin</button>" not in pinned_row and "never <span" in pinned_row
    assert ">Pin</button>" in row(page, "shop__invoices")
    assert re.search(r'id="pins">1 of 10 pinned<', page)
    # AND History reads it as the console's, and the admin API names the admin
    assert re.findall(r'class="action">(\w+)<', page)[0] == "pinned"
    assert re.findall(r'class="cause">([^<]+)<', page)[0] == "the console"
    # WHEN the person unpins it
    assert console.post(f"/console/agents/{agent['id']}/unpin", TOOL).status_code == 303
    # THEN the marker is gone and the row offers Pin again
    page = text(console.get(f"/console/agents/{agent['id']}"))
    assert pinned(admin, agent) == [] and rows(page, "pinned") == []
    assert ">Pin</button>" in row(page, "shop__orders")
    assert re.findall(r'class="action">(\w+)<', page)[:2] == ["unpinned", "pinned"]


def test_pin_and_unpin_without_the_token_change_nothing(console: Console, admin: Admin, vendor: Vendor,
                                                        agent: dict[str, Any]) -> None:
    # GIVEN one tool pinned and one not
    publish(admin, vendor, "orders", "invoices")
    promote(admin, agent, "orders", "invoices")
    admin.call("PUT", f"/v1/agents/{agent['id']}/pins/shop/invoices")
    # WHEN each form is posted with a forged token
    forged = [console.post(f"/console/agents/{agent['id']}/pin", TOOL, csrf="forged"),
              console.post(f"/console/agents/{agent['id']}/unpin", {"vendor": "shop", "name": "invoices"},
                           csrf="forged")]
    # THEN both are refused and the pins are as they were
    assert [answer.status_code for answer in forged] == [403, 403]
    assert pinned(admin, agent) == ["invoices"]


def test_a_pin_past_the_limit_shows_why_and_changes_nothing(console: Console, admin: Admin, vendor: Vendor) -> None:
    # GIVEN an agent with cap 2 (one pin), one tool pinned and another promoted
    agent = admin.create_agent("small", cap=2)
    publish(admin, vendor, "orders", "invoices")
    promote(admin, agent, "invoices", "orders")
    admin.call("PUT", f"/v1/agents/{agent['id']}/pins/shop/invoices")
    # WHEN the person pins the other
    answer = console.post(f"/console/agents/{agent['id']}/pin", TOOL)
    # THEN the page says why, nothing was pinned, and History is unchanged
    assert answer.status_code == 409
    assert "may pin at most 1 tool (half its cap, at least one)" in text(answer)
    assert "Nothing was changed." in text(answer)
    assert pinned(admin, agent) == ["invoices"]
    events = admin.call("GET", f"/v1/agents/{agent['id']}/history").json_body["items"]
    assert [e["action"] for e in events] == ["pinned", "promoted", "promoted"]


def test_pinning_a_tool_not_in_the_set_is_refused(console: Console, admin: Admin, vendor: Vendor,
                                                  agent: dict[str, Any]) -> None:
    publish(admin, vendor, "orders")
    answer = console.post(f"/console/agents/{agent['id']}/pin", TOOL)
    assert answer.status_code == 409 and "not in this agent&#39;s working set" in text(answer)
    assert admin.call("GET", f"/v1/agents/{agent['id']}/history").json_body["items"] == []


def test_demoting_a_pinned_tool_from_the_console_unpins_it(console: Console, admin: Admin, vendor: Vendor,
                                                           agent: dict[str, Any], mcp: Mcp) -> None:
    # GIVEN a tool the agent pinned
    publish(admin, vendor, "orders")
    mcp.call("promote", {**TOOL, "pinned": True})
    # WHEN a person demotes it from the console, then promotes it again
    assert console.post(f"/console/agents/{agent['id']}/demote", TOOL).status_code == 303
    assert console.post(f"/console/agents/{agent['id']}/promote", TOOL).status_code == 303
    # THEN it is back, unpinned, and History tells the whole story with who did what
    assert pinned(admin, agent) == []
    events = admin.call("GET", f"/v1/agents/{agent['id']}/history").json_body["items"]
    assert [(e["action"], e["cause"], e["actor"]) for e in reversed(events)] == [
        ("promoted", "agent_asked", agent["id"]), ("pinned", "agent_asked", agent["id"]),
        ("demoted", "console", "admin"), ("promoted", "console", "admin")]
