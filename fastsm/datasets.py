"""Built-in data sets, each returned as ``(X_train, X_test, Y_train, Y_test)``.

The order is that of scikit-learn's ``train_test_split``; every array is 2-D.
"""

from __future__ import annotations

import numpy as np

from fastsm._validation import check_int, check_scalar


def _s_curve(y: np.ndarray) -> np.ndarray:
    return y + 0.3 * np.sin(2.0 * np.pi * y)


def toy1(seed: int = 0, *, n_train: int = 500, n_test: int = 500, noise: float = 0.05):
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
    rng = np.random.default_rng(seed)
    y_tr = rng.uniform(0.0, 1.0, n_train)
    x_tr = _s_curve(y_tr) + noise * rng.standard_normal(n_train)
    y_te = np.arange(n_test) / n_test
    x_te = _s_curve(y_te)
    return x_tr[:, None], x_te[:, None], y_tr[:, None], y_te[:, None]


def toy2(seed: int = 0, *, n_train: int = 500, n_test: int = 500, noise: float = 0.05):
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
    rng = np.random.default_rng(seed)
    y_all = rng.uniform(-1.0, 1.0, 2 * n_train)
    x_all = _s_curve(y_all) + noise * rng.standard_normal(2 * n_train)
    y_tr, x_tr = y_all[::2], x_all[::2]
    y_te = -1.0 + 2.0 * (np.arange(n_test) + 0.5) / n_test
    x_te = _s_curve(y_te)
    return x_tr[:, None], x_te[:, None], y_tr[:, None], y_te[:, None]


def random_structured(seed: int = 0, *, n_train: int = 500, n_test: int = 100, dx: int = 5, dy: int = 16,
                      noise: float = 0.05):
    """A random smooth multi-output problem: ``y = tanh(x W1) W2 + noise``.

    Used by the tests and benchmarks for the dy = 16 case.
    """
    rng = np.random.default_rng(seed)
    W1 = rng.standard_normal((dx, 8)) / np.sqrt(dx)
    W2 = rng.standard_normal((8, dy)) / np.sqrt(8)
    X = rng.standard_normal((n_train + n_test, dx))
    Y = np.tanh(X @ W1) @ W2 + noise * rng.standard_normal((n_train + n_test, dy))
    return X[:n_train], X[n_train:], Y[:n_train], Y[n_train:]
