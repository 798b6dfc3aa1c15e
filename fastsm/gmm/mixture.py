"""The :class:`GaussianMixture` state: weights, means, full covariances and their factors."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fastsm._validation import as_float_array, as_rng, check_int


@dataclass(frozen=True, eq=False)
class GaussianMixture:
    """A Gaussian mixture ``f = sum_i w_i N(mu_i, S_i)`` in R^d.

    Parameters
    ----------
    weights : array_like (K,)
        Non-negative, summing to 1 (within 1e-8; then renormalised exactly).
    means : array_like (K, d)
    covariances : array_like (K, d, d) or (K, d)
        Full symmetric positive definite covariances, or their diagonals.

    All arrays are private read-only copies.

    Attributes
    ----------
    chol : ndarray (K, d, d)
        Lower Cholesky factors of the covariances.
    logdet : ndarray (K,)
        Their log-determinants.
    """

    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray
    chol: np.ndarray = field(init=False, repr=False)
    logdet: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        w = as_float_array("weights", self.weights, ndim=1)
        mu = as_float_array("means", self.means, ndim=(1, 2))
        if mu.ndim == 1:
            mu = mu[None, :] if w.shape[0] == 1 else mu[:, None]
        K, d = mu.shape
        if w.shape[0] != K:
            raise ValueError(f"weights must have one entry per component ({K}), got {w.shape[0]}")
        if np.any(w < 0):
            raise ValueError("weights must be non-negative")
        if abs(w.sum() - 1.0) > 1e-8:
            raise ValueError(f"weights must sum to 1, got {w.sum():.12g}")
        S = as_float_array("covariances", self.covariances, ndim=(2, 3))
        if S.ndim == 2:
            if S.shape != (K, d):
                raise ValueError(f"diagonal covariances must have shape {(K, d)}, got {S.shape}")
            S = np.einsum("kd,de->kde", S, np.eye(d))
        if S.shape != (K, d, d):
            raise ValueError(f"covariances must have shape {(K, d, d)} (or {(K, d)} for diagonals), got {S.shape}")
        if not np.allclose(S, S.transpose(0, 2, 1), rtol=1e-10, atol=1e-12 * np.abs(S).max()):
            raise ValueError("covariances must be symmetric")
        L = np.empty_like(S)
        for k in range(K):
            try:
                L[k] = np.linalg.cholesky(S[k])
            except np.linalg.LinAlgError:
                raise ValueError(f"covariances[{k}] is not symmetric positive definite") from None
        # private read-only copies: the caller's arrays may change, ours may not
        for name, value in (("weights", w / w.sum()), ("means", mu), ("covariances", S), ("chol", L),
                            ("logdet", 2.0 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(axis=1))):
            value = np.array(value, dtype=np.float64, order="C", copy=True)
            value.setflags(write=False)
            object.__setattr__(self, name, value)

    @property
    def n_components(self) -> int:
        return self.weights.shape[0]

    @property
    def dim(self) -> int:
        return self.means.shape[1]

    @classmethod
    def from_sklearn(cls, model) -> GaussianMixture:
        """From a fitted ``sklearn.mixture.GaussianMixture`` (any ``covariance_type``)."""
        for attr in ("weights_", "means_", "covariances_", "covariance_type"):
            if not hasattr(model, attr):
                raise TypeError("model must be a fitted sklearn.mixture.GaussianMixture")
        K, d = model.means_.shape
        c, kind = np.asarray(model.covariances_, dtype=float), model.covariance_type
        if kind == "full":
            S = c
        elif kind == "diag":
            S = np.einsum("kd,de->kde", c, np.eye(d))
        elif kind == "spherical":
            S = c[:, None, None] * np.eye(d)[None]
        elif kind == "tied":
            S = np.broadcast_to(c, (K, d, d)).copy()
        else:  # pragma: no cover - sklearn has no other kinds
            raise ValueError(f"unknown covariance_type {kind!r}")
        return cls(model.weights_, model.means_, S)

    def sample(self, n: int, seed: int | np.random.Generator | None = None) -> np.ndarray:
        """``n`` samples (n, d), seeded with ``numpy.random.default_rng(seed)``."""
        n = check_int("n", n)
        rng = as_rng("seed", seed)
        counts = rng.multinomial(n, self.weights)
        z = rng.standard_normal((n, self.dim))
        comp = np.repeat(np.arange(self.n_components), counts)
        return self.means[comp] + np.einsum("nde,ne->nd", self.chol[comp], z)


def check_mixtures(mixtures, name: str) -> int:
    """Validate a non-empty sequence of mixtures of one dimension; returns that dimension."""
    from collections.abc import Sequence

    if isinstance(mixtures, GaussianMixture) or not isinstance(mixtures, Sequence) or len(mixtures) == 0:
        raise TypeError(f"{name} must be a non-empty sequence of GaussianMixture")
    for m in mixtures:
        if not isinstance(m, GaussianMixture):
            raise TypeError(f"{name} must hold GaussianMixture objects, got {type(m).__name__}")
    dims = {m.dim for m in mixtures}
    if len(dims) != 1:
        raise ValueError(f"all mixtures must have the same dimension, got {sorted(dims)} in {name}")
    return dims.pop()
