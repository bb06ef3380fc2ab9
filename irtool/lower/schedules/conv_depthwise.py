"""Depthwise `nn.conv2d` (one input and one output channel per group) vectorized along the
output row: each output vector is the sum of KH x KW products of a broadcast weight and a
vector of input columns (contiguous at unit column stride, strided otherwise), accumulated in
registers by an unrolled `fma` chain and stored once. Vectorizing over channels would need one
input channel per lane (a gather per step) in NCHW.

A row narrower than a vector (7- and 14-wide maps of MobileNet and EfficientNet on 16
lanes) fills few lanes, and a strided row costs a shuffle per tap, so there (`flat_plane`) the
plane is swept flat instead. The padded input plane is copied into a local buffer as its
SH x SW phase planes (rows py, py + SH, ...; columns px, px + SW, ...; one plane at unit
stride), each Wq = ceil(W / SW) wide. Output pixel (y, x) computed at position y * Wq + x then
reads, for tap (ky, kx), phase ((ky DH) mod SH, (kx DW) mod SW) at that position plus
((ky DH) div SH) * Wq + (kx DW) div SW, so consecutive positions are consecutive elements across
row ends and every tap is one contiguous vector load. The Wq - OW positions between two output
rows are computed and dropped; the rows are then stored from a local buffer of the positions."""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import (
    Allocate,
    BinaryOp,
    Buffer,
    BufferStore,
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
from irtool.lower.schedules.pad import row_pieces
from irtool.lower.schedules.tile import Store, chunks, splat, vec
from irtool.lower.te import INDEX, Builder, Scheduled, Tensor, add, const, imm, mul


def flat_plane(kernel: tuple[int, int], strides: tuple[int, int], width: int, lanes: int) -> bool:
    """Whether the depthwise conv sweeps its phase planes flat: at unit stride when an output row
    is narrower than a vector (a 7- or 14-lane vector is split by LLVM into 4 + 2 + 1 or 8 + 4 + 2;
    a 28-wide map on 16 lanes measured the same either way, znver4); strided, when the kernel
    is 5 wide or more: each tap of a strided row is two loads and a shuffle, which cost EfficientNet's
    5x5/2 convs 2.4-3.9x onnxruntime's time, 1.5-2.2x once split into phases; a 3x3/2 conv was
    slower split (1.15 -> 1.3x at 112x112, znver5)."""
    if strides == (1, 1):
        return width < lanes
    return kernel[1] >= 5


def conv2d_depthwise(data: Tensor, w: Tensor, kernel_layout: str, kernel: tuple[int, int], dtype: str,
                     out_shape: tuple[int, ...], strides: tuple[int, int], dilation: tuple[int, int],
                     lanes: int) -> Scheduled | None:
    """The depthwise NCHW conv over already padded `data` (groups = input = output channels),
    or None for dtypes other than float32."""
    if not (dtype == "float32" and data.dtype == w.dtype == dtype) or min(out_shape) == 0:
        return None
    if flat_plane(kernel, strides, out_shape[3], lanes):
        return conv2d_depthwise_flat(data, w, kernel_layout, kernel, out_shape, strides, dilation, lanes)
    n_ext, c_ext, oh, ow = out_shape
    kh, kw = kernel
    (sh, sw), (dh, dw) = strides, dilation

    def emit(builder: Builder, store: Store) -> Stmt:
        db, wb = builder.buffer_of(data), builder.buffer_of(w)
        b, c, y = Var("b", INDEX), Var("c", INDEX), Var("oy", INDEX)

        weight = weights_of(wb, c, kernel_layout)

        def row_vector(x0: PrimExpr, n: int) -> Stmt:
            def pixels(ky: int, kx: int) -> PrimExpr:
                col = add(mul(x0, sw), kx * dw)
                return BufferLoad(db, (b, c, add(mul(y, sh), ky * dh), Ramp(col, const(sw), n) if n > 1 else col))
            return store((b, c, y, vec(x0, n)), taps(weight, pixels, kernel, n))
        row = row_pieces(ow, lanes, row_vector)
        return For(b, const(0), const(n_ext), "serial", For(c, const(0), const(c_ext), "serial", For(
            y, const(0), const(oh), "serial", seq(row))))
    return Scheduled(out_shape, dtype, emit, "conv2d")


def weights_of(wb: Buffer, c: PrimExpr, kernel_layout: str) -> Callable[[int, int], PrimExpr]:
    """Channel `c`'s weight at kernel position (ky, kx), read from `wb` in `kernel_layout`."""
    return lambda ky, kx: BufferLoad(wb, in_blocked((c, const(0), const(ky), const(kx)), "OIHW", kernel_layout))


def taps(weight: Callable[[int, int], PrimExpr], pixels: Callable[[int, int], PrimExpr], kernel: tuple[int, int],
         lanes: int) -> PrimExpr:
    """The sum over the kernel of broadcast `weight(ky, kx)` x `pixels(ky, kx)`: one multiply,
    then an `fma` per tap."""
    value: PrimExpr | None = None
    for ky in range(kernel[0]):
        for kx in range(kernel[1]):
            wv = splat(weight(ky, kx), lanes)
            value = BinaryOp("mul", wv, pixels(ky, kx)) if value is None else Call("fma", [wv, pixels(ky, kx), value])
    assert value is not None
    return value


def conv2d_depthwise_flat(data: Tensor, w: Tensor, kernel_layout: str, kernel: tuple[int, int],
                          out_shape: tuple[int, ...], strides: tuple[int, int], dilation: tuple[int, int],
                          lanes: int) -> Scheduled:
    """The depthwise conv over the flattened phase planes of the padded plane (see the module doc)."""
    n_ext, c_ext, oh, ow = out_shape
    hp, wp = data.shape[2], data.shape[3]
    (sh, sw), (dh, dw) = strides, dilation
    hq, wq = -(-hp // sh), -(-wp // sw)      # a phase plane: every sh-th row, every sw-th column
    positions = (oh - 1) * wq + ow           # through the last output pixel

    def emit(builder: Builder, store: Store) -> Stmt:
        db, wb = builder.buffer_of(data), builder.buffer_of(w)
        b, c = Var("b", INDEX), Var("c", INDEX)
        plane = Buffer("dw_plane", (sh * sw * hq * wq,), "float32", scope="local")
        wide = Buffer("dw_wide", (positions,), "float32", scope="local")
        y = Var("oy", INDEX)

        def phase(py: int, px: int) -> list[Stmt]:
            """Input rows py, py + sh, ... and columns px, px + sw, ... as rows of `wq` elements;
            the cells past the input (a shorter phase) are zeros, which only dropped positions read."""
            base, rows, cols = (py * sw + px) * hq * wq, len(range(py, hp, sh)), len(range(px, wp, sw))
            r = Var("r", INDEX)

            def cell(row: PrimExpr, x0: PrimExpr, n: int) -> PrimExpr:
                return vec(add(add(mul(row, wq), x0), base), n)
            copy = For(r, const(0), const(rows), "serial", seq([*row_pieces(cols, lanes, lambda x0, n: BufferStore(
                plane, (cell(r, x0, n),), BufferLoad(db, (b, c, add(mul(r, sh), py), Ramp(add(mul(x0, sw), px), const(sw), n)
                                                        if n > 1 else add(mul(x0, sw), px))))),
                *([BufferStore(plane, (cell(r, const(cols), 1),), imm(0.0, "float32"))] if cols < wq else [])]))
            zero_row = [BufferStore(plane, (cell(const(rows), const(x0), n),), splat(imm(0.0, "float32"), n))
                        for x0, n in chunks(wq, lanes)] if rows < hq else []
            return [copy, *zero_row]

        weight = weights_of(wb, c, kernel_layout)

        def sweep(q0: PrimExpr, n: int) -> Stmt:
            def pixels(ky: int, kx: int) -> PrimExpr:
                (ry, py), (rx, px) = divmod(ky * dh, sh), divmod(kx * dw, sw)
                return BufferLoad(plane, (vec(add(q0, (py * sw + px) * hq * wq + ry * wq + rx), n),))
            return BufferStore(wide, (vec(q0, n),), taps(weight, pixels, kernel, n))
        rows = For(y, const(0), const(oh), "serial", seq(row_pieces(ow, lanes, lambda x0, n: store(
            (b, c, y, vec(x0, n)), BufferLoad(wide, (vec(add(mul(y, wq), x0), n),))))))
        copies = [stmt for py in range(sh) for px in range(sw) for stmt in phase(py, px)]
        body = Allocate(plane, Allocate(wide, seq([*copies, *row_pieces(positions, lanes, sweep), rows])))
        return For(b, const(0), const(n_ext), "serial", For(c, const(0), const(c_ext), "serial", body))
    return Scheduled(out_shape, "float32", emit, "conv2d")
