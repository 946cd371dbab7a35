"""Ranking for the find_tool meta-tool: which published tools match a free-text need.

Four per-doc signals, summed with fixed weights (W_* below):

* sentence -- cosine of the query's all-MiniLM-L6-v2 vector (chalicelib/embedder.py) with
  the tool's stored vector ("name words: description", see document_vector). The index's
  mean tool vector is subtracted first: every tool text shares a "this is a tool" direction
  that otherwise dominates the cosine. z-scored across the docs.
* static -- cosine of query and tool text pooled from wordllama's static token vectors
  (read from the installed wheel). Each token is weighted by how peaky its similarity is
  across this index (max minus mean cosine over the docs), so filler fades. z-scored. A
  second, differently trained view: it still adds 2-3 points of recall@5 next to MiniLM.
* keyword -- BM25 over name fields (vendor, name split on "-", glued names segmented)
  and description, light stemmer, query-side stop words; divided by its maximum.
* name -- idf-weighted share of the query's words found in a tool's vendor or name.

"No hit" uses absolute evidence: a query needs a content word (not a stop word), and then
either a doc sharing a content word with it, or a content word that is a real word (in the
MiniLM vocabulary, so not gibberish) and a MiniLM cosine of GATE_COSINE or more with some
doc; the docs listed are then those sharing a word or reaching HIT_COSINE.
Parameters were picked on every 10th MetaTool query only (bench/find_tool_quality.py).

Tool vectors cost a forward pass each, so the app computes them once per tool version with
document_vector() and passes them back in Document.vector; building an index from stored
vectors needs no model run at all. Queries are embedded at search time.

A toolbox grows while it is searched, so an index takes changed docs up in place
(SearchIndex.updated, about 25 ms at 10,000 tools against 2 s for a build): the keyword side
keeps each term's raw frequencies and works BM25 out at query time, the sentence side keeps the
vectors and each one's distance from their mean, both exactly as a fresh build would. Only the
static signal's token weights stay as the last full build measured them, until REBUILD_SHARE of
the docs changed.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from chalicelib import embedder

if TYPE_CHECKING:
    from tokenizers import Tokenizer

_DATA = Path(__file__).with_name("search_data")
_WORD = re.compile(r"[a-z0-9]+")
_CASED_WORD = re.compile(r"[A-Za-z0-9]+")

# Picked on the tuning subset (every 10th MetaTool query); see bench/find_tool_quality.py.
W_SENTENCE = 1.0
W_STATIC = 1.0
W_KEYWORD = 1.0
W_NAME = 2.0  # share of the query's words found in a tool's vendor or name
RANGE_POWER = 0.5  # static token weight = (max - mean cosine over docs) ** RANGE_POWER
GATE_COSINE = 0.25  # best MiniLM cosine that makes a query without shared words answerable
HIT_COSINE = 0.1  # MiniLM cosine that lists a doc without a shared word, once answerable
BM25_K1 = 1.2
BM25_B = 0.3
NAME_WEIGHT = 3.0  # a vendor/name term counts like this many description terms
_CHUNK = 256  # token rows per product when weighing tokens, bounds memory on big indexes
_POOL_CHUNK = 128  # docs per count matrix when pooling
ENCODE_BATCH = 512  # texts tokenized at once
SAME_AS_MEAN = 1e-3  # float32 rounding of |v|^2 - 2 v.m + |m|^2 for unit vectors is ~1e-7, so ~3e-4 apart

# What a stored vector is: change the version whenever the model or the text it is computed
# from changes, so the app can tell stale vectors from current ones.
VECTOR_VERSION = "all-MiniLM-L6-v2-f16/name-words-colon-description/float16le/2"
VECTOR_BYTES = embedder.DIMENSIONS * 2


@dataclass(frozen=True)
class Document:
    key: str  # opaque id, e.g. "vendor/name"
    vendor: str  # ^[a-z0-9][a-z0-9-]{0,30}$
    name: str  # same pattern, e.g. "list-sales-orders"
    description: str
    # document_vector(vendor, name, description); computed if None; PENDING: not computed yet
    # (a large import's vectors come from the work queue), ranked without the sentence signal
    vector: bytes | None = None


PENDING = b""


def document_vector(vendor: str, name: str, description: str) -> bytes:
    """The tool's MiniLM vector as the app stores it: 384 float16, little-endian (768 bytes).

    The vendor stays out of the vector: a vendor shared by many tools adds the same words to
    all of them and blurs them together (measured worse); BM25 and the name share cover it.
    """
    (vector,) = document_vectors([(vendor, name, description)])
    return vector


def document_vectors(tools: list[tuple[str, str, str]]) -> list[bytes]:
    """`document_vector` of each (vendor, name, description), in one batch (a third faster per
    tool than one at a time)."""
    vectors = _embed_documents([_vector_text(name, description) for _, name, description in tools])
    return [vector.astype("<f2").tobytes() for vector in vectors]


@functools.cache
def _stop_words() -> frozenset[str]:
    lines = (_DATA / "stopwords.txt").read_text(encoding="utf-8").splitlines()
    return frozenset(w for line in lines if not line.startswith("#") for w in line.split())


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _content_words(query: str) -> list[str]:
    """The query's distinct words that are not stop words, in order."""
    return [w for w in dict.fromkeys(_words(query)) if w not in _stop_words()]


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    """Light English stemmer: "orders", "ordering", "ordered" -> "order"; "prices" -> "pric".

    Strips one inflection, then a final "e", so "create"/"creates"/"creating" all meet.
    """
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "xes", "zes", "ches", "shes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    elif word.endswith("ing") and len(word) > 5:
        word = word[:-3]
    elif word.endswith("ed") and len(word) > 4:
        word = word[:-2]
    if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "lsz":
        word = word[:-1]  # "shipping" -> "shipp" -> "ship"
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


def _is_known_word(word: str) -> bool:
    """Whether a word, or its stem, is a whole word of the MiniLM vocabulary.

    On a diverse toolbox made-up words ("zzqx frobnicate") reach MiniLM cosines of 0.2-0.3
    with some tool, as high as weak real queries do; they are not words, though.
    """
    return word in embedder.vocabulary() or _stem(word) in embedder.vocabulary()


def _segment(part: str, dictionary: frozenset[str]) -> list[str]:
    """Split a glued name ("auspetrolprices") into dictionary words, fewest pieces first.

    Known words of 3+ letters cost 1, any other character costs 3, so unknown stretches
    only survive when nothing in the dictionary covers them.
    """
    unreached: list[tuple[float, list[str]]] = [(float("inf"), [])]
    best: list[tuple[float, list[str]]] = [(0.0, [])] + unreached * len(part)
    for end in range(1, len(part) + 1):
        for start in range(max(0, end - 20), end):
            piece = part[start:end]
            cost = 1.0 if len(piece) >= 3 and piece in dictionary else 3.0 * len(piece)
            if best[start][0] + cost < best[end][0]:
                best[end] = (best[start][0] + cost, best[start][1] + [piece])
    return best[-1][1]


@functools.lru_cache(maxsize=65536)
def _split_glued(part: str) -> tuple[str, ...]:
    """Dictionary words of a glued name part (pieces under 3 letters dropped), else the part."""
    pieces = [p for p in _segment(part, embedder.vocabulary()) if len(p) >= 3]
    return tuple(pieces) or (part,)


def _name_words(name: str, description: str) -> list[str]:
    """Words of a tool name: split on "-", and long parts that are no word segmented.

    A part the tool's own description uses ("agones" for "Agones provides soccer results")
    is a name in its own right and stays whole.
    """
    own = set(_words(description))
    words: list[str] = []
    for part in filter(None, name.split("-")):
        whole = len(part) < 6 or part in own or part in embedder.vocabulary()
        words.extend([part] if whole else _split_glued(part))
    return words


def _keywords(vendor: str, name: str, name_words: list[str]) -> list[str]:
    """Name-field keywords: vendor parts, name words and glued originals ("financetool")."""
    return name_words + [p for p in f"{vendor}-{name}".split("-") if p and p not in name_words]


def _vector_text(name: str, description: str) -> str:
    """What a tool's MiniLM vector is computed from (measured better than the description
    alone, or the raw name in front)."""
    return " ".join(_name_words(name, description)) + ": " + description


def _embed_documents(texts: list[str]) -> np.ndarray:
    """MiniLM vectors rounded through float16, as stored, so a computed vector ranks exactly
    like the stored one."""
    return embedder.embed(texts).astype("<f2").astype(np.float32)


def _document_vectors(docs: list[Document]) -> np.ndarray:
    """Each doc's stored vector, computing (in one batch) those the caller did not supply; a
    PENDING one stays zero."""
    vectors = np.zeros((len(docs), embedder.DIMENSIONS), np.float32)
    missing = []
    for row, doc in enumerate(docs):
        if doc.vector == PENDING:
            continue
        if doc.vector is None:
            missing.append(row)
        elif len(doc.vector) != VECTOR_BYTES:
            raise ValueError(f"{doc.key}: a vector is {VECTOR_BYTES} bytes, got {len(doc.vector)}")
        else:
            vectors[row] = np.frombuffer(doc.vector, "<f2")
    if missing:
        vectors[missing] = _embed_documents([_vector_text(docs[i].name, docs[i].description)
                                             for i in missing])
    return vectors


@dataclass(frozen=True)
class _Terms:
    """What one doc gives the lexicon: its stemmed terms with their weighted frequency, and the
    stemmed terms of its vendor and name."""

    freqs: dict[str, float]
    named: frozenset[str]

    @classmethod
    def of(cls, doc: Document, name_words: list[str]) -> _Terms:
        keywords = _keywords(doc.vendor, doc.name, name_words)
        freqs: defaultdict[str, float] = defaultdict(float)
        for word in keywords:
            freqs[_stem(word)] += NAME_WEIGHT
        for word in _words(doc.description):
            freqs[_stem(word)] += 1.0
        return cls(dict(freqs), frozenset(map(_stem, keywords)))


_NO_POSTINGS = (np.zeros(0, np.int64), np.zeros(0))


@dataclass(frozen=True)
class _Lexicon:
    """The keyword side of an index: per stemmed term, the docs holding it with its frequency, and
    the docs whose vendor or name hold it. BM25 weights are worked out at query time from these
    and the doc lengths, so a changed doc touches only its own terms' lists."""

    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # stemmed term -> (docs, term frequency)
    in_names: dict[str, np.ndarray]  # stemmed term -> docs whose vendor or name holds it
    lengths: np.ndarray  # per doc: its term count, name terms counted NAME_WEIGHT times

    @classmethod
    def build(cls, terms: list[_Terms]) -> _Lexicon:
        return cls({}, {}, np.zeros(0)).updated(list(range(len(terms))), [None] * len(terms), terms)

    @property
    def size(self) -> int:
        return len(self.lengths)

    def updated(self, rows: list[int], old: list[_Terms | None], new: list[_Terms]) -> _Lexicon:
        """A copy with doc `rows[i]` holding `new[i]` instead of `old[i]` (None: a row past the end,
        appended); only the lists of the terms involved are rewritten."""
        lengths = _grown(self.lengths, rows, np.array([sum(terms.freqs.values()) for terms in new]))
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
        return _Lexicon(postings, in_names, lengths)

    def idf(self, term: str) -> float:
        """BM25's idf; a word no doc holds counts as the rarest possible."""
        held = len(self.postings[term][0]) if term in self.postings else 0
        return math.log(1 + (self.size - held + 0.5) / (held + 0.5))

    def scores(self, content: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """BM25 per doc, and the idf-weighted share of the query's words in each doc's name."""
        bm25, named = np.zeros(self.size), np.zeros(self.size)
        terms = {_stem(w) for w in content}
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


class _Wordllama:
    """wordllama's 256-d static token vectors and tokenizer, read from the installed wheel.

    wordllama's own loader looks for files where the wheel does not put them and pulls in
    pydantic; reading the safetensors file ourselves needs only numpy.
    """

    def __init__(self) -> None:
        from tokenizers import Tokenizer

        spec = importlib.util.find_spec("wordllama")  # locates, does not import
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("the wordllama package is not installed")
        root = Path(next(iter(spec.submodule_search_locations)))
        raw = (root / "weights" / "l2_supercat_256.safetensors").read_bytes()
        (vectors,) = embedder.read_safetensors(raw).values()
        self.vectors = vectors.astype(np.float32)
        self.norms = np.maximum(np.linalg.norm(self.vectors, axis=1), 1e-9)
        self.tokenizer: Tokenizer = Tokenizer.from_file(
            str(root / "tokenizers" / "l2_supercat_tokenizer_config.json")
        )

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text, ENCODE_BATCH texts at a time (an encoding holds offsets, tokens
        and masks too: a whole toolbox's at once weighs tens of MiB)."""
        ids: list[np.ndarray] = []
        for lo in range(0, len(texts), ENCODE_BATCH):
            encodings = self.tokenizer.encode_batch(list(texts[lo: lo + ENCODE_BATCH]), add_special_tokens=False)
            ids.extend(np.asarray(e.ids, dtype=np.int32) for e in encodings)
        return ids


@functools.cache
def _wordllama() -> _Wordllama:
    return _Wordllama()


class _StaticVectors:
    """The static signal for one index: range-weighted wordllama vectors of its docs."""

    def __init__(self, plain: np.ndarray, spread: np.ndarray, weighted: np.ndarray, surface: dict[str, str]) -> None:
        self._plain = plain  # unweighted, unit: what token weights are measured against
        self._spread = spread  # token weights; NaN = not yet known (query-only tokens: on first use)
        self._weighted = weighted  # unit
        self._surface = surface  # lower-cased word -> usual spelling in the descriptions

    @classmethod
    def build(cls, texts: list[str], descriptions: list[str]) -> _StaticVectors:
        model = _wordllama()
        empty = np.zeros((0, model.vectors.shape[1]), np.float32)
        return cls(empty, np.full(len(model.vectors), np.nan, np.float32), empty, {}).updated(
            list(range(len(texts))), texts, descriptions, reweigh=True)  # every row new: measure all tokens

    def updated(self, rows: list[int], texts: list[str], descriptions: list[str], *,
                reweigh: bool = False) -> _StaticVectors:
        """A copy with doc `rows[i]` pooled from `texts[i]`. The weights of tokens already known stay
        as they are unless `reweigh` (measuring a token against every doc is most of a build);
        tokens new to the index are measured against the docs as they now are."""
        model = _wordllama()
        token_ids = model.encode(texts)
        ones = np.ones(len(model.vectors), np.float32)
        plain = _grown(self._plain, rows, _normalise(_pool(model.vectors, token_ids, ones)))
        spread = np.full_like(self._spread, np.nan) if reweigh else self._spread.copy()
        seen = np.unique(np.concatenate([np.zeros(0, np.int64), *token_ids]))
        measure = seen[np.isnan(spread[seen])]
        spread[measure] = _token_spread(model, measure, plain)
        weighted = _grown(self._weighted, rows, _normalise(_pool(model.vectors, token_ids, np.nan_to_num(spread))))
        return _StaticVectors(plain, spread, weighted, {**_surface_forms(descriptions), **self._surface})

    @property
    def nbytes(self) -> int:
        return self._plain.nbytes + self._spread.nbytes + self._weighted.nbytes + 100 * len(self._surface)

    def cosine(self, query: str) -> np.ndarray:
        """Range-weighted cosine of the query with every doc."""
        model = _wordllama()
        # The tokenizer is case-sensitive; respelling each word the way the tools spell it
        # (else lower case) makes ranking ignore the query's case without losing "GitHub".
        cased = _CASED_WORD.sub(lambda m: self._surface.get(m[0].lower(), m[0].lower()), query)
        (query_ids,) = model.encode([cased])
        missing = np.unique(query_ids[np.isnan(self._spread[query_ids])])
        if missing.size:  # the cache only ever gains entries, so sharing it is harmless
            self._spread[missing] = _token_spread(model, missing, self._plain)
        return self._weighted @ _normalise(self._spread[query_ids] @ model.vectors[query_ids])


@dataclass(frozen=True)
class _Signals:
    """Everything a non-empty index ranks with, one row per doc."""

    lexicon: _Lexicon
    vectors: np.ndarray  # stored MiniLM vectors (unit length): absolute evidence for "no hit"
    mean: np.ndarray  # the known vectors' mean: every tool text shares it, so ranking takes it out
    distance: np.ndarray  # per doc, |vector - mean| (inf where it has no direction: centred cosine 0)
    static: _StaticVectors
    known: np.ndarray  # False for a PENDING vector: its sentence signal is left neutral

    def updated(self, rows: list[int], old: list[Document | None], new: list[Document]) -> _Signals:
        """A copy with doc `rows[i]` now `new[i]` (it was `old[i]`; None: appended)."""
        name_words = [_name_words(d.name, d.description) for d in new]
        before = [_Terms.of(d, _name_words(d.name, d.description)) if d else None for d in old]
        vectors = _grown(self.vectors, rows, _document_vectors(new))
        known = _grown(self.known, rows, np.array([d.vector != PENDING for d in new]))
        return _Signals(
            lexicon=self.lexicon.updated(rows, before, [_Terms.of(d, w) for d, w in zip(new, name_words)]),
            vectors=vectors,
            **_centre(vectors, known),
            static=self.static.updated(rows, _static_texts(new, name_words), [d.description for d in new]),
            known=known,
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
                + self.static.nbytes + self.known.nbytes)


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

    @classmethod
    def build(cls, docs: Iterable[Document]) -> SearchIndex:
        """Index the docs; a repeated key keeps its last doc. Docs without a vector get one
        computed here (a forward pass each), so pass stored vectors when there are many."""
        unique = list({d.key: d for d in docs}.values())
        if not unique:
            return cls([], None)
        name_words = [_name_words(d.name, d.description) for d in unique]
        vectors = _document_vectors(unique)
        known = np.array([d.vector != PENDING for d in unique])
        signals = _Signals(
            lexicon=_Lexicon.build([_Terms.of(d, w) for d, w in zip(unique, name_words)]),
            vectors=vectors,
            **_centre(vectors, known),
            static=_StaticVectors.build(_static_texts(unique, name_words), [d.description for d in unique]),
            known=known,
        )
        return cls([replace(d, vector=None) for d in unique], signals)

    def updated(self, docs: Iterable[Document]) -> SearchIndex:
        """This index with the given docs added, or in place of the docs of the same key; each
        changed doc costs about what its own terms and tokens do. Once REBUILD_SHARE of the docs
        changed since the last full build, the index is built whole again from its own docs."""
        changes = list({d.key: d for d in docs}.values())
        if not changes:
            return self
        if self._signals is None or self._changed + len(changes) > REBUILD_SHARE * len(self):
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
        """Roughly what the index holds in memory."""
        texts = sum(len(d.key) + len(d.vendor) + len(d.name) + len(d.description) + 300 for d in self._docs)
        return texts + self._key_order.nbytes + (self._signals.nbytes if self._signals else 0)

    def __len__(self) -> int:
        return len(self._keys)

    def search(self, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """Keys with scores, best first; only real hits (empty list when nothing is relevant).

        Scores are a weighted sum of per-query normalised signals: higher is better, but
        they are only comparable within one query.
        """
        content = _content_words(query)
        if self._signals is None or limit <= 0 or not content:
            return []
        signals = self._signals
        keyword, named = signals.lexicon.scores(content)
        shares_word = bool((keyword > 0).any())
        if not shares_word and not any(map(_is_known_word, content)):
            return []  # gibberish: skip the forward pass
        query_vector = embedder.embed([query])[0]
        cosine = signals.vectors @ query_vector
        if not shares_word and cosine.max() < GATE_COSINE:
            return []
        top = keyword.max()
        sentence = signals.centred(cosine, query_vector)
        if not signals.known.all():  # pending vectors: neutral, judged among the known ones only
            sentence = np.where(signals.known, _zscore_among(sentence, signals.known), 0.0)
        else:
            sentence = _zscore(sentence)
        fused = (W_SENTENCE * sentence
                 + W_STATIC * _zscore(signals.static.cosine(query))
                 + W_KEYWORD * (keyword / top if top > 0 else keyword) + W_NAME * named)
        fused = np.round(fused, 6)  # scores as answered: equal ones (to a rounding) are ordered by key
        hits = np.flatnonzero((keyword > 0) | (cosine >= HIT_COSINE))
        order = hits[np.lexsort((self._key_order[hits], -fused[hits]))][:limit]
        return [(self._keys[i], float(fused[i])) for i in order]


def _static_texts(docs: list[Document], name_words: list[list[str]]) -> list[str]:
    """What each doc's static vector is pooled from: its name words and description."""
    return [" ".join(words) + " " + doc.description for doc, words in zip(docs, name_words)]


def _centre(vectors: np.ndarray, known: np.ndarray) -> dict[str, np.ndarray]:
    """The known vectors' mean, and each vector's distance from it (|v|^2 - 2 v.m + |m|^2, one
    product instead of a copy of every vector)."""
    mean = vectors[known].mean(axis=0) if known.any() else np.zeros(vectors.shape[1], np.float32)
    squared = np.einsum("ij,ij->i", vectors, vectors) - 2 * (vectors @ mean) + mean @ mean
    distance = np.sqrt(np.maximum(squared, 0.0))
    # Below SAME_AS_MEAN the subtraction's rounding is all there is: such a vector (all docs alike,
    # or a PENDING one) has no direction left, and its centred cosine is 0.
    return {"mean": mean, "distance": np.where(known & (distance > SAME_AS_MEAN), distance, np.inf).astype(np.float32)}


def _grown(array: np.ndarray, rows: list[int], values: np.ndarray) -> np.ndarray:
    """A copy of `array` with `values[i]` at row `rows[i]`, lengthened for rows past its end."""
    size = max(len(array), max(rows, default=-1) + 1)
    out = np.zeros((size, *array.shape[1:]), array.dtype)
    out[:len(array)] = array
    out[rows] = values
    return out


def _surface_forms(descriptions: list[str]) -> dict[str, str]:
    """Most common spelling of each word in the descriptions, keyed by its lower case."""
    spellings: dict[str, Counter[str]] = defaultdict(Counter)
    for description in descriptions:
        for word in _CASED_WORD.findall(description):
            spellings[word.lower()][word] += 1
    return {lower: forms.most_common(1)[0][0] for lower, forms in spellings.items()}


def _zscore(x: np.ndarray) -> np.ndarray:
    std = x.std(axis=-1, keepdims=True)
    return (x - x.mean(axis=-1, keepdims=True)) / np.where(std > 0, std, 1.0)


def _zscore_among(x: np.ndarray, among: np.ndarray) -> np.ndarray:
    """z-scores of x against the mean and spread of its `among` entries only."""
    if not among.any():
        return np.zeros_like(x)
    std = x[among].std()
    return (x - x[among].mean()) / (std if std > 0 else 1.0)


def _normalise(rows: np.ndarray) -> np.ndarray:
    return rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), 1e-9)


def _pool(vectors: np.ndarray, token_ids: list[np.ndarray], weights: np.ndarray) -> np.ndarray:
    """Weighted sum of token vectors per doc, as (doc x token) count matrix @ vectors.

    Done a chunk of docs at a time so the dense count matrix stays small; one BLAS product
    per chunk is far faster than gathering every token's vector.
    """
    out = np.zeros((len(token_ids), vectors.shape[1]), np.float32)
    for lo in range(0, len(token_ids), _POOL_CHUNK):
        chunk = token_ids[lo: lo + _POOL_CHUNK]
        flat = np.concatenate(chunk)
        if flat.size == 0:
            continue
        owner = np.repeat(np.arange(len(chunk)), [len(ids) for ids in chunk])
        uniq, col = np.unique(flat, return_inverse=True)
        cells = np.bincount(owner * len(uniq) + col, weights=weights[flat], minlength=len(chunk) * len(uniq))
        counts = cells.reshape(len(chunk), len(uniq)).astype(np.float32)
        out[lo: lo + len(chunk)] = counts @ vectors[uniq]
    return out


def _token_spread(model: _Wordllama, tokens: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """(max - mean cosine to the docs) ** RANGE_POWER for each given token id."""
    spread = np.empty(tokens.size, np.float32)
    for lo in range(0, tokens.size, _CHUNK):
        ids = tokens[lo: lo + _CHUNK]
        cos = (model.vectors[ids] @ docs.T) / model.norms[ids, None]
        spread[lo: lo + _CHUNK] = np.maximum(cos.max(axis=1) - cos.mean(axis=1), 0.0) ** RANGE_POWER
    return spread
