"""The keyword signal: BM25 over each tool's name fields (vendor, name words, glued originals,
counted NAME_WEIGHT times) and description, and the idf-weighted share of a query's words found
in a tool's vendor or name. Raw term frequencies are kept and BM25 is worked out at query time, so
a changed doc touches only its own terms."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from chalicelib.search.arrays import grown
from chalicelib.search.documents import Document
from chalicelib.search.text import keywords, stem, words

# Picked on the tuning subset (every 10th MetaTool query); see bench/find_tool_quality.py.
BM25_K1 = 1.2
BM25_B = 0.3
NAME_WEIGHT = 3.0  # a vendor/name term counts like this many description terms
PATH_WEIGHT = 1.0  # an imported operation's path/operationId word (structure.py), in its name field too


@dataclass(frozen=True)
class Terms:
    """What one doc gives the lexicon: its stemmed terms with their weighted frequency, and the
    stemmed terms of its vendor and name."""

    freqs: dict[str, float]
    named: frozenset[str]

    @classmethod
    def of(cls, doc: Document, name_words: list[str]) -> Terms:
        """The terms of `doc`, whose name splits into `name_words`."""
        names = keywords(doc.vendor, doc.name, name_words)
        freqs: defaultdict[str, float] = defaultdict(float)
        for word in names:
            freqs[stem(word)] += NAME_WEIGHT
        for word in words(doc.description):
            freqs[stem(word)] += 1.0
        named = frozenset(map(stem, names))
        if doc.structure is not None and PATH_WEIGHT:
            for word in doc.structure.resources:
                freqs[word] += PATH_WEIGHT
            named |= frozenset(doc.structure.resources)
        return cls(dict(freqs), named)


_NO_POSTINGS = (np.zeros(0, np.int64), np.zeros(0))


@dataclass(frozen=True)
class Lexicon:
    """The keyword side of an index: per stemmed term, the docs holding it with its frequency, and
    the docs whose vendor or name hold it. BM25 weights are worked out at query time from these
    and the doc lengths, so a changed doc touches only its own terms' lists."""

    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # stemmed term -> (docs, term frequency)
    in_names: dict[str, np.ndarray]  # stemmed term -> docs whose vendor or name holds it
    lengths: np.ndarray  # per doc: its term count, name terms counted NAME_WEIGHT times

    @classmethod
    def build(cls, terms: list[Terms]) -> Lexicon:
        """The lexicon of docs 0..n-1 holding `terms`."""
        return cls({}, {}, np.zeros(0)).updated(list(range(len(terms))), [None] * len(terms), terms)

    @property
    def size(self) -> int:
        return len(self.lengths)

    def updated(self, rows: list[int], old: list[Terms | None], new: list[Terms]) -> Lexicon:
        """A copy with doc `rows[i]` holding `new[i]` instead of `old[i]` (None: a row past the end,
        appended); only the lists of the terms involved are rewritten."""
        lengths = grown(self.lengths, rows, np.array([sum(terms.freqs.values()) for terms in new]))
        dropped: dict[str, set[int]] = defaultdict(set)
        dropped_names: dict[str, set[int]] = defaultdict(set)
        added: dict[str, list[tuple[int, float]]] = defaultdict(list)
        added_names: dict[str, list[int]] = defaultdict(list)
        for row, before, after in zip(rows, old, new):
            for term in before.freqs if before else ():
                dropped[term].add(row)
            for term in before.named if before else ():
                dropped_names[term].add(row)
            for term, freq in after.freqs.items():
                added[term].append((row, freq))
            for term in after.named:
                added_names[term].append(row)
        postings = dict(self.postings)
        for term in dropped.keys() | added.keys():
            docs, freqs = postings.pop(term, _NO_POSTINGS)
            keep = ~np.isin(docs, list(dropped.get(term, ())))
            more = added.get(term, [])
            docs = np.concatenate([docs[keep], np.array([row for row, _ in more], np.int64)])
            if docs.size:
                postings[term] = (docs, np.concatenate([freqs[keep], np.array([freq for _, freq in more])]))
        in_names = dict(self.in_names)
        for term in dropped_names.keys() | added_names.keys():
            docs = in_names.pop(term, _NO_POSTINGS[0])
            docs = np.concatenate([docs[~np.isin(docs, list(dropped_names.get(term, ())))],
                                   np.array(added_names.get(term, []), np.int64)])
            if docs.size:
                in_names[term] = docs
        return Lexicon(postings, in_names, lengths)

    def idf(self, term: str) -> float:
        """BM25's idf; a word no doc holds counts as the rarest possible."""
        held = len(self.postings[term][0]) if term in self.postings else 0
        return math.log(1 + (self.size - held + 0.5) / (held + 0.5))

    def scores(self, content: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """BM25 per doc, and the idf-weighted share of the query's words in each doc's name."""
        bm25, named = np.zeros(self.size), np.zeros(self.size)
        terms = {stem(w) for w in content}
        norm = BM25_K1 * (1 - BM25_B + BM25_B * self.lengths / max(self.lengths.mean(), 1e-9))
        for term in terms:
            idf = self.idf(term)
            if term in self.postings:
                docs, freqs = self.postings[term]
                bm25[docs] += idf * freqs * (BM25_K1 + 1) / (freqs + norm[docs])
            if term in self.in_names:
                named[self.in_names[term]] += idf
        total = sum(map(self.idf, terms))
        return bm25, named / total if total > 0 else named
