"""Compute rules of the neural-network operators (definitions/nn.py).

Convolution, dense, matmul, pooling and `lrn` are `Reduce` tensors (one accumulator per output
element, so their elementwise consumers run on it in the same nest); softmax computes each
exponential once (row max and row sum in vector lanes, then the exponentials times 1 / sum); convolution padding
is a stage of its own, so the accumulation loop reads without bounds checks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from irtool.ir.tir import BinaryOp, Call, PrimExpr, is_float
from irtool.ir.types import TensorType, Type
from irtool.lower.errors import LoweringError
from irtool.lower.rules._lanes import lane_reduce
from irtool.lower.rules._rule import Attrs, dot_dtype, out_tensor_type, rule, shape_of, sum_dtype
from irtool.lower.rules.reduce import mean_of
from irtool.lower.schedules import conv2d_schedule, dense_tiled, register_tile
from irtool.lower.schedules.int8 import conv2d_int8, dense_int8
from irtool.lower.schedules.layout import in_blocked
from irtool.lower.schedules.matmul import matmul_tiled
from irtool.lower.schedules.conv_depthwise import conv2d_depthwise
from irtool.lower.schedules.pad import pad_nchw
from irtool.lower.schedules.pool import Window, global_pool_nchw, pool2d_nchw
from irtool.lower.te import (
    Compute,
    Element,
    Idx,
    Reduce,
    Tensor,
    acc_load,
    acc_store,
    add,
    all_of,
    cast,
    clamp,
    cmp,
    const,
    floordiv,
    imm,
    in_range,
    mul,
    select,
    sub,
)
from irtool.ops.definitions._common import int_pair, padding4
from irtool.ops.definitions.nn import unblocked_shape

Layout = str


def _in_layout(canonical_idx: Idx, canonical: Layout, layout: Layout) -> Idx:
    """An index written in `canonical` axis order (e.g. NCHW) re-ordered for `layout`."""
    return tuple(canonical_idx[canonical.index(c)] for c in layout)


def _layout(attrs: Attrs, key: str, fallback: str) -> str:
    return str(attrs[key]) or fallback


# ---------------------------------------------------------------------------------- conv2d

@rule("nn.conv2d")
def _conv2d(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, w = args
    dl, kl = str(attrs["data_layout"]), str(attrs["kernel_layout"])
    ol = _layout(attrs, "out_layout", dl)
    dtype = out_tensor_type(out).dtype
    n, c, h, wd = (x.shape[dl.index(a)] for a in "NCHW")
    o, cg, kh, kw = (int(d) for d in unblocked_shape("nn.conv2d", kl, TensorType(w.shape, w.dtype), "OIHW"))
    groups = int(attrs["groups"])  # type: ignore[arg-type]
    top, left, bottom, right = padding4(attrs["padding"])
    dh, dw = int_pair(attrs["dilation"])
    sh, sw = int_pair(attrs["strides"])
    data: Tensor = x
    data_layout = dl
    if groups == c == o and dl == ol == "NCHW":   # the depthwise schedule pads as it copies
        depthwise = conv2d_depthwise(x, w, kl, (kh, kw), dtype, shape_of(out), (sh, sw), (dh, dw),
                                     register_tile().lanes, (top, left, bottom, right))
        if depthwise is not None:
            return depthwise
    if top or left or bottom or right:
        data, data_layout = _pad_stage(x, dl, (top, left, bottom, right), (n, c, h, wd)), "NCHW"
    if data_layout == "NCHW" and ol == "NCHW":
        tiled = conv2d_int8(data, w, kl, (kh, kw), dtype, shape_of(out), (sh, sw), (dh, dw)) if groups == 1 else None
        tiled = tiled or conv2d_schedule(data, w, kl, (kh, kw), dtype, shape_of(out), (sh, sw), (dh, dw), groups)
        if tiled is not None:
            return tiled
    per_group = o // groups
    wide = dot_dtype(dtype)

    def fbody(ctx: Element, idx: Idx) -> PrimExpr:
        bn, bo, oy, ox = (idx[ol.index(a)] for a in "NCHW")
        base = mul(floordiv(bo, per_group), cg) if groups > 1 else const(0)
        acc = ctx.accumulator(wide, imm(0, wide), "conv_acc")

        def body(r: Idx) -> PrimExpr:
            rc, ry, rx = r
            xi = _in_layout((bn, add(base, rc), add(mul(oy, sh), mul(ry, dh)), add(mul(ox, sw), mul(rx, dw))),
                            "NCHW", data_layout)
            wi = in_blocked((bo, rc, ry, rx), "OIHW", kl)
            prod = BinaryOp("mul", cast(wide, ctx.load(data, xi)), cast(wide, ctx.load(w, wi)))
            return acc_store(acc, BinaryOp("add", acc_load(acc), prod))
        ctx.loop((cg, kh, kw), ("rc", "ry", "rx"), body)
        return cast(dtype, acc_load(acc))
    return Reduce(shape_of(out), dtype, fbody, "conv2d")


def _pad_stage(x: Tensor, layout: Layout, pads: tuple[int, int, int, int],
               nchw: tuple[int, ...]) -> Tensor:
    """The zero-padded input in NCHW, computed once into a buffer of its own."""
    top, left, bottom, right = pads
    n, c, h, w = nchw
    if layout == "NCHW" and x.dtype == "float32":
        return pad_nchw(x, pads, register_tile().lanes)

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        b, ch, y, xx = idx
        yy, xs = sub(y, top), sub(xx, left)
        inside = all_of([*in_range(yy, 0, h), *in_range(xs, 0, w)])
        v = ctx.load(x, _in_layout((b, ch, clamp(yy, 0, h - 1), clamp(xs, 0, w - 1)), "NCHW", layout))
        return select(inside, v, imm(0, x.dtype))
    return Compute((n, c, h + top + bottom, w + left + right), x.dtype, f, "pad", stage=True)


# ------------------------------------------------------------------------- dense / matmul

@rule("nn.dense")
def _dense(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, w = args
    dtype = out_tensor_type(out).dtype
    wl = _layout(attrs, "weight_layout", "NK")
    tiled = dense_tiled(x, w, dtype, weight_layout=wl)
    if tiled is None and wl == "NK":
        tiled = dense_int8(x, w, dtype, shape_of(out))
    if tiled is None and wl == "NK":
        tiled = matmul_tiled(x, w, dtype, shape_of(out), False, True)
    if tiled is not None:
        return tiled
    k_extent = x.shape[-1]
    wide = dot_dtype(dtype)

    def fbody(ctx: Element, idx: Idx) -> PrimExpr:
        acc = ctx.accumulator(wide, imm(0, wide), "dense_acc")
        ctx.loop((k_extent,), ("k",), lambda r: acc_store(acc, BinaryOp("add", acc_load(acc), BinaryOp(
            "mul", cast(wide, ctx.load(x, idx[:-1] + r)),
            cast(wide, ctx.load(w, in_blocked((idx[-1], r[0]), "NK", wl)))))))
        return cast(dtype, acc_load(acc))
    return Reduce(shape_of(out), dtype, fbody, "dense")


@rule("nn.batch_matmul")
def _batch_matmul(args: list, attrs: Attrs, out: Type) -> Tensor:
    a, b = args
    dtype = out_tensor_type(out).dtype
    ta, tb = bool(attrs["transpose_a"]), bool(attrs["transpose_b"])
    tiled = matmul_tiled(a, b, dtype, shape_of(out), ta, tb)
    if tiled is not None:
        return tiled
    k_extent = a.shape[1] if ta else a.shape[2]
    wide = dot_dtype(dtype)

    def fbody(ctx: Element, idx: Idx) -> PrimExpr:
        bi, i, j = idx
        ba = const(0) if a.shape[0] == 1 else bi
        bb = const(0) if b.shape[0] == 1 else bi
        acc = ctx.accumulator(wide, imm(0, wide), "matmul_acc")

        def body(r: Idx) -> PrimExpr:
            (k,) = r
            av = ctx.load(a, (ba, k, i) if ta else (ba, i, k))
            bv = ctx.load(b, (bb, j, k) if tb else (bb, k, j))
            return acc_store(acc, BinaryOp("add", acc_load(acc), BinaryOp("mul", cast(wide, av), cast(wide, bv))))
        ctx.loop((k_extent,), ("k",), body)
        return cast(dtype, acc_load(acc))
    return Reduce(shape_of(out), dtype, fbody, "batch_matmul")


# --------------------------------------------------------------- bias, activations, norms

def _along_axis(name: str, combine: Callable[[PrimExpr, PrimExpr], PrimExpr]) -> None:
    @rule(name)
    def lower(args: list, attrs: Attrs, out: Type) -> Tensor:
        x, v = args
        axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
        return Compute(x.shape, x.dtype, lambda ctx, idx: combine(ctx.load(x, idx), ctx.load(v, (idx[axis],))),
                       name.replace("nn.", ""))


_along_axis("nn.bias_add", lambda x, b: BinaryOp("add", x, b))
_along_axis("nn.prelu", lambda x, a: select(cmp("gt", x, imm(0, x.dtype)), x, BinaryOp("mul", x, a)))


def _without(idx: Idx, axis: int) -> Idx:
    return idx[:axis] + idx[axis + 1:]


def _row_statistic(x: Tensor, axis: int, value: Callable[[Element, Idx], PrimExpr], combine: str, name: str,
                   finish: Callable[[PrimExpr], PrimExpr] | None = None) -> Reduce:
    """A reduction of `value(ctx, x-index)` along `axis` in vector lanes (`_lanes`); the result
    drops that axis. Sums of 16-bit floats accumulate in float32, as numpy's do."""
    return lane_reduce(_without(x.shape, axis), x.dtype, (x.shape[axis],), value,
                       lambda s, r: s[:axis] + r + s[axis:], combine, finish, name,
                       sum_dtype(x.dtype) if combine == "add" else x.dtype)


def _minus_row_max(x: Tensor, axis: int) -> Callable[[Element, Idx], PrimExpr]:
    """`x - row max` (what softmax exponentiates, so exp never overflows); the max is a stage."""
    row_max = _row_statistic(x, axis, lambda ctx, i: ctx.load(x, i), "max", "max")

    def shifted(ctx: Element, i: Idx) -> PrimExpr:
        return BinaryOp("sub", ctx.load(x, i), ctx.load(row_max, _without(i, axis)))
    return shifted


@rule("nn.softmax")
def _softmax(args: list, attrs: Attrs, out: Type) -> Tensor:
    """exp(x - row max) once, into a stage; its row sum; then each exponential over the sum. The
    exponentials and the sum round to x's type, as the interpreter's numpy rounds them for
    float16 (the sum accumulates in float32); a float32 row multiplies by 1 / sum (one division
    per row, not per element), a float16 one divides in float32 and rounds once, as numpy does."""
    x = args[0]
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    wide = sum_dtype(x.dtype)
    shifted = _minus_row_max(x, axis)
    exps = Compute(x.shape, x.dtype, lambda ctx, i: cast(x.dtype, Call("exp", (cast(wide, shifted(ctx, i)),))),
                   "exp", stage=True)
    if wide == x.dtype:
        inv_sum = _row_statistic(exps, axis, lambda ctx, i: ctx.load(exps, i), "add", "inv_sum",
                                 lambda total: BinaryOp("div", imm(1, total.dtype), total))
        return Compute(x.shape, x.dtype, lambda ctx, i: BinaryOp(
            "mul", ctx.load(exps, i), ctx.load(inv_sum, _without(i, axis))), "softmax")
    row_sum = _row_statistic(exps, axis, lambda ctx, i: ctx.load(exps, i), "add", "sum")
    return Compute(x.shape, x.dtype, lambda ctx, i: cast(x.dtype, BinaryOp(
        "div", cast(wide, ctx.load(exps, i)), cast(wide, ctx.load(row_sum, _without(i, axis))))), "softmax")


@rule("nn.log_softmax")
def _log_softmax(args: list, attrs: Attrs, out: Type) -> Tensor:
    """(x - row max) - log(row sum of exp(x - row max))."""
    x = args[0]
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    shifted = _minus_row_max(x, axis)
    row_sum = _row_statistic(x, axis, lambda ctx, i: Call("exp", (shifted(ctx, i),)), "add", "sum")
    return Compute(x.shape, x.dtype, lambda ctx, i: BinaryOp("sub", shifted(ctx, i), Call(
        "log", (ctx.load(row_sum, _without(i, axis)),))), "log_softmax")


@rule("nn.lrn")
def _lrn(args: list, attrs: Attrs, out: Type) -> Tensor:
    x = args[0]
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    size = int(attrs["size"])  # type: ignore[arg-type]
    half = size // 2
    n = x.shape[axis]
    dt = x.dtype

    def sq_sum(ctx: Element, idx: Idx) -> PrimExpr:
        acc = ctx.accumulator(dt, imm(0, dt), "lrn_acc")

        def body(r: Idx) -> PrimExpr:
            j = add(sub(idx[axis], half), r[0])
            v = ctx.load(x, idx[:axis] + (clamp(j, 0, n - 1),) + idx[axis + 1:])
            term = select(all_of(in_range(j, 0, n)), BinaryOp("mul", v, v), imm(0, dt))
            return acc_store(acc, BinaryOp("add", acc_load(acc), term))
        ctx.loop((size,), ("k",), body)
        return acc_load(acc)
    sums = Reduce(x.shape, dt, sq_sum, "lrn_sum")

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        scaled = BinaryOp("div", BinaryOp("mul", imm(float(attrs["alpha"]), dt), ctx.load(sums, idx)),  # type: ignore[arg-type]
                          imm(size, dt))
        denom = Call("pow", (BinaryOp("add", imm(float(attrs["bias"]), dt), scaled),  # type: ignore[arg-type]
                             imm(float(attrs["beta"]), dt)))  # type: ignore[arg-type]
        return BinaryOp("div", ctx.load(x, idx), denom)
    return Compute(x.shape, dt, f, "lrn")


@rule("nn.batch_norm", "nn.dropout")
def _needs_simplify_inference(args: list, attrs: Attrs, out: Type) -> Tensor:
    raise LoweringError("has no TIR compute rule; run `simplify-inference` before `lower` "
                        "(it rewrites batch_norm and dropout into elementwise arithmetic)")


# --------------------------------------------------------------------------------- pooling

def _pool(name: str, is_max: bool) -> None:
    @rule(name)
    def lower(args: list, attrs: Attrs, out: Type) -> Tensor:
        x = args[0]
        layout = str(attrs["layout"])
        ol = _layout(attrs, "out_layout", layout)
        dt = x.dtype
        h, w = x.shape[layout.index("H")], x.shape[layout.index("W")]
        kh, kw = int_pair(attrs["pool_size"])
        dh, dw = int_pair(attrs["dilation"])
        sh, sw = int_pair(attrs["strides"])
        top, left, bottom, right = padding4(attrs["padding"])
        include_pad = bool(attrs.get("count_include_pad", False))
        fill = imm(-np.inf if is_float(dt) else np.iinfo(dt).min, dt) if is_max else imm(0, dt)
        oh, ow = (shape_of(out)[ol.index(a)] for a in "HW")
        if layout == ol == "NCHW":
            vectors = pool2d_nchw(x, is_max, (Window(h, kh, sh, dh, top, bottom), Window(w, kw, sw, dw, left, right)),
                                  shape_of(out), include_pad, register_tile().lanes)
            if vectors is not None:
                return vectors
        if is_max and layout == "NCHW" and dt == "float32" and (top or left or bottom or right):
            # Padding as a stage of -inf rows/columns: the window loop then needs no bounds checks.
            x = pad_nchw(x, (top, left, bottom, right), register_tile().lanes, -np.inf)
            h, w, top, left, bottom, right = h + top + bottom, w + left + right, 0, 0, 0, 0
        # (lowest, highest) window position along each axis, relative to the unpadded data.
        ext_h = (-top, (oh - 1) * sh + (kh - 1) * dh - top)
        ext_w = (-left, (ow - 1) * sw + (kw - 1) * dw - left)

        def fbody(ctx: Element, idx: Idx) -> PrimExpr:
            bn, ch, oy, ox = (idx[ol.index(a)] for a in "NCHW")
            acc = ctx.accumulator(dt, fill, "pool_acc")
            count = None if is_max else ctx.accumulator("int32", const(0), "pool_count")

            def body(r: Idx) -> list:
                ry, rx = r
                y = sub(add(mul(oy, sh), mul(ry, dh)), top)
                xx = sub(add(mul(ox, sw), mul(rx, dw)), left)
                checks = [*_bounds(y, ext_h, h), *_bounds(xx, ext_w, w)]
                v = ctx.load(x, _in_layout((bn, ch, clamp(y, 0, h - 1) if checks else y,
                                            clamp(xx, 0, w - 1) if checks else xx), "NCHW", layout))
                inside = all_of(checks)
                v = select(inside, v, fill)
                stmts = [acc_store(acc, BinaryOp("max" if is_max else "add", acc_load(acc), v))]
                if count is not None:
                    counted = inside if not include_pad else all_of(
                        [*_bounds(add(y, top), (0, ext_h[1] + top), h + top + bottom),
                         *_bounds(add(xx, left), (0, ext_w[1] + left), w + left + right)])
                    stmts.append(acc_store(count, add(acc_load(count), select(counted, const(1), const(0)))))
                return stmts
            ctx.loop((kh, kw), ("ry", "rx"), body)
            if count is None:
                return acc_load(acc)
            n = BinaryOp("max", acc_load(count), const(1))
            if is_float(dt):
                return BinaryOp("div", acc_load(acc), cast(dt, n))
            return cast(dt, BinaryOp("div", cast("float64", acc_load(acc)), cast("float64", n)))
        return Reduce(shape_of(out), dt, fbody, name.replace("nn.", ""))


def _bounds(pos: PrimExpr, extent: tuple[int, int], size: int) -> list[PrimExpr]:
    """The checks that keep `pos` in [0, size), given the range it sweeps (none if always in)."""
    low, high = extent
    above, below = in_range(pos, 0, size)
    return ([above] if low < 0 else []) + ([below] if high >= size else [])


_pool("nn.max_pool2d", True)
_pool("nn.avg_pool2d", False)


def _global_pool(name: str, is_max: bool) -> None:
    @rule(name)
    def lower(args: list, attrs: Attrs, out: Type) -> Tensor:
        x = args[0]
        layout = str(attrs["layout"])
        ol = _layout(attrs, "out_layout", layout)
        h, w = x.shape[layout.index("H")], x.shape[layout.index("W")]
        if layout == ol == "NCHW":
            vectors = global_pool_nchw(x, is_max, register_tile().lanes,
                                       (lambda t: t) if is_max else (lambda t: mean_of(t, h * w)))
            if vectors is not None:
                return vectors

        def fbody(ctx: Element, idx: Idx) -> PrimExpr:
            bn, ch = idx[ol.index("N")], idx[ol.index("C")]

            def at(y: PrimExpr, xx: PrimExpr) -> Idx:
                return _in_layout((bn, ch, y, xx), "NCHW", layout)
            init = ctx.load(x, at(const(0), const(0))) if is_max else imm(0, x.dtype)
            acc = ctx.accumulator(x.dtype, init, "pool_acc")
            ctx.loop((h, w), ("ry", "rx"), lambda r: acc_store(
                acc, BinaryOp("max" if is_max else "add", acc_load(acc), ctx.load(x, at(*r)))))
            return acc_load(acc) if is_max else mean_of(acc_load(acc), h * w)
        return Reduce(shape_of(out), x.dtype, fbody, name.replace("nn.", ""))


_global_pool("nn.global_avg_pool2d", False)
_global_pool("nn.global_max_pool2d", True)
