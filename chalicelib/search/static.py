"""The static signal: cosine of query and tool text pooled from wordllama's 256-d static token
vectors (read from the installed wheel). Each token is weighted by how peaky its similarity is
across the index (max minus mean cosine over the docs, ** RANGE_POWER), so filler fades. A second,
differently trained view next to MiniLM: it still adds 2-3 points of recall@5.

Changed docs are pooled in place; the weights of tokens already known stay as the last full build
measured them (chalicelib/search/index.py rebuilds once REBUILD_SHARE of the docs changed)."""

from __future__ import annotations

import functools
import importlib.util
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from chalicelib.search import embedder
from chalicelib.search.arrays import grown, normalise
from chalicelib.search.documents import Document

if TYPE_CHECKING:
    from tokenizers import Tokenizer

_CASED_WORD = re.compile(r"[A-Za-z0-9]+")
# Picked on the tuning subset (every 10th MetaTool query); see bench/find_tool_quality.py.
RANGE_POWER = 0.5  # static token weight = (max - mean cosine over docs) ** RANGE_POWER
_CHUNK = 256  # token rows per product when weighing tokens, bounds memory on big indexes
_POOL_CHUNK = 128  # docs per count matrix when pooling
ENCODE_BATCH = 512  # texts tokenized at once


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
def wordllama() -> _Wordllama:
    """The token vectors and tokenizer, loaded on first use and then shared by the process."""
    return _Wordllama()


class StaticVectors:
    """The static signal for one index: range-weighted wordllama vectors of its docs."""

    def __init__(self, plain: np.ndarray, spread: np.ndarray, weighted: np.ndarray, surface: dict[str, str]) -> None:
        self._plain = plain  # unweighted, unit: what token weights are measured against
        self._spread = spread  # token weights; NaN = not yet known (query-only tokens: on first use)
        self._weighted = weighted  # unit
        self._surface = surface  # lower-cased word -> usual spelling in the descriptions

    @classmethod
    def build(cls, texts: list[str], descriptions: list[str]) -> StaticVectors:
        """The signal of docs pooled from `texts`, every token weighed against all of them."""
        model = wordllama()
        empty = np.zeros((0, model.vectors.shape[1]), np.float32)
        return cls(empty, np.full(len(model.vectors), np.nan, np.float32), empty, {}).updated(
            list(range(len(texts))), texts, descriptions, reweigh=True)  # every row new: measure all tokens

    def updated(self, rows: list[int], texts: list[str], descriptions: list[str], *,
                reweigh: bool = False) -> StaticVectors:
        """A copy with doc `rows[i]` pooled from `texts[i]`. The weights of tokens already known stay
        as they are unless `reweigh` (measuring a token against every doc is most of a build);
        tokens new to the index are measured against the docs as they now are."""
        model = wordllama()
        token_ids = model.encode(texts)
        ones = np.ones(len(model.vectors), np.float32)
        plain = grown(self._plain, rows, normalise(_pool(model.vectors, token_ids, ones)))
        spread = np.full_like(self._spread, np.nan) if reweigh else self._spread.copy()
        seen = np.unique(np.concatenate([np.zeros(0, np.int64), *token_ids]))
        measure = seen[np.isnan(spread[seen])]
        spread[measure] = _token_spread(model, measure, plain)
        weighted = grown(self._weighted, rows, normalise(_pool(model.vectors, token_ids, np.nan_to_num(spread))))
        return StaticVectors(plain, spread, weighted, {**_surface_forms(descriptions), **self._surface})

    @property
    def nbytes(self) -> int:
        return self._plain.nbytes + self._spread.nbytes + self._weighted.nbytes + 100 * len(self._surface)

    def cosine(self, query: str) -> np.ndarray:
        """Range-weighted cosine of the query with every doc."""
        model = wordllama()
        # The tokenizer is case-sensitive; respelling each word the way the tools spell it
        # (else lower case) makes ranking ignore the query's case without losing "GitHub".
        cased = _CASED_WORD.sub(lambda m: self._surface.get(m[0].lower(), m[0].lower()), query)
        (query_ids,) = model.encode([cased])
        missing = np.unique(query_ids[np.isnan(self._spread[query_ids])])
        if missing.size:  # the cache only ever gains entries, so sharing it is harmless
            self._spread[missing] = _token_spread(model, missing, self._plain)
        return self._weighted @ normalise(self._spread[query_ids] @ model.vectors[query_ids])


def static_texts(docs: list[Document], name_words: list[list[str]]) -> list[str]:
    """What each doc's static vector is pooled from: its name words and description."""
    return [" ".join(words) + " " + doc.description for doc, words in zip(docs, name_words)]


def _surface_forms(descriptions: list[str]) -> dict[str, str]:
    """Most common spelling of each word in the descriptions, keyed by its lower case."""
    spellings: dict[str, Counter[str]] = defaultdict(Counter)
    for description in descriptions:
        for word in _CASED_WORD.findall(description):
            spellings[word.lower()][word] += 1
    return {lower: forms.most_common(1)[0][0] for lower, forms in spellings.items()}


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
