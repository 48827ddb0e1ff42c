"""SIMD building blocks for the numba kernels, emitted as LLVM vector code.

Left to itself, LLVM does not vectorise the kernels' short loops well: a head has 8-64 elements,
fewer than the 64 its vectorised loop body takes at once, and numba cannot tell it that the arrays
do not overlap, so loops over heads stay scalar and carry run-time overlap checks. The functions
here work on spans of flat, C-contiguous arrays (index t of an [N, H, D] array is element
t // (H*D), (t // D) % H, t % D) with explicit vectors instead: chunks of ``LANES`` elements (16:
one AVX-512 register of float32, or two AVX2 ones), then one chunk of half that, then single
elements. Every function has a fixed order of operations, so results are bit-identical from run
to run. n, heads and dim are element counts; w and scale are scalars.

- ``head_dots(out, io, a, ia, b, ib, heads, dim, scale)``: out[io + h] = scale * <a_h, b_h> for
  every head h, where a_h = a[ia + h*dim : ia + (h+1)*dim] (and b_h alike); groups of 8 heads are
  reduced together (a transpose-and-add tree) when dim is a multiple of 8
- ``head_axpy(y, iy, w, iw, x, ix, heads, dim)``: y[iy + h*dim + d] += w[iw + h] * x[ix + h*dim + d];
  groups of 8 heads are unrolled, with no tail handling, when dim is a multiple of LANES
- ``scale(y, iy, w, x, ix, n)``: y[iy + t] = w * x[ix + t]
- ``add``, ``mul``, ``maximum``, ``exp_diff`` ``(y, iy, x, ix, n)``: y[iy + t] becomes y + x, y * x,
  max(y, x) or exp(y - x), with x = x[ix + t]
- ``softmax_grad(ds, i0, p, i1, dp, i2, delta, i3, n)``: ds[i0 + t] = p[i1 + t] * (dp[i2 + t] - delta[i3 + t])

The float32 exp is e^x = 2^n e^r with x = n ln2 + r, |r| <= ln2 / 2, and a degree-6 polynomial
for e^r (the Cephes expf coefficients; about 1.5 ulp). Below -87.3 it gives 0 (e^-87.3 is the
smallest normal float32), -inf included; the kernels take exp of score - row max <= 0 only.
float64 calls the C library's exp per element (that path serves gradcheck, whose finite
differences need an exp without the polynomial's steps at the range-reduction boundaries).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 16
GROUP = 8  # heads reduced together by head_dots
_LOG2E, _LN2_HI, _LN2_LO = 1.4426950408889634, 0.693359375, -2.12194440e-4  # ln 2 split: n * hi is exact
_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_LOWEST, _HIGHEST = -87.33654, 88.72283
_I32 = ir.IntType(32)


def _arrays_ok(*arrays) -> bool:
    """C-contiguous float arrays of one dtype (the functions index their flat data)."""
    first = arrays[0]
    return all(
        isinstance(t, types.Array) and t.layout == "C" and t.dtype == first.dtype for t in arrays
    ) and isinstance(first.dtype, types.Float)


def _pointer(context, builder, sig, args, at):
    """Address of flat element args[at + 1] of the C-contiguous array args[at]."""
    data = context.make_array(sig.args[at])(context, builder, args[at]).data
    return builder.gep(data, [context.cast(builder, args[at + 1], sig.args[at + 1], types.intp)])


def _count(context, builder, sig, args, at):
    return context.cast(builder, args[at], sig.args[at], types.intp)


def _scalar(context, builder, sig, args, at):
    """args[at] converted to the dtype of the array args[0]."""
    return context.cast(builder, args[at], sig.args[at], sig.args[0].dtype)


def _load(builder, ptr, lanes):
    if lanes == 1:
        return builder.load(ptr)
    return builder.load(builder.bitcast(ptr, ir.VectorType(ptr.type.pointee, lanes).as_pointer()), align=4)


def _store(builder, value, ptr, lanes):
    if lanes == 1:
        builder.store(value, ptr)
    else:
        builder.store(value, builder.bitcast(ptr, value.type.as_pointer()), align=4)


def _splat(builder, scalar, lanes):
    if lanes == 1:
        return scalar
    vec = ir.VectorType(scalar.type, lanes)
    first = builder.insert_element(ir.Constant(vec, ir.Undefined), scalar, _I32(0))
    return builder.shuffle_vector(
        first, ir.Constant(vec, ir.Undefined), ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes)
    )


def _const(typ, value):
    return ir.Constant(typ, [value] * typ.count) if isinstance(typ, ir.VectorType) else ir.Constant(typ, value)


def _call(builder, name, *args):
    """Calls the LLVM intrinsic ``llvm.NAME`` overloaded on the type of the first argument."""
    typ = args[0].type
    scalar = typ.element if isinstance(typ, ir.VectorType) else typ
    suffix = "f32" if isinstance(scalar, ir.FloatType) else "f64"
    if isinstance(typ, ir.VectorType):
        suffix = f"v{typ.count}{suffix}"
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(typ, [typ] * len(args)), f"llvm.{name}.{suffix}"
    )
    return builder.call(fn, list(args))


def _fma(builder, x, y, z):
    """x * y + z with one rounding."""
    return _call(builder, "fma", x, y, z)


def _shuffle(builder, x, y, lanes):
    return builder.shuffle_vector(x, y, ir.Constant(ir.VectorType(_I32, len(lanes)), lanes))


def _hsum(builder, vec, lanes):
    """Sum of a vector's lanes by halving (a fixed order); a scalar is returned as it is."""
    while lanes > 1:
        half = lanes // 2
        if half == 1:
            low, high = builder.extract_element(vec, _I32(0)), builder.extract_element(vec, _I32(1))
        else:
            low, high = (
                _shuffle(builder, vec, vec, list(range(half))),
                _shuffle(builder, vec, vec, list(range(half, lanes))),
            )
        vec, lanes = builder.fadd(low, high), half
    return vec


def _spans(builder, n, body):
    """Calls body(builder, offset, lanes) over [0, n): full chunks of LANES, one of LANES // 2, then ones."""
    intp = n.type
    full = builder.udiv(n, intp(LANES))
    with cgutils.for_range(builder, full) as loop:
        body(builder, builder.mul(loop.index, intp(LANES)), LANES)
    done = builder.mul(full, intp(LANES))
    half = LANES // 2
    with builder.if_then(builder.icmp_unsigned(">=", builder.sub(n, done), intp(half))):
        body(builder, done, half)
    rest_start = builder.add(done, builder.and_(builder.sub(n, done), intp(half)))
    with cgutils.for_range(builder, n, start=rest_start) as loop:
        body(builder, loop.index, 1)


def _dot_ir(builder, ptr_a, ptr_b, n):
    """IR for sum over t < n of a[t] * b[t]: LANES-wide fused multiply-adds, then the rest."""
    elem = ptr_a.type.pointee
    vec_acc = cgutils.alloca_once_value(builder, ir.Constant(ir.VectorType(elem, LANES), None))
    acc = cgutils.alloca_once_value(builder, ir.Constant(elem, 0.0))

    def body(b, off, lanes):
        x, y = _load(b, b.gep(ptr_a, [off]), lanes), _load(b, b.gep(ptr_b, [off]), lanes)
        if lanes == LANES:
            b.store(_fma(b, x, y, b.load(vec_acc)), vec_acc)
        else:
            b.store(b.fadd(b.load(acc), _hsum(b, b.fmul(x, y), lanes)), acc)

    _spans(builder, n, body)
    return builder.fadd(_hsum(builder, builder.load(vec_acc), LANES), builder.load(acc))


def _reduce_heads(builder, accs, width):
    """Sums each of GROUP vectors of ``width`` lanes: one vector of GROUP lanes, head order kept.

    Adjacent pairs are merged (the first halves of every lane group of both, plus the second
    halves), so each round doubles the groups per vector and halves their lanes."""
    lanes = width
    while len(accs) > 1:
        half = lanes // 2
        merged = []
        for x, y in zip(accs[0::2], accs[1::2]):
            groups = width // lanes
            first = [g * lanes + t for g in range(groups) for t in range(half)]
            second = [g * lanes + half + t for g in range(groups) for t in range(half)]
            low = _shuffle(builder, x, y, first + [width + i for i in first])
            high = _shuffle(builder, x, y, second + [width + i for i in second])
            merged.append(builder.fadd(low, high))
        accs, lanes = merged, half
    vec = accs[0]
    while lanes > 1:  # GROUP groups of `lanes` lanes left in one vector
        half = lanes // 2
        first = [g * lanes + t for g in range(GROUP) for t in range(half)]
        second = [g * lanes + half + t for g in range(GROUP) for t in range(half)]
        vec = builder.fadd(_shuffle(builder, vec, vec, first), _shuffle(builder, vec, vec, second))
        lanes = half
    return vec


def _grouped_dots(builder, out, ptr_a, ptr_b, heads, dim, scale, width):
    """head_dots for dim a multiple of ``width``: GROUP heads at a time, then one by one."""
    intp = heads.type
    elem = ptr_a.type.pointee
    vec = ir.VectorType(elem, width)
    groups = builder.udiv(heads, intp(GROUP))
    chunks = builder.udiv(dim, intp(width))
    with cgutils.for_range(builder, groups) as group:
        first = builder.mul(group.index, intp(GROUP))
        accs = [cgutils.alloca_once_value(builder, ir.Constant(vec, None)) for _ in range(GROUP)]
        with cgutils.for_range(builder, chunks) as chunk:
            for t, acc in enumerate(accs):
                off = builder.add(builder.mul(builder.add(first, intp(t)), dim), builder.mul(chunk.index, intp(width)))
                x, y = (
                    _load(builder, builder.gep(ptr_a, [off]), width),
                    _load(builder, builder.gep(ptr_b, [off]), width),
                )
                builder.store(_fma(builder, x, y, builder.load(acc)), acc)
        sums = _reduce_heads(builder, [builder.load(acc) for acc in accs], width)
        _store(builder, builder.fmul(sums, _splat(builder, scale, GROUP)), builder.gep(out, [first]), GROUP)
    _dots_from(builder, out, ptr_a, ptr_b, builder.mul(groups, intp(GROUP)), heads, dim, scale)


def _dots_from(builder, out, ptr_a, ptr_b, first, heads, dim, scale):
    """head_dots one head at a time, for heads first..heads-1 (any dim)."""
    with cgutils.for_range(builder, heads, start=first) as head:
        off = builder.mul(head.index, dim)
        value = _dot_ir(builder, builder.gep(ptr_a, [off]), builder.gep(ptr_b, [off]), dim)
        builder.store(builder.fmul(value, scale), builder.gep(out, [head.index]))


@intrinsic
def head_dots(typingctx, out, io, a, ia, b, ib, heads, dim, scale):
    """out[io + h] = scale * <a[ia + h*dim : ia + (h+1)*dim], b[ib + h*dim : ...]> for h < heads."""
    if not _arrays_ok(out, a, b):
        return None

    def codegen(context, builder, sig, args):
        out_ptr, ptr_a, ptr_b = (_pointer(context, builder, sig, args, at) for at in (0, 2, 4))
        heads_v, dim_v = _count(context, builder, sig, args, 6), _count(context, builder, sig, args, 7)
        scale_v = _scalar(context, builder, sig, args, 8)
        intp = heads_v.type
        wide = builder.icmp_unsigned("==", builder.urem(dim_v, intp(LANES)), intp(0))
        narrow = builder.icmp_unsigned("==", builder.urem(dim_v, intp(LANES // 2)), intp(0))
        with builder.if_else(wide) as (then, otherwise):
            with then:
                _grouped_dots(builder, out_ptr, ptr_a, ptr_b, heads_v, dim_v, scale_v, LANES)
            with otherwise:
                with builder.if_else(narrow) as (then_narrow, other):
                    with then_narrow:
                        _grouped_dots(builder, out_ptr, ptr_a, ptr_b, heads_v, dim_v, scale_v, LANES // 2)
                    with other:  # any other head dim: one head at a time
                        _dots_from(builder, out_ptr, ptr_a, ptr_b, intp(0), heads_v, dim_v, scale_v)
        return context.get_dummy_value()

    return types.void(out, io, a, ia, b, ib, heads, dim, scale), codegen


def _axpy_one_head(builder, ptr_y, ptr_w, ptr_x, head, dim):
    """y[h*dim + d] += w[h] * x[h*dim + d] for one head h (any dim)."""
    weight = builder.load(builder.gep(ptr_w, [head]))
    base = builder.mul(head, dim)

    def body(b, off, lanes):
        at = b.add(base, off)
        target = b.gep(ptr_y, [at])
        value = _fma(b, _splat(b, weight, lanes), _load(b, b.gep(ptr_x, [at]), lanes), _load(b, target, lanes))
        _store(b, value, target, lanes)

    _spans(builder, dim, body)


def _grouped_axpy(builder, ptr_y, ptr_w, ptr_x, heads, dim, width):
    """head_axpy for dim a multiple of ``width``: GROUP heads unrolled at a time, then one by one."""
    intp = heads.type
    groups = builder.udiv(heads, intp(GROUP))
    with cgutils.for_range(builder, groups) as group:
        first = builder.mul(group.index, intp(GROUP))
        weights = [builder.load(builder.gep(ptr_w, [builder.add(first, intp(t))])) for t in range(GROUP)]
        with cgutils.for_range(builder, builder.udiv(dim, intp(width))) as chunk:
            for t, weight in enumerate(weights):
                off = builder.add(builder.mul(builder.add(first, intp(t)), dim), builder.mul(chunk.index, intp(width)))
                target = builder.gep(ptr_y, [off])
                x = _load(builder, builder.gep(ptr_x, [off]), width)
                _store(
                    builder,
                    _fma(builder, _splat(builder, weight, width), x, _load(builder, target, width)),
                    target,
                    width,
                )
    _axpy_from(builder, ptr_y, ptr_w, ptr_x, builder.mul(groups, intp(GROUP)), heads, dim)


def _axpy_from(builder, ptr_y, ptr_w, ptr_x, first, heads, dim):
    """head_axpy one head at a time, for heads first..heads-1 (any dim)."""
    with cgutils.for_range(builder, heads, start=first) as head:
        _axpy_one_head(builder, ptr_y, ptr_w, ptr_x, head.index, dim)


@intrinsic
def head_axpy(typingctx, y, iy, w, iw, x, ix, heads, dim):
    """y[iy + h*dim + d] += w[iw + h] * x[ix + h*dim + d] for h < heads, d < dim."""
    if not _arrays_ok(y, w, x):
        return None

    def codegen(context, builder, sig, args):
        ptr_y, ptr_w, ptr_x = (_pointer(context, builder, sig, args, at) for at in (0, 2, 4))
        heads_v, dim_v = _count(context, builder, sig, args, 6), _count(context, builder, sig, args, 7)
        intp = heads_v.type
        wide = builder.icmp_unsigned("==", builder.urem(dim_v, intp(LANES)), intp(0))
        with builder.if_else(wide) as (then, otherwise):
            with then:
                _grouped_axpy(builder, ptr_y, ptr_w, ptr_x, heads_v, dim_v, LANES)
            with otherwise:
                _axpy_from(builder, ptr_y, ptr_w, ptr_x, intp(0), heads_v, dim_v)
        return context.get_dummy_value()

    return types.void(y, iy, w, iw, x, ix, heads, dim), codegen


@intrinsic
def scale(typingctx, y, iy, w, x, ix, n):
    """y[iy + t] = w * x[ix + t] for t < n."""
    if not (_arrays_ok(y, x) and isinstance(w, (types.Float, types.Integer))):
        return None

    def codegen(context, builder, sig, args):
        ptr_y, ptr_x = _pointer(context, builder, sig, args, 0), _pointer(context, builder, sig, args, 3)
        weight = _scalar(context, builder, sig, args, 2)

        def body(b, off, lanes):
            _store(
                b, b.fmul(_splat(b, weight, lanes), _load(b, b.gep(ptr_x, [off]), lanes)), b.gep(ptr_y, [off]), lanes
            )

        _spans(builder, _count(context, builder, sig, args, 5), body)
        return context.get_dummy_value()

    return types.void(y, iy, w, x, ix, n), codegen


def _exp_ir(b, x):
    """IR for e^x of a float or a vector of floats (see the module doc)."""
    typ = x.type
    scalar = typ.element if isinstance(typ, ir.VectorType) else typ
    if not isinstance(scalar, ir.FloatType):
        return _call(b, "exp", x)
    low = b.fcmp_ordered("<", x, _const(typ, _LOWEST))
    x = b.select(b.fcmp_ordered(">", x, _const(typ, _HIGHEST)), _const(typ, _HIGHEST), x)
    x = b.select(low, _const(typ, _LOWEST), x)
    n = _call(b, "floor", _fma(b, x, _const(typ, _LOG2E), _const(typ, 0.5)))
    r = _fma(b, n, _const(typ, -_LN2_LO), _fma(b, n, _const(typ, -_LN2_HI), x))
    poly = _const(typ, _POLY[0])
    for c in _POLY[1:]:
        poly = _fma(b, poly, r, _const(typ, c))
    e_r = b.fadd(_fma(b, poly, b.fmul(r, r), r), _const(typ, 1.0))
    ints = ir.VectorType(_I32, typ.count) if isinstance(typ, ir.VectorType) else _I32
    bits = b.shl(b.add(b.fptosi(n, ints), _const(ints, 127)), _const(ints, 23))
    return b.select(low, _const(typ, 0.0), b.fmul(e_r, b.bitcast(bits, typ)))


def _maximum(b, y, x):
    return b.select(b.fcmp_ordered(">", x, y), x, y)


def _map(name, op, inputs, reads_output):
    """An intrinsic ``name(y, iy, x1, i1, ..., n)``: y[iy + t] = op(builder, [y,] x1, ...) for t < n."""

    def codegen(context, builder, sig, args):
        ptrs = [_pointer(context, builder, sig, args, 2 * k) for k in range(inputs + 1)]

        def body(b, off, lanes):
            target = b.gep(ptrs[0], [off])
            values = [_load(b, b.gep(p, [off]), lanes) for p in ptrs[1:]]
            _store(b, op(b, *([_load(b, target, lanes)] if reads_output else []), *values), target, lanes)

        _spans(builder, _count(context, builder, sig, args, 2 * inputs + 2), body)
        return context.get_dummy_value()

    def typed(args):
        if not _arrays_ok(*args[0 : 2 * inputs + 2 : 2]):
            return None
        return types.void(*args), codegen

    if inputs == 1:

        def typer(typingctx, y, iy, x, ix, n):
            return typed((y, iy, x, ix, n))

    else:

        def typer(typingctx, y, iy, x1, i1, x2, i2, x3, i3, n):
            return typed((y, iy, x1, i1, x2, i2, x3, i3, n))

    typer.__name__ = name
    return intrinsic(typer)


add = _map("add", lambda b, y, x: b.fadd(y, x), 1, True)
mul = _map("mul", lambda b, y, x: b.fmul(y, x), 1, True)
maximum = _map("maximum", _maximum, 1, True)
exp_diff = _map("exp_diff", lambda b, y, x: _exp_ir(b, b.fsub(y, x)), 1, True)
softmax_grad = _map("softmax_grad", lambda b, p, dp, delta: b.fmul(p, b.fsub(dp, delta)), 3, False)
