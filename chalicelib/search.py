"""Ranking for the find_tool meta-tool: which published tools match a free-text need.

Four per-doc signals, summed with fixed weights (W_* below):

* dense -- cosine of query and tool text pooled from wordllama's static token vectors
  (read from the installed wheel). Each token is weighted by how peaky its similarity
  is across this index (max minus mean cosine over the docs), so filler fades. z-scored.
* word -- each query content word votes for docs it is unusually close to (cosine
  z-scored across docs, above a floor); catches specific words the average dilutes.
* keyword -- BM25 over name fields (vendor, name split on "-", glued names segmented)
  and description, light stemmer, query-side stop words; divided by its maximum.
* name -- idf-weighted share of the query's words found in a tool's vendor or name.

"No hit" uses absolute evidence: a query is answerable if a doc shares a content word
with it, or its best dense cosine reaches GATE_COSINE and it holds a real word (gibberish
does not); the docs listed are then those sharing a word or reaching HIT_COSINE.
Parameters were picked on every 10th MetaTool query only (bench/find_tool_quality.py).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer

_DATA = Path(__file__).with_name("search_data")
_WORD = re.compile(r"[a-z0-9]+")
_CASED_WORD = re.compile(r"[A-Za-z0-9]+")

# Picked on the tuning subset (every 10th MetaTool query); see bench/find_tool_quality.py.
W_DENSE = 1.0
W_WORD = 0.2
W_KEYWORD = 1.0
W_NAME = 4.0  # share of the query's words found in a tool's vendor or name
RANGE_POWER = 0.5  # token weight = (max - mean cosine over docs) ** RANGE_POWER
WORD_Z_FLOOR = 1.0  # a query word only votes for docs this many std devs above its mean
GATE_COSINE = 0.25  # best dense cosine that makes a query without shared words answerable
HIT_COSINE = 0.1  # dense cosine that lists a doc without a shared word, once answerable
BM25_K1 = 1.2
BM25_B = 0.3
NAME_WEIGHT = 3.0  # a vendor/name term counts like this many description terms
_CHUNK = 2048  # token rows per product when weighing tokens, bounds memory on big indexes
_POOL_CHUNK = 128  # docs per count matrix when pooling


@dataclass(frozen=True)
class Document:
    key: str  # opaque id, e.g. "vendor/name"
    vendor: str  # ^[a-z0-9][a-z0-9-]{0,30}$
    name: str  # same pattern, e.g. "list-sales-orders"
    description: str


@dataclass(frozen=True)
class _Lexicon:
    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # stemmed term -> (docs, BM25 weights)
    in_names: dict[str, np.ndarray]  # stemmed term -> docs whose vendor or name holds it
    idf: dict[str, float]


@functools.cache
def _stop_words() -> frozenset[str]:
    lines = (_DATA / "stopwords.txt").read_text(encoding="utf-8").splitlines()
    return frozenset(w for line in lines if not line.startswith("#") for w in line.split())


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


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


def _name_words(name: str, dictionary: frozenset[str], memo: dict[str, list[str]]) -> list[str]:
    """Words of a tool name: split on "-", long parts the dictionary lacks segmented."""
    words: list[str] = []
    for part in filter(None, name.split("-")):
        if part not in memo:
            pieces = [] if len(part) < 6 or part in dictionary else _segment(part, dictionary)
            memo[part] = [p for p in pieces if len(p) >= 3] or [part]
        words.extend(memo[part])
    return words


def _keywords(doc: Document, dictionary: frozenset[str], memo: dict[str, list[str]]) -> list[str]:
    """Name-field keywords: vendor parts, name words and glued originals ("financetool")."""
    words = _name_words(doc.name, dictionary, memo)
    return words + [p for p in f"{doc.vendor}-{doc.name}".split("-") if p and p not in words]


class _Model:
    """wordllama's 256-d token vectors and tokenizer, read from the installed wheel.

    wordllama's own loader looks for files where the wheel does not put them and pulls in
    pydantic; reading the safetensors header ourselves needs only numpy.
    """

    def __init__(self) -> None:
        from tokenizers import Tokenizer

        spec = importlib.util.find_spec("wordllama")  # locates, does not import
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("the wordllama package is not installed")
        root = Path(next(iter(spec.submodule_search_locations)))
        self.vectors = _read_safetensors(root / "weights" / "l2_supercat_256.safetensors")
        self.norms = np.maximum(np.linalg.norm(self.vectors, axis=1), 1e-9)
        self.tokenizer: Tokenizer = Tokenizer.from_file(
            str(root / "tokenizers" / "l2_supercat_tokenizer_config.json")
        )
        # Whole-word tokens double as a small English dictionary for name segmentation.
        self.words = frozenset(
            t[1:].lower() for t in self.tokenizer.get_vocab()
            if t.startswith("\u2581") and t[1:].isalpha() and len(t) > 3
        )

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int64) for e in encodings]

    def encode_words(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of each word and, per token, the index of the word it belongs to."""
        enc = self.tokenizer.encode(list(words), is_pretokenized=True, add_special_tokens=False)
        return np.asarray(enc.ids, dtype=np.int64), np.asarray(enc.word_ids, dtype=np.int64)


def _read_safetensors(path: Path) -> np.ndarray:
    with path.open("rb") as fh:
        header_len = int.from_bytes(fh.read(8), "little")
        (meta,) = [v for k, v in json.loads(fh.read(header_len)).items() if k != "__metadata__"]
        start, end = meta["data_offsets"]
        fh.seek(8 + header_len + start)
        dtype = {"F16": np.float16, "F32": np.float32}[meta["dtype"]]
        raw = np.frombuffer(fh.read(end - start), dtype=dtype)
    return raw.reshape(meta["shape"]).astype(np.float32)


@functools.cache
def _model() -> _Model:
    return _Model()


def _surface_forms(docs: list[Document]) -> dict[str, str]:
    """Most common spelling of each word in the descriptions, keyed by its lower case."""
    spellings: dict[str, Counter[str]] = defaultdict(Counter)
    for d in docs:
        for word in _CASED_WORD.findall(d.description):
            spellings[word.lower()][word] += 1
    return {lower: forms.most_common(1)[0][0] for lower, forms in spellings.items()}


def _zscore(x: np.ndarray) -> np.ndarray:
    std = x.std(axis=-1, keepdims=True)
    return (x - x.mean(axis=-1, keepdims=True)) / np.where(std > 0, std, 1.0)


def _normalise(rows: np.ndarray) -> np.ndarray:
    return rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), 1e-9)


class SearchIndex:
    """Immutable index over a toolbox; build once, query many times."""

    def __init__(self, keys: list[str], lexicon: _Lexicon, plain: np.ndarray,
                 weighted: np.ndarray, spread: np.ndarray, surface: dict[str, str]) -> None:
        self._keys = keys
        self._key_order = np.argsort(np.argsort(np.asarray(keys, dtype=object)))  # tie-break rank
        self._lexicon = lexicon
        self._plain = plain  # unweighted mean-pooled doc vectors, unit length
        self._weighted = weighted  # range-weighted doc vectors, unit length
        self._spread = spread  # per vocabulary id: token weight in this index, NaN = not yet known
        self._surface = surface  # lower-cased word -> its usual spelling in the descriptions

    @classmethod
    def build(cls, docs: Iterable[Document]) -> SearchIndex:
        unique = list({d.key: d for d in docs}.values())  # a repeated key keeps its last doc
        if not unique:
            empty = np.zeros((0, 0), np.float32)
            return cls([], _Lexicon({}, {}, {}), empty, empty, np.zeros(0, np.float32), {})
        model = _model()
        dictionary = model.words | {w for d in unique for w in _words(d.description) if len(w) >= 3}
        memo: dict[str, list[str]] = {}
        keywords = [_keywords(d, dictionary, memo) for d in unique]
        postings, idf = _bm25_postings(keywords, [_words(d.description) for d in unique])
        in_names: dict[str, list[int]] = defaultdict(list)
        for doc, words in enumerate(keywords):
            for term in {_stem(w) for w in words}:
                in_names[term].append(doc)
        # The vendor stays out of the vectors: a vendor shared by many tools adds the same
        # words to all of them and blurs them together (measured worse); BM25 covers it.
        token_ids = model.encode([" ".join(_name_words(d.name, dictionary, memo)) + " " + d.description
                                  for d in unique])
        ones = np.ones(len(model.vectors), np.float32)
        plain = _normalise(_pool(model.vectors, token_ids, ones))
        # Token weights for this index; query-only tokens are filled in on first use.
        spread = np.full(len(model.vectors), np.nan, np.float32)
        seen = np.unique(np.concatenate(token_ids))
        spread[seen] = _token_spread(model, seen, plain)
        weighted = _normalise(_pool(model.vectors, token_ids, np.nan_to_num(spread)))
        lexicon = _Lexicon(postings, {t: np.array(d) for t, d in in_names.items()}, idf)
        return cls([d.key for d in unique], lexicon, plain, weighted, spread, _surface_forms(unique))

    def __len__(self) -> int:
        return len(self._keys)

    def search(self, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """Keys with scores, best first; only real hits (empty list when nothing is relevant).

        Scores are a weighted sum of per-query normalised signals: higher is better, but
        they are only comparable within one query.
        """
        if not self._keys or limit <= 0:
            return []
        content = [w for w in dict.fromkeys(_words(query)) if w not in _stop_words()]
        keyword, named = self._keyword_scores(content)
        cosine, votes = self._dense_scores(query, content)
        if not self._anything_relevant(content, keyword, cosine):
            return []
        top = keyword.max()
        fused = (W_DENSE * _zscore(cosine) + W_WORD * _zscore(votes)
                 + W_KEYWORD * (keyword / top if top > 0 else keyword) + W_NAME * named)
        hits = np.flatnonzero((keyword > 0) | (cosine >= HIT_COSINE))
        order = hits[np.lexsort((self._key_order[hits], -fused[hits]))][:limit]
        return [(self._keys[i], round(float(fused[i]), 6)) for i in order]

    @staticmethod
    def _anything_relevant(content: list[str], keyword: np.ndarray, cosine: np.ndarray) -> bool:
        """A shared keyword, or a close dense match for a query with at least one real word.

        Gibberish ("zzqx frobnicate") splits into sub-word shards that can look close to an
        odd tool name, so dense evidence alone needs a word the tokenizer knows whole.
        """
        if (keyword > 0).any():
            return True
        return bool(cosine.max() >= GATE_COSINE and any(w in _model().words for w in content))

    def _keyword_scores(self, content: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """BM25 per doc, and the idf-weighted share of the query's words in each doc's name."""
        bm25, named = np.zeros(len(self._keys)), np.zeros(len(self._keys))
        terms = {_stem(w) for w in content}
        lex = self._lexicon
        unseen = math.log(1 + (len(self._keys) + 0.5) / 0.5)  # unknown words: rarest possible
        for term in terms:
            if term in lex.postings:
                docs, weights = lex.postings[term]
                bm25[docs] += weights
            if term in lex.in_names:
                named[lex.in_names[term]] += lex.idf[term]
        total = sum(lex.idf.get(t, unseen) for t in terms)
        return bm25, named / total if total > 0 else named

    def _dense_scores(self, query: str, content: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Range-weighted cosine of the whole query, and the per-word z-score votes."""
        model = _model()
        # The tokenizer is case-sensitive; respelling each word the way the tools spell it
        # (else lower case) makes ranking ignore the query's case without losing "GitHub".
        cased = _CASED_WORD.sub(lambda m: self._surface.get(m[0].lower(), m[0].lower()), query)
        (query_ids,) = model.encode([cased])
        missing = np.unique(query_ids[np.isnan(self._spread[query_ids])])
        if missing.size:  # the cache only ever gains entries, so sharing it is harmless
            self._spread[missing] = _token_spread(model, missing, self._plain)
        vector = _normalise(self._spread[query_ids] @ model.vectors[query_ids])
        votes = np.zeros(len(self._keys))
        if content:
            word_ids, word_of = model.encode_words(content)
            words = np.zeros((len(content), model.vectors.shape[1]), np.float32)
            np.add.at(words, word_of, model.vectors[word_ids])
            word_cos = _normalise(words) @ self._plain.T
            votes = np.maximum(_zscore(word_cos) - WORD_Z_FLOOR, 0.0).sum(axis=0)
        return self._weighted @ vector, votes


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


def _token_spread(model: _Model, tokens: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """(max - mean cosine to the docs) ** RANGE_POWER for each given token id."""
    spread = np.empty(tokens.size, np.float32)
    for lo in range(0, tokens.size, _CHUNK):
        ids = tokens[lo: lo + _CHUNK]
        cos = (model.vectors[ids] @ docs.T) / model.norms[ids, None]
        spread[lo: lo + _CHUNK] = np.maximum(cos.max(axis=1) - cos.mean(axis=1), 0.0) ** RANGE_POWER
    return spread
