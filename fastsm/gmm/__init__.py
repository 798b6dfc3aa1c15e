"""Similarity between Gaussian mixtures ([GMM] §2): KL and SM-family approximations."""

from fastsm.gmm.measures import component_divergences, divergence, pairwise
from fastsm.gmm.mixture import GaussianMixture

__all__ = ["GaussianMixture", "component_divergences", "divergence", "pairwise"]
