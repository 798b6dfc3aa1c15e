"""fastsm: Numba-compiled Sharma–Mittal twin Gaussian processes, SM divergences and GMM similarity."""

import numba as _numba

#: The oldest Numba release fastsm runs on (pyproject.toml's floor): its kernel cache keeps the callees' loads
#: on each compiled library (``CodeLibrary._reload_init``), which Numba 0.63 introduced (fastsm/_cache.py).
_NUMBA_FLOOR = (0, 63)

_numba_release = tuple(int("".join(c for c in part if c.isdigit()) or 0) for part in _numba.__version__.split(".")[:2])
if _numba_release < _NUMBA_FLOOR:
    raise ImportError(f"fastsm needs Numba >= {_NUMBA_FLOOR[0]}.{_NUMBA_FLOOR[1]}, and Numba {_numba.__version__} is "
                      f"installed: pip install 'numba>={_NUMBA_FLOOR[0]}.{_NUMBA_FLOOR[1]}'")
if _numba.config.DISABLE_JIT:  # type: ignore[attr-defined]
    raise ImportError("fastsm's kernels need Numba's compiler, and NUMBA_DISABLE_JIT=1 turns it off (their LAPACK "
                      "bindings and calls between kernels have no pure-Python form): unset NUMBA_DISABLE_JIT")

from fastsm._threads import configure_threading_layer as _configure_threading_layer  # noqa: E402

_configure_threading_layer()  # before any parallel kernel runs: TBB, else workqueue (never GNU OpenMP)

import importlib  # noqa: E402
from types import ModuleType as _ModuleType  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

from fastsm import divergences, tgp  # noqa: E402
from fastsm._threads import threading_layer  # noqa: E402
from fastsm.exceptions import CacheWarning, ExtrapolationWarning  # noqa: E402

if TYPE_CHECKING:
    from fastsm import datasets, gmm, shift

#: Subpackages imported on first use (``fastsm.shift`` ...): together ~0.13 s of ``import fastsm``.
_ON_FIRST_USE = ("datasets", "gmm", "shift")


def __getattr__(name: str) -> _ModuleType:
    if name in _ON_FIRST_USE:
        return importlib.import_module(f"fastsm.{name}")
    raise AttributeError(f"module 'fastsm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ON_FIRST_USE))


__version__ = "0.2.0"

__all__ = ["tgp", "shift", "divergences", "gmm", "datasets", "threading_layer", "CacheWarning", "ExtrapolationWarning",
           "__version__"]
