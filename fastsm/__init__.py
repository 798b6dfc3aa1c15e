"""fastsm: Numba-compiled Sharma–Mittal twin Gaussian processes and friends."""

from fastsm import datasets, divergences, tgp

__version__ = "0.1.0"

__all__ = ["tgp", "divergences", "datasets", "__version__"]
