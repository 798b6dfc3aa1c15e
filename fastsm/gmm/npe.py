"""GMM-NPE: neighbourhood-preserving embedding of Gaussian components ([GMM] §4).

1. Every component ``N(mu, S)`` becomes ``P = |S|^(-1/(d+1)) [[S + mu mu^T, mu], [mu^T, 1]]``
   in ``SPD(d+1)`` with ``det P = 1`` (Eq. 12), vectorised as the upper
   triangle with off-diagonal entries scaled by ``sqrt(2)`` (so Euclidean
   distances of the vectors are Frobenius distances of the matrices).
2. Neighbours of ``P_i``: its ``n_neighbors`` nearest representatives under
   ``D(P_i, P_j) = KL(N(0, P_i) || N(0, P_j))`` (or all within ``threshold``).
3. Weights: the sparse MAXDET problem of §4.1 (our Numba interior-point
   solver, :mod:`fastsm._kernels.maxdet`), optionally normalised to sum 1.
4. Projection (NPE, He et al. 2005): PCA onto the span of the vectors, then
   with ``M = (I - W)^T (I - W)`` (row-wise weights) solve
   ``X M X^T a = lambda (X X^T + ridge I) a`` and keep the eigenvectors of the
   **smallest** eigenvalues.  [GMM] Eq. 11 writes
   ``(I - W)(I - W)^T`` and "largest"; ``projection="paper"`` reproduces that
   literal reading for comparison (see ``benchmarks/gmm_npe_synthetic.py``).
5. Measures between two embedded mixtures: D1 (Eq. 16), D2 (Eq. 17) and the
   EMD (Eq. 18–19, POT's ``ot.emd2`` if installed, else an exact LP by SciPy's
   HiGHS).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from fastsm._kernels.maxdet import maxdet_rows
from fastsm._threads import thread_limits
from fastsm._validation import check_choice, check_int, check_scalar
from fastsm._warn import warn
from fastsm.gmm.mixture import GaussianMixture, check_mixtures


def embed_components(means: np.ndarray, covariances: np.ndarray) -> np.ndarray:
    """The ``SPD(d+1)`` representatives of Eq. 12 (``det P = 1``), shape (K, d+1, d+1)."""
    K, d = means.shape
    P = np.empty((K, d + 1, d + 1))
    P[:, :d, :d] = covariances + np.einsum("ki,kj->kij", means, means)
    P[:, :d, d] = means
    P[:, d, :d] = means
    P[:, d, d] = 1.0
    logdet = np.linalg.slogdet(covariances)[1]
    return P * np.exp(-logdet / (d + 1))[:, None, None]


def vectorize(P: np.ndarray) -> np.ndarray:
    """Upper triangles with off-diagonals times sqrt(2): (K, (d+1)(d+2)/2)."""
    n = P.shape[-1]
    iu = np.triu_indices(n)
    scale = np.where(iu[0] == iu[1], 1.0, np.sqrt(2.0))
    return P[:, iu[0], iu[1]] * scale


@dataclass(frozen=True, eq=False)
class NPEEmbedding:
    """A fitted GMM-NPE projection, reusable for unseen mixtures.

    Attributes
    ----------
    projection : ndarray (l, n)
        Rows ``a_k`` of the projection; a component's vector ``v`` maps to ``projection @ v``.
    eigenvalues : ndarray (r,)
        All generalised eigenvalues (in the PCA space of rank ``r``), in the
        order used to pick the rows.
    dim : int
        Dimension ``d`` of the mixtures.
    weights : ndarray (M, M)
        The neighbour weights ``W`` (rows: representatives).
    converged : ndarray (M,) of bool
        Whether each MAXDET problem reached the requested duality gap (``fit_npe``
        warns once, with the count, when one did not).
    estimated_dim : int
        ``l_hat``: eigenvalues above ``1e-3`` times the largest of the
        paper-form problem ([GMM] §5.1's estimate of the manifold dimension).
    """

    projection: np.ndarray
    eigenvalues: np.ndarray
    dim: int
    weights: np.ndarray = field(repr=False)
    converged: np.ndarray = field(repr=False)
    estimated_dim: int
    options: dict = field(default_factory=dict)


def _neighbour_kl(P: np.ndarray) -> np.ndarray:
    """``D[i, j] = KL(N(0, P_i) || N(0, P_j))`` for all pairs, by one GEMM.

    ``tr(P_j^-1 P_i)`` is the Frobenius product of ``P_j^-1`` and ``P_i``: with
    the inverses from the Cholesky factors (``det P = 1``, well conditioned)
    all M^2 traces are one (M × n^2)·(n^2 × M) product instead of M^2
    factorisations.  Used only to rank neighbours.
    """
    M, n = P.shape[0], P.shape[1]
    L = np.linalg.cholesky(P)
    logdet = 2.0 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(axis=1)
    eye = np.broadcast_to(np.eye(n), P.shape)
    Linv = np.linalg.solve(L, eye)  # batched triangular inverse via LU: M n^3, negligible
    Pinv = np.einsum("kji,kjl->kil", Linv, Linv)
    traces = P.reshape(M, -1) @ Pinv.reshape(M, -1).T  # [i, j] = tr(P_j^-1 P_i)
    return 0.5 * (traces - n + logdet[None, :] - logdet[:, None])


def fit_npe(
    mixtures: Sequence[GaussianMixture],
    n_components: int = 2,
    *,
    n_neighbors: int = 10,
    threshold: float | None = None,
    sparsity: float = 0.1,
    normalize_weights: bool = False,
    projection: str = "npe",
    ridge: float = 1e-8,
    tol: float = 1e-9,
    threads: int | None = None,
) -> NPEEmbedding:
    """Learn the GMM-NPE projection from the components of ``mixtures``.

    Parameters
    ----------
    mixtures : sequence of GaussianMixture
        Training mixtures; all their components are representatives.
    n_components : int
        Output dimension ``l``.
    n_neighbors : int
        Neighbours per representative (by KL of the embedded Gaussians).
    threshold : float, optional
        Use all representatives with ``D(P_i, P_j) <= threshold`` instead
        (at least one neighbour is kept).
    sparsity : float
        ``lambda`` of the l1 term in the MAXDET problem (>= 0).
    normalize_weights : bool
        Divide each row of ``W`` by its sum after solving (NPE's constraint of
        Eq. 9); the MAXDET problem itself has no such constraint.
    projection : {"npe", "paper"}
        ``"npe"``: smallest eigenvalues with ``(I-W)^T (I-W)`` (He et al.);
        ``"paper"``: [GMM] Eq. 11 read literally (largest, ``(I-W)(I-W)^T``).
    ridge : float
        Added (relative to the mean diagonal) to ``X X^T``.
    tol : float
        Duality-gap tolerance of the MAXDET solver.
    """
    d = check_mixtures(mixtures, "mixtures")
    check_choice("projection", projection, ("npe", "paper"))
    sparsity = check_scalar("sparsity", sparsity, low=0.0)
    tol = check_scalar("tol", tol, low=0.0, low_open=True)
    ridge = check_scalar("ridge", ridge, low=0.0)
    means = np.concatenate([m.means for m in mixtures])
    covs = np.concatenate([m.covariances for m in mixtures])
    M = means.shape[0]
    n_neighbors = check_int("n_neighbors", n_neighbors, low=1)
    if M < 2:
        raise ValueError("fit_npe needs at least two components in all")
    with np.errstate(over="ignore", invalid="ignore"):
        P = embed_components(means, covs)
    if not np.all(np.isfinite(P)):
        raise ValueError("the SPD(d+1) embedding of the components overflows float64 (means or covariances too "
                         "large, e.g. |mean| > 1e150); rescale the mixtures")
    X = vectorize(P)  # (M, n)
    n_vec = X.shape[1]
    n_components = check_int("n_components", n_components, low=1)
    if n_components > n_vec:
        raise ValueError(f"n_components must be <= {n_vec} (the vectorised dimension), got {n_components}")
    with thread_limits(threads):
        Dkl = _neighbour_kl(P)
        np.fill_diagonal(Dkl, np.inf)
        nbrs = []
        for i in range(M):
            order = np.argsort(Dkl[i])
            if threshold is not None:
                sel = order[Dkl[i, order] <= threshold]
                nbrs.append(sel if sel.size else order[:1])
            else:
                nbrs.append(order[: min(n_neighbors, M - 1)])
        # whitened neighbour matrices Q_j = P_i^-1/2 P_j P_i^-1/2
        ev, V = np.linalg.eigh(P)
        Pm = np.einsum("kij,kj,klj->kil", V, ev**-0.5, V)
        Qs = np.ascontiguousarray(np.concatenate([Pm[i] @ P[nb] @ Pm[i] for i, nb in enumerate(nbrs)]))
        cs = np.trace(Qs, axis1=1, axis2=2) + sparsity
        offsets = np.concatenate([[0], np.cumsum([len(nb) for nb in nbrs])]).astype(np.int64)
        w = np.empty(Qs.shape[0])
        status = np.zeros(M, dtype=np.int64)
        maxdet_rows(Qs, cs, offsets, tol, 200, w, status)
    if status.any():
        warn(f"the MAXDET weights of {int(np.count_nonzero(status))} of {M} representatives did not converge to "
             f"tol = {tol:g}; see NPEEmbedding.converged", RuntimeWarning)
    W = np.zeros((M, M))
    for i, nb in enumerate(nbrs):
        W[i, nb] = w[offsets[i]:offsets[i + 1]]
    if normalize_weights:
        W = W / np.maximum(W.sum(axis=1, keepdims=True), 1e-300)
    # PCA first (He et al. 2005): the embedded vectors often span few dimensions
    # (zero-mean components on a curve span 3), and without it the "smallest"
    # eigenvectors are the null space of X, which maps every component to 0
    _, sv, Vt = np.linalg.svd(X, full_matrices=False)
    keep = sv > 1e-8 * sv[0]
    U = Vt[keep].T  # (n, r)
    r = U.shape[1]
    if n_components > r:
        raise ValueError(f"n_components must be <= {r}, the rank of the embedded components")
    Xt = U.T @ X.T  # (r, M): columns are representatives, as in [GMM] Eq. 10
    IW = np.eye(M) - W
    B = Xt @ Xt.T
    B += ridge * np.mean(np.diag(B)) * np.eye(r)
    A_paper = Xt @ (IW @ IW.T) @ Xt.T
    ev_paper = scipy.linalg.eigh(A_paper, B, eigvals_only=True)
    estimated = int(np.sum(ev_paper > 1e-3 * ev_paper.max()))
    if projection == "npe":
        evals, evecs = scipy.linalg.eigh(Xt @ (IW.T @ IW) @ Xt.T, B)
    else:
        evals, evecs = scipy.linalg.eigh(A_paper, B)
        evals, evecs = evals[::-1], evecs[:, ::-1]
    rows = (U @ evecs[:, :n_components]).T
    return NPEEmbedding(
        projection=np.ascontiguousarray(rows), eigenvalues=evals, dim=d, weights=W, converged=status == 0,
        estimated_dim=estimated,
        options={"n_neighbors": n_neighbors, "threshold": threshold, "sparsity": sparsity,
                 "normalize_weights": normalize_weights, "projection": projection, "ridge": ridge},
    )


def transform(embedding: NPEEmbedding, f: GaussianMixture) -> np.ndarray:
    """The ``l``-dimensional vectors of ``f``'s components, shape (K, l)."""
    if not isinstance(embedding, NPEEmbedding):
        raise TypeError(f"embedding must be an NPEEmbedding, got {type(embedding).__name__}")
    if not isinstance(f, GaussianMixture):
        raise TypeError(f"f must be a GaussianMixture, got {type(f).__name__}")
    if f.dim != embedding.dim:
        raise ValueError(f"the mixture has dimension {f.dim}; the embedding was fitted for {embedding.dim}")
    return vectorize(embed_components(f.means, f.covariances)) @ embedding.projection.T


def _emd(a, b, d):
    try:
        import ot
    except ImportError:
        ot = None
    if ot is not None:
        return float(ot.emd2(a, b, d))
    from scipy.optimize import linprog

    m, k = d.shape
    A_eq = np.zeros((m + k, m * k))
    for i in range(m):
        A_eq[i, i * k:(i + 1) * k] = 1.0
    for j in range(k):
        A_eq[m + j, j::k] = 1.0
    res = linprog(d.ravel(), A_eq=A_eq, b_eq=np.concatenate([a, b]), bounds=(0, None), method="highs")
    if not res.success:  # pragma: no cover - a transportation LP with equal masses is always feasible
        raise RuntimeError(f"EMD linear program failed: {res.message}")
    return float(res.fun)


def _measure(V, a, U, b, measure):
    dmat = np.sqrt(np.maximum(((V[:, None, :] - U[None, :, :]) ** 2).sum(-1), 0.0))
    if measure == "d1":
        p = (b[None, :] * dmat).min(axis=1)
        q = (a[:, None] * dmat).min(axis=0)
        return 0.5 * (np.max(a * p) + np.max(b * q))
    if measure == "d2":
        return 0.5 * (np.max(a * (dmat @ b)) + np.max(b * (a @ dmat)))
    return _emd(a, b, dmat)


def npe_distance(embedding: NPEEmbedding, f: GaussianMixture, g: GaussianMixture, measure: str = "d1") -> float:
    """GMM-NPE measure between two mixtures: ``"d1"`` (Eq. 16), ``"d2"`` (Eq. 17) or ``"emd"`` (Eq. 18–19)."""
    check_choice("measure", measure, ("d1", "d2", "emd"))
    return float(_measure(transform(embedding, f), f.weights, transform(embedding, g), g.weights, measure))


def npe_pairwise(embedding: NPEEmbedding, mixtures_a: Sequence[GaussianMixture],
                 mixtures_b: Sequence[GaussianMixture] | None = None, measure: str = "d1") -> np.ndarray:
    """:func:`npe_distance` for every pair (each mixture is transformed once)."""
    check_choice("measure", measure, ("d1", "d2", "emd"))
    A = [(transform(embedding, f), f.weights) for f in mixtures_a]
    B = A if mixtures_b is None else [(transform(embedding, g), g.weights) for g in mixtures_b]
    return np.array([[_measure(V, a, U, b, measure) for (U, b) in B] for (V, a) in A])
