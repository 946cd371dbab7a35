"""A warm instance's search index follows the toolbox by its change records (chalicelib/catalog/indexes.py,
store.tools), updates in place (SearchIndex.updated), and is kept within a memory budget."""

from __future__ import annotations

from collections import OrderedDict
from datetime import timedelta

import numpy as np
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from pynamodb.exceptions import GetError

from bench.dynamo_calls import DynamoCalls
from chalicelib.base.clock import utcnow
from chalicelib.catalog import indexes
from chalicelib.identity import accounts
from chalicelib.search import bm25, documents, text
from chalicelib.search import index as search_index
from chalicelib.search.bm25 import Terms
from chalicelib.search.documents import Document, document_vector
from chalicelib.search.index import SearchIndex
from chalicelib.store import tools as tool_store
from chalicelib.store.base import ConditionFailed
from chalicelib.store.models import ToolChangeItem, change_partition, change_sk
from chalicelib.store.tools import NewVersion
from tests.conftest import Admin, Mcp
from tests.test_search import TOOLBOX, doc, keys

QUERIES = ["sales orders by customer", "refund a buyer", "weather in a city", "send an invoice", "stock per warehouse",
           "card charges", "unpaid bills", "create a product"]


def find(mcp: Mcp, query: str) -> list[str]:
    return [hit["name"] for hit in mcp.call("find_tool", {"query": query})["structuredContent"]["hits"]]


# --- the change records ------------------------------------------------------------------------


def test_each_write_of_heads_moves_the_revision_by_one_and_records_the_heads() -> None:
    # GIVEN an account
    account_id = accounts.create_account("acme", utcnow())[0].account_id
    # WHEN two tools are published in one batch, one of them is marked unavailable, and a vector set
    published = tool_store.put_versions(account_id, [NewVersion("acme", "a", {}, 0), NewVersion("acme", "b", {}, 0)],
                                        "admin", utcnow())
    tool_store.set_unavailable(account_id, published[:1], "gone")
    tool_store.set_vectors(account_id, [(published[1], b"v" * 768)], "test")
    # THEN each write is one revision, and the records name exactly the heads each wrote
    assert tool_store.toolbox_revision(account_id) == 3
    assert tool_store.changed_since(account_id, 0, 3) == {("acme", "a"), ("acme", "b")}
    assert tool_store.changed_since(account_id, 1, 3) == {("acme", "a"), ("acme", "b")}
    assert tool_store.changed_since(account_id, 2, 3) == {("acme", "b")}
    assert tool_store.changed_since(account_id, 3, 3) == set()


def test_a_missing_change_record_makes_the_changes_unknown() -> None:
    # GIVEN three publishes, the middle one's record gone (expired)
    account_id = accounts.create_account("acme", utcnow())[0].account_id
    for name in "abc":
        tool_store.put_version(account_id, NewVersion("acme", name, {}, 0), "admin", utcnow())
    ToolChangeItem(account_id=change_partition(account_id), sk=change_sk(2)).delete()
    # WHEN the changes since revision 1 are asked for
    # THEN they are unknown (a reader must read the whole toolbox), while those after 2 are known
    assert tool_store.changed_since(account_id, 1, 3) is None
    assert tool_store.changed_since(account_id, 2, 3) == {("acme", "c")}


def test_a_writer_that_read_an_old_revision_reads_it_again_and_commits() -> None:
    # GIVEN a writer that read revision 0, then another publish took revision 1
    account_id = accounts.create_account("acme", utcnow())[0].account_id
    tool_store.put_version(account_id, NewVersion("acme", "first", {}, 0), "admin", utcnow())
    stale = tool_store.toolbox_revision  # what put_versions would have read before the other publish
    # WHEN the late writer commits at the revision it read
    revision = tool_store._revise(account_id, [], lambda write: None, 0, utcnow())
    # THEN it commits as the next revision instead, and both records stand
    assert revision == 2 == stale(account_id)
    assert tool_store.changed_since(account_id, 0, 2) == {("acme", "first")}


def test_a_write_whose_own_condition_fails_writes_nothing_and_moves_nothing() -> None:
    # GIVEN a tool at version 1
    account_id = accounts.create_account("acme", utcnow())[0].account_id
    tool_store.put_version(account_id, NewVersion("acme", "a", {}, 0), "admin", utcnow())
    # WHEN a publish claims it follows version 5
    with pytest.raises(ConditionFailed):
        tool_store.put_version(account_id, NewVersion("acme", "a", {"x": 1}, 5), "admin", utcnow())
    # THEN the revision and the records are as they were
    assert tool_store.toolbox_revision(account_id) == 1
    assert tool_store.changed_since(account_id, 0, 2) is None
    assert tool_store.get_head(account_id, "acme", "a").version == 1


def test_change_records_expire_with_the_tables_ttl() -> None:
    # GIVEN a publish
    account_id = accounts.create_account("acme", utcnow())[0].account_id
    before = utcnow()
    tool_store.put_version(account_id, NewVersion("acme", "a", {}, 0), "admin", before)
    # WHEN its record is read
    record = ToolChangeItem.get(change_partition(account_id), change_sk(1))
    # THEN DynamoDB's TTL drops it after the retention
    assert record.ttl >= before + tool_store.CHANGE_RETENTION - timedelta(seconds=1)


# --- SearchIndex.updated ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stored() -> list[Document]:
    return [Document(f"{v}/{n}", v, n, d, document_vector(v, n, d)) for v, n, d in TOOLBOX]


def test_an_updated_index_finds_a_new_tool_and_a_changed_description(stored: list[Document]) -> None:
    # GIVEN an index over nine of the tools
    index = SearchIndex.build(stored[:9])
    # WHEN the tenth is added and a description changes
    changed = doc("xero", "list-bills", "Payouts sent to the merchant's bank account.")
    updated = index.updated([stored[9], changed])
    # THEN the new tool is found, the new wording finds the changed tool and the old wording no longer does
    assert keys(updated.search("weather conditions in a city", 1)) == ["metoffice/dailyweatherreport"]
    assert keys(updated.search("payouts to my bank", 1)) == ["xero/list-bills"]
    assert updated._signals.lexicon.scores(["ledger"])[0].max() == 0
    # AND the index it came from is untouched (searches in flight keep using it)
    assert len(index) == 9 and keys(index.search("accounting ledger", 1)) == ["xero/list-bills"]


def test_keyword_scores_after_updates_equal_a_fresh_builds(stored: list[Document]) -> None:
    # GIVEN an index updated twice (a tool added, then two descriptions changed)
    changed = [doc("shopify", "refund-payment", "Refund an order to the buyer's card."),
               doc("xero", "list-bills", "Bills and invoices awaiting payment.")]
    updated = SearchIndex.build(stored[:9]).updated([stored[9]]).updated(changed)
    fresh = SearchIndex.build([*stored, *changed])
    # WHEN both score the same words
    for query in QUERIES:
        words = text.content_words(query)
        ours = _by_key(updated, updated._signals.lexicon.scores(words))
        theirs = _by_key(fresh, fresh._signals.lexicon.scores(words))
        # THEN BM25 and the name share are the same for every tool
        assert ours.keys() == theirs.keys()
        for key in ours:
            np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-12)


def test_an_updated_index_ranks_like_a_fresh_build(stored: list[Document]) -> None:
    # GIVEN an index updated in place and a fresh build of the same docs
    changed = [doc("shopify", "refund-payment", "Refund an order to the buyer's card.")]
    updated = SearchIndex.build(stored[:8]).updated(stored[8:]).updated(changed)
    fresh = SearchIndex.build([*stored, *changed])
    # WHEN both answer the queries
    # THEN the best tool is the same for each (only the static signal's token weights may differ slightly)
    assert [keys(updated.search(q, 1)) for q in QUERIES] == [keys(fresh.search(q, 1)) for q in QUERIES]


def test_too_many_changes_rebuild_the_index_whole(stored: list[Document], monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an index, and a rebuild share of 20%
    monkeypatch.setattr(search_index, "REBUILD_SHARE", 0.2)
    index = SearchIndex.build(stored[:8])
    # WHEN one change comes, then more than the share
    once = index.updated([stored[8]])
    again = once.updated([stored[9], doc("xero", "list-bills", "Bills awaiting payment.")])
    # THEN the first is applied in place and the second rebuilds (nothing counted as changed since)
    assert once._changed == 1
    assert again._changed == 0 and len(again) == 10
    assert keys(again.search("weather conditions in a city", 1)) == ["metoffice/dailyweatherreport"]


def test_a_pending_vector_that_arrives_joins_the_sentence_signal(stored: list[Document]) -> None:
    # GIVEN an index where one tool's vector is still being computed
    pending = Document(stored[9].key, "metoffice", "dailyweatherreport", stored[9].description, documents.PENDING)
    index = SearchIndex.build([*stored[:9], pending])
    # WHEN its vector arrives
    updated = index.updated([stored[9]])
    # THEN it ranks with it, exactly as if it had been there from the start
    assert not index._signals.known[9] and updated._signals.known[9]
    np.testing.assert_array_equal(updated._signals.vectors, SearchIndex.build(stored)._signals.vectors)


def test_an_empty_index_takes_its_first_tools(stored: list[Document]) -> None:
    # GIVEN the index of an empty toolbox (an account searched before it published anything)
    empty = SearchIndex.build([])
    # WHEN its first tools arrive as changes
    updated = empty.updated(stored[8:])
    # THEN they are indexed and found (it used to raise: an empty index has no signals to keep)
    assert len(updated) == 2 and updated._changed == 0
    assert keys(updated.search("weather conditions in a city", 1)) == ["metoffice/dailyweatherreport"]


def _by_key(index: SearchIndex, scores: tuple[np.ndarray, np.ndarray]) -> dict[str, tuple[float, float]]:
    bm25, named = scores
    return {key: (bm25[row], named[row]) for row, key in enumerate(index._keys)}


def test_terms_count_name_words_more_than_description_words() -> None:
    # GIVEN a tool whose name and description share a word
    # WHEN its terms are taken for the lexicon
    terms = Terms.of(doc("acme", "list-orders", "List every order."), ["list", "orders"])
    # THEN a name word counts NAME_WEIGHT times, a description word once, and the name's terms are marked
    assert terms.freqs["order"] == bm25.NAME_WEIGHT + 1 and terms.named == {"acme", "list", "order"}


# --- the warm instance --------------------------------------------------------------------------


def test_a_publish_reaches_a_warm_index_by_its_change_records(admin: Admin, mcp: Mcp) -> None:
    # GIVEN a warm index over two tools
    admin.publish()
    admin.publish(name="list-invoices", description="List invoices sent to customers.")
    assert find(mcp, "sales orders")[0] == "list-sales-orders"
    # WHEN a third tool is published and the agent searches again
    admin.publish(name="weather-report", description="Weather forecast for a city.")
    counter = DynamoCalls().install()
    with counter.measure() as made:
        hits = find(mcp, "forecast for Paris")
    # THEN the new tool is found, reading the change record and the one changed head, not the toolbox
    assert hits[0] == "weather-report"
    assert sorted(made) == ["BatchGetItem", "BatchGetItem", "GetItem", "PutItem", "Query", "Query"]  # auth,
    # revision, records, the changed head, the hits; and what the search answered (chalicelib/catalog/usage.py)


def test_a_search_of_an_empty_toolbox_then_a_publish_finds_the_tool(admin: Admin, mcp: Mcp) -> None:
    # GIVEN an agent that searched while the toolbox was empty (its warm index holds no tool)
    assert find(mcp, "sales orders") == []
    # WHEN a tool is published and the agent searches again
    admin.publish()
    # THEN the tool is found: the -32603 the e2e suite saw when another test searched an empty toolbox first
    assert find(mcp, "sales orders") == ["list-sales-orders"]


def _store_error(code: str | None) -> GetError:
    """What pynamodb raises for a GetItem that failed past the SDK's retries: with DynamoDB's error
    code, or (None) a read that timed out."""
    cause = (ReadTimeoutError(endpoint_url="http://127.0.0.1:1") if code is None
             else ClientError({"Error": {"Code": code, "Message": "refused"}}, "GetItem"))
    return GetError("Failed to get item", cause)


@pytest.mark.parametrize("code", ["ProvisionedThroughputExceededException", "ThrottlingException",
                                  "InternalServerError", None])
def test_a_store_failing_for_now_gives_find_tool_a_clear_busy_error(admin: Admin, mcp: Mcp, code: str | None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a toolbox whose store is throttled or slow past its retries
    admin.publish()

    def failing(account_id: str) -> None:
        raise _store_error(code)

    monkeypatch.setattr(tool_store, "search_revisions", failing)
    # WHEN the agent calls find_tool
    result = mcp.call("find_tool", {"query": "sales orders"})
    # THEN it gets a tool error saying to try again, not -32603 Internal error
    assert result["isError"] is True and result["structuredContent"]["error"]["code"] == "busy"
    assert "try again" in result["structuredContent"]["error"]["message"]


def test_a_store_refusing_a_search_is_still_a_crash(admin: Admin, mcp: Mcp, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a store that refuses the read itself (a bug of ours, not load)
    def refusing(account_id: str) -> None:
        raise _store_error("ValidationException")

    monkeypatch.setattr(tool_store, "search_revisions", refusing)
    # WHEN the agent calls find_tool THEN it is not passed off as "busy": -32603, and logged
    answer = mcp.post("tools/call", {"name": "find_tool", "arguments": {"query": "sales orders"}}).json_body
    assert answer["error"]["code"] == -32603


def test_a_gap_in_the_records_rebuilds_from_the_whole_toolbox(admin: Admin, mcp: Mcp) -> None:
    # GIVEN a warm index, then two publishes whose first record is gone
    admin.publish()
    assert find(mcp, "sales orders")[0] == "list-sales-orders"
    admin.publish(name="list-invoices", description="List invoices sent to customers.")
    admin.publish(name="weather-report", description="Weather forecast for a city.")
    account_id = accounts.authenticate_admin(admin.token)
    ToolChangeItem(account_id=change_partition(account_id), sk=change_sk(2)).delete()
    # WHEN the agent searches
    # THEN both new tools are found (from the whole toolbox)
    assert find(mcp, "forecast for Paris")[0] == "weather-report"
    assert find(mcp, "invoices sent")[0] == "list-invoices"


def test_an_index_never_goes_back_to_an_older_revision(admin: Admin, mcp: Mcp, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a warm index at the current revision
    admin.publish()
    find(mcp, "sales orders")
    # WHEN a lagging read of the revision says an older one
    monkeypatch.setattr(tool_store, "toolbox_revision", lambda account_id, consistent=False: 0)
    counter = DynamoCalls().install()
    with counter.measure() as made:
        hits = find(mcp, "sales orders")
    # THEN the index held is used as it is
    assert hits == ["list-sales-orders"] and "Query" not in made[1:]


def test_indexes_are_kept_least_recently_used_within_the_budget(client, settings_env) -> None:
    # GIVEN three accounts with a tool each, and a budget that holds two and a half of their indexes
    ids = []
    for name in ("acme", "globex", "initech"):
        account_id = accounts.create_account(name, utcnow())[0].account_id
        tool_store.put_version(account_id, NewVersion("acme", "orders", {"description": "List orders."}, 0),
                               "admin", utcnow())
        ids.append(account_id)
    budget = 2.5 * indexes.current(ids[0]).nbytes
    indexes.clear()
    settings_env(WORKSET_SEARCH_CACHE_MB=str(budget / (1 << 20)))
    # WHEN the accounts are searched in turn, the first again last
    for account_id in (*ids, ids[0]):
        indexes.current(account_id)
    # THEN the memory held stays within the budget, the index used last is kept, the oldest dropped
    assert indexes.cached_bytes() <= budget
    assert list(indexes._entries) == [ids[2], ids[0]]


def test_an_index_larger_than_the_budget_still_serves(settings_env, client) -> None:
    # GIVEN a budget smaller than any index
    account_id = accounts.create_account("acme", utcnow())[0].account_id
    tool_store.put_version(account_id, NewVersion("acme", "orders", {"description": "List orders."}, 0), "admin",
                           utcnow())
    settings_env(WORKSET_SEARCH_CACHE_MB="0")
    # WHEN the account searches
    index = indexes.current(account_id)
    # THEN its index answers, and is the only one held
    assert keys(index.search("orders", 1)) == ["acme/orders"]
    assert list(indexes._entries) == [account_id]


def test_a_build_makes_room_before_it_runs(client, settings_env, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN two accounts, and a budget that holds one and a half of their indexes
    ids = []
    for name in ("acme", "globex"):
        account_id = accounts.create_account(name, utcnow())[0].account_id
        tool_store.put_version(account_id, NewVersion("acme", "orders", {"description": "List orders."}, 0),
                               "admin", utcnow())
        ids.append(account_id)
    settings_env(WORKSET_SEARCH_CACHE_MB=str(1.5 * indexes.current(ids[0]).nbytes / (1 << 20)))
    held_during_build: list[list[str]] = []
    original = SearchIndex.build

    def recording(docs):
        held_during_build.append(list(indexes._entries))
        return original(docs)

    monkeypatch.setattr(SearchIndex, "build", staticmethod(recording))
    # WHEN the second account is searched
    indexes.current(ids[1])
    # THEN the first index was dropped before the build ran, not after (a build's peak never sits on a full cache)
    assert held_during_build == [[]]
    assert list(indexes._entries) == [ids[1]]


def test_an_index_evicted_by_another_search_right_after_it_was_found_still_serves(
        client, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an account's warm index at the toolbox's revision
    account_id = accounts.create_account("acme", utcnow())[0].account_id
    tool_store.put_version(account_id, NewVersion("acme", "orders", {"description": "List orders."}, 0), "admin",
                           utcnow())
    indexes.current(account_id)

    class EvictedOnceRead(OrderedDict):
        """The cache, where another thread's search (another account's build making room) drops the
        account's index just after this search found it there: the interleaving forced, no threads."""

        def get(self, key, default=None):
            found = super().get(key, default)
            if key == account_id and found is not None and not evicted:
                evicted.append(self.pop(key))
            return found

    evicted: list[object] = []
    monkeypatch.setattr(indexes, "_entries", EvictedOnceRead(indexes._entries))
    # WHEN the account searches again
    index = indexes.current(account_id)
    # THEN the index it found answers (it used to look the account up again, and raise KeyError: -32603)
    assert evicted and keys(index.search("orders", 1)) == ["acme/orders"]


def test_a_search_holding_an_older_index_never_replaces_a_newer_one(client) -> None:
    # GIVEN an account's index at revision 2 in the cache
    account_id = accounts.create_account("acme", utcnow())[0].account_id
    for name in ("orders", "invoices"):
        tool_store.put_version(account_id, NewVersion("acme", name, {"description": f"List {name}."}, 0), "admin",
                               utcnow())
    indexes.current(account_id)
    newer = indexes._entries[account_id]
    # WHEN a search that found revision 1's index (before the other refreshed) keeps it as used
    older = indexes._Entry(1, SearchIndex.build([]))
    with indexes._lock:
        indexes._keep(account_id, older)
    # THEN the newer index stays
    assert indexes._entries[account_id] is newer


def test_an_account_item_without_a_revision_still_takes_its_first_publish() -> None:
    # GIVEN an account item written before the revision had a default
    from chalicelib.store.models import AccountItem

    account_id = accounts.create_account("acme", utcnow())[0].account_id
    AccountItem(account_id=account_id).update(actions=[AccountItem.toolbox_revision.remove()])
    # WHEN a tool is published
    tool_store.put_version(account_id, NewVersion("acme", "a", {}, 0), "admin", utcnow())
    # THEN it is revision 1, with its record
    assert tool_store.toolbox_revision(account_id) == 1
    assert tool_store.changed_since(account_id, 0, 1) == {("acme", "a")}


def test_vectors_a_search_computes_count_in_the_budget(client, settings_env) -> None:
    # GIVEN two accounts' indexes held within a budget that just fits them as built: one of a large
    # import whose vectors are pending (the work queue has not stored them), one small
    pending = accounts.create_account("acme", utcnow())[0].account_id
    tool_store.put_versions(pending, [NewVersion("shop", f"get-{word}", {"description": f"Fetch a {word} by its id."}, 0)
                                      for word in ("invoice", "parcel", "coupon", "ledger", "basket", "refund",
                                                   "supplier", "customer", "warehouse", "shipment")],
                            "admin", utcnow())
    small = accounts.create_account("globex", utcnow())[0].account_id
    tool_store.put_version(small, NewVersion("acme", "orders", {"description": "List orders."}, 0), "admin", utcnow())
    built = indexes.current(pending).nbytes + indexes.current(small).nbytes
    indexes.clear()
    settings_env(WORKSET_SEARCH_CACHE_MB=str((built + 100) / (1 << 20)))
    indexes.current(small)
    index = indexes.current(pending)
    assert not index._signals.known.any() and list(indexes._entries) == [small, pending]
    before = index.nbytes
    # WHEN the first account's searches compute the vectors of their pending first hits
    for query in ("fetch an invoice", "a parcel", "refund a coupon", "the ledger", "a basket of a customer"):
        index.search(query, 5)
    grown = index.nbytes
    indexes.current(pending)
    # THEN what the index grew by is counted: the cache holds what it really takes, within the budget,
    # the least recently used index dropped to make room
    assert grown > before
    assert indexes.cached_bytes() == grown
    assert list(indexes._entries) == [pending]
