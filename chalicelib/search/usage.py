"""The account's own use as a ranking signal: what earlier requests led to.

An account's evidence is a bounded list of (request, tool, count) pairs, each request with its
MiniLM vector (computed once, when the pair is stored). A new request's vector is compared with
every stored request's (one product over at most a few hundred rows); a stored request at least
FLOOR similar lends its tool a boost that grows from 0 at FLOOR to W_USAGE at an identical
request, a little less for a pair seen only once (COUNT_FULL).

The boost is added to a tool's fused score (SearchIndex.search) and capped at W_USAGE, so it
only reorders tools the request already ranks within W_USAGE of each other; a tool that is not a
hit (no shared word, no MiniLM closeness) is never listed at all. Poisoned evidence therefore
cannot put an unrelated tool first for a clear request: its score sits far more than W_USAGE
below the right tool's (tests/test_usage.py). Both figures were picked on the tuning part of
MetaTool only (every 10th query; bench/usage_replay.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from chalicelib.search import embedder

# Picked on the tuning subset (every 10th MetaTool query); see bench/usage_replay.py.
W_USAGE = 2.0  # the most a tool's fused score can rise: below a clear request's lead
FLOOR = 0.4  # MiniLM cosine between two requests below which they lend nothing
COUNT_FULL = 3  # a pair seen this often lends its full weight; seen once, ONCE_SHARE of it
ONCE_SHARE = 0.75
VECTOR_BYTES = embedder.DIMENSIONS * 2  # float16, as tool vectors are stored


@dataclass(frozen=True)
class Evidence:
    """One remembered pair: a request that led to a tool (`key` is "vendor/name")."""

    query: str
    key: str
    count: int
    vector: bytes  # the request's MiniLM vector, float16 little-endian


def query_vector(query: str) -> bytes:
    """A request's stored vector (a forward pass: once, when its pair is stored)."""
    return embedder.embed([query])[0].astype("<f2").tobytes()


class Memory:
    """An account's evidence, ready to rank with: the vectors as one matrix."""

    def __init__(self, evidence: Sequence[Evidence]) -> None:
        kept = [e for e in evidence if len(e.vector) == VECTOR_BYTES and e.count > 0]
        self.keys = [e.key for e in kept]
        self.vectors = (np.stack([np.frombuffer(e.vector, "<f2") for e in kept]).astype(np.float32) if kept
                        else np.zeros((0, embedder.DIMENSIONS), np.float32))
        counts = np.array([e.count for e in kept], np.float32)
        self.weights = np.minimum(1.0, ONCE_SHARE + (1 - ONCE_SHARE) * np.log2(np.maximum(counts, 1))
                                  / np.log2(COUNT_FULL)).astype(np.float32)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        """Roughly what the memory holds."""
        return self.vectors.nbytes + self.weights.nbytes + sum(len(k) + 60 for k in self.keys)

    def boost(self, query_vector: np.ndarray, rows: Mapping[str, int], size: int) -> np.ndarray:
        """Per doc row (of `size`), what the evidence adds to its fused score: W_USAGE times the
        strongest of its pairs, a pair's strength rising linearly from 0 at FLOOR to its weight
        at an identical request. Pairs of tools not in the index lend nothing."""
        added = np.zeros(size, np.float32)
        if not self.keys:
            return added
        similarity = self.vectors @ query_vector
        strength = np.clip((similarity - FLOOR) / (1 - FLOOR), 0.0, 1.0) * self.weights
        for i in np.flatnonzero(strength > 0):
            row = rows.get(self.keys[i])
            if row is not None:
                added[row] = max(added[row], strength[i])
        return W_USAGE * added


EMPTY = Memory(())
