"""Numba's cache, kept sound for kernels that call other kernels by symbol.

A kernel compiled with :func:`fastsm._kernels.shared.call` holds a declaration of its callee's
process-wide symbol (:func:`symbol`), not a copy of the callee.  Before such machine code is loaded
from Numba's cache, the callee must be compiled (or loaded) and its symbol registered: the compile
result carries a ``Load`` for each callee in its ``reload_init``, which Numba runs before it loads the
code.  A kernel that links (calls plainly) a kernel holding such a declaration holds the declaration
too, so it needs the same ``Load``.

Numba copies the ``reload_init`` of the libraries a kernel links into the kernel's own, but a library
loaded from the cache starts with an empty one (``CPUCodeLibrary._unserialize``): a kernel compiled in a
process that had loaded its callee from the cache was cached without its callee's ``Load``, and a later
process that loaded it found the symbol missing.  LLVM's dynamic linker then either aborted ("LLVM
ERROR: Symbol not found") or, when the object was finalised with the rest, recorded the error and left
*every* external relocation of the batch unapplied, so the first call through one (a CPython API
function in the kernel's wrapper) jumped to address 0: the SIGSEGV of #67, in kernels that call nothing
by symbol themselves.

:class:`KernelCache` closes both ends:

* a result loaded from the cache gets its ``reload_init`` back on its library, so every kernel that
  links it inherits its ``Load`` entries, whatever process compiled it;
* a cached result is used only if every symbol its machine code declares is registered by one of its
  ``Load`` entries, and it is the signature it was asked for (two processes compiling two signatures of
  one kernel at once can swap Numba's data files); otherwise it is a cache miss and the kernel is
  compiled again, and the cache entry replaced.  A result is saved only if the same holds.

The check reads the names in the object code, before Numba hands it to LLVM: a missing symbol never
reaches the dynamic linker, where it would poison every later link of the process.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from typing import Any

from numba.core.caching import CompileResultCacheImpl, FunctionCache
from numba.core.errors import NumbaWarning
from numba.core.registry import CPUDispatcher
from numba.core.sigutils import normalize_signature

#: Prefix of the symbols of kernels called by symbol.
SYMBOL_PREFIX = "fastsm."

_SYMBOL = re.compile(re.escape(SYMBOL_PREFIX.encode()) + rb"[A-Za-z_][A-Za-z0-9_]*\.[0-9a-f]{32}")


def symbol(module: str, name: str, argtypes: tuple) -> str:
    """The process-wide symbol of kernel ``module.name`` compiled for ``argtypes``: the same in every
    process (unlike Numba's own names, which number functions in the order a process compiles them)."""
    digest = hashlib.sha256(f"{module}.{name}{argtypes!r}".encode()).hexdigest()[:32]
    return f"{SYMBOL_PREFIX}{name}.{digest}"


def loaded_symbols(reload_init) -> set[str]:
    """The symbols the entries of a ``reload_init`` register (those with a ``symbol``)."""
    return {entry.symbol for entry in reload_init if hasattr(entry, "symbol")}


def declared_symbols(library) -> set[str]:
    """The callee symbols (:func:`symbol`) that a compiled library's code declares."""
    return {fn.name for fn in library._final_module.functions
            if fn.is_declaration and _SYMBOL.fullmatch(fn.name.encode())}


class StaleEntry(RuntimeError):
    """A cached kernel was compiled against a callee that has changed since: the entry is not used."""


class KernelCacheImpl(CompileResultCacheImpl):
    """Numba's compile-result cache, with the checks and the ``reload_init`` of the module docstring."""

    def rebuild(self, target_context, payload):
        libdata, reload_init = payload[0], payload[7]
        _, kind, data = libdata
        if kind != "object":
            return None
        if not set(m.decode() for m in _SYMBOL.findall(data[0])) <= loaded_symbols(reload_init):
            return None
        try:
            cres = super().rebuild(target_context, payload)
        except StaleEntry:
            return None
        cres.library._reload_init.update(reload_init)
        return cres

    def check_cachable(self, cres):
        missing = declared_symbols(cres.library) - loaded_symbols(cres.library._reload_init)
        if missing:
            warnings.warn(f"{cres.fndesc.qualname} is not cached: no Load registers {sorted(missing)}",
                          NumbaWarning, stacklevel=2)
            return False
        return super().check_cachable(cres)


class KernelCache(FunctionCache):
    """:class:`KernelCacheImpl`'s cache; a data file holding another signature than its index says is a miss."""

    _impl_class = KernelCacheImpl

    def _load_overload(self, sig, target_context):
        if not self._enabled:
            return None
        data = self._cache_file.load(self._index_key(sig, target_context.codegen()))
        if data is None or tuple(data[3].args) != tuple(normalize_signature(sig)[0]):
            return None
        return self._impl.rebuild(target_context, data)


class Kernel(CPUDispatcher):
    """Numba's CPU dispatcher with :class:`KernelCache` (every kernel of :func:`fastsm.config.kernel`)."""

    def enable_caching(self) -> None:
        self._cache = KernelCache(self.py_func)


class InternalKernel(Kernel):
    """A kernel compiled without a CPython wrapper (``kernel(internal=True)``): only other kernels call
    it, and a call from Python raises instead of jumping to a wrapper that is not there."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{self.py_func.__qualname__} is an internal kernel (compiled without a CPython "
                        "wrapper): call it from a kernel")
