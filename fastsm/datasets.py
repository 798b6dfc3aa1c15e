"""Built-in data sets, each returned as ``(X_train, X_test, Y_train, Y_test)``.

The order is that of scikit-learn's ``train_test_split``; every array is 2-D.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from fastsm._validation import as_rng, check_int, check_scalar

if TYPE_CHECKING:
    from fastsm.gmm import GaussianMixture

__all__ = ["toy1", "toy2", "random_structured", "smooth_manifold", "gmm_manifold", "covariate_shift_toy", "ShiftData",
           "digits_reconstruction", "center_mask", "linnerud"]


class ShiftData(NamedTuple):
    """A covariate-shift data set: unpacks as ``X_train, X_test, Y_train, Y_test, ratio_train``."""

    X_train: np.ndarray
    X_test: np.ndarray
    Y_train: np.ndarray
    Y_test: np.ndarray
    ratio_train: np.ndarray  # true p_te(x) / p_tr(x) at the training inputs

def _s_curve(y: np.ndarray) -> np.ndarray:
    return y + 0.3 * np.sin(2.0 * np.pi * y)


def toy1(seed: int = 0, *, n_train: int = 500, n_test: int = 500, noise: float = 0.05) -> tuple[np.ndarray,
         np.ndarray, np.ndarray, np.ndarray]:
    """Bo & Sminchisescu's S-shaped toy ([SM] §5.1.1, Toy 1).

    Training outputs ``y ~ U(0, 1)``, inputs ``x = y + 0.3 sin(2 pi y) +
    noise * N(0, 1)``.  Test outputs are equally spaced in **y**
    (``0, 1/n_test, ..., 1 - 1/n_test``; 0, 0.002, ..., 0.998 by default)
    with noise-free inputs, so the truth of every test input is known: the
    curve is multi-valued in x, and equally spaced *inputs* (as [SM]'s text
    says) would have no single true output.  This is the setting of Bo &
    Sminchisescu's code, where the published 0.116 comes from.  [SM]'s text
    (250 training points, sigma = 0.005) is ``toy1(n_train=250, noise=0.005)``.

    Parameters
    ----------
    seed : int
        Seed of ``numpy.random.default_rng``.
    n_train, n_test : int
        Sizes of the two sets.
    noise : float
        Standard deviation of the input noise.
    """
    check_int("n_train", n_train, low=1)
    check_int("n_test", n_test, low=1)
    noise = check_scalar("noise", noise, low=0.0)
    rng = as_rng("seed", seed)
    y_tr = rng.uniform(0.0, 1.0, n_train)
    x_tr = _s_curve(y_tr) + noise * rng.standard_normal(n_train)
    y_te = np.arange(n_test) / n_test
    x_te = _s_curve(y_te)
    return x_tr[:, None], x_te[:, None], y_tr[:, None], y_te[:, None]


def toy2(seed: int = 0, *, n_train: int = 500, n_test: int = 500, noise: float = 0.05) -> tuple[np.ndarray,
         np.ndarray, np.ndarray, np.ndarray]:
    """The double S of [SM] §5.1.2 (Toy 2).

    Two S shapes concatenated: ``y ~ U(-1, 1)`` with the Toy 1 map
    ``x = y + 0.3 sin(2 pi y) + noise N(0, 1)``, which on ``(-1, 0)`` is the
    Toy 1 S shifted by -1 in both x and y.  Choices the text leaves open,
    documented here: ``2 n_train`` points are drawn (``n_train`` per S, as in
    Toy 1) and down-sampled by 2 (every second point of the draw), so the
    training set has ``n_train`` points on twice the range; the noise is
    Toy 1's; the ``n_test`` test outputs are equally spaced in ``(-1, 1)``
    (``-1 + 2 (i + 0.5) / n_test``) with noise-free inputs, for the same
    reason as in :func:`toy1`.
    """
    check_int("n_train", n_train, low=1)
    check_int("n_test", n_test, low=1)
    noise = check_scalar("noise", noise, low=0.0)
    rng = as_rng("seed", seed)
    y_all = rng.uniform(-1.0, 1.0, 2 * n_train)
    x_all = _s_curve(y_all) + noise * rng.standard_normal(2 * n_train)
    y_tr, x_tr = y_all[::2], x_all[::2]
    y_te = -1.0 + 2.0 * (np.arange(n_test) + 0.5) / n_test
    x_te = _s_curve(y_te)
    return x_tr[:, None], x_te[:, None], y_tr[:, None], y_te[:, None]


def random_structured(seed: int = 0, *, n_train: int = 500, n_test: int = 100, dx: int = 5, dy: int = 16,
                      noise: float = 0.05) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A random smooth multi-output problem: ``y = tanh(x W1) W2 + noise``.

    Used by the tests and benchmarks for the dy = 16 case.
    """
    rng = as_rng("seed", seed)
    W1 = rng.standard_normal((dx, 8)) / np.sqrt(dx)
    W2 = rng.standard_normal((8, dy)) / np.sqrt(8)
    X = rng.standard_normal((n_train + n_test, dx))
    Y = np.tanh(X @ W1) @ W2 + noise * rng.standard_normal((n_train + n_test, dy))
    return X[:n_train], X[n_train:], Y[:n_train], Y[n_train:]


def smooth_manifold(seed: int = 0, *, n_train: int = 2000, n_test: int = 500, dx: int = 10, dy: int = 8,
                    latent: int = 3, noise: float = 0.01) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A large-N structured-regression set: inputs and outputs on a ``latent``-dimensional manifold.

    Like pose data (image features and joint angles, both driven by a few
    degrees of freedom): a latent state ``u ~ U[0, 1]^latent`` drives
    ``dx`` input features ``x_j = sin(u . a_j + b_j) + noise * N(0, 1)``
    and ``dy`` outputs ``y_k = cos(u . c_k + e_k)``, with frequencies
    ``a_j, c_k ~ N(0, 2^2 I)`` and phases ``b_j, e_k ~ U[0, 2 pi)`` drawn
    once from ``seed``.  The outputs are noise-free, so the test error is
    the regression's own.  Used for KNN-local TGP at ``n_train = 100 000``
    (``benchmarks/local_large.py``, ``docs/scale.md``).

    Parameters
    ----------
    seed : int
        Seed of ``numpy.random.default_rng`` (the maps and the samples).
    n_train, n_test : int
    dx, dy : int
        Input features and outputs.
    latent : int
        Dimension of the manifold.
    noise : float
        Standard deviation of the input noise.
    """
    n_train = check_int("n_train", n_train, low=1)
    n_test = check_int("n_test", n_test, low=1)
    dx = check_int("dx", dx, low=1)
    dy = check_int("dy", dy, low=1)
    latent = check_int("latent", latent, low=1)
    noise = check_scalar("noise", noise, low=0.0)
    rng = as_rng("seed", seed)
    A = 2.0 * rng.standard_normal((latent, dx))
    b = rng.uniform(0.0, 2.0 * np.pi, dx)
    C = 2.0 * rng.standard_normal((latent, dy))
    e = rng.uniform(0.0, 2.0 * np.pi, dy)
    U = rng.uniform(0.0, 1.0, (n_train + n_test, latent))
    X = np.sin(U @ A + b) + noise * rng.standard_normal((n_train + n_test, dx))
    Y = np.cos(U @ C + e)
    return X[:n_train], X[n_train:], Y[:n_train], Y[n_train:]


def _diag_dominant_spd(rng, d: int, eps: float) -> np.ndarray:
    """[GMM] §5.1: iid U(0,1), symmetrised, diagonal replaced by the off-diagonal row sums, plus eps I."""
    A = rng.uniform(0.0, 1.0, (d, d))
    A = 0.5 * (A + A.T)
    np.fill_diagonal(A, 0.0)
    np.fill_diagonal(A, A.sum(axis=1))
    return A + eps * np.eye(d)


def gmm_manifold(
    d: int = 10,
    K: int = 1,
    *,
    l: int = 1,
    t_range: tuple[float, float] = (0.0, 5.0),
    shifted_means: bool = False,
    n_gaussians: int = 800,
    n_mixtures: int = 200,
    a: float = 1.0,
    b: float = 0.0,
    c: float = 0.0,
    eps: float = 1e-5,
    seed: int = 0,
) -> tuple[list[GaussianMixture], np.ndarray]:
    """Synthetic two-class Gaussian mixtures on a low-dimensional manifold ([GMM] §5.1).

    Returns ``(mixtures, labels)``: ``n_mixtures`` :class:`fastsm.gmm.GaussianMixture`
    of ``K`` equally weighted components in R^d, and their class (0 or 1).

    Covariances lie on the curve (Eq. 20, ``l = 1``)
    ``F(t) = a t^2 A2/||A2|| + b t A1/||A1|| + c I`` or the surface (Eq. 21,
    ``l = 2``) ``F(t1, t2) = a (t1^2 + t2^2) A2/||A2|| + b (t1 + t2) A1/||A1|| + c I``
    with ``t`` uniform in ``t_range``; ``A1``, ``A2`` are the paper's
    diagonally dominant random matrices.  Choices the text leaves open,
    documented here:

    * two classes, each with its **own** pair ``(A1, A2)`` (its own curve);
      the pool of ``n_gaussians`` Gaussians is split equally between them and
      so are the ``n_mixtures`` mixtures, whose components are drawn uniformly
      without replacement from their class's pool;
    * ``||.||`` is the Frobenius norm; ``c`` multiplies the identity;
    * ``eps I`` (the paper's 1e-5) is added to ``F(t)`` as well, because with
      the paper's ``a = 1, b = c = 0`` the curve passes through the zero matrix
      at ``t = 0``; for ``b != 0`` and ``t < 0``, ``F(t)`` can be indefinite, in
      which case its eigenvalues are clipped at ``eps``;
    * means: zero, or (``shifted_means``) ``0`` for class 0 and ``10 h``,
      ``h ~ U(0,1)^d``, for class 1.
    """
    check_int("d", d, low=1)
    check_int("K", K, low=1)
    if l not in (1, 2):
        raise ValueError(f"l must be 1 or 2, got {l}")
    r1, r2 = (check_scalar("t_range[0]", t_range[0]), check_scalar("t_range[1]", t_range[1]))
    if not r1 < r2:
        raise ValueError(f"t_range must be increasing, got {t_range}")
    rng = as_rng("seed", seed)
    per_class = n_gaussians // 2
    if K > per_class:
        raise ValueError(f"K = {K} exceeds the {per_class} Gaussians per class")
    from fastsm.gmm import GaussianMixture

    pools = []
    for cls in (0, 1):
        A1, A2 = _diag_dominant_spd(rng, d, eps), _diag_dominant_spd(rng, d, eps)
        A1, A2 = A1 / np.linalg.norm(A1), A2 / np.linalg.norm(A2)
        if l == 1:
            t = rng.uniform(r1, r2, per_class)
            quad, lin = t**2, t
        else:
            t1, t2 = rng.uniform(r1, r2, (2, per_class))
            quad, lin = t1**2 + t2**2, t1 + t2
        S = a * quad[:, None, None] * A2 + b * lin[:, None, None] * A1 + (c + eps) * np.eye(d)
        w, V = np.linalg.eigh(S)
        S = np.einsum("kij,kj,klj->kil", V, np.maximum(w, eps), V)
        S = 0.5 * (S + S.transpose(0, 2, 1))
        mean = 10.0 * rng.uniform(0.0, 1.0, d) if (shifted_means and cls == 1) else np.zeros(d)
        pools.append((S, mean))
    mixtures, labels = [], []
    for i in range(n_mixtures):
        cls = i % 2
        S, mean = pools[cls]
        idx = rng.choice(per_class, size=K, replace=False)
        mixtures.append(GaussianMixture(np.full(K, 1.0 / K), np.tile(mean, (K, 1)), S[idx]))
        labels.append(cls)
    return mixtures, np.array(labels)


def _normal_pdf(x: np.ndarray, mean: float, sd: float) -> np.ndarray:
    return np.exp(-0.5 * ((x - mean) / sd) ** 2) / (sd * np.sqrt(2.0 * np.pi))


def covariate_shift_toy(n_train: int = 500, n_test: int = 300, seed: int = 0, *, noise: float = 0.1) -> ShiftData:
    """The synthetic covariate-shift problem of [CS] §III-D.

    ``y = -2 x^3 + 3 sinc(x) + 1 + eps``, ``eps ~ N(0, noise^2)`` (0.1 in the
    paper), training inputs ``x ~ N(0.5, 0.5^2)``, test inputs
    ``x ~ N(0, 0.3^2)``.  ``sinc`` is the normalised ``sin(pi x) / (pi x)``
    (MATLAB's and NumPy's; the paper does not say).  Test outputs carry the
    same noise.

    Returns
    -------
    ShiftData
        ``X_train (n_train, 1), X_test (n_test, 1), Y_train, Y_test`` and
        ``ratio_train``, the true density ratio ``p_te / p_tr`` at the
        training inputs.
    """
    check_int("n_train", n_train, low=1)
    check_int("n_test", n_test, low=1)
    noise = check_scalar("noise", noise, low=0.0)
    rng = as_rng("seed", seed)
    x_tr = rng.normal(0.5, 0.5, n_train)
    x_te = rng.normal(0.0, 0.3, n_test)

    def f(x):
        return -2.0 * x**3 + 3.0 * np.sinc(x) + 1.0

    y_tr = f(x_tr) + noise * rng.standard_normal(n_train)
    y_te = f(x_te) + noise * rng.standard_normal(n_test)
    ratio = _normal_pdf(x_tr, 0.0, 0.3) / _normal_pdf(x_tr, 0.5, 0.5)
    return ShiftData(x_tr[:, None], x_te[:, None], y_tr[:, None], y_te[:, None], ratio)


def _sklearn_loader(name: str):
    try:
        import sklearn.datasets as skd
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"{name} reads a data set shipped with scikit-learn: pip install 'fastsm[sklearn]'") from exc
    return skd


def digits_reconstruction(center: int = 4, seed: int = 0, *, test_size: float = 0.5) -> tuple[np.ndarray, np.ndarray,
                          np.ndarray, np.ndarray]:
    """Image reconstruction on scikit-learn's handwritten digits ([SM] §5.1.3 on 8×8 images).

    Predict the central ``center × center`` pixels of each 8×8 digit from the
    other ``64 - center**2`` pixels, as [SM] §5.1.3 predicts the central 16
    pixels of 16×16 USPS digits from the outer 240.  The 1797 images of
    :func:`sklearn.datasets.load_digits` (shipped with scikit-learn, no
    download) are scaled from 0…16 to [-1, 1] (USPS's range in [SM]) and split
    at random into training and test halves; labels are not used.

    Parameters
    ----------
    center : {2, 4}
        Side of the central square predicted.
    seed : int
        Seed of the split.
    test_size : float
        Share of the images in the test set, in (0, 1).

    Returns
    -------
    X_train, X_test : ndarray, shape (n, 64 - center**2)
        The outer pixels, row by row.
    Y_train, Y_test : ndarray, shape (n, center**2)
        The central pixels, row by row.
    """
    if check_int("center", center, low=1) not in (2, 4):
        raise ValueError(f"center must be 2 or 4, got {center!r}")
    test_size = check_scalar("test_size", test_size, low=0.0, high=1.0, low_open=True, high_open=True)
    images = _sklearn_loader("digits_reconstruction").load_digits().images / 8.0 - 1.0
    mask = center_mask(center)
    X, Y = images[:, ~mask], images[:, mask]
    n = len(images)
    n_test = int(round(test_size * n))
    if not 1 <= n_test <= n - 1:
        raise ValueError(f"test_size must leave at least one of the {n} images on each side, got {test_size}")
    perm = as_rng("seed", seed).permutation(n)
    te, tr = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    return X[tr], X[te], Y[tr], Y[te]


def center_mask(center: int, side: int = 8) -> np.ndarray:
    """Boolean ``side × side`` mask of the central ``center × center`` pixels (``side - center`` even)."""
    side = check_int("side", side, low=1)
    center = check_int("center", center, low=1)
    if center > side or (side - center) % 2:
        raise ValueError(f"center must be <= side and differ from it by an even number, got {center} and {side}")
    lo = (side - center) // 2
    mask = np.zeros((side, side), dtype=bool)
    mask[lo:lo + center, lo:lo + center] = True
    return mask


def linnerud():
    """The Linnerud physical-exercise data (20 men; scikit-learn's :func:`~sklearn.datasets.load_linnerud`).

    Three exercise counts (chins, situps, jumps) as inputs and three
    physiological measurements (weight, waist, pulse) as outputs; no split
    (20 points: evaluate by leave-one-out).

    Returns
    -------
    X : ndarray, shape (20, 3)
    Y : ndarray, shape (20, 3)
    """
    data = _sklearn_loader("linnerud").load_linnerud()
    return np.asarray(data.data, dtype=np.float64), np.asarray(data.target, dtype=np.float64)
