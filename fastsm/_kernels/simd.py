"""Eight doubles as one value: explicit SIMD for kernels LLVM's loop vectoriser leaves scalar.

LLVM vectorises a loop only where it can prove (or check at run time, with a small budget of
checks) that its stores do not overlap its loads.  A loop that updates several rows of one matrix
from several other rows of it — a Cholesky factorisation's trailing update — exceeds that budget,
and Numba gives LLVM no aliasing facts about array arguments, so such loops stay scalar
(docs/scale.md).  :data:`vec8` is a Numba type whose values are LLVM ``<8 x double>`` vectors;
:func:`vload` / :func:`vstore` move eight consecutive entries of an array, and :func:`vadd`,
:func:`vsub`, :func:`vmul`, :func:`vsplat` compute on them, and :func:`vhsum` sums the lanes in a
fixed order.  The code then says which loads and stores happen, in which order, and LLVM keeps
the vectors in registers.

Every operation is an IEEE operation on each of the eight lanes (a plain ``fmul`` / ``fsub``, no
fast-math flags, never fused): the results are those of the same scalar code, on every CPU —
LLVM lowers an ``<8 x double>`` to one AVX-512 register, two AVX ones or four SSE2 ones, with the
same bits.  Offsets are flat element offsets into a C-contiguous array's data; nothing is bounds
checked, so callers keep every load and store inside the array.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic, models, register_model


class Vec8Type(types.Type):
    """Numba type of eight float64 lanes (LLVM ``<8 x double>``)."""

    def __init__(self) -> None:
        super().__init__(name="Vec8f64")


vec8 = Vec8Type()
_VT = ir.VectorType(ir.DoubleType(), 8)


@register_model(Vec8Type)
class _Vec8Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _VT)


def _element_pointer(context, builder, arrtype, arr, offset):
    ary = context.make_array(arrtype)(context, builder, arr)
    return builder.bitcast(builder.gep(ary.data, [offset]), _VT.as_pointer())


@intrinsic
def vload(typingctx, arr, offset):
    """Entries ``offset .. offset+7`` of a C-contiguous float64 array's data (flat)."""
    def codegen(context, builder, sig, args):
        return builder.load(_element_pointer(context, builder, sig.args[0], args[0], args[1]), align=8)

    return vec8(arr, types.intp), codegen


@intrinsic
def vstore(typingctx, arr, offset, v):
    """Store ``v`` into entries ``offset .. offset+7`` of a C-contiguous float64 array's data (flat)."""
    def codegen(context, builder, sig, args):
        builder.store(args[2], _element_pointer(context, builder, sig.args[0], args[0], args[1]), align=8)
        return context.get_dummy_value()

    return types.void(arr, types.intp, vec8), codegen


@intrinsic
def vsplat(typingctx, x):
    """``x`` in all eight lanes."""
    def codegen(context, builder, sig, args):
        v = builder.insert_element(ir.Constant(_VT, ir.Undefined), args[0], ir.Constant(ir.IntType(32), 0))
        return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), 8), [0] * 8))

    return vec8(types.float64), codegen


@intrinsic
def vadd(typingctx, a, b):
    """``a + b`` lane by lane."""
    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1])

    return vec8(vec8, vec8), codegen


@intrinsic
def vsub(typingctx, a, b):
    """``a - b`` lane by lane."""
    def codegen(context, builder, sig, args):
        return builder.fsub(args[0], args[1])

    return vec8(vec8, vec8), codegen


@intrinsic
def vmul(typingctx, a, b):
    """``a * b`` lane by lane."""
    def codegen(context, builder, sig, args):
        return builder.fmul(args[0], args[1])

    return vec8(vec8, vec8), codegen


@intrinsic
def vhsum(typingctx, v):
    """The sum of the eight lanes in one fixed order, ``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``."""
    def codegen(context, builder, sig, args):
        lane = [builder.extract_element(args[0], ir.Constant(ir.IntType(32), i)) for i in range(8)]
        left = builder.fadd(builder.fadd(lane[0], lane[1]), builder.fadd(lane[2], lane[3]))
        right = builder.fadd(builder.fadd(lane[4], lane[5]), builder.fadd(lane[6], lane[7]))
        return builder.fadd(left, right)

    return types.float64(vec8), codegen
