"""Array helpers the signals and their fusion share: growing a per-doc array in place of a
rebuild, unit rows, z-scores."""

from __future__ import annotations

import numpy as np


def grown(array: np.ndarray, rows: list[int], values: np.ndarray) -> np.ndarray:
    """A copy of `array` with `values[i]` at row `rows[i]`, lengthened for rows past its end."""
    size = max(len(array), max(rows, default=-1) + 1)
    out = np.zeros((size, *array.shape[1:]), array.dtype)
    out[:len(array)] = array
    out[rows] = values
    return out


def normalise(rows: np.ndarray) -> np.ndarray:
    """Each row scaled to unit length (a zero row stays zero)."""
    return rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), 1e-9)


def zscore(x: np.ndarray) -> np.ndarray:
    """z-scores of x along its last axis (a flat x gives zeros)."""
    std = x.std(axis=-1, keepdims=True)
    return (x - x.mean(axis=-1, keepdims=True)) / np.where(std > 0, std, 1.0)


def zscore_among(x: np.ndarray, among: np.ndarray) -> np.ndarray:
    """z-scores of x against the mean and spread of its `among` entries only."""
    if not among.any():
        return np.zeros_like(x)
    std = x[among].std()
    return (x - x[among].mean()) / (std if std > 0 else 1.0)
