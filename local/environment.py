"""The environment both local processes (the stack and its emulator) set before anything imports
boto3, numpy or the settings."""

from __future__ import annotations

import os


def prepare() -> None:
    """The local stack never needs real credentials; the stage allows private networks. Its
    request threads each run the embedding model: numpy's BLAS gets one thread per caller
    (OpenBLAS's own threads, one per core each, spin against the other callers' and starve the
    server; the model's matrices are too small to gain from them)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("WORKSET_STAGE", "local")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
