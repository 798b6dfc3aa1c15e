"""Input checks with messages that name the argument and what was expected."""

from __future__ import annotations

import numbers

import numpy as np


def as_float_array(name: str, value, *, ndim: int | tuple[int, ...], allow_empty: bool = False) -> np.ndarray:
    """Coerce ``value`` to a C-contiguous float64 array and check it.

    Integer and float32 input is converted; complex, object, boolean and
    string input is rejected with a :class:`TypeError`.  NaN/inf, a wrong
    number of dimensions and empty arrays raise :class:`ValueError`.
    """
    if value is None:
        raise TypeError(f"{name} must be an array, got None")
    try:
        arr = np.asarray(value)
    except Exception as exc:  # pragma: no cover - exotic array-likes
        raise TypeError(f"{name} could not be converted to an array: {exc}") from exc
    if arr.dtype == object or arr.dtype.kind not in "iuf":
        raise TypeError(
            f"{name} must hold real numbers (int or float), got dtype {arr.dtype}"
        )
    ndims = (ndim,) if isinstance(ndim, int) else ndim
    if arr.ndim not in ndims:
        want = " or ".join(str(d) for d in ndims)
        raise ValueError(f"{name} must be {want}-dimensional, got shape {arr.shape}")
    if not allow_empty and arr.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    return arr


def as_2d(name: str, value) -> np.ndarray:
    """A finite float64 matrix; a 1-D array is read as one column."""
    arr = as_float_array(name, value, ndim=(1, 2))
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    return np.ascontiguousarray(arr)


def check_scalar(
    name: str,
    value,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A finite real scalar inside the given interval."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    if low is not None and (v <= low if low_open else v < low):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {v}")
    if high is not None and (v >= high if high_open else v > high):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {v}")
    return v


def check_int(name: str, value, *, low: int = 0) -> int:
    """An integer >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def as_rng(name: str, value) -> np.random.Generator:
    """``numpy.random.default_rng(value)`` for a seed (None, int >= 0, SeedSequence, BitGenerator or Generator)."""
    if isinstance(value, bool) or not (value is None or isinstance(value, numbers.Integral)
                                       or isinstance(value, (np.random.SeedSequence, np.random.BitGenerator,
                                                             np.random.Generator))):
        raise TypeError(f"{name} must be None, an int seed or a numpy.random.Generator, got {value!r}")
    if isinstance(value, numbers.Integral) and value < 0:
        raise ValueError(f"{name} must be a non-negative int seed, got {value}")
    return np.random.default_rng(int(value) if isinstance(value, numbers.Integral) else value)


#: Inputs beyond this magnitude have squared distances that overflow float64 (1e154^2 * d).
MAX_INPUT = 1e150


def check_distances(name: str, X: np.ndarray) -> None:
    """Reject inputs whose squared distances overflow (an RBF kernel of them is NaN or 0 everywhere)."""
    big = float(np.abs(X).max()) if X.size else 0.0
    if big > MAX_INPUT:
        raise ValueError(f"{name} has values up to {big:.3g}: squared distances between such inputs overflow "
                         "float64; standardise the inputs (e.g. sklearn.preprocessing.StandardScaler)")


def check_choice(name: str, value, choices: tuple[str, ...]) -> str:
    """One of a fixed set of strings."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value
