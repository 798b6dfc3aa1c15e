"""Kernels compiled once and called by symbol: :func:`call`.

Numba compiles a kernel that other kernels call into a library of its own, and then links a copy of
that library into every caller, where LLVM optimises it and emits its machine code again (and once
more in the caller's callers).  Before this module, the demo's first prediction compiled 74 000 lines
of LLVM IR for 40 000 lines of distinct functions: ``exp_neg_scaled`` seven times, the Hessian's
``_assemble`` three times, every step of the optimiser twice (docs/performance.md, "Kernels called
by symbol").

``call(kernel, *args)`` in a kernel calls ``kernel`` (a kernel of :func:`fastsm.config.kernel`)
through a symbol of its own instead: the caller's module declares it, the process resolves it to
the one compiled copy (as it resolves LAPACK's ``dpotrf``, :mod:`fastsm._kernels.linalg`), and
nothing is linked.  The callee's machine code is the code it runs alone; the call costs what a
call to a function LLVM did not inline costs.  It suits kernels that do O(N) work or more per call,
or that several kernels call: not a leaf of a few flops in a hot loop, which LLVM should inline.

A caller loaded from Numba's cache in a later process holds no copy either, so the callee must be
compiled (or loaded from the cache) and its symbol registered before the caller's machine code is
loaded: the caller's compile result records a :class:`Load` of each callee, which Numba runs before
it loads the caller (``reload_init``), and which a caller's own callers inherit when they link it,
whether they compiled it or loaded it from the cache (:mod:`fastsm._cache`, which also refuses a
cached result whose code declares a symbol that none of its ``Load`` entries registers).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

import llvmlite.binding as llvm
from numba.core import cgutils, types
from numba.extending import intrinsic

from fastsm._cache import StaleEntry, symbol


class Load(NamedTuple):
    """Compile ``module.name`` for ``argtypes`` (or load it from the cache) and register its
    :func:`symbol`; run before a caller compiled with :func:`call` is loaded from the cache.

    ``restype`` is the return type the caller was compiled against: a callee that now returns
    another type (its source changed, the caller's cached code did not) raises
    :class:`~fastsm._cache.StaleEntry` instead of being called with the wrong layout, and the cache
    compiles the caller again."""

    module: str
    name: str
    argtypes: tuple
    restype: Any

    @property
    def symbol(self) -> str:
        """The symbol this registers."""
        return symbol(self.module, self.name, self.argtypes)

    def __call__(self) -> None:
        kernel = getattr(importlib.import_module(self.module), self.name)
        restype = register(kernel, self.argtypes)
        if restype != self.restype:
            raise StaleEntry(f"{self.module}.{self.name} now returns {restype}, but a kernel in Numba's cache was "
                             f"compiled against {self.restype}: that kernel is compiled again")


def register(kernel: Any, argtypes: tuple) -> Any:
    """Compile ``kernel`` for ``argtypes`` (a no-op if it is) and register its :func:`symbol` at its
    native entry; returns its return type."""
    kernel.compile(argtypes)
    cres = kernel.overloads[argtypes]
    address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    if not address:
        raise RuntimeError(f"{kernel.py_func.__qualname__}{argtypes} has no native entry to register")
    llvm.add_symbol(symbol(kernel.py_func.__module__, kernel.py_func.__name__, argtypes), address)
    return cres.signature.return_type


def _compile(typingctx: Any, kernel: Any, argtypes: tuple) -> Any:
    """Compile the kernel of the dispatcher type ``kernel`` for ``argtypes`` (or load it) and :func:`register`
    it; returns its return type."""
    # typed as a plain call first: compiled from here instead, the callee's own callees took 0.5 s more each
    typingctx.resolve_function_type(kernel, argtypes, {})
    return register(kernel.dispatcher, argtypes)


def before_emit(library: Any, action: Callable[[], None]) -> None:
    """Run ``action`` when ``library`` (a Numba code library being compiled) has been optimised, before its module
    goes to the JIT: the last moment a symbol its code calls can be registered.  Numba's JIT emits every module
    added to it when any library is finalised, so the symbols must be there before the module is added
    (``_finalize_final_module``)."""
    pending = library.__dict__.get("_fastsm_before_emit")
    if pending is None:
        pending = library._fastsm_before_emit = []
        finalize = library._finalize_final_module

        def finalize_final_module() -> None:
            while pending:
                pending.pop(0)()
            finalize()

        library._finalize_final_module = finalize_final_module
    pending.append(action)


@intrinsic
def call(typingctx, kernel, *args):
    """``kernel(*args)`` through ``kernel``'s :func:`symbol`: compiled once, not linked into the caller
    (module docstring).

    A kernel with a declared result type (``fastsm.config.kernel(result=...)``) not yet compiled for
    ``args`` is compiled, or loaded, only when the caller's code has been generated and optimised
    (:func:`before_emit`): the caller's typing, lowering and LLVM passes do not wait for it (nor for a
    helper process compiling it, :mod:`fastsm._prefetch`)."""
    disp = kernel.dispatcher
    argtypes = tuple(args)
    declared = disp.result_type is not None and argtypes not in disp.overloads
    restype = disp.result_type(argtypes) if declared else _compile(typingctx, kernel, argtypes)
    module, name = disp.py_func.__module__, disp.py_func.__name__
    load = Load(module, name, argtypes, restype)

    def compile_declared() -> None:
        compiled = _compile(disp.typingctx, kernel, argtypes)
        if compiled != restype:
            raise TypeError(f"{disp.py_func.__qualname__}{argtypes} returns {compiled}, not its declared result "
                            f"type {restype}")

    def codegen(context, builder, sig, llargs):
        library = context.active_code_library
        library._reload_init.add(load)
        if declared:
            before_emit(library, compile_declared)
        fnty = context.call_conv.get_function_type(restype, argtypes)
        fn = cgutils.get_or_insert_function(builder.module, fnty, symbol(module, name, argtypes))
        values = cgutils.unpack_tuple(builder, llargs[1], len(argtypes))
        status, result = context.call_conv.call_function(builder, fn, restype, argtypes, values)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return result

    return restype(kernel, types.StarArgTuple.from_types(argtypes)), codegen
