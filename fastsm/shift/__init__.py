"""Covariate shift ([CS]): KLIEP importance weights by Frank–Wolfe and their σ selection.

Importance-weighted TGP is :func:`fastsm.tgp.fit` with ``sample_weight``.
"""

from fastsm.shift.kliep import SOLVERS, ImportanceWeights, weights_at
from fastsm.shift.select import SigmaSelection, default_sigmas, select_sigma, weighted_kernel_ridge
from fastsm.shift.weights import estimate_weights

__all__ = ["SOLVERS", "ImportanceWeights", "estimate_weights", "weights_at", "SigmaSelection", "select_sigma",
           "default_sigmas", "weighted_kernel_ridge"]
