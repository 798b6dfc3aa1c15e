"""fastsm: Numba-compiled Sharma–Mittal twin Gaussian processes, SM divergences and GMM similarity."""

from fastsm import datasets, divergences, gmm, tgp

__version__ = "0.1.0"

__all__ = ["tgp", "divergences", "gmm", "datasets", "__version__"]
