"""DynamoDB calls per operation stay within their targets (counts, not timings)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.dynamo_calls import DynamoCalls
from chalicelib.catalog import indexes
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
