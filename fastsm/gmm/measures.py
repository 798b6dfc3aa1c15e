"""KL (and SM-family) approximations between Gaussian mixtures ([GMM] §2; docs/math.md §7).

``divergence(f, g)`` is ``pairwise([f], [g])[0, 0]``: one code path.  All
components of all mixtures are stacked, the component-pair divergences are
computed in one parallel call from per-component Cholesky factors, and one
parallel kernel aggregates them per mixture pair.

Methods (``f = sum_i a_i f_i``, ``g = sum_j b_j g_j``, ``D`` the component divergence):

* ``"we"``:  ``sum_ij a_i b_j D(f_i||g_j)`` (the convexity upper bound for KL, [GMM] Eq. 3);
* ``"mb"``:  Goldberger's matching: ``m(i) = argmin_j D(f_i||g_j) - log b_j``,
  ``sum_i a_i (D(f_i||g_m(i)) + log(a_i / b_m(i)))`` ([GMM] Eq. 5, with the
  matching rule that makes the ``log`` term consistent);
* ``"mbs"``: ``sum_i a_i min_j D(f_i||g_j)`` (Eq. 6);
* ``"var"``: Hershey & Olsen's variational approximation,
  ``sum_i a_i log(sum_i' a_i' e^-D(f_i||f_i') / sum_j b_j e^-D(f_i||g_j))`` by
  log-sum-exp ([GMM] Eq. 8 prints it without the log — wrong);
* ``"ut"``:  unscented transform with ``2d`` sigma points
  ``mu_i ± (sqrt(d) L_i)_k`` per component, ``L_i`` the **Cholesky** factor of
  ``S_i`` (the value depends on the square root; [GMM] Eq. 7 omits the
  ``sqrt(d)`` that makes the 2d-point rule exact for quadratics);
* ``"mc"``:  Monte Carlo, ``mean log f(x) - log g(x)`` over ``n_samples``
  seeded samples of ``f``.

``component`` selects ``D``: ``"kl"`` (default), ``"bhattacharyya"``,
``"renyi"``/``"tsallis"`` (order 0.5) or ``("renyi", a)``, ``("tsallis", a)``,
``("sm", a, b)`` — beyond the paper, for ``"we"``, ``"mb"``, ``"mbs"``,
``"var"``.  ``"ut"`` and ``"mc"`` approximate the KL of the mixtures and
accept only ``"kl"``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fastsm._kernels import mixture as _k
from fastsm._threads import thread_limits
from fastsm._validation import as_rng, check_choice, check_int, check_scalar
from fastsm.gmm.mixture import GaussianMixture, check_mixtures

METHODS = ("we", "mb", "mbs", "var", "ut", "mc")
_AGG = {"we": _k.WE, "mb": _k.MB, "mbs": _k.MBS, "var": _k.VAR}


def _component_spec(component):
    """``(kind, alpha, beta)`` from the ``component`` argument."""
    if isinstance(component, str):
        check_choice("component", component, ("kl", "renyi", "tsallis", "bhattacharyya"))
        return component, 0.5, 1.0
    if isinstance(component, tuple) and component and component[0] in ("renyi", "tsallis", "sm"):
        kind = component[0]
        need = 3 if kind == "sm" else 2
        if len(component) != need:
            raise ValueError(f"component {kind!r} takes {need - 1} parameter(s): {component!r}")
        a = check_scalar("component alpha", component[1], low=0.0, low_open=True)
        if a == 1.0:
            raise ValueError("component alpha must differ from 1 (use 'kl')")
        b = check_scalar("component beta", component[2], low=0.0, low_open=True) if kind == "sm" else a
        return kind, a, b
    raise ValueError("component must be 'kl', 'renyi', 'tsallis', 'bhattacharyya', ('renyi', a), "
                     f"('tsallis', a) or ('sm', a, b); got {component!r}")


class _Stack:
    """All components of a list of mixtures, packed."""

    def __init__(self, mixtures: Sequence[GaussianMixture], name: str):
        self.dim = check_mixtures(mixtures, name)
        self.off = np.concatenate([[0], np.cumsum([m.n_components for m in mixtures])]).astype(np.int64)
        self.w = np.concatenate([m.weights for m in mixtures])
        self.M = np.ascontiguousarray(np.concatenate([m.means for m in mixtures]))
        self.S = np.ascontiguousarray(np.concatenate([m.covariances for m in mixtures]))
        self.L = np.ascontiguousarray(np.concatenate([m.chol for m in mixtures]))
        self.ld = np.concatenate([m.logdet for m in mixtures])
        self.mixtures = list(mixtures)
        self.packed = _k.Components(self.w, self.off, self.M, self.S, self.L, self.ld)


def _pair_divergences(A: _Stack, B: _Stack, I, J, spec):
    kind, a, b = spec
    out = np.empty(I.shape[0])
    if kind == "kl":
        _k.kl_pairs(A.packed, B.packed, I, J, out)
        return out
    alpha = 0.5 if kind == "bhattacharyya" else a
    status = np.zeros(I.shape[0], dtype=np.int64)
    _k.log_rho_pairs(A.packed, B.packed, alpha, I, J, out, status)
    if np.any(status):
        raise ValueError("a component pair has a*S_g + (1-a)*S_f not positive definite (alpha > 1)")
    if kind == "bhattacharyya":
        return -out
    if kind == "renyi":
        return out / (alpha - 1.0)
    if kind == "tsallis":
        return np.expm1(out) / (alpha - 1.0)
    return out / (alpha - 1.0) if b == 1.0 else np.expm1(out * (1.0 - b) / (1.0 - alpha)) / (b - 1.0)


def component_divergences(f: GaussianMixture, g: GaussianMixture, component: str = "kl", *,
                          threads: int | None = None) -> np.ndarray:
    """The ``K_f × K_g`` matrix ``D(f_i || g_j)`` of component divergences."""
    A, B = _Stack([f], "f"), _Stack([g], "g")
    if A.dim != B.dim:
        raise ValueError(f"f and g must have the same dimension, got {A.dim} and {B.dim}")
    I, J = np.meshgrid(np.arange(f.n_components), np.arange(g.n_components), indexing="ij")
    with thread_limits(threads):
        return _pair_divergences(A, B, I.ravel(), J.ravel(), _component_spec(component)).reshape(I.shape)


def pairwise(mixtures_a: Sequence[GaussianMixture], mixtures_b: Sequence[GaussianMixture] | None = None,
             method: str = "var", *, component: str = "kl", n_samples: int = 100_000,
             seed: int | np.random.Generator | None = None, threads: int | None = None) -> np.ndarray:
    """Divergence ``D(a || b)`` for every pair of mixtures, in parallel.

    Parameters
    ----------
    mixtures_a, mixtures_b : sequence of GaussianMixture
        ``mixtures_b`` defaults to ``mixtures_a``.
    method : {"we", "mb", "mbs", "var", "ut", "mc"}
    component : str or tuple
        Component divergence (see module docstring).
    n_samples, seed : int
        Monte Carlo only: samples per mixture of ``mixtures_a`` (shared by all
        its pairs) and the seed of ``numpy.random.default_rng``.
    threads : int, optional

    Returns
    -------
    ndarray (len(mixtures_a), len(mixtures_b))
    """
    check_choice("method", method, METHODS)
    spec = _component_spec(component)
    if method in ("ut", "mc") and spec[0] != "kl":
        raise ValueError(f"method {method!r} approximates the KL divergence of the mixtures; component must be 'kl'")
    A = _Stack(mixtures_a, "mixtures_a")
    B = A if mixtures_b is None else _Stack(mixtures_b, "mixtures_b")
    if A.dim != B.dim:
        raise ValueError(f"mixtures_a and mixtures_b must have the same dimension, got {A.dim} and {B.dim}")
    na, nb = len(A.off) - 1, len(B.off) - 1
    out = np.empty((na, nb))
    with thread_limits(threads):
        if method in _AGG:
            I, J = np.meshgrid(np.arange(len(A.w)), np.arange(len(B.w)), indexing="ij")
            C = np.ascontiguousarray(_pair_divergences(A, B, I.ravel(), J.ravel(), spec).reshape(I.shape))
            if method == "var":
                sizes = np.diff(A.off)
                Is = np.concatenate([np.repeat(np.arange(A.off[a], A.off[a + 1]), sizes[a]) for a in range(na)])
                Js = np.concatenate([np.tile(np.arange(A.off[a], A.off[a + 1]), sizes[a]) for a in range(na)])
                Cself = _pair_divergences(A, A, Is, Js, spec)
                offself = np.concatenate([[0], np.cumsum(sizes**2)]).astype(np.int64)
            else:
                Cself, offself = np.zeros(1), np.zeros(na + 1, dtype=np.int64)
            _k.aggregate(_AGG[method], C, A.packed, B.packed, Cself, offself, out)
        elif method == "ut":
            d = A.dim
            # sigma points mu_i ± sqrt(d) L_i[:, k], k = 1..d, each of weight 1/(2d)
            cols = np.sqrt(d) * A.L.transpose(0, 2, 1)  # (K, d, d): row k = column k of sqrt(d) L
            X = np.concatenate([A.M[:, None, :] + cols, A.M[:, None, :] - cols], axis=1).reshape(-1, d)
            logg = np.empty((X.shape[0], nb))
            _k.mixtures_logpdf(np.ascontiguousarray(X), B.packed, logg)
            logf = np.empty((X.shape[0], na))
            _k.mixtures_logpdf(np.ascontiguousarray(X), A.packed, logf)
            owner = np.repeat(np.arange(na), np.diff(A.off) * 2 * d)
            wpt = np.repeat(A.w, 2 * d) / (2 * d)
            own = logf[np.arange(X.shape[0]), owner]
            for a in range(na):
                rows = owner == a
                out[a] = wpt[rows] @ (own[rows][:, None] - logg[rows])
        else:
            n_samples = check_int("n_samples", n_samples, low=1)
            rng = as_rng("seed", seed)
            for a, f in enumerate(A.mixtures):
                X = f.sample(n_samples, rng)
                logg = np.empty((n_samples, nb))
                _k.mixtures_logpdf(X, B.packed, logg)
                logf = np.empty((n_samples, 1))
                sub = A.off[a:a + 2] - A.off[a]
                k0, k1 = A.off[a], A.off[a + 1]
                comps = _k.Components(A.w[k0:k1], sub, A.M[k0:k1], A.S[k0:k1], A.L[k0:k1], A.ld[k0:k1])
                _k.mixtures_logpdf(X, comps, logf)
                out[a] = np.mean(logf - logg, axis=0)
    return out


def divergence(f: GaussianMixture, g: GaussianMixture, method: str = "var", *, component: str = "kl",
               n_samples: int = 100_000, seed: int | np.random.Generator | None = None,
               threads: int | None = None) -> float:
    """Approximate ``D(f || g)`` between two mixtures (see :func:`pairwise` and the module docstring)."""
    for name, m in (("f", f), ("g", g)):
        if not isinstance(m, GaussianMixture):
            raise TypeError(f"{name} must be a GaussianMixture, got {type(m).__name__}")
    if f.dim != g.dim:
        raise ValueError(f"f and g must have the same dimension, got {f.dim} and {g.dim}")
    return float(pairwise([f], [g], method, component=component, n_samples=n_samples, seed=seed,
                          threads=threads)[0, 0])
