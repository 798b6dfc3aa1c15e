"""``msub(c, a, b) = c - a b`` rounded once where the compile target has fused multiply-add.

The row loops of :mod:`fastsm._kernels.tri_rows` take every term of a product or substitution as
one multiply-subtract, and :func:`fastsm._kernels.linalg.factor_symmetric` every term of its updates
(:func:`vmsub`: eight lanes).  Rounded once (one FMA instruction), that is one instruction instead of two
on the FP ports: on CPUs whose FP ports all multiply and add (Intel's), the unfused loops ran at
half the rate of OpenBLAS's FMA kernels (#68).  The choice is LLVM's ``llvm.fma`` intrinsic, written
out, not the ``contract`` fast-math flag: with the flag LLVM fuses where it likes, and a kernel
compiled in the process and the same kernel loaded from the cache rounded differently
(:data:`fastsm.config.FASTMATH_FLAGS`); here every call is fused, or none is.

Where the compile target lacks FMA (x86-64 before Haswell and Piledriver, or ``NUMBA_CPU_FEATURES``
without ``+fma``) ``llvm.fma`` would become a call to the C library's software ``fma``, so ``msub``
is an ordinary product and difference there, two roundings.  Which one a process uses is fixed by
its compile target (:func:`fused`); Numba's cache keys every entry on that target's features, so a
cached kernel never mixes the two.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core import codegen as numba_codegen
from numba.extending import intrinsic

from fastsm._kernels.simd import vec8


def _target_features(context) -> str:
    features = getattr(context.codegen(), "_tm_features", None)
    return numba_codegen.get_host_cpu_features() if features is None else features


def _fuses(features: str) -> bool:
    return "+fma" in features.split(",")


def fused() -> bool:
    """Whether :func:`msub` rounds once in this process's kernels (their compile target has FMA)."""
    from numba.core.registry import cpu_target

    return _fuses(_target_features(cpu_target.target_context))


def _emit_msub(context, builder, ty, intrinsic_name, x, y, z):
    """``x - y * z`` of LLVM type ``ty``: ``intrinsic_name`` (``llvm.fma.*``) on ``-y`` where the target fuses,
    else a product and a difference."""
    if _fuses(_target_features(context)):
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ty, [ty, ty, ty]), intrinsic_name)
        return builder.call(fma, [builder.fneg(y), z, x])
    return builder.fsub(x, builder.fmul(y, z))


@intrinsic
def msub(typingctx, c, a, b):
    """``c - a * b`` for float64 ``c``, ``a``, ``b``: one rounding where the target has FMA, else two."""
    if not all(isinstance(t, types.Float) for t in (c, a, b)):
        return None

    def codegen(context, builder, sig, args):
        x, y, z = (context.cast(builder, v, t, types.float64) for v, t in zip(args, sig.args, strict=True))
        return _emit_msub(context, builder, ir.DoubleType(), "llvm.fma.f64", x, y, z)

    return types.float64(c, a, b), codegen


@intrinsic
def vmsub(typingctx, c, a, b):
    """:func:`msub` on eight lanes (:data:`fastsm._kernels.simd.vec8`): ``c - a * b``, each lane as ``msub``."""
    def codegen(context, builder, sig, args):
        return _emit_msub(context, builder, ir.VectorType(ir.DoubleType(), 8), "llvm.fma.v8f64", *args)

    return vec8(vec8, vec8, vec8), codegen
