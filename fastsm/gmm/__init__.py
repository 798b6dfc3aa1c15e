"""Similarity between Gaussian mixtures ([GMM]): KL / SM-family approximations and GMM-NPE."""

from fastsm.gmm.measures import component_divergences, divergence, pairwise
from fastsm.gmm.mixture import GaussianMixture
from fastsm.gmm.npe import NPEEmbedding, embed_components, fit_npe, npe_distance, npe_pairwise, transform

__all__ = [
    "GaussianMixture", "component_divergences", "divergence", "pairwise",
    "NPEEmbedding", "embed_components", "fit_npe", "transform", "npe_distance", "npe_pairwise",
]
