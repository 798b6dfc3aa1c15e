"""TGP hyperparameters: the one dataclass every TGP module shares (it imports nothing of the package's TGP).

Kernel widths may be given relative to the data, as scikit-learn's SVR takes
``gamma="scale"``: ``"scale"`` or ``"<factor>*scale"`` (e.g. ``"0.5*scale"``)
is resolved by :func:`scale_gamma` when a model is fitted.  The rule and its
constants were chosen by exact leave-one-out on real data (docs/realdata.md,
"Scale-aware defaults").
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fastsm._validation import check_scalar

#: ``"scale"`` for inputs: ``gamma_x = SCALE_X / m_x`` (``m``: median squared pairwise distance, :func:`scale_gamma`).
SCALE_X: float = 0.125
#: ``"scale"`` for outputs: ``gamma_y = SCALE_Y / m_y``.
SCALE_Y: float = 2.0
#: Rows over which the median pairwise distance is taken; larger sets are thinned (:func:`median_sq_distance`).
SCALE_MAX_ROWS: int = 2000

_SCALE = re.compile(r"^\s*(?:([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*\*\s*)?scale\s*$")


def scale_factor(name: str, value) -> float | None:
    """The factor of a relative width (``"scale"``: 1.0, ``"0.5*scale"``: 0.5); ``None`` for a number.

    Raises
    ------
    ValueError
        For any other string, or a factor that is not a positive finite number.
    """
    if not isinstance(value, str):
        return None
    m = _SCALE.match(value)
    if m is None:
        raise ValueError(f"{name} must be a positive number, 'scale' or '<factor>*scale' "
                         f"(e.g. '0.5*scale'), got {value!r}")
    factor = 1.0 if m.group(1) is None else float(m.group(1))
    if not (np.isfinite(factor) and factor > 0.0):
        raise ValueError(f"{name}: the factor of {value!r} must be a positive finite number")
    return factor


def _weighted_lower_median(d: np.ndarray, w: np.ndarray) -> float:
    order = np.argsort(d, kind="stable")
    cum = np.cumsum(w[order])
    return float(d[order][np.searchsorted(cum, 0.5 * cum[-1])])


def median_sq_distance(Z: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
    """Median squared distance between distinct rows of ``Z`` (pairs at distance 0 are left out).

    The lower weighted median over pairs ``i < j`` with weights
    ``w_i w_j`` (``1`` without ``sample_weight``), so that integer weights
    give exactly what the repeated rows give, and duplicate rows do not
    pull it to 0.  It depends neither on the order of the rows nor (up to
    rounding) on an offset, and scales with the square of a factor on
    ``Z``.  Above :data:`SCALE_MAX_ROWS` rows, copies of a row become one
    row weighted by their number, and if more than that many distinct rows
    remain it is taken over that many, spread evenly over them sorted
    lexicographically (so still independent of their order, and integer
    weights still equal repeated rows).  ``max |z|^2`` when every row is the same (1.0 for zeros).
    """
    from scipy.spatial.distance import pdist

    Z = np.asarray(Z, dtype=np.float64)
    n = Z.shape[0]
    w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if w is not None and n and np.all(w == w[0]):
        w = None  # equal weights are no weights (exactly, whatever their value)
    if w is not None and n:
        w = _safe_scale(w)
    if n > SCALE_MAX_ROWS:
        # thinned over the distinct rows, each weighted by its copies: repeated rows and integer
        # weights give the same set (and the same median) on either side of the threshold
        Z, inv = np.unique(Z, axis=0, return_inverse=True)
        counts = np.bincount(inv.reshape(-1), weights=None if w is None else w, minlength=Z.shape[0])
        w = None if w is None and np.all(counts == 1.0) else counts.astype(np.float64)
        if w is not None:
            w = _safe_scale(w)
        n = Z.shape[0]
    if n > SCALE_MAX_ROWS:
        order = np.lexsort(Z.T[::-1])
        keep = order[np.linspace(0, n - 1, SCALE_MAX_ROWS).round().astype(np.int64)]
        Z, w = Z[keep], None if w is None else w[keep]
        n = SCALE_MAX_ROWS
    if n < 2:
        return _no_distance(Z)
    d = pdist(Z, "sqeuclidean")
    if w is None:
        d = d[d > 0.0]
        return float(np.partition(d, (d.size - 1) // 2)[(d.size - 1) // 2]) if d.size else _no_distance(Z)
    i, j = np.triu_indices(n, 1)
    pw = w[i] * w[j]
    pos = (d > 0.0) & (pw > 0.0)
    if not pos.any():
        return _no_distance(Z)
    return _weighted_lower_median(d[pos], pw[pos])


def _safe_scale(w: np.ndarray) -> np.ndarray:
    """``w``, or beyond ``2^+-400`` ``w`` divided by a power of two (exact): ``w_i w_j`` cannot overflow."""
    return w if 2.0**-400 < w.max() < 2.0**400 else np.ldexp(w, -np.frexp(w.max())[1])


def _no_distance(Z: ArrayLike) -> float:
    """The median's stand-in when all rows are equal: ``max |z|^2``, which scales with the data as the
    median does (1.0 for all-zero rows)."""
    Z = np.asarray(Z)
    top = float(np.max(np.abs(Z))) ** 2 if Z.size else 0.0
    return top if 0.0 < top < np.inf else 1.0


def scale_gamma(Z: ArrayLike, factor: float = 1.0, sample_weight: ArrayLike | None = None) -> float:
    """``factor / median_sq_distance(Z)``.

    ``gamma_x="f*scale"`` resolves to ``scale_gamma(X, f * SCALE_X)`` and
    ``gamma_y="f*scale"`` to ``scale_gamma(Y, f * SCALE_Y)``.
    """
    return float(factor) / median_sq_distance(Z, sample_weight)


@dataclass(frozen=True)
class TGPParams:
    """Hyperparameters of KLTGP, IKLTGP and SMTGP.

    Kernels are ``k(a, b) = exp(-gamma ||a - b||^2) + lambda [a is b]``, the
    convention of scikit-learn's ``rbf_kernel`` and Bo & Sminchisescu's
    ``kparam``: the papers' width ``2 rho^2`` is ``1 / gamma`` ([SM] Table 1,
    Toy 1: ``2 rho_x^2 = 5, 2 rho_y^2 = 0.05`` is ``gamma_x = 0.2, gamma_y = 20``).

    Parameters
    ----------
    gamma_x, gamma_y : float or str
        RBF inverse widths of the input and output kernels (> 0), or
        relative to the training data: ``"scale"`` is
        ``SCALE_X / m_x`` for the inputs and ``SCALE_Y / m_y`` for the
        outputs, with ``m`` the median squared distance between training
        rows (:func:`median_sq_distance`); ``"f*scale"`` multiplies that by
        ``f``.  Resolved to numbers by :meth:`resolve` when a model is
        fitted (``model.params`` holds numbers).  The default, ``"scale"``,
        makes predictions independent of the units of ``X`` and ``Y``.
    lambda_x, lambda_y : float
        Diagonal regularisers of ``K_X`` and ``K_Y`` (>= 0), in units of the
        kernels' unit variance -- so independent of the data's units.
    alpha : float
        SM order, ``0 < alpha < 1`` (weight of ``K_Y`` in ``K_XY``, [SM] Eq. 22).
    beta : float
        SM degree, ``beta > 0``; ``beta == 1`` is the Rényi limit.
    """

    gamma_x: float | str = "scale"
    gamma_y: float | str = "scale"
    lambda_x: float = 1e-3
    lambda_y: float = 1e-3
    alpha: float = 0.9
    beta: float = 1.5

    def __post_init__(self) -> None:
        for name in ("gamma_x", "gamma_y"):
            value = getattr(self, name)
            if scale_factor(name, value) is None:
                object.__setattr__(self, name, check_scalar(name, value, low=0.0, low_open=True))
            else:
                object.__setattr__(self, name, value.strip())
        for name in ("lambda_x", "lambda_y"):
            object.__setattr__(self, name, check_scalar(name, getattr(self, name), low=0.0))
        object.__setattr__(
            self, "alpha", check_scalar("alpha", self.alpha, low=0.0, high=1.0, low_open=True, high_open=True)
        )
        object.__setattr__(self, "beta", check_scalar("beta", self.beta, low=0.0, low_open=True))

    @property
    def resolved(self) -> bool:
        """Whether both widths are numbers (not ``"scale"``)."""
        return not (isinstance(self.gamma_x, str) or isinstance(self.gamma_y, str))

    def widths(self) -> tuple[float, float]:
        """``(gamma_x, gamma_y)`` as numbers; a :class:`ValueError` while either is still ``"scale"``."""
        gx, gy = self.gamma_x, self.gamma_y
        if isinstance(gx, str) or isinstance(gy, str):
            raise ValueError(f"the widths are relative to training data ({gx!r}, {gy!r}): resolve() them first")
        return gx, gy

    def resolve(self, X: ArrayLike, Y: ArrayLike, sample_weight: ArrayLike | None = None) -> TGPParams:
        """These parameters with ``"scale"`` widths turned into numbers for training data ``X``, ``Y``.

        ``sample_weight`` weighs the pairs of the median (integer weights
        act as repeated rows).  Numbers are returned unchanged.
        """
        if self.resolved:
            return self
        out = {}
        for name, Z, const in (("gamma_x", X, SCALE_X), ("gamma_y", Y, SCALE_Y)):
            f = scale_factor(name, getattr(self, name))
            if f is not None:
                out[name] = scale_gamma(Z, f * const, sample_weight)
        return dataclasses.replace(self, **out)


#: [SM] Table 1's Toy 1 values (2 rho_x^2 = 5, 2 rho_y^2 = 0.05, lambda = 1e-4, alpha = 0.9, beta = 1.5): the
#: defaults before ``"scale"``, and the paper's and Bo & Sminchisescu's settings for their toys.
TOY1_PARAMS = TGPParams(gamma_x=0.2, gamma_y=20.0, lambda_x=1e-4, lambda_y=1e-4, alpha=0.9, beta=1.5)
