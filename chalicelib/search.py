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
"""

from __future__ import annotations

import functools
import importlib.util
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

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
_CHUNK = 2048  # token rows per product when weighing tokens, bounds memory on big indexes
_POOL_CHUNK = 128  # docs per count matrix when pooling

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
    best: list[tuple[float, list[str]]] = [(0.0, [])] + [(float("inf"), [])] * len(part)
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
class _Lexicon:
    """The keyword side of an index: BM25 postings and which docs hold a term in their name."""

    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # stemmed term -> (docs, BM25 weights)
    in_names: dict[str, np.ndarray]  # stemmed term -> docs whose vendor or name holds it
    idf: dict[str, float]
    size: int  # number of docs

    @classmethod
    def build(cls, docs: list[Document], name_words: list[list[str]]) -> _Lexicon:
        keywords = [_keywords(d.vendor, d.name, words) for d, words in zip(docs, name_words)]
        postings, idf = _bm25_postings(keywords, [_words(d.description) for d in docs])
        in_names: dict[str, list[int]] = defaultdict(list)
        for doc, words in enumerate(keywords):
            for term in {_stem(w) for w in words}:
                in_names[term].append(doc)
        return cls(postings, {t: np.array(d) for t, d in in_names.items()}, idf, len(docs))

    def scores(self, content: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """BM25 per doc, and the idf-weighted share of the query's words in each doc's name."""
        bm25, named = np.zeros(self.size), np.zeros(self.size)
        terms = {_stem(w) for w in content}
        unseen = math.log(1 + (self.size + 0.5) / 0.5)  # unknown words: rarest possible
        for term in terms:
            if term in self.postings:
                docs, weights = self.postings[term]
                bm25[docs] += weights
            if term in self.in_names:
                named[self.in_names[term]] += self.idf[term]
        total = sum(self.idf.get(t, unseen) for t in terms)
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
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int64) for e in encodings]


@functools.cache
def _wordllama() -> _Wordllama:
    return _Wordllama()


class _StaticVectors:
    """The static signal for one index: range-weighted wordllama vectors of its docs."""

    def __init__(self, texts: list[str], descriptions: list[str]) -> None:
        model = _wordllama()
        token_ids = model.encode(texts)
        ones = np.ones(len(model.vectors), np.float32)
        self._plain = _normalise(_pool(model.vectors, token_ids, ones))  # unweighted, unit
        # Token weights for this index; query-only tokens are filled in on first use.
        self._spread = np.full(len(model.vectors), np.nan, np.float32)  # NaN = not yet known
        seen = np.unique(np.concatenate(token_ids))
        self._spread[seen] = _token_spread(model, seen, self._plain)
        self._weighted = _normalise(_pool(model.vectors, token_ids, np.nan_to_num(self._spread)))
        self._surface = _surface_forms(descriptions)  # lower-cased word -> usual spelling

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
    centred: np.ndarray  # the same minus their mean, renormalised: what ranking uses
    static: _StaticVectors
    known: np.ndarray  # False for a PENDING vector: its sentence signal is left neutral

class SearchIndex:
    """Immutable index over a toolbox; build once, query many times."""

    def __init__(self, keys: list[str], signals: _Signals | None) -> None:
        self._keys = keys
        self._key_order = np.argsort(np.argsort(np.asarray(keys, dtype=object)))  # tie-break rank
        self._signals = signals

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
        static = _StaticVectors([" ".join(w) + " " + d.description for d, w in zip(unique, name_words)],
                                [d.description for d in unique])
        mean = vectors[known].mean(axis=0) if known.any() else np.zeros(embedder.DIMENSIONS, np.float32)
        signals = _Signals(
            lexicon=_Lexicon.build(unique, name_words),
            vectors=vectors,
            centred=np.where(known[:, None], _normalise(vectors - mean), 0.0),
            static=static,
            known=known,
        )
        return cls([d.key for d in unique], signals)

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
        sentence = signals.centred @ query_vector
        if not signals.known.all():  # pending vectors: neutral, judged among the known ones only
            sentence = np.where(signals.known, _zscore_among(sentence, signals.known), 0.0)
        else:
            sentence = _zscore(sentence)
        fused = (W_SENTENCE * sentence
                 + W_STATIC * _zscore(signals.static.cosine(query))
                 + W_KEYWORD * (keyword / top if top > 0 else keyword) + W_NAME * named)
        hits = np.flatnonzero((keyword > 0) | (cosine >= HIT_COSINE))
        order = hits[np.lexsort((self._key_order[hits], -fused[hits]))][:limit]
        return [(self._keys[i], round(float(fused[i]), 6)) for i in order]


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


def _bm25_postings(
    name_terms: list[list[str]], description_terms: list[list[str]]
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, float]]:
    """Per stemmed term, the docs holding it and their BM25 weight (name terms count more);
    and each term's idf."""
    freqs: list[Counter[str]] = []
    for names, words in zip(name_terms, description_terms):
        tf: Counter[str] = Counter()
        for w in names:
            tf[_stem(w)] += NAME_WEIGHT
        for w in words:
            tf[_stem(w)] += 1.0
        freqs.append(tf)
    lengths = np.array([sum(tf.values()) for tf in freqs])
    norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths / max(lengths.mean(), 1e-9))
    df = Counter(t for tf in freqs for t in tf)
    idf = {t: math.log(1 + (len(freqs) - n + 0.5) / (n + 0.5)) for t, n in df.items()}
    lists: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for doc, tf in enumerate(freqs):
        for term, f in tf.items():
            docs, weights = lists[term]
            docs.append(doc)
            weights.append(idf[term] * f * (BM25_K1 + 1) / (f + norm[doc]))
    return {t: (np.array(d), np.array(w)) for t, (d, w) in lists.items()}, idf


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
