"""Depthwise `nn.conv2d` (one input and one output channel per group) vectorized along the
output row: each output vector is the sum of KH x KW products of a broadcast weight and a
vector of input columns (contiguous at unit column stride, strided otherwise), accumulated in
registers by an unrolled `fma` chain and stored once. Vectorizing over channels would need one
input channel per lane (a gather per step) in NCHW."""

from __future__ import annotations

from irtool.ir.tir import (
    BinaryOp,
    BufferLoad,
    Call,
    For,
    PrimExpr,
    Ramp,
    Stmt,
    Var,
    seq,
)
from irtool.lower.schedules.layout import in_blocked
from irtool.lower.schedules.tile import Store, chunks, splat, vec
from irtool.lower.te import INDEX, Builder, Scheduled, Tensor, add, const, mul


def conv2d_depthwise(data: Tensor, w: Tensor, kernel_layout: str, kernel: tuple[int, int], dtype: str,
                     out_shape: tuple[int, ...], strides: tuple[int, int], dilation: tuple[int, int],
                     lanes: int) -> Scheduled | None:
    """The depthwise NCHW conv over already padded `data` (groups = input = output channels),
    or None for dtypes other than float32."""
    if not (dtype == "float32" and data.dtype == w.dtype == dtype) or min(out_shape) == 0:
        return None
    n_ext, c_ext, oh, ow = out_shape
    kh, kw = kernel
    (sh, sw), (dh, dw) = strides, dilation

    def emit(builder: Builder, store: Store) -> Stmt:
        db, wb = builder.buffer_of(data), builder.buffer_of(w)
        b, c, y = Var("b", INDEX), Var("c", INDEX), Var("oy", INDEX)

        def row_vector(x0: PrimExpr, n: int) -> Stmt:
            value: PrimExpr | None = None
            for ky in range(kh):
                for kx in range(kw):
                    weight = splat(BufferLoad(wb, in_blocked((c, const(0), const(ky), const(kx)), "OIHW",
                                                             kernel_layout)), n)
                    col = add(mul(x0, sw), kx * dw)
                    cols = Ramp(col, const(sw), n) if n > 1 else col
                    pixels = BufferLoad(db, (b, c, add(mul(y, sh), ky * dh), cols))
                    value = BinaryOp("mul", weight, pixels) if value is None else Call("fma", [weight, pixels, value])
            assert value is not None
            return store((b, c, y, vec(x0, n)), value)
        row: list[Stmt] = []
        full = ow // lanes
        if full:
            xv = Var("xv", INDEX)
            row.append(For(xv, const(0), const(full), "serial", row_vector(mul(xv, lanes), lanes)))
        row += [row_vector(const(x0), n) for x0, n in chunks(ow, lanes) if x0 >= full * lanes]
        return For(b, const(0), const(n_ext), "serial", For(c, const(0), const(c_ext), "serial", For(
            y, const(0), const(oh), "serial", seq(row))))
    return Scheduled(out_shape, dtype, emit, "conv2d")
