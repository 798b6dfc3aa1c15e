"""Plain NumPy/SciPy twins of fastsm's public functions (same signatures).

They are the baseline fastsm must beat and an independent check of it.
"""

from fastsm.reference import divergences, tgp

__all__ = ["tgp", "divergences"]
