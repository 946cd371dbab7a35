"""What an index ranks: a Document per tool, and its stored MiniLM vector (the sentence signal's
side of a tool, chalicelib/search/embedder.py), computed once per tool version by the app."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chalicelib.search import embedder
from chalicelib.search.structure import Structure
from chalicelib.search.text import name_words

# What a stored vector is: change the version whenever the model or the text it is computed
# from changes, so the app can tell stale vectors from current ones.
VECTOR_VERSION = "all-MiniLM-L6-v2-f16/name-words-colon-description/float16le/2"
VECTOR_BYTES = embedder.DIMENSIONS * 2


@dataclass(frozen=True)
class Document:
    key: str  # opaque id, e.g. "vendor/name"
    vendor: str  # validation.VENDOR_PATTERN
    name: str  # same pattern, e.g. "list-sales-orders"
    description: str
    # document_vector(vendor, name, description); computed if None; PENDING: not computed yet
    # (a large import's vectors come from the work queue), ranked without the sentence signal
    vector: bytes | None = None
    # what an imported operation's shape says (chalicelib/search/structure.py); None: neutral
    structure: Structure | None = None


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


def _vector_text(name: str, description: str) -> str:
    """What a tool's MiniLM vector is computed from (measured better than the description
    alone, or the raw name in front)."""
    return " ".join(name_words(name, description)) + ": " + description


def _embed_documents(texts: list[str]) -> np.ndarray:
    """MiniLM vectors rounded through float16, as stored, so a computed vector ranks exactly
    like the stored one."""
    return embedder.embed(texts).astype("<f2").astype(np.float32)


def stored_vectors(docs: list[Document]) -> np.ndarray:
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
