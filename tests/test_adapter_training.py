"""bench/adapter_data.py and bench/train_adapter.py: the pairs say what Workset embeds, and the
adapter's gradient is the loss's (issue 25, goal 4). No model is loaded: vectors are made up."""

from __future__ import annotations

import numpy as np

from bench import adapter_data, train_adapter
from chalicelib.search.documents import _vector_text

DOCUMENT = {
    "openapi": "3.0.0",
    "info": {"title": "Acme API", "version": "1"},
    "paths": {
        "/widgets": {
            "get": {"operationId": "listWidgets", "summary": "List all Acme widgets.",
                    "description": "Returns every widget of the account, newest first, paginated by cursor."},
            "post": {"operationId": "createWidget", "summary": "Create a widget",
                     "description": "Create a widget."},  # adds nothing to the summary: no pair
        },
        "/widgets/{id}": {"delete": {"operationId": "deleteWidget", "summary": "Delete one widget"}},  # no description
    },
}


def test_pairs_are_requests_and_the_tool_text_workset_embeds() -> None:
    pairs = adapter_data.api_pairs("acme.example", DOCUMENT, __import__("random").Random(1))
    assert [p.request for p in pairs] == ["list all widgets"]  # lower-cased, the API's name gone
    (pair,) = pairs
    description = DOCUMENT["paths"]["/widgets"]["get"]["description"]  # type: ignore[index]
    assert pair.tool == _vector_text("list-widgets", f"List all Acme widgets.\n\n{description}")
    assert pair.detail == _vector_text("list-widgets", description)
    assert pair.validation == adapter_data.validation_api("acme.example")


def test_a_document_the_import_refuses_gives_no_pairs() -> None:
    assert adapter_data.api_pairs("bad.example", {"openapi": "3.0.0", "paths": {"nope": {}}},
                                  __import__("random").Random(1)) == []


def test_the_adapter_starts_as_the_identity() -> None:
    rng = np.random.default_rng(3)
    queries = train_adapter.normalised(rng.normal(size=(5, 384)).astype(np.float32))
    np.testing.assert_allclose(train_adapter.adapted(queries, np.zeros((384, 384), np.float32)), queries, atol=1e-6)
    moved = train_adapter.adapted(queries, rng.normal(size=(384, 384)).astype(np.float32) * 0.1)
    np.testing.assert_allclose(np.linalg.norm(moved, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(moved, queries)


def test_the_gradient_is_the_losss() -> None:
    rng = np.random.default_rng(0)
    q = train_adapter.normalised(rng.normal(size=(6, 8)))
    d = train_adapter.normalised(rng.normal(size=(6, 8)))
    weights = rng.normal(size=(8, 8)) * 0.1
    _, gradient = train_adapter.loss_and_gradient(weights, q, d)
    step = 1e-6
    numeric = np.zeros_like(weights)
    for i in range(8):
        for j in range(8):
            up, down = weights.copy(), weights.copy()
            up[i, j] += step
            down[i, j] -= step
            numeric[i, j] = (train_adapter.loss_and_gradient(up, q, d)[0]
                             - train_adapter.loss_and_gradient(down, q, d)[0]) / (2 * step)
    np.testing.assert_allclose(gradient, numeric, atol=1e-6)


def test_training_learns_a_mapping_it_can_learn() -> None:
    """Tools are their queries rotated: the cosine alone ranks them near chance, q + qW can undo it."""
    rng = np.random.default_rng(1)
    rotation = np.linalg.qr(rng.normal(size=(16, 16)))[0]
    queries = train_adapter.normalised(rng.normal(size=(1024, 16)))
    tools = train_adapter.normalised(queries @ rotation + rng.normal(size=(1024, 16)) * 0.05)
    before = train_adapter.recall(queries[768:], tools[768:])[1]
    weights, log = train_adapter.train(queries[:768], tools[:768], queries[768:], tools[768:])
    after = train_adapter.recall(train_adapter.adapted(queries[768:], weights), tools[768:])[1]
    assert before < 0.2, before
    assert after > 0.5, (after, log)
