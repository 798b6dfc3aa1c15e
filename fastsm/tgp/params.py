"""TGP hyperparameters: the one dataclass every TGP module shares (it imports nothing of the package's TGP)."""

from __future__ import annotations

from dataclasses import dataclass

from fastsm._validation import check_scalar


@dataclass(frozen=True)
class TGPParams:
    """Hyperparameters of KLTGP, IKLTGP and SMTGP.

    Kernels are ``k(a, b) = exp(-gamma ||a - b||^2) + lambda [a is b]``, the
    convention of scikit-learn's ``rbf_kernel`` and Bo & Sminchisescu's
    ``kparam``: the papers' width ``2 rho^2`` is ``1 / gamma`` ([SM] Table 1,
    Toy 1: ``2 rho_x^2 = 5, 2 rho_y^2 = 0.05`` is ``gamma_x = 0.2, gamma_y = 20``).

    Parameters
    ----------
    gamma_x, gamma_y : float
        RBF inverse widths of the input and output kernels (> 0).
    lambda_x, lambda_y : float
        Diagonal regularisers of ``K_X`` and ``K_Y`` (>= 0).
    alpha : float
        SM order, ``0 < alpha < 1`` (weight of ``K_Y`` in ``K_XY``, [SM] Eq. 22).
    beta : float
        SM degree, ``beta > 0``; ``beta == 1`` is the Rényi limit.
    """

    gamma_x: float = 0.2
    gamma_y: float = 20.0
    lambda_x: float = 1e-4
    lambda_y: float = 1e-4
    alpha: float = 0.9
    beta: float = 1.5

    def __post_init__(self) -> None:
        for name in ("gamma_x", "gamma_y"):
            object.__setattr__(self, name, check_scalar(name, getattr(self, name), low=0.0, low_open=True))
        for name in ("lambda_x", "lambda_y"):
            object.__setattr__(self, name, check_scalar(name, getattr(self, name), low=0.0))
        object.__setattr__(
            self, "alpha", check_scalar("alpha", self.alpha, low=0.0, high=1.0, low_open=True, high_open=True)
        )
        object.__setattr__(self, "beta", check_scalar("beta", self.beta, low=0.0, low_open=True))
