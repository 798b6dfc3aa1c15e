"""The GPU engine's hardware layer: an array namespace, triangular products and memory, on NumPy + SciPy
(the CPU, how CI runs the engine) or CuPy (the GPU, ``pip install 'fastsm[cuda]'``).

Everything above this module (:mod:`fastsm.cuda.evaluation`, :mod:`fastsm.cuda.optimizer`,
:mod:`fastsm.cuda.engine`) is written against :class:`Backend` alone, so the code a GPU runs is the code
the tests run on the CPU against the Numba engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from fastsm._memory import available_bytes

#: What the GPU engine's missing-package errors tell a user to install.
EXTRA = "pip install 'fastsm[cuda]' (CUDA 13 drivers; 'fastsm[cuda12]' for CUDA 12)"


@dataclasses.dataclass(frozen=True)
class Backend:
    """An array namespace and the few operations the engine takes from outside it.

    ``solve(L, B, trans)``: ``L^-1 B`` (``trans``: ``L^-T B``) for a lower-triangular ``L`` (its upper
    triangle is not read) and a matrix ``B`` of right-hand sides (TRSM), or stacks of both (``p × n × n`` and
    ``p × n × c``: one solve per matrix, batched); ``free_bytes()``: memory the
    engine may still allocate (``None``: unknown); ``to_host`` and ``to_device`` move arrays.
    """

    name: str
    xp: Any
    solve: Callable[[Any, Any, bool], Any]
    free_bytes: Callable[[], int | None]
    to_device: Callable[[Any], Any]
    to_host: Callable[[Any], np.ndarray]


def _scipy_solve(L, B, trans: bool):
    from scipy.linalg import solve_triangular

    if L.ndim == 2:
        return solve_triangular(L, B, lower=True, trans=1 if trans else 0, check_finite=False)
    if _BATCHED_SCIPY:
        return solve_triangular(L, B, lower=True, trans=1 if trans else 0, check_finite=False)
    out = np.empty(np.broadcast_shapes(L.shape[:-2], B.shape[:-2]) + B.shape[-2:])
    for p in range(out.shape[0]):  # SciPy before 1.15 solves one matrix a call
        out[p] = solve_triangular(L[p], B[p], lower=True, trans=1 if trans else 0, check_finite=False)
    return out


def _scipy_batches() -> bool:
    import scipy

    major, minor = (int(p) for p in scipy.__version__.split(".")[:2])
    return (major, minor) >= (1, 15)


_BATCHED_SCIPY = _scipy_batches()


def numpy_backend() -> Backend:
    """The engine on the CPU: NumPy, SciPy's ``solve_triangular`` (LAPACK's DTRTRS), the process's memory."""
    return Backend("numpy", np, _scipy_solve, available_bytes,
                   lambda a: np.ascontiguousarray(a, dtype=np.float64), np.asarray)


def cupy_backend() -> Backend:
    """The engine on the current CUDA device: CuPy and cuSOLVER/cuBLAS's TRSM (``cupyx.scipy.linalg``).

    Raises ``ImportError`` naming the ``fastsm[cuda]`` extra where CuPy is not installed, and
    ``RuntimeError`` where CuPy finds no usable CUDA device.
    """
    try:
        import cupy
        from cupyx.scipy.linalg import solve_triangular
    except ImportError as exc:
        raise ImportError(f"the GPU engine (fastsm.cuda) needs CuPy: {EXTRA}; backend='numpy' runs the same engine "
                          f"on the CPU ({exc})") from exc
    try:
        n_devices = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError: no driver, no device
        raise RuntimeError(f"the GPU engine (fastsm.cuda) found no CUDA device ({exc}); backend='numpy' runs the "
                           "same engine on the CPU") from exc
    if n_devices < 1:
        raise RuntimeError("the GPU engine (fastsm.cuda) found no CUDA device; backend='numpy' runs the same engine "
                           "on the CPU")

    def solve(L, B, trans: bool):
        return solve_triangular(L, B, lower=True, trans=1 if trans else 0, check_finite=False)

    def free_bytes() -> int:
        pool = cupy.get_default_memory_pool()
        free, _total = cupy.cuda.runtime.memGetInfo()
        return int(free + pool.free_bytes())

    def to_device(a):
        return cupy.ascontiguousarray(cupy.asarray(a, dtype=cupy.float64))

    return Backend("cupy", cupy, solve, free_bytes, to_device, cupy.asnumpy)


def backend(name: str) -> Backend:
    """The :class:`Backend` called ``name``: ``"cupy"`` (the GPU) or ``"numpy"`` (the same engine on the CPU)."""
    if name == "cupy":
        return cupy_backend()
    if name == "numpy":
        return numpy_backend()
    raise ValueError(f"backend must be 'cupy' (the GPU) or 'numpy' (the same engine on the CPU), got {name!r}")


def is_device_array(a) -> bool:
    """Whether ``a`` is a CuPy array (without importing CuPy where it is not already imported)."""
    mod = type(a).__module__
    return mod.startswith("cupy")
