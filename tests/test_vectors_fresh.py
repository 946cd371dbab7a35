"""Fresh at once (issue 25, goal 6): an import's request computes at most INLINE_VECTORS search
vectors and queues the rest for the work queue, whose job stores them; search ranks a tool whose
vector is still pending with the static signal standing in, and the first few such hits by
their own vector computed by the search; the local stack consumes the work
queue with a thread per core (and one more), a message at a time as Lambda does; the model is
loaded once however many threads want it first."""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from chalice.test import Client

from chalicelib.base.config import settings
from chalicelib.catalog import imports
from chalicelib.catalog.imports import VECTOR_BATCH
from chalicelib.catalog.indexes import INLINE_VECTORS
from chalicelib.search import documents, embedder
from chalicelib.search.documents import PENDING, VECTOR_VERSION, Document, document_vector
from chalicelib.search.index import RERANK_PENDING, SearchIndex
from chalicelib.store import tools as tool_store
from local import workers
from tests.books import take_bodies, work
from tests.conftest import Admin, Vendor

WORDS = ["invoice", "shipment", "customer", "warehouse", "refund", "coupon", "ledger", "parcel", "supplier", "basket"]


@pytest.fixture
def embedded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every text the search model is asked to embed for a tool's stored vector, in order."""
    texts: list[str] = []
    real = documents._embed_documents

    def counted(batch: list[str]) -> np.ndarray:
        texts.extend(batch)
        return real(batch)

    monkeypatch.setattr(documents, "_embed_documents", counted)
    yield texts


def _document(vendor: Vendor, operations: int) -> str:
    paths = {f"/{WORDS[n % 10]}s/{n}": {"get": {"operationId": f"get{WORDS[n % 10].title()}{n}",
                                                "summary": f"Fetch {WORDS[n % 10]} number {n}"}}
             for n in range(operations)}
    return json.dumps({"openapi": "3.1.0", "info": {"title": "t", "version": "1"},
                       "servers": [{"url": vendor.url}], "paths": paths})


def _import(admin: Admin, vendor: Vendor, operations: int) -> dict[str, Any]:
    answer = admin.call("POST", "/v1/imports/openapi", {"vendor": "shop", "document": _document(vendor, operations)})
    assert answer.status_code == 200, answer.json_body
    return answer.json_body  # type: ignore[no-any-return]


def _heads(admin: Admin) -> list[Any]:
    from chalicelib.identity import accounts

    account_id = accounts.account_of_admin_token(admin.token)
    assert account_id is not None
    return tool_store.list_vendor_heads(account_id, "shop")


def test_a_large_import_computes_at_most_inline_vectors_and_queues_the_rest(
        admin: Admin, vendor: Vendor, embedded: list[str]) -> None:
    # GIVEN a document of many more operations than one request embeds
    operations = 4 * INLINE_VECTORS + 3
    # WHEN it is imported
    answer = _import(admin, vendor, operations)
    # THEN the request embedded at most INLINE_VECTORS texts
    assert answer["counts"]["published"] == operations
    assert len(embedded) <= INLINE_VECTORS
    # AND the work queue's messages name every tool without a vector, each once, in small batches
    messages = take_bodies(settings().sweep_queue)
    queued = [tuple(tool) for message in messages for tool in message["tools"]]
    assert all(message["type"] == imports.VECTORS and len(message["tools"]) <= VECTOR_BATCH for message in messages)
    without = sorted((head.vendor, head.name, head.version) for head in _heads(admin)
                     if head.vector_version != VECTOR_VERSION)
    assert sorted(queued) == without and len(queued) == answer["vectors_pending"] == operations - len(embedded)


def test_the_inline_bound_keeps_a_request_to_a_few_long_texts() -> None:
    # GIVEN the model's longest text (MAX_TOKENS tokens; a forward pass costs about its tokens)
    # WHEN a request embeds its most
    # THEN that is at most 2,048 tokens (measured ~0.7 s of one core; Lambda's 512 MB get ~0.3 core)
    assert 1 <= INLINE_VECTORS and INLINE_VECTORS * embedder.MAX_TOKENS <= 2048


def test_a_small_import_has_its_vectors_when_it_answers(admin: Admin, vendor: Vendor, embedded: list[str]) -> None:
    # GIVEN a document of INLINE_VECTORS operations
    # WHEN it is imported
    answer = _import(admin, vendor, INLINE_VECTORS)
    # THEN every vector was computed in the request and nothing was queued
    assert answer["vectors_pending"] == 0 and len(embedded) == INLINE_VECTORS
    assert take_bodies(settings().sweep_queue) == []
    assert {head.vector_version for head in _heads(admin)} == {VECTOR_VERSION}


def test_the_work_queue_job_stores_the_queued_vectors_once(admin: Admin, vendor: Vendor, client: Client,
                                                           embedded: list[str]) -> None:
    # GIVEN a large import whose vectors are queued
    _import(admin, vendor, 3 * VECTOR_BATCH + 1)
    messages = take_bodies(settings().sweep_queue)
    # WHEN the sweep worker handles the messages
    work(client, messages)
    # THEN every head holds its vector, the same one a publish would have computed
    heads = _heads(admin)
    assert {head.vector_version for head in heads} == {VECTOR_VERSION}
    head = heads[0]
    alone = document_vector(head.vendor, head.name, head.definition["description"])
    # (computed in a batch or alone, a value may round to the next float16)
    assert np.abs(np.frombuffer(head.vector, "<f2") - np.frombuffer(alone, "<f2")).max() < 2e-3
    # AND a second delivery of the same messages (SQS delivers at least once) computes nothing
    embedded.clear()
    work(client, messages)
    assert embedded == []


def _index(pending: set[str]) -> SearchIndex:
    tools = [("get-weather-forecast", "Weather forecast for a city: temperature and precipitation for the coming days."),
             ("list-city-events", "Events happening in a city: concerts, exhibitions and fairs."),
             ("get-city-map", "A map of a city with its streets and districts."),
             ("book-city-hotel", "Book a hotel room in a city for given dates."),
             ("get-city-traffic", "Traffic jams and road works in a city right now."),
             ("convert-currency", "Convert an amount of money from one currency to another.")]
    return SearchIndex.build([Document(f"demo/{name}", "demo", name, text,
                                       PENDING if name in pending else document_vector("demo", name, text))
                              for name, text in tools])


def test_a_pending_tool_ranks_first_on_a_clear_request() -> None:
    # GIVEN a toolbox where the one tool about the weather still waits for its vector
    index = _index(pending={"get-weather-forecast"})
    # WHEN a request asks in other words for what only it does (sharing "city" with every tool)
    hits = index.search("will it rain in the city tomorrow", limit=3)
    # THEN it is first all the same (with its sentence signal left at zero, it came third)
    assert hits[0][0] == "demo/get-weather-forecast"


def test_a_pending_tool_is_listed_without_a_shared_word() -> None:
    # GIVEN every tool waiting for its vector
    index = _index(pending={"get-weather-forecast", "list-city-events", "get-city-map", "book-city-hotel",
                            "get-city-traffic", "convert-currency"})
    # WHEN a request shares a word with some tools but none with the one it means
    hits = [key for key, _ in index.search("exchange rate of the dollar in this city", limit=3)]
    # THEN that one is listed, by the static signal standing in for its vector (only tools sharing
    # "city" were, before)
    assert hits and hits[0] == "demo/convert-currency"


EVERY_TOOL = {"get-weather-forecast", "list-city-events", "get-city-map", "book-city-hotel", "get-city-traffic",
              "convert-currency"}


def test_a_pending_tool_ranks_first_where_the_static_stand_in_puts_others_first() -> None:
    # GIVEN every tool waiting for its vector
    index = _index(pending=EVERY_TOOL)
    # WHEN a request shares "city" with five tools but means the sixth
    hits = [key for key, _ in index.search("exchange dollars in the city", limit=3)]
    # THEN the one it means is first, as once the vectors exist (the static signal alone put the
    # city map, hotel and traffic tools ahead of it: the first hits now get their own vectors)
    assert hits[0] == "demo/convert-currency"


def test_a_request_sharing_no_word_finds_a_pending_tool() -> None:
    # GIVEN every tool waiting for its vector
    index = _index(pending=EVERY_TOOL)
    # WHEN a request shares no word with any tool
    hits = [key for key, _ in index.search("will it rain tomorrow", limit=3)]
    # THEN the tool it means is found (with no vector known there was no MiniLM cosine to pass the
    # "no hit" gate, and the answer was empty)
    assert hits and hits[0] == "demo/get-weather-forecast"


def test_a_request_meaning_no_tool_finds_nothing_while_vectors_are_pending(embedded: list[str]) -> None:
    # GIVEN every tool waiting for its vector
    index = _index(pending=EVERY_TOOL)
    embedded.clear()
    # WHEN a request of made-up words, or of real words that mean none of the tools, is searched
    # THEN nothing is found, and the made-up words cost no forward pass
    assert index.search("zzqx frobnicate", limit=3) == []
    assert embedded == []
    assert index.search("a sonnet about autumn leaves", limit=3) == []


def test_a_search_computes_few_pending_vectors_and_keeps_them(embedded: list[str]) -> None:
    # GIVEN every tool waiting for its vector
    index = _index(pending=EVERY_TOOL)
    embedded.clear()
    # WHEN it is searched twice with requests whose first hits are the same tools
    first = index.search("a map of the city", limit=3)
    computed = len(embedded)
    again = index.search("a map of the city", limit=3)
    # THEN the first search computed vectors only for its first RERANK_PENDING candidates, the
    # second none (the index keeps them), and both answered alike
    assert 1 <= computed <= RERANK_PENDING
    assert len(embedded) == computed and again == first


def test_the_local_work_queue_has_a_consumer_per_core_and_one_more(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the local stack's workers, with their polling loops recorded instead of run
    started: list[tuple[str, int]] = []
    monkeypatch.setattr(workers, "_consume", lambda stop, queue, handler, batch: started.append((queue, batch)))
    monkeypatch.setattr(workers, "_every", lambda stop, seconds, job: None)
    # WHEN they start
    workers.start(threading.Event(), sweep_interval=300)
    time.sleep(0.2)  # the threads record and end at once
    # THEN the work queue has a consumer per core and one more, each taking one message at a time
    # (as app.py's sweep_worker, batch_size=1), and the webhook queue one taking ten
    assert sorted(started) == sorted([(settings().sweep_queue, 1)] * ((os.cpu_count() or 1) + 1)
                                     + [(settings().webhook_queue, 10)])


def test_the_model_is_loaded_once_by_threads_that_want_it_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a model that takes a while to load, not loaded yet
    loads: list[int] = []

    def slow_load() -> object:
        loads.append(1)
        time.sleep(0.3)
        return object()

    monkeypatch.setattr(embedder, "_load", functools.cache(slow_load))
    # WHEN four threads want it at the same moment
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(embedder.model())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN it was loaded once, and all four have the same one
    assert len(loads) == 1 and len(got) == 4 and all(model is got[0] for model in got)
