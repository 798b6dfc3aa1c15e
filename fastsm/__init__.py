"""fastsm: Numba-compiled Sharma–Mittal twin Gaussian processes, SM divergences and GMM similarity."""

import numba as _numba

if _numba.config.DISABLE_JIT:  # type: ignore[attr-defined]
    raise ImportError("fastsm's kernels need Numba's compiler, and NUMBA_DISABLE_JIT=1 turns it off (their LAPACK "
                      "bindings and calls between kernels have no pure-Python form): unset NUMBA_DISABLE_JIT")

from fastsm._threads import configure_threading_layer as _configure_threading_layer  # noqa: E402

_configure_threading_layer()  # before any parallel kernel runs: TBB, else workqueue (never GNU OpenMP)

from fastsm import datasets, divergences, gmm, shift, tgp  # noqa: E402
from fastsm._threads import threading_layer  # noqa: E402
from fastsm.exceptions import CacheWarning, ExtrapolationWarning  # noqa: E402

__version__ = "0.2.0"

__all__ = ["tgp", "shift", "divergences", "gmm", "datasets", "threading_layer", "CacheWarning", "ExtrapolationWarning",
           "__version__"]
