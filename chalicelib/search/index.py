"""SearchIndex: the four signals of each doc fused into one ranking, and the "no hit" rule.

Per doc, summed with fixed weights (W_* below):

* sentence -- cosine of the query's MiniLM vector with the tool's stored one (documents.py), the
  index's mean tool vector subtracted first: every tool text shares a "this is a tool" direction
  that otherwise dominates the cosine. z-scored across the docs. A doc whose vector is PENDING (a
  large import's, until the work queue stores it) has the static signal's z-score instead, and
  the first few such candidates of a search get their vector computed there (RERANK_PENDING).
* static -- range-weighted wordllama cosine (static.py), z-scored.
* keyword -- BM25 (bm25.py), divided by its maximum.
* name -- idf-weighted share of the query's words found in a tool's vendor or name (bm25.py).

"No hit" uses absolute evidence: a query needs a content word (not a stop word), and then
either a doc sharing a content word with it, or a content word that is a real word (in the
MiniLM vocabulary, so not gibberish) and a MiniLM cosine of GATE_COSINE or more with some
doc; the docs listed are then those sharing a word or reaching HIT_COSINE.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from chalicelib.search import embedder
from chalicelib.search.arrays import grown, zscore, zscore_among
from chalicelib.search.bm25 import Lexicon, Terms
from chalicelib.search.documents import PENDING, Document, document_vectors, stored_vectors
from chalicelib.search.static import StaticVectors, static_texts
from chalicelib.search.structure import Shapes, about_the_asker
from chalicelib.search.text import content_words, is_known_word, name_words, stem
from chalicelib.search.usage import Memory

# Picked on the tuning subset (every 10th MetaTool query); see bench/find_tool_quality.py.
W_SENTENCE = 1.0
W_STATIC = 1.0
W_KEYWORD = 1.0
W_NAME = 2.0  # share of the query's words found in a tool's vendor or name
GATE_COSINE = 0.25  # best MiniLM cosine that makes a query without shared words answerable
HIT_COSINE = 0.1  # MiniLM cosine that lists a doc without a shared word, once answerable
W_STRUCTURE = 3.0  # intent, cover and many of an imported operation (structure.py); 0 for other docs
PENDING_HIT_Z = 2.0  # static z-score that lists a PENDING doc without a shared word (bench/pending_quality.py)
# A search computes the MiniLM vectors of the PENDING docs among the first RERANK_PENDING hits of
# each ranking it makes (the request, its parts and its residual: at most 5 x 5 vectors, kept by the index
# and counted in its `nbytes`, which the search cache's budget reads live)
# and ranks them by their real sentence signal; with no vector known to z-score against,
# PENDING_COSINE_SPREAD of cosine counts as one z (bench/pending_quality.py).
RERANK_PENDING = 5
PENDING_COSINE_SPREAD = 0.05
COMPUTED_OVERHEAD = 200  # bytes of a computed vector besides its floats: the ndarray object, its dict entry
RESIDUAL_NORM = 1e-3  # a request vector this close to its best hit's leaves no residual direction
SAME_AS_MEAN = 1e-3  # float32 rounding of |v|^2 - 2 v.m + |m|^2 for unit vectors is ~1e-7, so ~3e-4 apart


@dataclass(frozen=True)
class _Signals:
    """Everything a non-empty index ranks with, one row per doc."""

    lexicon: Lexicon
    vectors: np.ndarray  # stored MiniLM vectors (unit length): absolute evidence for "no hit"
    mean: np.ndarray  # the known vectors' mean: every tool text shares it, so ranking takes it out
    distance: np.ndarray  # per doc, |vector - mean| (inf where it has no direction: centred cosine 0)
    static: StaticVectors
    known: np.ndarray  # False for a PENDING vector: its sentence signal is left neutral
    shapes: Shapes  # what imported operations' structure says (zero for other docs)

    def updated(self, rows: list[int], old: list[Document | None], new: list[Document]) -> _Signals:
        """A copy with doc `rows[i]` now `new[i]` (it was `old[i]`; None: appended)."""
        split = [name_words(d.name, d.description) for d in new]
        before = [Terms.of(d, name_words(d.name, d.description)) if d else None for d in old]
        vectors = grown(self.vectors, rows, stored_vectors(new))
        known = grown(self.known, rows, np.array([d.vector != PENDING for d in new]))
        return _Signals(
            lexicon=self.lexicon.updated(rows, before, [Terms.of(d, w) for d, w in zip(new, split)]),
            vectors=vectors,
            **_centre(vectors, known),
            static=self.static.updated(rows, static_texts(new, split), [d.description for d in new]),
            known=known,
            shapes=self.shapes.updated(rows, [d.structure for d in new]),
        )

    def centred(self, cosine: np.ndarray, query_vector: np.ndarray) -> np.ndarray:
        """Cosine of the query with each vector minus the mean, from the plain cosines: (v - m).q /
        |v - m| needs no second product, and a changed doc changes no other doc's row."""
        return np.where(self.known, (cosine - self.mean @ query_vector) / self.distance, 0.0)

    @property
    def nbytes(self) -> int:
        """Roughly what the signals hold in memory (the arrays, and a little per term)."""
        postings = sum(docs.nbytes + freqs.nbytes + 100 for docs, freqs in self.lexicon.postings.values())
        names = sum(docs.nbytes + 100 for docs in self.lexicon.in_names.values())
        return (postings + names + self.lexicon.lengths.nbytes + self.vectors.nbytes + self.distance.nbytes
                + self.static.nbytes + self.known.nbytes + self.shapes.nbytes)


# Changes applied in place leave the static signal's token weights as the last full build measured
# them; once this share of the docs changed since, the next update rebuilds the index whole.
REBUILD_SHARE = 0.1


class SearchIndex:
    """An index over a toolbox: build once, query many times, and take changed docs up with
    `updated` (a new index; this one is never modified, so searches in flight are safe)."""

    def __init__(self, docs: list[Document], signals: _Signals | None, changed: int = 0) -> None:
        self._docs = docs  # without their vectors (those are in the signals)
        self._rows = {doc.key: row for row, doc in enumerate(docs)}
        self._keys = [doc.key for doc in docs]
        self._key_order = np.argsort(np.argsort(np.asarray(self._keys, dtype=object)))  # tie-break rank
        self._signals = signals
        self._changed = changed  # docs changed in place since the last full build
        # row -> MiniLM vector a search computed for a PENDING doc; only ever gains entries, so
        # searches sharing it are safe (an updated index starts afresh: its docs may have changed)
        self._computed: dict[int, np.ndarray] = {}
        self._built_nbytes: int | None = None  # `nbytes` without `_computed`, measured at its first read
        # each vendor's content words and rows: a request naming a vendor asks within it
        by_vendor: dict[str, list[int]] = {}
        for row, doc in enumerate(docs):
            by_vendor.setdefault(doc.vendor, []).append(row)
        self._vendors = [(frozenset(content_words(vendor.replace("-", " "))), np.array(rows, np.int64))
                         for vendor, rows in by_vendor.items()]

    @classmethod
    def build(cls, docs: Iterable[Document]) -> SearchIndex:
        """Index the docs; a repeated key keeps its last doc. Docs without a vector get one
        computed here (a forward pass each), so pass stored vectors when there are many."""
        unique = list({d.key: d for d in docs}.values())
        if not unique:
            return cls([], None)
        split = [name_words(d.name, d.description) for d in unique]
        vectors = stored_vectors(unique)
        known = np.array([d.vector != PENDING for d in unique])
        signals = _Signals(
            lexicon=Lexicon.build([Terms.of(d, w) for d, w in zip(unique, split)]),
            vectors=vectors,
            **_centre(vectors, known),
            static=StaticVectors.build(static_texts(unique, split), [d.description for d in unique]),
            known=known,
            shapes=Shapes.build([d.structure for d in unique]),
        )
        return cls([replace(d, vector=None) for d in unique], signals)

    def updated(self, docs: Iterable[Document]) -> SearchIndex:
        """This index with the given docs added, or in place of the docs of the same key; each
        changed doc costs about what its own terms and tokens do. Once REBUILD_SHARE of the docs
        changed since the last full build, the index is built whole again from its own docs."""
        changes = list({d.key: d for d in docs}.values())
        if not changes:
            return self
        if self._signals is None:  # an empty toolbox's index (searched before any publish): nothing to keep
            return SearchIndex.build(changes)
        if self._changed + len(changes) > REBUILD_SHARE * len(self):
            return SearchIndex.build([*self._stored_docs(), *changes])
        rows, old, all_docs = [], [], list(self._docs)
        for doc in changes:
            row = self._rows.get(doc.key)
            if row is None:
                row = len(all_docs)
                all_docs.append(doc)
            rows.append(row)
            old.append(self._docs[row] if row < len(self._docs) else None)
            all_docs[row] = replace(doc, vector=None)
        return SearchIndex(all_docs, self._signals.updated(rows, old, changes), self._changed + len(changes))

    def _stored_docs(self) -> list[Document]:
        """The docs as given, with the vectors the index holds."""
        assert self._signals is not None
        signals = self._signals
        return [replace(doc, vector=signals.vectors[row].astype("<f2").tobytes() if signals.known[row] else PENDING)
                for row, doc in enumerate(self._docs)]

    @property
    def nbytes(self) -> int:
        """Roughly what the index holds in memory now: what it was built with (measured once), and
        the vectors its searches computed since for PENDING docs (read live: they grow the index
        after it was built, up to a vector per pending doc, and the cache's budget must see them)."""
        if self._built_nbytes is None:
            texts = sum(len(d.key) + len(d.vendor) + len(d.name) + len(d.description) + 300 for d in self._docs)
            self._built_nbytes = texts + self._key_order.nbytes + (self._signals.nbytes if self._signals else 0)
        return self._built_nbytes + len(self._computed) * self._computed_nbytes

    @property
    def _computed_nbytes(self) -> int:
        """What one vector of `_computed` holds: its float32s, the array and the dict entry."""
        return (self._signals.vectors.shape[1] * 4 if self._signals else 0) + COMPUTED_OVERHEAD

    def __len__(self) -> int:
        return len(self._keys)

    def search(self, query: str, limit: int = 10, memory: Memory | None = None) -> list[tuple[str, float]]:
        """Keys with scores, best first; only real hits (empty list when nothing is relevant).
        `memory`: the account's own use (search/usage.py), a capped boost for what similar
        requests led to; it reorders hits, never adds one.

        Scores are a weighted sum of per-query normalised signals: higher is better, but
        they are only comparable within one query.
        """
        return self.search_many([query], limit, memory)[0]

    def search_many(self, queries: list[str], limit: int = 10, memory: Memory | None = None,
                    residual: bool = False) -> list[list[tuple[str, float]]]:
        """`search` of each query (a request and its intents, queries.py), with the MiniLM vectors
        of all of them in one forward pass and their cosines with every doc in one product. With
        `residual`, one more ranking after them: the first query's with what its best hit explains
        taken away (`_residual`), from the vector already computed (no second forward pass)."""
        signals = self._signals
        answers: list[list[tuple[str, float]]] = [[] for _ in queries]
        if signals is None or limit <= 0:
            return answers + ([[]] if residual else [])
        # position -> (content words, BM25, name share, shares a word) of each answerable query
        lexical: dict[int, tuple[list[str], np.ndarray, np.ndarray, bool]] = {}
        for position, query in enumerate(queries):
            content = content_words(query) or about_the_asker(query)  # "who am I": its asker
            if not content:
                continue
            keyword, named = signals.lexicon.scores(content)
            shares_word = bool((keyword > 0).any())
            if shares_word or any(map(is_known_word, content)):  # else gibberish: skip the forward pass
                lexical[position] = (content, keyword, named, shares_word)
        if not lexical:
            return answers + ([[]] if residual else [])
        vectors = embedder.embed([queries[position] for position in lexical])
        cosines = signals.vectors @ vectors.T
        for column, (position, (content, keyword, named, shares_word)) in enumerate(lexical.items()):
            cosine = cosines[:, column]
            if shares_word or not signals.known.all() or cosine.max() >= GATE_COSINE:
                answers[position] = self._ranked(queries[position], content, keyword, named, vectors[column],
                                                  cosine, limit, memory)
        if residual:  # position 0 is column 0 whenever it is answerable
            answers.append(self._residual(queries[0], lexical[0][0], vectors[0], answers[0][0][0],
                                          (lexical[0][1] > 0) | (cosines[:, 0] >= HIT_COSINE), limit, memory)
                           if answers[0] else [])
        return answers

    def holds(self, key: str, words: list[str]) -> list[bool]:
        """Whether `key`'s text (vendor, name, description) holds each of `words`, stemmed as BM25 does."""
        if self._signals is None or key not in self._rows:
            return [False] * len(words)
        row, postings = self._rows[key], self._signals.lexicon.postings
        stems = [stem(word) for word in words]
        return [term in postings and bool((postings[term][0] == row).any()) for term in stems]

    def cosines(self, key: str, keys: list[str]) -> np.ndarray:
        """The MiniLM cosine of `key`'s stored vector with each of `keys`' (0 where either is PENDING
        or unknown): a sibling of a tool is near it, a tool for another intent is not."""
        out = np.zeros(len(keys), np.float32)
        signals = self._signals
        if signals is None or key not in self._rows or not signals.known[self._rows[key]]:
            return out
        rows = [self._rows.get(k, -1) for k in keys]
        found = [i for i, row in enumerate(rows) if row >= 0 and signals.known[row]]
        if found:
            out[found] = signals.vectors[[rows[i] for i in found]] @ signals.vectors[self._rows[key]]
        return out

    def _residual(self, query: str, content: list[str], query_vector: np.ndarray, top: str, listed: np.ndarray,
                  limit: int, memory: Memory | None) -> list[tuple[str, float]]:
        """What a request asks beyond its best hit `top` ("explaining away"): ranked as a query of
        the request's content words `top`'s text does not hold (all of them if it holds every one)
        and of the request's vector minus its projection on `top`'s, renormalised. A request for
        two things whose best hit answers one then finds the other, with or without an "and";
        `top` itself is left out, and so is any doc the request itself would not list (`listed`:
        sharing a word with it or near it in meaning): a residual direction is close to something in
        any toolbox. One more product with the vectors, no MiniLM pass."""
        assert self._signals is not None
        signals = self._signals
        row = self._rows[top]
        lexicon = signals.lexicon
        left = [w for w in content
                if not (stem(w) in lexicon.postings and bool((lexicon.postings[stem(w)][0] == row).any()))]
        words, text = (left, " ".join(left)) if left else (content, query)
        vector = query_vector
        explained = signals.vectors[row] if signals.known[row] else self._computed.get(row)
        if explained is not None:
            rest = query_vector - float(query_vector @ explained) * explained
            norm = float(np.linalg.norm(rest))
            if norm > RESIDUAL_NORM:
                vector = (rest / norm).astype(np.float32)
        keyword, named = lexicon.scores(words)
        among = listed.copy()
        among[row] = False
        return self._ranked(text, words, keyword, named, vector, signals.vectors @ vector, limit, memory, among)

    def _ranked(self, query: str, content: list[str], keyword: np.ndarray, named: np.ndarray,
                query_vector: np.ndarray, cosine: np.ndarray, limit: int,
                memory: Memory | None, among: np.ndarray | None = None) -> list[tuple[str, float]]:
        """One answerable query's hits: its signals fused, best first (only docs `among`, if given)."""
        assert self._signals is not None
        signals = self._signals
        top = keyword.max()
        static = zscore(signals.static.cosine(query))
        centred = signals.centred(cosine, query_vector)
        sentence = _sentence_or_stand_in(centred, static, signals.known)
        fused = (W_SENTENCE * sentence
                 + W_STATIC * static
                 + W_KEYWORD * (keyword / top if top > 0 else keyword) + W_NAME * named)
        if W_STRUCTURE:
            fused = fused + W_STRUCTURE * self._within_named_vendors(content, signals.shapes.scores(query, content))
        if memory is not None:
            fused = fused + memory.boost(query_vector, self._rows, len(self._keys))
        fused = np.round(fused, 6)  # scores as answered: equal ones (to a rounding) are ordered by key
        if not signals.known.all():
            # the first few candidates still PENDING get their own vectors: their sentence signal
            # replaces the stand-in, and their cosine is the absolute evidence the gate and the
            # listing below want (with every vector pending there was none: no shared word, no answer)
            candidates = np.flatnonzero((keyword > 0) | (cosine >= HIT_COSINE) | ~signals.known)
            first = candidates[np.lexsort((self._key_order[candidates], -fused[candidates]))][:RERANK_PENDING]
            rows = first[~signals.known[first]]
            if rows.size:
                own_cosine, own_sentence = self._pending_sentence(rows, query_vector, centred)
                cosine = cosine.copy()
                cosine[rows] = own_cosine
                fused[rows] = np.round(fused[rows] + W_SENTENCE * (own_sentence - sentence[rows]), 6)
            if not (keyword > 0).any() and cosine.max() < GATE_COSINE:
                return []
        listed = (keyword > 0) | (cosine >= HIT_COSINE) | _listed_while_pending(static, signals.known)
        hits = np.flatnonzero(listed if among is None else listed & among)
        order = hits[np.lexsort((self._key_order[hits], -fused[hits]))][:limit]
        return [(self._keys[i], float(fused[i])) for i in order]

    def _within_named_vendors(self, content: list[str], scores: np.ndarray) -> np.ndarray:
        """`scores` (the structure signal) kept only for the tools of the vendors the request names,
        if it names any: in "shop orders" the shop's create-order stays ahead of another vendor's
        list-orders, which the verbless request's lean to reads would otherwise lift."""
        asked = set(content)
        named = [rows for words, rows in self._vendors if words and words <= asked]
        if not named or sum(len(rows) for rows in named) == len(self._keys):
            return scores
        kept = np.zeros(len(scores), bool)
        kept[np.concatenate(named)] = True
        return np.where(kept, scores, 0.0)

    def _pending_sentence(self, rows: np.ndarray, query_vector: np.ndarray,
                          centred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The MiniLM cosine and sentence signal of PENDING docs `rows`, their vectors computed
        here (a forward pass each, once per index), z-scored as the known docs' are; with none
        known, their cosines' spread among themselves over PENDING_COSINE_SPREAD. At rank 1 the
        static stand-in loses a tenth of what MiniLM finds (a rental request's "apartment" vs the
        tool's "house renting"); these few passes win nearly all of it back (bench/pending_quality.py)."""
        assert self._signals is not None
        signals = self._signals
        missing = [int(row) for row in rows if int(row) not in self._computed]
        if missing:
            docs = [self._docs[row] for row in missing]
            for row, vector in zip(missing, document_vectors([(d.vendor, d.name, d.description) for d in docs])):
                self._computed[row] = np.frombuffer(vector, "<f2").astype(np.float32)
        vectors = np.stack([self._computed[int(row)] for row in rows])
        cosine = vectors @ query_vector
        known = signals.known
        if not known.any():
            return cosine, (cosine - cosine.mean()) / PENDING_COSINE_SPREAD
        distance = np.linalg.norm(vectors - signals.mean, axis=1)
        own = np.where(distance > SAME_AS_MEAN, (cosine - signals.mean @ query_vector) / distance, 0.0)
        spread = centred[known].std()
        return cosine, (own - centred[known].mean()) / (spread if spread > 0 else 1.0)


def _sentence_or_stand_in(sentence: np.ndarray, static: np.ndarray, known: np.ndarray) -> np.ndarray:
    """The sentence signal, z-scored; for a doc whose vector is PENDING (a large import's, until
    the work queue stores it), the static signal's z-score (`static`) stands in. Both measure
    how close the request's meaning is to the tool's text: left at zero instead, a pending doc
    would rank a whole signal behind the known ones (bench/pending_quality.py). With no vector
    known at all there is nothing to rank against: the other signals rank alone (standing in
    there only weighs the static signal double, measured 2-4 points lower recall@1)."""
    if known.all():
        return zscore(sentence)
    if not known.any():
        return np.zeros_like(sentence)
    return np.where(known, zscore_among(sentence, known), static)


def _listed_while_pending(static: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Pending docs listed without a shared word: those whose static signal stands out
    (PENDING_HIT_Z), as a MiniLM cosine of HIT_COSINE would list them once their vector exists."""
    return ~known & (static >= PENDING_HIT_Z)


def _centre(vectors: np.ndarray, known: np.ndarray) -> dict[str, np.ndarray]:
    """The known vectors' mean, and each vector's distance from it (|v|^2 - 2 v.m + |m|^2, one
    product instead of a copy of every vector)."""
    mean = vectors[known].mean(axis=0) if known.any() else np.zeros(vectors.shape[1], np.float32)
    squared = np.einsum("ij,ij->i", vectors, vectors) - 2 * (vectors @ mean) + mean @ mean
    distance = np.sqrt(np.maximum(squared, 0.0))
    # Below SAME_AS_MEAN the subtraction's rounding is all there is: such a vector (all docs alike,
    # or a PENDING one) has no direction left, and its centred cosine is 0.
    return {"mean": mean, "distance": np.where(known & (distance > SAME_AS_MEAN), distance, np.inf).astype(np.float32)}
