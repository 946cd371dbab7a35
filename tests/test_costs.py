"""DynamoDB calls per operation stay within their targets (counts, not timings)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.dynamo_calls import DynamoCalls
from chalicelib.catalog import indexes
from chalicelib.mcp.metatools import APPROVAL_META
from tests.conftest import Admin, Mcp, Vendor


@pytest.fixture
def promoted(admin: Admin, mcp: Mcp, vendor: Vendor) -> Mcp:
    """An agent with five promoted tools, a sixth in the toolbox, and a warm search index."""
    for index in range(6):
        admin.publish(name=f"tool-{index}", request={"method": "GET", "url": f"{vendor.url}/x"})
    for index in range(5):
        mcp.call("promote", {"vendor": "unleashed", "name": f"tool-{index}"})
    mcp.call("find_tool", {"query": "warm"})
    return mcp


CASES: list[tuple[str, int, Callable[[Mcp], object]]] = [
    ("tools/list", 2, lambda mcp: mcp.post("tools/list")),
    ("promote", 4, lambda mcp: mcp.call("promote", {"vendor": "unleashed", "name": "tool-5"})),
    ("demote", 3, lambda mcp: mcp.call("demote", {"vendor": "unleashed", "name": "tool-0"})),
    # A call is a durable run: one write starts it (lease + use), one ends it (result, lease freed).
    ("call", 4, lambda mcp: mcp.call("unleashed__tool-0", {"customer": "acme"})),
    # issue 25: one PutItem remembers what the search answered, so that a promote, run_tool or call
    # that follows credits the request (chalicelib/catalog/usage.py); what was learned is read with the
    # toolbox revision's GetItem, and reread only when it changed
    ("find_tool warm", 4, lambda mcp: mcp.call("find_tool", {"query": "sales orders"})),
]
# A 2025-11-25 client hears of its own change on the response; once that answer is built, one
# UpdateItem marks what it was told (never inside the change's transaction, whose answer may be
# lost). The current revision's clients hear through their subscription instead.
CASES += [
    ("promote (2026 revision)", 3, lambda mcp: _modern(mcp).call("promote", {"vendor": "unleashed", "name": "tool-5"})),
    ("demote (2026 revision)", 2, lambda mcp: _modern(mcp).call("demote", {"vendor": "unleashed", "name": "tool-0"})),
]


def _modern(mcp: Mcp) -> Mcp:
    mcp.modern = True
    return mcp


@pytest.mark.parametrize(("label", "target", "run"), CASES, ids=[case[0] for case in CASES])
def test_dynamodb_calls_per_operation(promoted: Mcp, label: str, target: int, run) -> None:
    counter = DynamoCalls().install()
    with counter.measure() as made:
        run(promoted)
    assert 0 < len(made) <= target, made


def test_cold_find_tool_reads_the_toolbox_once_more(promoted: Mcp) -> None:
    indexes.clear()
    counter = DynamoCalls().install()
    with counter.measure() as made:
        promoted.call("find_tool", {"query": "sales orders"})
    assert sorted(made) == ["BatchGetItem", "GetItem", "PutItem", "Query", "Query"]


@pytest.fixture
def promoted_writes(admin: Admin, mcp: Mcp, vendor: Vendor) -> Mcp:
    """An agent with five promoted write tools (approval policy first_call), a person's policy set
    for one of them and for the vendor's default (so the policy reads find items), the first call of
    write-0 approved, a sixth write in the toolbox, and a warm search index."""
    for index in range(6):
        admin.publish(name=f"write-{index}", description=f"Create sales order {index}.",
                      annotations={"destructiveHint": False},
                      request={"method": "POST", "url": f"{vendor.url}/orders"})
    assert admin.call("PUT", "/v1/tools/unleashed/write-1/approval-policy", {"policy": "every_call"}).status_code == 200
    assert admin.call("PUT", "/v1/vendors/unleashed/approval-policy", {"policy": "first_call"}).status_code == 200
    for index in range(5):
        mcp.call("promote", {"vendor": "unleashed", "name": f"write-{index}"})
    first = mcp.call("unleashed__write-0", {"customer": "acme"})["structuredContent"]
    assert first["status"] == "awaiting_approval", first
    assert admin.call("POST", f"/v1/approvals/{first['run_id']}/approve").status_code == 200
    mcp.call("find_tool", {"query": "warm"})
    return mcp


# issue 26: approval policies are read in the same BatchGetItem as the tools they apply to, so a
# toolbox of writes costs what a toolbox of reads does
WRITE_CASES: list[tuple[str, int, Callable[[Mcp], object]]] = [
    ("tools/list", 2, lambda mcp: mcp.post("tools/list")),
    ("promote", 4, lambda mcp: mcp.call("promote", {"vendor": "unleashed", "name": "write-5"})),
    ("call of an approved write", 4, lambda mcp: mcp.call("unleashed__write-0", {"customer": "acme"})),
    ("find_tool warm", 4, lambda mcp: mcp.call("find_tool", {"query": "create sales order"})),
    ("promote (2026 revision)", 3,
     lambda mcp: _modern(mcp).call("promote", {"vendor": "unleashed", "name": "write-5"})),
]


@pytest.mark.parametrize(("label", "target", "run"), WRITE_CASES, ids=[case[0] for case in WRITE_CASES])
def test_dynamodb_calls_per_operation_with_writes_promoted(promoted_writes: Mcp, label: str, target: int,
                                                           run) -> None:
    counter = DynamoCalls().install()
    with counter.measure() as made:
        answer = run(promoted_writes)
    assert 0 < len(made) <= target, made
    assert made.count("BatchGetItem") <= 1, made  # the tools and their policies: one read
    body = getattr(answer, "json_body", None) or {}
    assert "error" not in body, body


def test_the_policies_read_with_the_tools_are_the_ones_a_person_set(promoted_writes: Mcp) -> None:
    # the same read that brings the tools brings the policies: write-1 asks on every call (its
    # own setting), the others on their first call (the vendor's default)
    listed = {tool["name"]: tool for tool in promoted_writes.post("tools/list").json_body["result"]["tools"]}
    approvals = {name: tool["_meta"].get(APPROVAL_META) for name, tool in listed.items() if "__" in name}
    assert approvals == {"unleashed__write-0": "first_call", "unleashed__write-1": "every_call",
                         "unleashed__write-2": "first_call", "unleashed__write-3": "first_call",
                         "unleashed__write-4": "first_call"}
    again = promoted_writes.call("unleashed__write-0", {"customer": "acme"})  # approved on its first call
    assert again["isError"] is False and again["structuredContent"].get("status") != "awaiting_approval", again
    run = promoted_writes.call("unleashed__write-1", {"customer": "acme"})["structuredContent"]  # asks every time
    assert run["status"] == "awaiting_approval", run
