"""find_tool learns from the account's own use (issue 25, goal 3): a find_tool followed by the
same agent's promote, run_tool or call of a hit is a (request, tool) pair; similar requests in
the same account rank that tool higher. Per account, bounded, shown and reset by the admin."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from chalice.test import Client

from chalicelib.base.clock import utcnow
from chalicelib.catalog import usage
from chalicelib.search import embedder
from chalicelib.search.usage import FLOOR, W_USAGE, Evidence, Memory
from chalicelib.store.models import MemoryItem
from tests.conftest import Admin, Console, Mcp

QUERY = "list the sales orders"
PARAPHRASE = "show me the sales orders"
PATH = "/v1/account/search-memory"


def twins(admin: Admin) -> None:
    """Two tools alike but for their vendor: a request for either ranks them nearly tied."""
    for vendor in ("unleashed", "cin7"):
        admin.publish(vendor=vendor, name="list-sales-orders", description="List sales orders, filtered by customer.")


def ranked(mcp: Mcp, query: str) -> list[str]:
    hits = mcp.call("find_tool", {"query": query})["structuredContent"]["hits"]
    return [f"{hit['vendor']}/{hit['name']}" for hit in hits]


def ref(key: str) -> dict[str, str]:
    vendor, name = key.split("/")
    return {"vendor": vendor, "name": name}


def memory(admin: Admin, **params: Any) -> dict[str, Any]:
    suffix = "?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else ""
    response = admin.call("GET", PATH + suffix)
    assert response.status_code == 200, response.body
    return response.json_body


def stored_pairs() -> list[MemoryItem]:
    return list(MemoryItem.scan(MemoryItem.kind == "memory"))


def test_a_promote_after_a_search_teaches_similar_requests(admin: Admin, mcp: Mcp) -> None:
    # GIVEN two near-tied tools, the second one second for the request
    twins(admin)
    before = ranked(mcp, QUERY)
    second = before[1]
    # WHEN the agent searches and promotes the second one
    mcp.call("promote", ref(ranked(mcp, QUERY)[1]))
    # THEN a similar request in the account ranks it first
    assert ranked(mcp, PARAPHRASE)[0] == second
    assert ranked(mcp, QUERY)[0] == second


def test_the_admin_sees_what_was_learned(admin: Admin, mcp: Mcp) -> None:
    # GIVEN a search followed by a promote of its second hit
    twins(admin)
    second = ranked(mcp, QUERY)[1]
    mcp.call("promote", ref(second))
    # WHEN the admin reads the search memory
    shown = memory(admin)
    # THEN it shows the request, the tool, how often and when
    assert shown["count"] == 1 and shown["next"] is None
    (pair,) = shown["items"]
    assert (pair["query"], f"{pair['vendor']}/{pair['name']}", pair["count"]) == (QUERY, second, 1)
    assert pair["last_seen"] and pair["first_seen"]


def test_the_memory_is_paged(admin: Admin, mcp: Mcp) -> None:
    # GIVEN two pairs learned
    twins(admin)
    for query in (QUERY, PARAPHRASE):
        mcp.call("run_tool", {**ref(ranked(mcp, query)[1]), "input": {"customer": "acme"}, "dryRun": True})
    # WHEN the admin reads them one at a time
    first = memory(admin, limit=1)
    rest = memory(admin, limit=1, cursor=first["next"])
    # THEN the pages hold both, and a cursor it never gave is bad input
    assert first["count"] == 2 and len(first["items"]) == len(rest["items"]) == 1
    assert {first["items"][0]["query"], rest["items"][0]["query"]} == {QUERY, PARAPHRASE}
    assert admin.call("GET", PATH + "?cursor=bm9wZQ").status_code == 400


def test_only_the_agent_that_searched_credits_its_search(admin: Admin, mcp: Mcp, client: Client) -> None:
    # GIVEN one agent's search
    twins(admin)
    second = ranked(mcp, QUERY)[1]
    other = Mcp(client, admin.create_agent("other")["api_key"])
    # WHEN another agent of the account promotes the hit
    other.call("promote", ref(second))
    # THEN nothing is learned; the searching agent's own promote is
    assert memory(admin)["count"] == 0
    mcp.call("promote", ref(second))
    assert memory(admin)["count"] == 1


def test_a_tool_the_search_did_not_list_is_not_credited(admin: Admin, mcp: Mcp) -> None:
    # GIVEN a search that lists the order tools only
    twins(admin)
    admin.publish(vendor="notion", name="create-page", description="Create a page in a Notion workspace.",
                  annotations={}, request={"method": "POST", "url": "http://127.0.0.1:9/pages"})
    assert "notion/create-page" not in ranked(mcp, QUERY)
    # WHEN the agent promotes a tool the search never listed
    mcp.call("promote", {"vendor": "notion", "name": "create-page"})
    # THEN nothing is learned
    assert memory(admin)["count"] == 0


def test_a_follow_up_after_the_window_is_not_credited(admin: Admin, mcp: Mcp, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a search
    twins(admin)
    second = ranked(mcp, QUERY)[1]
    # WHEN the promote comes after the window
    later = utcnow() + usage.WINDOW + timedelta(minutes=1)
    monkeypatch.setattr("chalicelib.mcp.server.utcnow", lambda: later)
    mcp.call("promote", ref(second))
    # THEN nothing is learned
    assert memory(admin)["count"] == 0


def test_calls_after_one_search_count_once(admin: Admin, mcp: Mcp) -> None:
    # GIVEN a search, then a promote and three calls of the same hit
    twins(admin)
    second = ranked(mcp, QUERY)[1]
    mcp.call("promote", ref(second))
    for _ in range(3):
        mcp.call(second.replace("/", "__"), {"customer": "acme"})
    # THEN the pair is counted once
    assert [pair["count"] for pair in memory(admin)["items"]] == [1]


def test_a_direct_call_of_a_hit_credits_the_search(admin: Admin, mcp: Mcp) -> None:
    # GIVEN a promoted tool, then a search that lists it
    twins(admin)
    mcp.call("promote", {"vendor": "cin7", "name": "list-sales-orders"})
    assert "cin7/list-sales-orders" in ranked(mcp, QUERY)
    # WHEN the agent calls it by name
    mcp.call("cin7__list-sales-orders", {"customer": "acme"})
    # THEN the pair is learned
    assert [(p["query"], p["vendor"]) for p in memory(admin)["items"]] == [(QUERY, "cin7")]


def test_one_accounts_use_never_changes_anothers_ranking(admin: Admin, other_admin: Admin, mcp: Mcp,
                                                          client: Client) -> None:
    # GIVEN two accounts with the same tools, and the other account's baseline
    twins(admin)
    twins(other_admin)
    stranger = Mcp(client, other_admin.create_agent("stranger")["api_key"])
    baseline = ranked(stranger, PARAPHRASE)
    # WHEN the first account learns to prefer the other twin
    second = ranked(mcp, QUERY)[1]
    mcp.call("promote", ref(second))
    assert ranked(mcp, PARAPHRASE)[0] == second
    # THEN the second account ranks as before and has learned nothing
    assert ranked(stranger, PARAPHRASE) == baseline
    assert memory(other_admin)["count"] == 0


def test_reset_removes_everything_and_the_ranking_returns(admin: Admin, mcp: Mcp) -> None:
    # GIVEN a learned preference
    twins(admin)
    baseline = ranked(mcp, PARAPHRASE)
    mcp.call("promote", ref(ranked(mcp, QUERY)[1]))
    assert ranked(mcp, PARAPHRASE) != baseline
    # WHEN the admin resets the memory
    response = admin.call("DELETE", PATH)
    # THEN every pair is gone, from the answer and from the table, and the ranking is the baseline
    assert response.status_code == 200 and response.json_body["deleted"] == 1
    assert memory(admin)["count"] == 0 and memory(admin)["items"] == []
    assert stored_pairs() == []
    assert ranked(mcp, PARAPHRASE) == baseline


def test_a_search_from_before_a_reset_teaches_nothing(admin: Admin, mcp: Mcp) -> None:
    # GIVEN a search, then a reset
    twins(admin)
    second = ranked(mcp, QUERY)[1]
    admin.call("DELETE", PATH)
    # WHEN the agent promotes what that search listed
    mcp.call("promote", ref(second))
    # THEN nothing is learned (the search belonged to the memory the reset ended)
    assert memory(admin)["count"] == 0 and stored_pairs() == []


def test_the_memory_is_bounded(admin: Admin, mcp: Mcp, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a memory of at most three pairs
    monkeypatch.setattr(usage, "MEMORY_PAIRS", 3)
    twins(admin)
    # WHEN five different requests are each followed by a call of a hit
    queries = [f"sales orders of customer number {i}" for i in range(5)]
    for query in queries:
        ranked(mcp, query)
        mcp.call("run_tool", {"vendor": "cin7", "name": "list-sales-orders", "input": {"customer": "a"}})
    # THEN three pairs are kept, the most recent ones
    shown = memory(admin)
    assert shown["count"] == 3 and len(stored_pairs()) == 3
    assert {pair["query"] for pair in shown["items"]} == set(queries[2:])


def test_a_flooding_agent_stays_bounded_and_cannot_put_an_unrelated_tool_first(
        admin: Admin, mcp: Mcp, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an email tool and an unrelated destructive one, and a memory of at most eight pairs
    monkeypatch.setattr(usage, "MEMORY_PAIRS", 8)
    admin.publish(vendor="mailer", name="send-email", description="Send an email message to a recipient.",
                  annotations={"destructiveHint": False}, request={"method": "POST", "url": "http://127.0.0.1:9/m"})
    admin.publish(vendor="crm", name="delete-customer", description="Delete a customer record permanently.",
                  annotations={"destructiveHint": True}, request={"method": "DELETE", "url": "http://127.0.0.1:9/c"})
    hostile = Mcp(client, admin.create_agent("hostile")["api_key"])
    # WHEN a hostile agent teaches, over and over, that email requests mean deleting customers
    for i in range(12):
        query = f"send an email to the customer {i}" if i % 2 else f"email my customer {i}"
        assert "crm/delete-customer" in ranked(hostile, query)
        hostile.call("promote", {"vendor": "crm", "name": "delete-customer"})
        hostile.call("demote", {"vendor": "crm", "name": "delete-customer"})
    # THEN the memory holds no more than its bound, and a clear request still finds the email tool first
    assert memory(admin)["count"] == 8 and len(stored_pairs()) == 8
    assert ranked(mcp, "send an email to the customer")[0] == "mailer/send-email"
    assert ranked(mcp, "email my customer")[0] == "mailer/send-email"


def test_the_console_account_card_shows_the_memory_and_resets_it(admin: Admin, mcp: Mcp, console: Console) -> None:
    # GIVEN a pair learned from a request with markup in it
    twins(admin)
    query = "list the <b>sales</b> orders"
    mcp.call("promote", ref(ranked(mcp, query)[1]))
    # WHEN the person opens the account page
    page = console.get("/console/account").body.decode()
    # THEN the card shows the count and the request, as text
    assert 'id="learned-count">1<' in page
    assert "list the &lt;b&gt;sales&lt;/b&gt; orders" in page and "<b>sales</b>" not in page
    # WHEN they reset it THEN it is empty, on the page and in the table
    assert console.post("/console/account/search-memory/reset").status_code == 303
    assert 'id="learned-count">0<' in console.get("/console/account").body.decode()
    assert stored_pairs() == []


def test_the_reset_needs_the_sessions_csrf_token(admin: Admin, mcp: Mcp, console: Console) -> None:
    # GIVEN a pair learned
    twins(admin)
    mcp.call("promote", ref(ranked(mcp, QUERY)[1]))
    # WHEN a form without the session's CSRF token asks for the reset THEN nothing is deleted
    assert console.post("/console/account/search-memory/reset", csrf="forged").status_code in (400, 403)
    assert memory(admin)["count"] == 1


def _unit(*values: float) -> np.ndarray:
    vector = np.zeros(embedder.DIMENSIONS, np.float32)
    vector[: len(values)] = values
    return vector / np.linalg.norm(vector)


def test_a_pairs_boost_rises_from_the_floor_and_is_capped() -> None:
    # GIVEN one pair seen often, for a tool in row 1 of a three-doc index, and one of a tool not in it
    stored = _unit(1.0).astype("<f2").tobytes()
    memory = Memory([Evidence("q", "acme/b", 10, stored), Evidence("q", "gone/x", 10, stored)])
    rows = {"acme/a": 0, "acme/b": 1, "acme/c": 2}
    # WHEN requests at several similarities to the stored one are ranked
    identical = memory.boost(_unit(1.0), rows, 3)
    below_floor = memory.boost(_unit(FLOOR - 0.05, np.sqrt(1 - (FLOOR - 0.05) ** 2)), rows, 3)
    halfway = memory.boost(_unit((1 + FLOOR) / 2, np.sqrt(1 - ((1 + FLOOR) / 2) ** 2)), rows, 3)
    # THEN only the stored tool rises: by W_USAGE at most, by nothing below the floor
    assert identical.tolist() == pytest.approx([0.0, W_USAGE, 0.0])
    assert below_floor.tolist() == [0.0, 0.0, 0.0]
    assert halfway[1] == pytest.approx(W_USAGE / 2, rel=1e-2) and halfway[0] == halfway[2] == 0.0
