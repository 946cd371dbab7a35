"""Ranking for the find_tool meta-tool: which published tools match a free-text need.

Three signals are computed for every document and fused per query:

* dense -- cosine between query and tool text, both pooled from wordllama's static token
  vectors (read straight from the installed wheel, no download). Tokens are weighted by
  how *peaky* their similarity is across this index (max minus mean cosine over the docs),
  so filler like "can you please" fades without a hand-made list.
* word -- each query content word votes for the docs it is unusually close to (its
  cosine z-scored across docs, above a floor), which rewards specific matches that the
  averaged query vector dilutes.
* keyword -- BM25 over vendor, name (split on "-", long glued names segmented into
  words) and description, with a light stemmer and query-side stop words.

Dense and word scores are z-scored across the index, keyword is divided by its maximum,
and the three are summed with fixed weights. A doc is a hit only if it shares a content
word with the query or its dense cosine clears an absolute floor; no hits -> [].
Weights were picked on every 10th MetaTool query (bench/find_tool_quality.py).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer

_DATA = Path(__file__).with_name("search_data")
_WORD = re.compile(r"[a-z0-9]+")

# Fusion weights and floors, tuned on the held-out-from-reporting subset of MetaTool.
W_DENSE = 1.0
W_WORD = 0.5
W_KEYWORD = 0.3
RANGE_POWER = 0.5  # token weight = (max - mean cosine over docs) ** RANGE_POWER
WORD_Z_FLOOR = 1.0  # a query word only votes for docs this many std devs above its mean
MIN_COSINE = 0.45  # dense cosine that counts as relevant without a shared word
BM25_K1 = 1.2
BM25_B = 0.3
NAME_WEIGHT = 3.0  # a vendor/name term counts like this many description terms
_CHUNK = 2048  # rows per matrix product at build time, bounds memory on big indexes


@dataclass(frozen=True)
class Document:
    key: str  # opaque id, e.g. "vendor/name"
    vendor: str  # ^[a-z0-9][a-z0-9-]{0,30}$
    name: str  # same pattern, e.g. "list-sales-orders"
    description: str


@functools.cache
def _stop_words() -> frozenset[str]:
    lines = (_DATA / "stopwords.txt").read_text(encoding="utf-8").splitlines()
    return frozenset(w for line in lines if not line.startswith("#") for w in line.split())


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _stem(word: str) -> str:
    """Strip one common English inflection so "orders"/"ordering" meet "order"."""
    if len(word) <= 3 or not word.isalpha():
        return word
    for suffix, repl in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                return word
            stem = word[: -len(suffix)] + repl
            if suffix in ("ing", "ed") and len(stem) > 3 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
                stem = stem[:-1]  # "shipped" -> "shipp" -> "ship"
            return stem
    return word


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
    """Words of a vendor or tool name: split on "-", long unknown parts segmented."""
    words: list[str] = []
    for part in filter(None, name.split("-")):
        if part not in memo:
            pieces = [] if len(part) < 6 or part in dictionary else _segment(part, dictionary)
            kept = [p for p in pieces if len(p) >= 3]
            memo[part] = kept or [part]
        words.extend(memo[part])
    return words


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
            t[1:].lower() for t in self.tokenizer.get_vocab() if t.startswith("\u2581") and t[1:].isalpha() and len(t) > 3
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
        raw = np.frombuffer(fh.read(end - start), dtype={"F16": np.float16, "F32": np.float32}[meta["dtype"]])
    return raw.reshape(meta["shape"]).astype(np.float32)


@functools.cache
def _model() -> _Model:
    return _Model()


def _zscore(x: np.ndarray) -> np.ndarray:
    std = x.std(axis=-1, keepdims=True)
    return (x - x.mean(axis=-1, keepdims=True)) / np.where(std > 0, std, 1.0)


def _normalise(rows: np.ndarray) -> np.ndarray:
    return rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), 1e-9)


class SearchIndex:
    """Immutable index over a toolbox; build once, query many times."""

    def __init__(self, keys: list[str], postings: dict[str, tuple[np.ndarray, np.ndarray]],
                 plain: np.ndarray, weighted: np.ndarray) -> None:
        self._keys = keys
        self._key_order = np.argsort(np.argsort(np.asarray(keys, dtype=object)))  # tie-break rank
        self._postings = postings  # stemmed term -> (doc indices, BM25 weights)
        self._plain = plain  # unweighted mean-pooled doc vectors, unit length
        self._weighted = weighted  # range-weighted doc vectors, unit length

    @classmethod
    def build(cls, docs: Iterable[Document]) -> SearchIndex:
        unique = list({d.key: d for d in docs}.values())  # a repeated key keeps its last doc
        if not unique:
            return cls([], {}, np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32))
        model = _model()
        dictionary = model.words | {w for d in unique for w in _words(d.description) if len(w) >= 3}
        memo: dict[str, list[str]] = {}
        names = [_name_words(d.name, dictionary, memo) for d in unique]
        # Vendors are keywords only: one vendor shared by many tools would pull all their
        # vectors together. Glued originals ("financetool") stay keywords next to their pieces.
        keywords = [n + _name_words(d.vendor, dictionary, memo) + f"{d.vendor}-{d.name}".split("-")
                    for n, d in zip(names, unique)]
        postings = _bm25_postings(keywords, [_words(d.description) for d in unique])
        token_ids = model.encode([" ".join(n) + " " + d.description for n, d in zip(names, unique)])
        plain = _normalise(_pool(model.vectors, token_ids, lambda ids: np.ones(len(ids), np.float32)))
        spread = _token_spread(model, np.unique(np.concatenate(token_ids)), plain)
        weighted = _normalise(_pool(model.vectors, token_ids, lambda ids: spread[ids]))
        return cls([d.key for d in unique], postings, plain, weighted)

    def __len__(self) -> int:
        return len(self._keys)

    def search(self, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """Keys with scores, best first; only real hits (empty list when nothing is relevant)."""
        if not self._keys or limit <= 0:
            return []
        content = [w for w in dict.fromkeys(_words(query)) if w not in _stop_words()]
        keyword = self._keyword_scores(content)
        cosine, word = self._dense_scores(query, content)
        relevant = np.flatnonzero((keyword > 0) | (cosine >= MIN_COSINE))
        if relevant.size == 0:
            return []
        top = keyword.max()
        fused = W_DENSE * _zscore(cosine) + W_WORD * _zscore(word) + W_KEYWORD * (keyword / top if top > 0 else keyword)
        order = relevant[np.lexsort((self._key_order[relevant], -fused[relevant]))][:limit]
        return [(self._keys[i], round(float(fused[i]), 6)) for i in order]

    def _keyword_scores(self, content: list[str]) -> np.ndarray:
        scores = np.zeros(len(self._keys))
        for term in {_stem(w) for w in content}:
            if term in self._postings:
                docs, weights = self._postings[term]
                scores[docs] += weights
        return scores

    def _dense_scores(self, query: str, content: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Range-weighted cosine of the whole query, and the per-word z-score votes."""
        model = _model()
        (query_ids,) = model.encode([query])
        word_ids, word_of = model.encode_words(content) if content else (np.zeros(0, np.int64),) * 2
        tokens, inverse = np.unique(np.concatenate([query_ids, word_ids]), return_inverse=True)
        if tokens.size == 0:
            return np.zeros(len(self._keys)), np.zeros(len(self._keys))
        dots = model.vectors[tokens] @ self._plain.T  # one product serves both signals
        cos = dots / model.norms[tokens, None]
        spread = np.maximum(cos.max(axis=1) - cos.mean(axis=1), 0.0) ** RANGE_POWER
        q_rows = inverse[: len(query_ids)]
        vector = _normalise((model.vectors[tokens[q_rows]] * spread[q_rows, None]).sum(axis=0))
        votes = np.zeros(len(self._keys))
        if content:
            w_rows = inverse[len(query_ids):]
            member = np.zeros((len(content), tokens.size))
            np.add.at(member, (word_of, w_rows), 1.0)
            word_cos = (member @ dots) / np.maximum(np.linalg.norm(member @ model.vectors[tokens], axis=1), 1e-9)[:, None]
            votes = np.maximum(_zscore(word_cos) - WORD_Z_FLOOR, 0.0).sum(axis=0)
        return self._weighted @ vector, votes


def _bm25_postings(name_terms: list[list[str]], description_terms: list[list[str]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per stemmed term, the docs containing it and their BM25 contribution (BM25F-style field weights)."""
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
    n = len(freqs)
    lists: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for doc, tf in enumerate(freqs):
        for term, f in tf.items():
            idf = np.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            lists[term].append((doc, idf * f * (BM25_K1 + 1) / (f + norm[doc])))
    return {t: (np.array([d for d, _ in p]), np.array([w for _, w in p])) for t, p in lists.items()}


def _pool(vectors: np.ndarray, token_ids: list[np.ndarray], weigh: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Weighted sum of token vectors per doc, a chunk of docs at a time."""
    out = np.zeros((len(token_ids), vectors.shape[1]), np.float32)
    for lo in range(0, len(token_ids), _CHUNK):
        sizes = np.array([len(ids) for ids in token_ids[lo: lo + _CHUNK]])
        if not sizes.any():
            continue
        flat = np.concatenate(token_ids[lo: lo + _CHUNK])
        contrib = vectors[flat] * weigh(flat)[:, None]
        starts = np.cumsum(sizes) - sizes
        out[lo: lo + len(sizes)][sizes > 0] = np.add.reduceat(contrib, starts[sizes > 0])
    return out


def _token_spread(model: _Model, tokens: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Per vocabulary id: (max - mean cosine to the docs) ** RANGE_POWER; 0 for ids not given."""
    spread = np.zeros(len(model.vectors), np.float32)
    for lo in range(0, tokens.size, _CHUNK):
        ids = tokens[lo: lo + _CHUNK]
        cos = (model.vectors[ids] @ docs.T) / model.norms[ids, None]
        spread[ids] = np.maximum(cos.max(axis=1) - cos.mean(axis=1), 0.0) ** RANGE_POWER
    return spread
