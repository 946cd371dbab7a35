"""What hosts with their own tool search need from Workset's tool list (issue 14, part 1): every
meta-tool and every promoted tool marked to load up front, with a search hint; find_tool's hits
carry each tool's input schema, its hint and how many more matched; a working set at the cap stays
far under the share of the context at which such a host starts deferring tools."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chalicelib.identity.accounts import DEFAULT_CAP
from chalicelib.mcp.metatools import ALWAYS_LOAD, ALWAYS_LOAD_BYTES, META_TOOLS, SEARCH_HINT
from tests.conftest import Admin, Mcp

# Claude Code defers MCP tools once their definitions pass 10% of the context window (its
# ENABLE_TOOL_SEARCH "auto" threshold); a 200k-token window gives 20k tokens.
DEFERRAL_TOKENS = 20_000
BYTES_PER_TOKEN = 4


@pytest.fixture(params=["legacy", "modern"])
def any_mcp(mcp: Mcp, request: pytest.FixtureRequest) -> Mcp:
    mcp.modern = request.param == "modern"
    return mcp


def _listed(mcp: Mcp) -> list[dict[str, Any]]:
    return mcp.post("tools/list").json_body["result"]["tools"]


def _publish_orders(admin: Admin, count: int) -> None:
    for index in range(count):
        admin.publish(name=f"orders-{index}", description=f"List sales orders of region {index}, by customer.",
                      annotations={"readOnlyHint": True, "title": f"Orders {index}"})


def test_every_tool_listed_is_marked_to_load_up_front_with_a_search_hint(admin: Admin, any_mcp: Mcp) -> None:
    # GIVEN an agent with two promoted tools
    _publish_orders(admin, 2)
    for index in range(2):
        any_mcp.call("promote", {"vendor": "unleashed", "name": f"orders-{index}"})
    # WHEN it lists its tools
    listed = _listed(any_mcp)
    # THEN the meta-tools and the promoted tools all say alwaysLoad; the promoted tools and find_tool
    # (the one a host that defers anyway must find) each with its own hint
    assert len(listed) == len(META_TOOLS) + 2
    assert all(tool["_meta"][ALWAYS_LOAD] is True for tool in listed)
    hints = {tool["name"]: tool["_meta"][SEARCH_HINT] for tool in listed if SEARCH_HINT in tool["_meta"]}
    assert hints["unleashed__orders-1"] == "unleashed orders 1 Orders 1"
    assert "search" in hints["find_tool"] and len(set(hints.values())) == len(hints) == 3


def test_find_tool_hits_carry_an_input_summary_the_first_its_schema_and_how_many_more_matched(
        admin: Admin, mcp: Mcp) -> None:
    # GIVEN more matching tools than the limit
    _publish_orders(admin, 6)
    # WHEN the agent asks for two
    found = mcp.call("find_tool", {"query": "sales orders", "limit": 2})["structuredContent"]
    # THEN two hits come with their input summarised, the first with its schema (enough for run_tool),
    # and four more are counted
    assert len(found["hits"]) == 2 and found["more"] == 4
    hit, second = found["hits"]
    assert hit["input_schema"]["required"] == ["customer"]
    assert second["input"] == "customer*: string, page: integer" and "input_schema" not in second
    # AND an input made from that schema alone passes the tool's validation
    made = {field: "x" for field in hit["input_schema"]["required"]}
    ran = mcp.call("run_tool", {"vendor": hit["vendor"], "name": hit["name"], "input": made})
    assert ran["structuredContent"]["error"]["code"] == "vendor_error"  # it reached the (absent) vendor


def test_a_working_set_at_the_default_cap_stays_far_from_deferral(admin: Admin, mcp: Mcp) -> None:
    # GIVEN an agent whose working set is full at the default cap, of tools with real-sized schemas
    _publish_orders(admin, DEFAULT_CAP)
    for index in range(DEFAULT_CAP):
        mcp.call("promote", {"vendor": "unleashed", "name": f"orders-{index}"})
    # WHEN it lists its tools
    listed = _listed(mcp)
    tokens = len(json.dumps(listed, separators=(",", ":"))) / BYTES_PER_TOKEN
    # THEN the whole list is a small share of what would make a host defer tools
    assert len(listed) == DEFAULT_CAP + len(META_TOOLS)
    assert tokens < DEFERRAL_TOKENS / 2, tokens


def test_past_the_always_load_budget_tools_keep_only_their_search_hint(admin: Admin, mcp: Mcp) -> None:
    # GIVEN a working set of tools with long descriptions, more than the budget holds
    for index in range(15):
        admin.publish(name=f"long-{index}", description=f"Long tool {index}. " + "Detail. " * 480)
        mcp.call("promote", {"vendor": "unleashed", "name": f"long-{index}"})
    # WHEN the agent lists its tools
    listed = _listed(mcp)
    # THEN the meta-tools and the first promoted tools load up front; the rest only carry a hint,
    # so a host may defer them behind its own search, and the list loaded up front stays in budget
    loaded = [tool for tool in listed if tool["_meta"].get(ALWAYS_LOAD)]
    hinted = [tool for tool in listed if ALWAYS_LOAD not in tool["_meta"]]
    assert listed[:len(loaded)] == loaded and len(META_TOOLS) < len(loaded) < len(listed)
    assert all(tool["_meta"][SEARCH_HINT].startswith("unleashed long") for tool in hinted)
    assert len(json.dumps(loaded)) <= ALWAYS_LOAD_BYTES * 1.05
