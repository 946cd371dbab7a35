"""Search requests of any size and shape: a bound on the request's length holds on every entrance
(find_tool's, and the console's toolbox and promote searches), with a clear error and no search
run past it; text a browser or a model may send (right-to-left marks, combining characters, a
sea of "and"s) is searched like any other."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from chalicelib.catalog import toolbox
from tests.conftest import Admin, Console, Mcp

LONG = "send an invoice and " * 50  # 1,000 characters: twice the bound


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every query that reached the search index."""
    from chalicelib.search import queries

    seen: list[str] = []
    search = queries.search

    def counted(index: Any, query: str, limit: int, memory: Any = None) -> Any:
        seen.append(query)
        return search(index, query, limit, memory)

    monkeypatch.setattr(queries, "search", counted)
    return seen


@pytest.mark.parametrize("path", ["/console/tools?q=", "/console/agents/{agent}?find="])
def test_a_console_search_past_the_bound_is_refused_clearly_and_runs_no_search(
        console: Console, admin: Admin, searches: list[str], path: str) -> None:
    # GIVEN a toolbox with a tool, and an agent
    admin.publish()
    agent = admin.create_agent()
    # WHEN a person's browser sends a search of 1,000 characters
    page = console.get(path.format(agent=agent["id"]) + quote(LONG))
    # THEN it is refused saying how long a search may be, and no search ran
    assert page.status_code == 400
    assert f"at most {toolbox.QUERY_MAX_CHARS} characters" in page.body.decode()
    assert searches == []


def test_a_search_at_the_bound_is_answered(console: Console, admin: Admin, searches: list[str]) -> None:
    admin.publish()
    page = console.get("/console/tools?q=" + quote(LONG[:toolbox.QUERY_MAX_CHARS]))
    assert page.status_code == 200
    assert len(searches) == 1


def test_find_tool_past_the_bound_is_an_input_error(mcp: Mcp, admin: Admin, searches: list[str]) -> None:
    admin.publish()
    answer = mcp.post("tools/call", {"name": "find_tool", "arguments": {"query": LONG}}).json_body
    error = answer.get("error") or answer["result"]
    assert "500" in str(error)
    assert searches == []


@pytest.mark.parametrize("query", [
    "\u202esend an invoice",  # a right-to-left override first
    "s\u0301e\u0301n\u0301d an invoice",  # combining accents on every letter
    " and" * 120,  # nothing but the connector
    "\u200b" * 400,  # zero-width spaces only
])
def test_odd_text_within_the_bound_is_searched_without_error(mcp: Mcp, admin: Admin, query: str) -> None:
    admin.publish()
    result = mcp.call("find_tool", {"query": query})
    assert "structuredContent" in result or result.get("isError") is False
