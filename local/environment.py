"""The environment both local processes (the stack and its emulator) set before anything imports
boto3, numpy or the settings."""

from __future__ import annotations

import os
from pathlib import Path


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


def private_folder(path: Path) -> None:
    """Make the data folder, or take one an older start made, for its owner only: it holds the
    tables' journal (connection secrets, encrypted), the emulator's KMS key material beside it,
    and the admin token."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (a stop may come at any moment), readable by its
    owner only from the moment the file exists (a chmod after the write leaves a window)."""
    written = path.with_suffix(".tmp")
    written.unlink(missing_ok=True)  # a stop's leftover keeps its mode: made afresh
    descriptor = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    os.replace(written, path)
