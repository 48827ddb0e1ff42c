"""Software prefetch for the numba kernels.

The fused CPU kernels gather one H x D row of k and v (or q and dy) per edge from random places in
memory, so they wait on memory more than they compute. Asking for the row a few edges ahead hides
much of that latency (about 1.5x on the backward column pass of rmat:17, H=8, D=16). numba has no
prefetch, so this emits LLVM's ``llvm.prefetch`` intrinsic; it is only a hint and never faults.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

CACHE_LINE_BYTES = 64


@intrinsic
def _prefetch_element(typingctx, flat, index):
    """Hints the CPU to load the cache line holding flat[index] (read, keep in all cache levels)."""
    sig = types.void(flat, index)

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        address = builder.bitcast(builder.gep(array.data, [args[1]]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fn_type = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fn_type, "llvm.prefetch.p0i8")
        # (address, rw=0 read, locality=3 keep, cache type=1 data)
        builder.call(fn, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always")
def prefetch_span(array, start, length):
    """Prefetches flat elements [start, start + length) of a C-contiguous array of any shape."""
    step = max(1, CACHE_LINE_BYTES // array.itemsize)
    offset = 0
    while offset < length:  # a while loop: range() with a run-time step divides once per call
        _prefetch_element(array, start + offset)
        offset += step
