"""One place for the Numba compilation flags and numerical defaults.

Every kernel in :mod:`fastsm._kernels` is compiled through :func:`kernel`, so
caching and floating-point flags are identical everywhere and no kernel is
recompiled by surprise.  ``fastmath`` is an explicit flag set *without*
``nnan``/``ninf``: those two let LLVM delete NaN/inf checks, which is how NaNs
silently escaped in other projects (see umap's history).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import numba

from fastsm._cache import InternalKernel, Kernel
from fastsm.exceptions import CacheWarning

#: LLVM fast-math flags used by every kernel: ``nsz`` only.  Every flag that lets LLVM choose
#: the rounding — ``arcp`` (``a / b`` -> ``a * (1 / b)``), ``reassoc`` (reordered, vectorised
#: reductions), ``contract`` (fused multiply-adds) — made it choose differently in a kernel
#: compiled in the process and the same kernel loaded from Numba's cache, depending on what it
#: inlined around it: SMTGP predictions with dy = 8 differed between a cold and a warm process
#: under ``reassoc`` alone and under ``contract`` alone; leave-one-out SMTGP (dy = 1) differed by
#: up to 3.6e-4 under ``arcp`` with ``reassoc`` (tests/test_determinism.py).
FASTMATH_FLAGS: frozenset[str] = frozenset({"nsz"})

#: Floor applied to the Schur complements eta (docs/math.md §2); hits are counted.
ETA_FLOOR_REL: float = 64.0 * 2.220446049250313e-16

#: A test input whose kernel values k(x, x_i) are all below this is
#: "extrapolated": the objective is flat at its start to working precision.
EXTRAPOLATION_K: float = 1e-10

#: Iteration limits above this are accepted and mean "no limit" (the kernels count in int64).
MAX_ITER_CAP: int = 2**62

#: Iterations per test point that every default budget holds ([SM] §5.2's 50): :func:`default_max_iter`.
DEFAULT_MAX_ITER: int = 50

#: KLTGP iterations at most of SMTGP's start (``init="kl"``, the default): the start need not be a
#: converged KLTGP prediction, SMTGP's own optimisation takes it from there.  At dy = 16 five iterations
#: cut a whole SMTGP prediction's evaluations by ~30 % at equal quality (docs/performance.md).
SM_START_ITER: int = 5

#: Leave-one-out points on which :func:`fastsm.tgp.select`'s coordinate searches screen SMTGP's alphas
#: (the best alpha is then scored on every point).  On digits halves (N = 1198, dy = 32) and two
#: random problems (N = 1000, dy = 2 and 16) 300 and 400 random points chose the full set's alpha in
#: 20 of 20 draws each, 200 points in 57 of 60 (docs/performance.md).
ALPHA_SCREEN_POINTS: int = 400

#: ``search="auto"`` (:class:`~fastsm.sklearn.TwinGPRegressorCV`'s default) sweeps every value of each
#: axis up to this many training points and steps to better neighbours above it (``"descent"``): on
#: digits halves (1198 points per fold) the descent chose what the sweeps chose with half the
#: settings; on Linnerud (16 points) it stopped in other minima in 3 of 5 folds (docs/performance.md).
DESCENT_MIN_POINTS: int = 500

#: SMTGP predictions with at most this many outputs seed their quasi-Newton matrix with the exact
#: Hessian of the criterion, where positive definite (it costs ``dy/2`` evaluations; at dy = 16 a
#: prediction needs 23 % fewer evaluations and 98.5 % of the points converge, was 74.5 %; at dy = 60
#: it costs 1.2x the time: docs/performance.md "Exact curvature").
SM_HESSIAN_MAX_DY: int = 32

#: When a point asks for exact curvature (the optimiser's :func:`~fastsm._kernels.curvature.wants_curvature`):
#: ``(first, every, last)``: first at iteration ``max(first, ceil(dy / 2))`` — once BFGS alone has spent
#: what a Hessian costs (dy/2 evaluations), so points that converge fast never pay for one (asked at
#: iteration 3, the Hessian made the digits selection's leave-one-out alpha stage at dy = 32 1.9x
#: slower) — then every ``every`` iterations, ``last - first`` at most, until one seeds BFGS (positive
#: definite, or any finite one, shifted, at the last request or where it costs
#: :data:`CURVATURE_SHIFT_COST` evaluations: :data:`CURVATURE_SHIFT`);
#: it replaces the dy iterations BFGS needs to learn the curvature (docs/performance.md, "Exact curvature").
CURVATURE_SCHEDULE: tuple[int, int, int] = (3, 4, 19)

#: At the schedule's last request an indefinite Hessian ``H`` seeds BFGS too, shifted to ``H + tau I``:
#: the least ``tau`` of ``max(beta, beta - min_i H_ii) 2^k`` (``beta = CURVATURE_SHIFT ||H||_F``) that
#: makes it positive definite (:func:`~fastsm._kernels.curvature.seed_inverse`).  Points still where
#: the criterion curves down after the whole schedule crawl there with BFGS alone (at dy = 16 on a
#: smooth-manifold problem 7 of 200 reached 50 iterations; with it all converge).  An eigenvalue
#: modification used at the first request sent 15 of 333 points of benchmarks/determinism.py's problem
#: to other minima, 10 of them higher; this, at the last request, 10, all lower (docs/performance.md).
CURVATURE_SHIFT: float = 1e-3

#: A Hessian that costs at least this many evaluations (``(dy + 1) // 2``: dy >= 15) is not thrown
#: away when indefinite: every request uses it, shifted as at the last one (:data:`CURVATURE_SHIFT`),
#: where a cheaper Hessian waits for a later, positive definite one.  At dy = 16 a point whose Hessian
#: stayed indefinite paid 8 evaluations a request for up to five requests; shifted at the first one,
#: smooth-manifold problems need 0-34 % fewer evaluations a point (seed 7: 35.8 -> 31.1) with as many
#: points within 1e-8 of the best minimum found (docs/performance.md).  Cheaper Hessians (dy <= 14)
#: keep waiting: shifted at dy = 4's first request (iteration 3) 11 of 333 points of
#: benchmarks/determinism.py's problem stopped in higher minima.
CURVATURE_SHIFT_COST: int = 8

#: Default step tolerance, relative to the output spread.  A converged position is fixed to about
#: this; at 1e-8 two BLAS kernel families could stop a tolerance apart (1.2e-8 on
#: benchmarks/determinism.py's problem), at 1e-9 they agree to 4.4e-9 for 3-7 % more evaluations
#: (docs/threads.md).
DEFAULT_TOL: float = 1e-9

#: Default objective tolerance: a full step that passed Armijo's test and lowered the objective by
#: at most ``ftol * |f|``, or a next quasi-Newton step predicting at most that decrease, ends the
#: point's optimisation.  Off by default: a value-based stop fixes
#: the minimiser only to ``sqrt(ftol |f| / curvature)`` (~1e-7 at 1e-12), so predictions on other
#: BLAS kernels differed by up to 3.3e-7; the step tests (taken and predicted quasi-Newton steps
#: below ``tol``) fix it to ``tol`` (docs/accuracy.md).  ``ftol=1e-12`` saves ~13 % of the
#: evaluations at dy = 16.
DEFAULT_FTOL: float = 0.0

#: Sufficient-decrease constant ``c1`` of the optimiser's Armijo test.
ARMIJO_C1: float = 1e-4

#: Relative objective noise tolerated by the optimiser's approximate Wolfe test: Hager & Zhang's
#: ``epsilon`` (CG_DESCENT's default).  It bounds the rounding noise of the values, which grows with
#: the conditioning of the kernel matrices: ~1e-10 relative on Toy 1 (lambda = 1e-4), but up to 2e-5
#: on a set of near-duplicate rows at lambda = 1e-8, where the decrease left near the minimum is
#: smaller than the noise.  With 1e-10 (before #55) such searches found no decrease, and the points
#: stopped up to 2.5e-3 of the output spread from the minimum; the slope window of the test, from
#: the accurate gradient, is what keeps a step from going up (docs/accuracy.md).
WOLFE_EPS: float = 1e-6

#: Line-search trials per iteration before the direction is declared useless (the point stops
#: unconverged).
MAX_LINESEARCH: int = 40

#: Test points in flight at once in the batched optimiser (rows per evaluation round).
DEFAULT_WINDOW: int = 512

#: Default trust radius (largest step) in units of the output spread.
DEFAULT_TRUST_RADIUS: float = 0.25

#: Default number of test points handled per batch (bounds memory use).
DEFAULT_BATCH_SIZE: int = 1024

#: KNN-local and region models (one or a few test points each) of at most this many training
#: points hold their factors as the row loops read them, formed once per model
#: (:func:`fastsm.tgp.views.with_row_products`).
ROW_PRODUCTS_MAX_N: int = 1024

#: Neighbour-index entries (test points x K) a local prediction holds at once:
#: test points are taken in chunks of ``LOCAL_CHUNK_ENTRIES // K`` rows (8 MB).
LOCAL_CHUNK_ENTRIES: int = 2**20

#: Test points of per-point KNN models (``share="none"``) predicted by one kernel call
#: (:func:`fastsm._kernels.knn.knn_rows`): enough to leave Python's share small, few enough
#: that the blocks of a chunk keep every worker busy.
KNN_BLOCK: int = 16

#: Default bound on the factorised region models a ``share="region"`` local model keeps: this share of
#: the memory the process may use (physical memory, or a container's limit), clamped to
#: ``[LOCAL_CACHE_MIN_BYTES, LOCAL_CACHE_MAX_BYTES]`` (:func:`fastsm.tgp.regions.default_cache_bytes`).
LOCAL_CACHE_SHARE: float = 1 / 8
LOCAL_CACHE_MIN_BYTES: int = 2**28
LOCAL_CACHE_MAX_BYTES: int = 2**31


#: Auto-parallelisation limited to explicit ``prange`` loops.  With Numba's
#: defaults every array expression, allocation and ``.copy()`` inside a
#: parallel kernel becomes a parfor of its own (compiled separately: most of
#: the cold-start time) and array reductions change their summation order with
#: the thread schedule.
PRANGE_ONLY: dict[str, bool] = {
    "prange": True, "comprehension": False, "reduction": False, "inplace_binop": False,
    "setitem": False, "numpy": False, "stencil": False, "fusion": False,
}


def kernel(*, parallel: bool = False, inline: bool = False, internal: bool = False,
           result: Callable[[tuple], Any] | None = None):
    """Decorator factory: ``numba.njit`` with the project's flags.

    Parameters
    ----------
    parallel : bool
        Compile with ``parallel=True`` (enables ``prange``).
    inline : bool
        Inline into the caller at Numba's IR level (``inline="always"``): a
        small helper that only names a step of its one caller costs no compile
        pipeline of its own (large or repeated steps do better as kernels of
        their own: docs/architecture.md), and its fast-math code is generated in its caller's context
        alone — the KLIEP polish's step as a kernel of its own gave results
        differing by 1e-13 between a process that compiled it and one that
        loaded it from the cache (``test_a_cold_and_a_warm_process_agree``).
    internal : bool
        Called from other kernels only: no CPython wrapper is compiled (the
        unboxing of every argument from Python objects, large for the
        NamedTuples of the optimiser; 1 s of the cold demo), and the
        dispatcher is an :class:`InternalKernel`, whose calls from Python raise
        ``TypeError``.
    result : callable, optional
        The kernel's return type as a function of its argument types (Numba types), for a kernel called by
        symbol (:func:`fastsm._kernels.shared.call`) whose result does not need its compile to be known: a
        caller is then typed, lowered and optimised without waiting for the kernel, which is compiled (or
        loaded from the cache) just before the caller's code goes to the JIT
        (:func:`fastsm._kernels.shared.before_emit`).  The compiled type is checked against it.
    """
    # numba's stubs type ``parallel`` as bool (it also takes the dict of passes to run) and do not
    # list ``no_cfunc_wrapper``: no kernel is passed as a first-class function, and the C wrapper of
    # each kernel cost about 0.4 s of the scikit-learn estimator's first fit with an empty cache
    options: dict[str, Any] = {"parallel": dict(PRANGE_ONLY) if parallel else False, "no_cfunc_wrapper": True,
                               "no_cpython_wrapper": internal, "inline": "always" if inline else "never",
                               "fastmath": set(FASTMATH_FLAGS), "nogil": True, "error_model": "numpy"}

    def compile_kernel(fn):
        disp = numba.njit(**options)(fn)
        # Numba's dispatcher with fastsm's cache (fastsm._cache); the classes hold no state of their own, the
        # dispatcher its declared result type (shared.call)
        disp.__class__ = InternalKernel if internal else Kernel
        disp.result_type = result
        try:
            disp.enable_caching()  # what cache=True does
        except RuntimeError as err:  # no writable cache folder: "cannot cache function ...: no locator available"
            if "no locator available" not in str(err):
                raise
            uncached_warning()
        return disp

    return compile_kernel


def default_max_iter(dy: int) -> int:
    """The iteration budget a prediction with ``dy`` outputs gets when ``max_iter`` is not given:
    :data:`DEFAULT_MAX_ITER` + ``2 dy``.

    BFGS learns the curvature of a ``dy``-dimensional criterion in about ``dy`` iterations, and above
    :data:`SM_HESSIAN_MAX_DY` no exact Hessian seeds it.  With a flat 50, smooth-manifold problems left
    up to 32 % of SMTGP's points unconverged at dy = 40-64 (KLTGP's and IKLTGP's up to 6 %); a run of
    500 iterations converged every point of 17 such problems at dy 2-64 within ``50 + 1.1 dy``
    iterations, so ``50 + dy`` left 1 % of one problem unconverged and ``50 + 2 dy`` none
    (``benchmarks/convergence.py``, docs/performance.md "An iteration budget that grows with dy").
    """
    return DEFAULT_MAX_ITER + 2 * int(dy)


@functools.cache
def uncached_warning() -> None:
    """Warn once per process that the kernels compile in memory only."""
    warnings.warn("fastsm's kernels cannot be cached: Numba finds no writable folder next to the package or in "
                  "the user's cache folder, so every process compiles them again (up to a minute before the first "
                  "prediction on 2 cores). Set NUMBA_CACHE_DIR to a writable folder to cache them.", CacheWarning,
                  stacklevel=4)
