"""Batch TGP prediction on a GPU: the CPU engine's algorithm over CuPy, or over NumPy + SciPy on the CPU.

:func:`predict` runs :func:`fastsm.tgp.predict`'s algorithm — the same start (the supported ridge start,
SMTGP's KLTGP start from it), quasi-Newton steps with the Armijo line search, stopping rule and SMTGP's
curvature schedule, Cholesky factors (substitutions, never inverses), float64 — with every evaluation
round of a chunk of test points as triangular solves (TRSM) and matrix products (GEMM) on the device.
``backend="numpy"`` runs the same code on the CPU: that is how CI tests it against the Numba engine
(docs/gpu.md).  CuPy is the optional extra ``fastsm[cuda]``; ``import fastsm`` never imports it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np

from fastsm import config
from fastsm._validation import check_choice, check_int
from fastsm.cuda.backend import EXTRA, Backend, is_device_array
from fastsm.cuda.backend import backend as make_backend
from fastsm.cuda.engine import predict_global
from fastsm.cuda.local import predict_local
from fastsm.tgp.local_model import LocalTGPModel
from fastsm.tgp.model import Prediction, TGPModel, check_inputs, check_model
from fastsm.tgp.options import PredictOptions
from fastsm.tgp.views import check_method_factors

__all__ = ["EXTRA", "Backend", "available", "make_backend", "predict"]


def available() -> bool:
    """Whether CuPy is installed and finds a CUDA device (what ``backend="cupy"`` needs)."""
    try:
        make_backend("cupy")
    except (ImportError, RuntimeError):
        return False
    return True


def predict(
    model: TGPModel | LocalTGPModel,
    X: Any,
    *,
    method: Literal["sm", "kl", "ikl"] = "sm",
    init: str | Any | None = None,
    max_iter: int | None = None,
    tol: float = config.DEFAULT_TOL,
    optimizer: Literal["bfgs", "gd"] = "bfgs",
    trust_radius: float = config.DEFAULT_TRUST_RADIUS,
    ftol: float = config.DEFAULT_FTOL,
    chunk_size: int | None = None,
    backend: Literal["cupy", "numpy"] = "cupy",
) -> Prediction:
    """Predict outputs on a GPU: :func:`fastsm.tgp.predict`'s algorithm and
    :class:`~fastsm.tgp.model.Prediction`.

    Parameters
    ----------
    model : TGPModel or LocalTGPModel
        A global model (:func:`fastsm.tgp.fit`), or a KNN-local one (:func:`fastsm.tgp.fit_local`) of
        ``share="none"`` (the default) predicted by ``"kl"`` or ``"sm"``: each test point's model of its ``K``
        nearest training points is fitted and predicted on the device, many points at a time.
    X : array_like or cupy.ndarray, shape (n, dx)
        Test inputs.  A CuPy array gives a :class:`Prediction` of CuPy arrays; anything else NumPy arrays.
    method, init, max_iter, tol, optimizer, trust_radius, ftol
        As :func:`fastsm.tgp.predict` (``method`` ``"sm_cubic"``, the O(N^3) reference form, is not here).
    chunk_size : int, optional
        Test points optimised together on the device.  Default: as many as half its free memory holds
        beside the model's factors (``fastsm.cuda.engine.chunk_bytes`` a point).  A point's prediction
        does not depend on its chunk except through the rounding of the device's BLAS (docs/gpu.md).
    backend : {"cupy", "numpy"}
        ``"cupy"`` (default): the current CUDA device, which needs ``pip install 'fastsm[cuda]'``
        (an ``ImportError`` names it; a ``RuntimeError`` where no device is found).  ``"numpy"``: the same
        engine on the CPU with NumPy and SciPy (tests, and machines without a GPU).

    Returns
    -------
    Prediction
        The fields of :func:`fastsm.tgp.predict`'s, with ``log_certainty = -inf`` where ``extrapolated``.

    Raises
    ------
    MemoryError
        Before any work, where the model's factors and one test point do not fit in the device's memory.
    """
    check_choice("method", method, ("sm", "kl", "ikl"))
    check_choice("backend", backend, ("cupy", "numpy"))
    if chunk_size is not None:
        chunk_size = check_int("chunk_size", chunk_size, low=1)
    if isinstance(model, LocalTGPModel):
        if model.share != "none":
            raise ValueError(f"fastsm.cuda.predict takes KNN-local models of share='none' (the default), got "
                             f"share={model.share!r}: use fastsm.tgp.predict for it")
        if method == "ikl":
            raise ValueError("method='ikl' of KNN-local models is not on the GPU engine: use 'kl' or 'sm', or "
                             "fastsm.tgp.predict")
    else:
        model = check_model(model)
        check_method_factors(model, method)
    be = make_backend(backend)
    on_device = is_device_array(X)
    if on_device and be.name != "cupy":
        raise TypeError("X is a CuPy array: pass backend='cupy' (or cupy.asnumpy(X) for backend='numpy')")
    Xh = check_inputs(model, be.to_host(X) if on_device else X)
    if init is not None and not isinstance(init, str) and is_device_array(init):
        init = be.to_host(init)
    opts = PredictOptions(method=method, init=init, max_iter=max_iter, tol=tol, ftol=ftol, trust_radius=trust_radius,
                          optimizer=optimizer)
    if isinstance(model, LocalTGPModel):
        res = predict_local(be, model, Xh, opts, chunk_size)
    else:
        res = predict_global(be, model, Xh, opts, chunk_size)
    if on_device:
        xp = be.xp
        arrays = {f.name: getattr(res, f.name) for f in dataclasses.fields(res)}
        res = dataclasses.replace(res, **{k: xp.asarray(v) for k, v in arrays.items() if isinstance(v, np.ndarray)})
    return res
