"""The public KLIEP entry point: :func:`estimate_weights` ([CS] §III), its width chosen or given.

It sits above both the solver (:mod:`fastsm.shift.kliep`) and the width
selection (:mod:`fastsm.shift.select`), which itself fits KLIEP models.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from fastsm import config
from fastsm._threads import resolve_threads
from fastsm._validation import as_rng, check_choice, check_int, check_scalar
from fastsm.shift.kliep import (
    DEFAULT_MAX_ITER,
    DEFAULT_TOL,
    SOLVERS,
    ImportanceWeights,
    Solver,
    check_centers,
    check_pair,
    fit_on_centers,
)
from fastsm.shift.select import SIGMA_CV_FOLDS, select_sigma


def estimate_weights(
    X_train: ArrayLike,
    X_test: ArrayLike,
    *,
    solver: Solver = "pfw",
    sigma: float | None = None,
    centers: int | ArrayLike | None = None,
    max_iter: int = DEFAULT_MAX_ITER,
    tol: float = DEFAULT_TOL,
    ftol: float = 0.0,
    polish: bool = True,
    threads: int | None = None,
    random_state: int | np.random.Generator | None = None,
) -> ImportanceWeights:
    """KLIEP importance weights ``w = p_te / p_tr`` at the training points ([CS] §III).

    Parameters
    ----------
    X_train : array_like (n_train, d)
        Training inputs (a 1-D array is one feature).
    X_test : array_like (n_test, d)
        Test inputs (unlabelled).
    solver : {"pfw", "afw", "fw", "pg"}
        Pairwise FW ([CS] Alg. 5), away-step FW (Alg. 4), standard FW (Alg. 2),
        each with the Armijo rule of Alg. 3; or projected gradient ascent as
        Sugiyama et al. (2008) solve KLIEP (step sizes 10^3 ... 10^-3, at
        most 100 steps each, until the likelihood stops increasing).
    sigma : float, optional
        Kernel width.  ``None``: chosen by likelihood cross-validation over
        :func:`fastsm.shift.default_sigmas` (:func:`fastsm.shift.select_sigma`).
    centers : None, int or array
        ``None``: every test point is a centre ([CS]); an int ``m``: ``m``
        random test points (Sugiyama et al. use 100); 1-D ints: indices into
        ``X_test``; 2-D: the centres.
    max_iter : int
        Most solver iterations (FW steps; ``pg``: ascent steps).
    tol : float
        Stop when the duality gap ``<g, d_FW>`` is at most ``tol``: the gap
        bounds ``F* - F``, the shortfall of the summed test log-likelihood
        from its optimum.
    ftol : float
        Also stop a FW solver when one iteration raises ``F`` by at most
        ``ftol * |F|`` (0: off).  ``ftol = 1e-6`` with ``polish=False`` is the
        reading of the paper's "until convergence of (2)" used in
        ``docs/shift.md``.
    polish : bool
        Beyond the paper: the solver runs until its gap is below
        ``n_test`` (or ``tol``, ``max_iter``), then a fully-corrective
        Newton polish on the active set closes the long tail (docs/math.md §5); it
        starts from the 64 largest atoms and adds atoms with positive gaps.
        ``gap_before_polish`` reports where it took over.
    threads : int, optional
        Numba threads for the kernel matrix and the gradient products.
    random_state : int or Generator, optional
        For ``centers=int`` and the cross-validation folds of ``sigma=None``.

    Returns
    -------
    ImportanceWeights
    """
    X_train, X_test = check_pair(X_train, X_test)
    check_choice("solver", solver, SOLVERS)
    max_iter = min(check_int("max_iter", max_iter, low=0), config.MAX_ITER_CAP)
    tol = check_scalar("tol", tol, low=0.0)
    ftol = check_scalar("ftol", ftol, low=0.0)
    if not isinstance(polish, (bool, np.bool_)):
        raise TypeError(f"polish must be a bool, got {type(polish).__name__}")
    resolve_threads(threads)
    rng = as_rng("random_state", random_state)
    C = check_centers(centers, X_test, rng)
    if sigma is None:
        if X_test.shape[0] < SIGMA_CV_FOLDS:
            raise ValueError(f"sigma=None chooses sigma by {SIGMA_CV_FOLDS}-fold likelihood cross-validation over "
                             f"the test points, which needs at least {SIGMA_CV_FOLDS} of them, got n_test = "
                             f"{X_test.shape[0]}; pass sigma (or call fastsm.shift.select_sigma with fewer n_folds)")
        sigma = select_sigma(X_train, X_test, centers=centers, solver=solver, threads=threads,
                             n_folds=SIGMA_CV_FOLDS, random_state=rng).sigma
    sigma = check_scalar("sigma", sigma, low=0.0, low_open=True)
    return fit_on_centers(X_train, X_test, C, sigma, solver, max_iter=max_iter, tol=tol, ftol=ftol, polish=bool(polish),
                threads=threads)
