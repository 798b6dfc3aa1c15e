"""The kernels' views of a fitted :class:`~fastsm.tgp.model.TGPModel`: its arrays as NamedTuples
(:class:`~fastsm._kernels.points.Fitted`, :class:`~fastsm._kernels.objectives.Objective`), its
factors as the products read them (symmetric storage), and how those products run (substitutions
or multiplications).  The model itself holds data only; what a prediction derives from it is formed here.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fastsm import config
from fastsm._kernels import objectives as obj
from fastsm._kernels.objectives import objective_plan
from fastsm._kernels.points import Fitted
from fastsm._kernels.tri_rows import MULTIPLY_PLAN, SOLVE_PLAN, ProductPlan, symmetric_storage
from fastsm._lapack import inverse_transposed
from fastsm._threads import resolve_threads, thread_limits, worker_pool
from fastsm.tgp.fitting import MODEL_PARTS, inverse_parts
from fastsm.tgp.model import TGPModel, TGPParams

METHOD_CODE = {"kl": obj.KL, "ikl": obj.IKL, "sm": obj.SM, "sm_cubic": obj.SM_CUBIC}


def inverse_form(model: TGPModel) -> TGPModel:
    """``model`` in inverse form (``W = L^-1`` explicit): itself, or for a model in Cholesky form a
    twin whose factors are inverted once (O(N^3), :func:`fastsm.tgp.fitting.inverse_parts`): the form
    every fit had before #55, kept for comparisons (the tests, ``python -m fastsm bench``'s per-point
    baseline)."""
    if model.factor_form == "inverse":
        return model
    return TGPModel._from_parts(model.X, model.Y, model.params, model.methods, inverse_parts(model),
                                model.sample_weight, copy=False)

class LeaveOneOut(NamedTuple):
    """What leave-one-out projects a model's products with (:func:`fastsm._kernels.objectives.project_out`):
    per factor ``V = W^T``, ``W = L^-1`` (row ``h`` is column ``h`` of ``W``, upper triangular)."""

    Vx: np.ndarray
    Vy: np.ndarray
    Vxy: np.ndarray


def leave_one_out(model: TGPModel, threads: int | None = None, shared: LeaveOneOut | None = None) -> LeaveOneOut:
    """``model``'s :class:`LeaveOneOut` projections, read-only: for a model in Cholesky form by LAPACK's
    ``dtrtri`` on its factors (three O(N^3 / 3) inversions, each on one BLAS thread, side by side on up
    to ``threads`` threads; the products themselves stay substitutions with ``L``), for one in inverse
    form ``W`` transposed.  ``shared``: the projections of a model with the same ``K_X`` and ``K_Y``
    (:func:`fastsm.tgp.with_alpha`'s), whose ``Vx`` and ``Vy`` are kept: only ``K_XY``'s are formed."""
    if shared is not None:
        if model.factor_form == "cholesky":
            with thread_limits(1):
                return shared._replace(Vxy=read_only(inverse_transposed(model.Wxy)))
        return shared._replace(Vxy=read_only(np.ascontiguousarray(model.Wxy.T)))
    if model.factor_form == "cholesky":
        factors = [getattr(model, name) for name in ("Wx", "Wy", "Wxy")]
        workers = min(len(factors), resolve_threads(threads))
        with thread_limits(1):
            if workers > 1:  # GIL-free LAPACK calls: bitwise the same as in series
                with worker_pool(workers, "fastsm-loo") as pool:
                    V = list(pool.map(inverse_transposed, factors))
            else:
                V = [inverse_transposed(L) for L in factors]
    else:
        V = [np.ascontiguousarray(getattr(model, name).T) for name in ("Wx", "Wy", "Wxy")]
    return LeaveOneOut(*(read_only(v) for v in V))


def _no_projections() -> np.ndarray:
    """The kernels' ``V`` arrays of a prediction without leave-one-out: empty, the same array type."""
    return read_only(np.empty((0, 0)))


def held_rows(held: np.ndarray | None, n: int, loo: LeaveOneOut | None = None) -> np.ndarray:
    """The kernels' ``held`` of ``n`` rows: each row's left-out training point (leave-one-out), ``-1``
    for none (``held=None``).  Always an int64 array: one compiled kernel for both.  Left-out points
    need the model's projections ``loo`` (:func:`~fastsm.tgp.views.leave_one_out`)."""
    if held is None:
        return np.full(n, -1, dtype=np.int64)
    out = np.ascontiguousarray(held, dtype=np.int64)
    if loo is None and out.size and out.max() >= 0:
        raise ValueError("left-out training points (held) need the model's projections: "
                         "loo=fastsm.tgp.views.leave_one_out(model)")
    return out


def eta_floor(p: TGPParams) -> float:
    """The floor of the etas for parameters ``p`` (``config.ETA_FLOOR_REL`` relative to ``k(z, z)``)."""
    return config.ETA_FLOOR_REL * (1.0 + max(p.lambda_x, p.lambda_y))


def with_row_products(model: TGPModel) -> TGPModel:
    """``model``, or for a model of at most ``config.ROW_PRODUCTS_MAX_N`` training points a twin
    sharing its arrays for models that predict one or a few points at a time (KNN-local and region
    models, :func:`predicts_few`).  The twin holds its factors as the row loops read them (symmetric
    storage; a model in Cholesky form stores ``L`` so already), formed here once, where
    :func:`product_factors` forms them per call.
    Neither is pickled: they belong to this process."""
    if model.n_train > config.ROW_PRODUCTS_MAX_N or predicts_few(model):
        return model
    parts = {name: getattr(model, name) for name in MODEL_PARTS}
    stored = {"Wx", "Wy", "Wxy"} if model.factor_form == "cholesky" else set()  # symmetric storage already
    factors = {}
    for name in ("Wx", "Wy", "Wxy", "G"):
        if parts[name] is not None:
            factors[name] = parts[name] if name in stored else symmetric_storage(np.ascontiguousarray(parts[name]))
            factors[name].flags.writeable = False
    parts["_row_products"], parts["_product_factors"] = True, factors
    return TGPModel._from_parts(model.X, model.Y, model.params, model.methods, parts, model.sample_weight, copy=False)


def products_plan(model: TGPModel, method: str = "kl") -> ProductPlan:
    """How ``model``'s products for ``method`` run: by the row loops (:mod:`fastsm._kernels.tri_rows`),
    substitutions with ``L`` for a model in Cholesky form (``plan.solve``; all but IKLTGP's products with
    its explicit ``G``, the objective's second factor), products with ``W`` for one in inverse form."""
    return objective_plan.py_func(SOLVE_PLAN if model.factor_form == "cholesky" else MULTIPLY_PLAN, METHOD_CODE[method])


def predicts_few(model: TGPModel) -> bool:
    """Whether ``model`` predicts one or a few points per call (a KNN-local or region model,
    :func:`with_row_products`): it then holds its factors as the row loops read them."""
    return bool(model.__dict__.get("_row_products", False))


def product_factors(model: TGPModel, names: tuple[str, ...] = ("Wx", "Wy", "Wxy", "G")) -> dict[str, np.ndarray]:
    """``model``'s triangular factors ``names`` (those it has) as the row loops read them, in symmetric
    storage (:func:`~fastsm._kernels.tri_rows.symmetric_storage`): a model in Cholesky form stores its ``L``
    so, :func:`with_row_products`'s twin holds all of them so; the others are formed here, each once."""
    found = model.__dict__.get("_product_factors")
    if found is not None:
        return found
    stored = {"Wx", "Wy", "Wxy"} if model.factor_form == "cholesky" else set()
    factors = {name: getattr(model, name) for name in names if getattr(model, name) is not None}
    return {name: M if name in stored else symmetric_storage(np.ascontiguousarray(M)) for name, M in factors.items()}


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a``.  The kernels' model arrays are always read-only: Numba compiles a
    kernel once per array type, and a writable array (a local model's) is another type."""
    v = a.view()
    v.flags.writeable = False
    return v


def fitted(model: TGPModel, loo: LeaveOneOut | None = None) -> Fitted:
    """``model``'s arrays as the point kernels read them (:class:`~fastsm._kernels.points.Fitted`), read-only;
    ``loo``: its leave-one-out projections (:func:`leave_one_out`), for predictions with left-out points."""
    p = model.params
    f = product_factors(model, ("Wx", "Wy", "Wxy"))
    V = (_no_projections(),) * 3 if loo is None else (loo.Vx, loo.Vy, loo.Vxy)
    return Fitted(read_only(model.X), read_only(model.Y), read_only(model.ridge_coef), float(p.gamma_x),
                  1.0 + p.lambda_x, eta_floor(model.params), read_only(f["Wx"]), read_only(f["Wy"]),
                  read_only(f["Wxy"]), *V)


def check_method_factors(model: TGPModel, method: str) -> None:
    """Raise ``ValueError`` where ``model`` lacks the factors ``method`` evaluates with (IKLTGP's ``G``)."""
    if method == "ikl" and model.G is None:
        raise ValueError("this model was fitted without 'ikl' in methods; refit with methods including 'ikl'")


def model_factors(model: TGPModel, method: str) -> tuple[np.ndarray, np.ndarray]:
    """The two factors ``method``'s objective multiplies by (:class:`~fastsm._kernels.objectives.Objective`)."""
    check_method_factors(model, method)
    second = {"ikl": "G", "sm": "Wxy"}.get(method, "Wy")
    factors = product_factors(model, ("Wy", second))
    return factors["Wy"], factors[second]


def cubic_factors(model: TGPModel, method: str):
    """``(K_X^-1, K_Y^-1)`` for the O(N^3) reference form, else ``None``; formed on one BLAS thread (a
    threaded product's bits depend on the thread count on some BLAS kernels, and so would the predictions)."""
    if method != "sm_cubic":
        return None
    with thread_limits(1):
        return np.ascontiguousarray(model.Kx_inv), np.ascontiguousarray(model.Ky_inv)


def objective_view(model: TGPModel, method: str, beta: float, loo: LeaveOneOut | None = None) -> obj.Objective:
    """The kernels' view of ``model`` for ``method`` (``beta = 1``: the beta-free SM transform); ``loo``: its
    leave-one-out projections (:func:`leave_one_out`), for evaluations with left-out points."""
    p = model.params
    W1, W2 = model_factors(model, method)
    if loo is None:
        V1 = V2 = _no_projections()
    else:
        V1, V2 = loo.Vy, loo.Vxy if method == "sm" else loo.Vy
    return obj.Objective(METHOD_CODE[method], read_only(model.Y), p.widths()[1], 1.0 + p.lambda_y, 1.0 + p.lambda_x,
                         p.alpha, float(beta), eta_floor(model.params), read_only(W1), read_only(W2),
                         float(model.logdet_y), float(model.logdet_x), read_only(np.ascontiguousarray(model.Y.T)),
                         V1, V2)
