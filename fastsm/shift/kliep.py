"""KLIEP importance weights by Frank–Wolfe ([CS] §III) and projected gradient (Sugiyama et al. 2008).

``w(x) = sum_l alpha_l exp(-||x - c_l||^2 / (2 sigma^2))`` ([CS] Eq. 1),
``alpha`` maximising ``F(alpha) = sum_j log w(x_te_j)`` subject to
``alpha >= 0`` and ``mean_i w(x_tr_i) = 1`` ([CS] Eq. 2; docs/math.md §5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fastsm._interrupt import run_interruptible
from fastsm._kernels import frank_wolfe as fwk
from fastsm._kernels import kliep_pg, kliep_polish
from fastsm._kernels import kliep_problem as kp
from fastsm._threads import Compute, thread_limits
from fastsm._validation import as_2d, as_rng, check_distances
from fastsm._warn import warn

Solver = Literal["pfw", "afw", "fw", "pg"]
SOLVERS: tuple[Solver, ...] = ("pfw", "afw", "fw", "pg")
_VARIANT = {"fw": kp.FW, "afw": kp.AFW, "pfw": kp.PFW, "pg": kp.PG}
_REASON = {kp.STOP_GAP: "gap", kp.STOP_MAX_ITER: "max_iter", kp.STOP_OBJECTIVE: "objective",
           kp.STOP_LINE_SEARCH: "line_search"}

#: Default cap on FW iterations (the FW phase of ``polish=True`` stops far earlier).
DEFAULT_MAX_ITER = 10_000
#: Default duality-gap tolerance (absolute, in units of F = sum of n_te logs).
DEFAULT_TOL = 1e-8
#: With ``polish=True`` the FW phase hands over to Newton once its gap is below this times n_te
#: (F* - F at most one nat per test point).  The earlier 1e-2 took 1.5-6x longer to the same optimum
#: (toy n = 300/2000/5000, 5-D and 20-D Gaussians at n = 2000; docs/shift.md).
POLISH_HANDOVER = 1.0
#: The polish starts from at most this many atoms (the largest; the rest join again only through the gap).
MAX_POLISH_START = 64
#: Largest scaled kernel matrix (bytes) stored; beyond it rows are recomputed each iteration.
MAX_STORED_BYTES = 2 * 1024**3
#: Centres whose mean kernel value over the training points is below this are unusable (beta = 1/b overflows).
MIN_CENTER_MEAN = 1e-250
#: Solver iterations recorded in ``gap_history`` / ``objective_history`` (the first ones; 3.2 MB).
TRACE_LIMIT = 100_000


class SigmaTooSmallError(ValueError):
    """The kernel width leaves KLIEP without a finite objective (raised for an explicit or a chosen ``sigma``)."""


@dataclass(frozen=True, eq=False, repr=False)
class ImportanceWeights:
    """Result of :func:`estimate_weights`: a fitted KLIEP density-ratio model.

    Attributes
    ----------
    weights : ndarray (n_train,)
        ``w(x_tr_i)``; their mean is 1 (the KLIEP constraint).
    coef : ndarray (n_centers,)
        The mixing coefficients ``alpha >= 0`` with ``b^T alpha = 1``.
    centers : ndarray (n_centers, d)
        Gaussian centres (test points).
    sigma : float
        Kernel width, ``k(x, c) = exp(-||x - c||^2 / (2 sigma^2))``.
    active : ndarray of int
        Indices of the centres with ``coef > 0`` (the support).
    objective : float
        ``F(alpha) = sum_j log w(x_te_j)`` ([CS] Eq. 2).
    gap : float
        Duality gap ``<g, d_FW>`` at the result: ``F* - F <= gap``.
    gap_history, objective_history : ndarray
        Gap and ``F`` before every solver iteration (``pg``: every accepted
        step), then before every polish round.  A gap is NaN where the
        solver stopped without computing it.  Only the first
        :data:`TRACE_LIMIT` solver iterations are recorded.
    n_good, n_drop, n_swap : int
        Step counts of the FW phase ([CS] §III-B; zero for ``pg``).
    n_iter : int
        Solver iterations (FW steps or accepted ``pg`` steps).
    n_polish : int
        Outer polish rounds (0 without polish).  A polish that ends below the objective it was
        handed (it could not leave a face) is discarded: the solver's iterate, its gap and its
        ``stop_reason`` are returned, so the polish never lowers ``objective``.
    gap_before_polish : float
        Gap where the solver handed over to the polish (``gap`` without it).
    converged : bool
        Whether ``gap <= tol``.
    stop_reason : str
        ``"gap"``, ``"max_iter"``, ``"objective"`` (``ftol`` met, or ``pg``'s
        own rule) or ``"line_search"`` (no ascent step found).
    solver : str
    """

    weights: np.ndarray
    coef: np.ndarray
    centers: np.ndarray
    sigma: float
    active: np.ndarray
    objective: float
    gap: float
    gap_history: np.ndarray
    objective_history: np.ndarray
    n_good: int
    n_drop: int
    n_swap: int
    n_iter: int
    n_polish: int
    gap_before_polish: float
    converged: bool
    stop_reason: str
    solver: str

    @property
    def n_nonzero(self) -> int:
        """Number of nonzero mixing coefficients."""
        return int(self.active.size)

    def __repr__(self) -> str:
        return (f"ImportanceWeights(solver={self.solver!r}, sigma={self.sigma:.4g}, n_centers={self.coef.size}, "
                f"n_nonzero={self.n_nonzero}, gap={self.gap:.3g}, converged={self.converged})")


def _frozen(a) -> np.ndarray:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


def check_pair(X_train, X_test) -> tuple[np.ndarray, np.ndarray]:
    """Validated float64 copies of the training and test inputs (same number of columns)."""
    X_train = as_2d("X_train", X_train)
    X_test = as_2d("X_test", X_test)
    if X_train.shape[1] != X_test.shape[1]:
        raise ValueError(f"X_train and X_test must have the same number of columns (features), "
                         f"got {X_train.shape[1]} and {X_test.shape[1]}")
    check_distances("X_train", X_train)
    check_distances("X_test", X_test)
    return X_train, X_test


def check_center_count(centers, n_test: int) -> int:
    """An ``int`` ``centers``, checked: between 1 and ``n_test``."""
    m = int(centers)
    if not 1 <= m <= n_test:
        raise ValueError(f"centers must be between 1 and n_test = {n_test} when an int, got {m}")
    return m


def check_centers(centers, X_test: np.ndarray, random_state) -> np.ndarray:
    """``None``: every test point; ``int m``: m test points drawn without replacement;
    1-D ints: indices into ``X_test``; 2-D floats: the centres themselves."""
    n_te, d = X_test.shape
    if centers is None:
        return X_test
    if isinstance(centers, (int, np.integer)) and not isinstance(centers, bool):
        m = check_center_count(centers, n_te)
        rng = as_rng("random_state", random_state)
        return X_test[np.sort(rng.choice(n_te, size=m, replace=False))]
    arr = np.asarray(centers)
    if arr.ndim == 1 and arr.dtype.kind in "iu":
        if arr.size == 0:
            raise ValueError("centers must not be empty")
        if arr.min() < 0 or arr.max() >= n_te:
            raise ValueError(f"centers indices must lie in [0, {n_te}) (rows of X_test), "
                             f"got values from {arr.min()} to {arr.max()}")
        return X_test[arr]
    C = as_2d("centers", centers)
    if C.shape[1] != d:
        raise ValueError(f"centers must have {d} columns (the inputs' features), got {C.shape[1]}")
    return C


def median_distance(X_train: np.ndarray, X_test: np.ndarray, *, max_points: int = 1000, seed: int = 0) -> float:
    """Median distance between distinct pooled inputs (on a subsample of at most ``max_points``); 1 if none."""
    Z = np.vstack([X_train, X_test])
    if Z.shape[0] > max_points:
        Z = Z[np.random.default_rng(seed).choice(Z.shape[0], max_points, replace=False)]
    sq = np.sum(Z * Z, axis=1)
    D2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * Z @ Z.T, 0.0)
    d2 = D2[np.triu_indices(Z.shape[0], 1)]
    d2 = d2[d2 > 0.0]  # duplicates (clumped data) would make the median 0
    return float(np.sqrt(np.median(d2))) if d2.size else 1.0


def kernel_gamma(sigma: float) -> float:
    """``1 / (2 sigma^2)``, the one place it is formed: 0 for a width so large that it underflows (every
    kernel value 1), never an ``OverflowError``; a width so small that it overflows is refused."""
    denominator = 2.0 * sigma * sigma  # a product of floats: inf, never OverflowError (sigma**2 raises)
    if not denominator > 0.0:
        raise SigmaTooSmallError(f"sigma = {sigma:g} is too small: 1 / (2 sigma^2) overflows; increase sigma")
    return 1.0 / denominator


def build_problem(X_train, X_test, C, sigma: float, *, stored: bool | None = None):
    """The scaled problem of :mod:`fastsm._kernels.kliep_problem` and ``b``; drops unusable centres.

    Returns ``(problem, b, keep)`` with ``keep`` the indices of the centres used.
    """
    gamma = kernel_gamma(sigma)
    b = np.empty(C.shape[0])
    C = np.ascontiguousarray(C)
    kp.center_means(C, np.ascontiguousarray(X_train.T), gamma, b)
    keep = np.flatnonzero(b >= MIN_CENTER_MEAN)
    if keep.size == 0:
        raise SigmaTooSmallError(f"sigma = {sigma:g} is too small: no centre has a nonzero kernel value at any "
                                 "training point (the density ratio cannot be represented); increase sigma")
    if keep.size < C.shape[0]:
        warn(f"{C.shape[0] - keep.size} of {C.shape[0]} centres lie where the training density is zero "
             f"to working precision at sigma = {sigma:g} and are left out", RuntimeWarning)
        C, b = np.ascontiguousarray(C[keep]), b[keep]
    inv_b = 1.0 / b
    if stored is None:
        stored = C.shape[0] * X_test.shape[0] * 8 <= MAX_STORED_BYTES
    if stored:
        A = np.empty((X_test.shape[0], C.shape[0]))
        kp.scaled_kernel(X_test, np.ascontiguousarray(C.T), gamma, inv_b, A)
    else:
        A = np.empty((0, 0))
    return kp.KliepProblem(A, X_test, np.ascontiguousarray(X_test.T), C, gamma, inv_b, bool(stored)), b, keep


def _start(problem, b: np.ndarray) -> np.ndarray:
    """[CS] Alg. 2 line 3 (the vertex of the smallest beta) if F is finite there, else uniform mu."""
    n_c = b.size
    mu = np.zeros(n_c)
    mu[int(np.argmax(b))] = 1.0
    z = np.empty(problem.Xte.shape[0])
    kp.combine(problem, mu, z, np.empty_like(z))
    if np.all(z > 0.0):
        return mu
    mu[:] = 1.0 / n_c
    kp.combine(problem, mu, z, np.empty_like(z))
    if not np.all(z > 0.0):
        bad = int(np.flatnonzero(~(z > 0.0))[0])
        raise SigmaTooSmallError(f"test point {bad} has a zero kernel value at every centre (sigma too small or "
                                 "centres too few): KLIEP's objective is -inf; increase sigma or use centers=None")
    return mu


def _trace(n: int) -> kp.FWTrace:
    return kp.FWTrace(np.full(n, np.nan), np.full(n, np.nan), np.full(n, -1, dtype=np.int64),
                       np.zeros(n, dtype=np.int64))


def _objective(problem, mu: np.ndarray) -> float:
    """KLIEP's ``F(mu) = sum_j log (A mu)_j`` ([CS] Eq. 6; ``-inf`` where a test point has no support)."""
    z = np.empty(problem.Xte.shape[0])
    kp.combine(problem, mu, z, np.empty_like(z))
    return float(kp.log_sum(z))


def _polish_start(problem, mu: np.ndarray) -> np.ndarray:
    """The polish's start: ``mu`` cut to its :data:`MAX_POLISH_START` largest atoms (Newton costs
    O(n_te k^2)), plus the largest term's atom of each test point that the cut leaves with less than
    half its ``(A mu)_j`` (of at most :data:`MAX_POLISH_START` such points, the worst covered),
    renormalised.  Cut to the largest atoms alone, a test point whose only support was a small atom
    had ``(A mu)_j = 0``: ``F = -inf``, and the polish could not move."""
    if np.count_nonzero(mu) <= MAX_POLISH_START:
        return mu.copy()
    cut = np.where(mu >= np.sort(mu)[-MAX_POLISH_START], mu, 0.0)
    z, z_cut = np.empty(problem.Xte.shape[0]), np.empty(problem.Xte.shape[0])
    kp.combine(problem, mu, z, np.empty_like(z))
    kp.combine(problem, cut, z_cut, np.empty_like(z))
    ratio = z_cut / z
    short = np.flatnonzero(~(ratio >= 0.5))
    if short.size:
        short = short[np.argsort(ratio[short], kind="stable")[:MAX_POLISH_START]]  # the worst covered first
        if problem.stored:
            rows = problem.A[short]
        else:
            rows = np.empty((short.size, mu.size))
            kp.scaled_kernel(np.ascontiguousarray(problem.Xte[short]), np.ascontiguousarray(problem.C.T), problem.gamma,
                             problem.inv_b, rows)
        top = np.argmax(rows * mu, axis=1)
        cut[top] = mu[top]
    return cut / cut.sum()


def solve(problem, b, solver: str, *, max_iter: int, tol: float, ftol: float, polish: bool, threads,
          check: bool = False) -> dict:
    """Run a solver (and the polish) on a built problem; returns the raw results."""
    n_te = problem.Xte.shape[0]
    with thread_limits(threads):
        mu = _start(problem, b)  # raises the clear error when no mu gives every test point a finite log
    if solver == "pg":
        mu = b.copy()  # Sugiyama et al. start at alpha = 1 (every atom positive: finite wherever uniform is)
    fw_tol = max(tol, POLISH_HANDOVER * n_te) if polish else tol
    trace = _trace(min(max_iter, TRACE_LIMIT) + 2)
    res: dict = {}

    if solver != "pg":
        opts = fwk.FWOptions(_VARIANT[solver], max_iter, fw_tol, ftol, 1e-4, check)

    def body(run: Compute) -> None:
        if solver == "pg":
            it, reason = kliep_pg.projected_gradient(problem, b, mu, max_iter, 100, trace, run.stop)
            counts = (0, 0, 0, 0)
        else:
            it, reason, *counts = fwk.frank_wolfe(problem, opts, mu, trace, run.stop)
        res.update(n_iter=it, reason=reason, counts=counts)
        gaps = np.full(51, np.nan)
        if polish and reason != kp.STOP_INTERRUPTED:
            handed = mu.copy()
            mu[:] = _polish_start(problem, mu)
            n_outer, polish_reason = kliep_polish.polish(problem, mu, tol, 50, 50, 1e-4, gaps, run.stop)
            if polish_reason != kp.STOP_INTERRUPTED and _objective(problem, mu) < _objective(problem, handed):
                # the polish ended below its hand-over (a face it could not leave): the solver's iterate stands
                mu[:] = handed
                res.update(n_polish=n_outer, polish_gaps=gaps[:0])
            else:
                res.update(reason=polish_reason, n_polish=n_outer, polish_gaps=gaps[: n_outer + 1])
        else:
            res.update(n_polish=0, polish_gaps=gaps[:0])

    # the polish: up to 50 rounds of Newton steps of O(n_te k^2), k up to the 64 atoms it starts from and more
    polish_flops = 50.0 * n_te * b.size * min(b.size, MAX_POLISH_START) if polish else 0.0
    run_interruptible(threads, body, flops=4.0 * max_iter * n_te * b.size + polish_flops)
    if res["reason"] == kp.STOP_INTERRUPTED:  # pragma: no cover - run_interruptible re-raises first
        raise KeyboardInterrupt
    it = res["n_iter"]
    mu[mu < 0.0] = 0.0
    mu /= mu.sum()
    res.update(mu=mu, trace=trace, gap_history=trace.gap[: it + 1], objective_history=trace.objective[: it + 1])
    return res


def fit_on_centers(X_train, X_test, C, sigma, solver, *, max_iter, tol, ftol, polish, threads, check=False,
         stored=None) -> ImportanceWeights:
    with thread_limits(threads):
        problem, b, keep = build_problem(X_train, X_test, C, sigma, stored=stored)
    res = solve(problem, b, solver, max_iter=max_iter, tol=tol, ftol=ftol, polish=polish, threads=threads,
                check=check)
    mu = res["mu"]
    coef = mu / b
    z = np.empty(X_test.shape[0])
    gt = np.empty(b.size)
    with thread_limits(threads):
        kp.combine(problem, mu, z, np.empty_like(z))
        with np.errstate(all="ignore"):  # z ~ 1e-310 at a test point: 1/z overflows, the gap certifies nothing
            r = 1.0 / z
            kp.gradient(problem, r, gt)
            gap = float(gt.max() - mu @ gt)
        weights = _evaluate(problem.C, coef, X_train, problem.gamma)
    if not np.isfinite(gap):
        gap = np.inf
    active = np.flatnonzero(coef > 0.0)
    hist_g = np.concatenate([res["gap_history"], res["polish_gaps"]])
    fw_gaps = res["gap_history"][np.isfinite(res["gap_history"])]
    n_good, n_drop, n_swap, violations = res["counts"]
    iw = ImportanceWeights(
        weights=_frozen(weights), coef=_frozen(coef), centers=_frozen(problem.C), sigma=float(sigma),
        active=_frozen(active), objective=float(kp.log_sum(z)), gap=gap, gap_history=_frozen(hist_g),
        objective_history=_frozen(res["objective_history"]), n_good=int(n_good), n_drop=int(n_drop),
        n_swap=int(n_swap), n_iter=int(res["n_iter"]), n_polish=int(res["n_polish"]),
        gap_before_polish=float(fw_gaps[-1]) if fw_gaps.size else np.nan, converged=bool(gap <= tol),
        stop_reason=_REASON[res["reason"]], solver=solver,
    )
    if check:
        object.__setattr__(iw, "_violations", int(violations))
        object.__setattr__(iw, "_trace", res["trace"])
    return iw


def _evaluate(C: np.ndarray, coef: np.ndarray, X: np.ndarray, gamma: float) -> np.ndarray:
    nz = np.flatnonzero(coef > 0.0)
    out = np.empty(X.shape[0])
    inv = np.zeros(nz.size)  # scaled_kernel's per-centre factor: coef
    inv[:] = coef[nz]
    K = np.empty((X.shape[0], nz.size))
    kp.scaled_kernel(X, np.ascontiguousarray(C[nz].T), gamma, inv, K)
    out[:] = K.sum(axis=1) if nz.size else 0.0
    return out


def weights_at(iw: ImportanceWeights, X: ArrayLike, *, threads: int | None = None) -> np.ndarray:
    """``w(x) = sum_l coef_l exp(-||x - c_l||^2 / (2 sigma^2))`` at new inputs ([CS] Eq. 1), on ``threads``
    Numba threads (``None``: all)."""
    if not isinstance(iw, ImportanceWeights):
        raise TypeError(f"iw must be an ImportanceWeights from estimate_weights, got {type(iw).__name__}")
    X = as_2d("X", X)
    if X.shape[1] != iw.centers.shape[1]:
        raise ValueError(f"X must have {iw.centers.shape[1]} columns (the centres' features), got {X.shape[1]}")
    with thread_limits(threads):
        return _evaluate(iw.centers, iw.coef, X, kernel_gamma(iw.sigma))
