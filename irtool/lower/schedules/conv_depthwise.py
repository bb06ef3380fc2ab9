"""Depthwise `nn.conv2d` (one input and one output channel per group) as a flat sweep of each
channel's plane in vectors of the target's lanes. Vectorizing over channels would need one
input channel per lane in NCHW (a gather per input and a scatter per output pixel: 1.2-1.3x
slower than this on EfficientNet's 7x7 and 14x14 maps, znver5).

The input plane is copied into a local buffer as its SH x SW phase planes (padded rows py,
py + SH, ...; padded columns px, px + SW, ...; one plane at unit stride), each Wq = ceil(Wp / SW)
wide, with the padding written as zeros there: no padded copy of the input is made beforehand.
Output pixel (y, x) is computed at position y * Wq + x; for tap (ky, kx) it reads phase
((ky DH) mod SH, (kx DW) mod SW) at that position plus ((ky DH) div SH) * Wq + (kx DW) div SW,
so consecutive positions are consecutive elements across row ends and every tap is one
contiguous vector load. `STEP_VECTORS` vectors of positions are accumulated together, tap by
tap, in `unrolled` loops over the kernel and the vectors (code generation expands them; the
accumulators start at zero): one broadcast weight feeds that many independent `fma` chains
(ConvNeXt's 7x7 kernels: one 49-long chain per vector, and a broadcast load per fma, ran at
1.8-1.9x onnxruntime's time on 56x56 and 28x28 maps, 1.2x so).
The Wq - OW positions between two output rows are computed and dropped; the rows are then stored
from a local buffer of the positions, where the fused epilogue applies.

Against the row-vector schedule this replaced (a vector of output columns per store, a strided
load and a shuffle per tap at stride 2, a separate padding stage), onnxruntime's time over this
one's went on EfficientNet-B0's shapes from 2.4-3.9x to 1.0-1.8x (5x5/2), 2.6x to 2.1x (7x7
maps), 1.4-1.5x to 1.0-1.1x (5x5 on 14x14 and 28x28), 1.2-1.6x to 1.0-1.3x (3x3/2), znver5.
7x7 maps stay slow: 49 outputs take 73-85 positions (5-6 vectors) and 7 short row stores."""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import (
    Allocate,
    Buffer,
    BufferLoad,
    BufferStore,
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
from irtool.lower.schedules.tile import Store, each_slot, loop, splat, vec
from irtool.lower.te import INDEX, Builder, Scheduled, Tensor, add, const, floordiv, floormod, imm, mul

# Output vectors accumulated together, tap by tap: each broadcast weight is loaded once for all
# of them, and their fma chains are independent (a 49-tap chain is 49 dependent fmas).
STEP_VECTORS = 8


def conv2d_depthwise(data: Tensor, w: Tensor, kernel_layout: str, kernel: tuple[int, int], dtype: str,
                     out_shape: tuple[int, ...], strides: tuple[int, int], dilation: tuple[int, int],
                     lanes: int, pads: tuple[int, int, int, int] = (0, 0, 0, 0)) -> Scheduled | None:
    """The depthwise NCHW conv (groups = input = output channels) over `data` padded by `pads`
    (top, left, bottom, right), or None for dtypes other than float32."""
    if not (dtype == "float32" and data.dtype == w.dtype == dtype) or min(out_shape) == 0:
        return None
    n_ext, c_ext, oh, ow = out_shape
    top, left, bottom, right = pads
    h, wd = data.shape[2], data.shape[3]
    (sh, sw), (dh, dw) = strides, dilation
    hq, wq = -(-(h + top + bottom) // sh), -(-(wd + left + right) // sw)   # a phase plane
    positions = (oh - 1) * wq + ow           # through the last output pixel

    def emit(builder: Builder, store: Store) -> Stmt:
        db, wb = builder.buffer_of(data), builder.buffer_of(w)
        b, c, y = Var("b", INDEX), Var("c", INDEX), Var("oy", INDEX)
        plane = Buffer("dw_plane", (sh * sw * hq * wq,), "float32", scope="local")
        wide = Buffer("dw_wide", (positions,), "float32", scope="local")

        def phase(py: int, px: int) -> list[Stmt]:
            """Padded rows py, py + sh, ... and columns px, px + sw, ... as `hq` rows of `wq`
            elements: the input where it lies, zeros around it (padding, and the cells past a
            shorter phase, which only dropped positions read)."""
            first_row, end_row = max(0, -(-(top - py) // sh)), min(hq, -(-(top + h - py) // sh))
            first_col, end_col = max(0, -(-(left - px) // sw)), min(wq, -(-(left + wd - px) // sw))
            base = (py * sw + px) * hq * wq

            def zeros(row: PrimExpr, start: int, end: int) -> list[Stmt]:
                return row_pieces(end - start, lanes, lambda x0, n: BufferStore(
                    plane, (vec(add(add(mul(row, wq), x0), base + start), n),), splat(imm(0.0, "float32"), n)))

            def zero_rows(start: int, end: int) -> list[Stmt]:
                r = Var("r", INDEX)
                return [For(r, const(start), const(end), "serial", seq(zeros(r, 0, wq)))] if end > start else []
            if end_row <= first_row or end_col <= first_col:
                return zero_rows(0, hq)   # a phase of padding only
            r = Var("r", INDEX)

            def piece(x0: PrimExpr, n: int) -> Stmt:
                col = add(mul(x0, sw), first_col * sw + px - left)
                return BufferStore(plane, (vec(add(add(mul(r, wq), x0), base + first_col), n),), BufferLoad(
                    db, (b, c, add(mul(r, sh), py - top), Ramp(col, const(sw), n) if n > 1 else col)))
            copy = For(r, const(first_row), const(end_row), "serial", seq(
                [*zeros(r, 0, first_col), *row_pieces(end_col - first_col, lanes, piece), *zeros(r, end_col, wq)]))
            return [*zero_rows(0, first_row), copy, *zero_rows(end_row, hq)]

        weight = weights_of(wb, c, kernel_layout)

        def pixels(ky: PrimExpr, kx: PrimExpr, q0: PrimExpr, n: int) -> PrimExpr:
            """The `n` positions from q0 as tap (ky, kx) reads them: in phase plane
            ((ky DH) mod SH, (kx DW) mod SW), (ky DH) div SH rows and (kx DW) div SW columns on."""
            y_off, x_off = mul(ky, dh), mul(kx, dw)
            phase_base = mul(add(mul(floormod(y_off, sh), sw), floormod(x_off, sw)), hq * wq)
            shift = add(mul(floordiv(y_off, sh), wq), floordiv(x_off, sw))
            return BufferLoad(plane, (vec(add(q0, add(phase_base, shift)), n),))

        def step(q0: PrimExpr, width: int) -> Stmt:
            """Positions q0 .. q0 + width - 1 in vectors, accumulated tap by tap: `unrolled` loops
            over the kernel and the vectors (code generation expands them)."""
            acc = Buffer("dw_acc", (STEP_VECTORS * lanes,), "float32", scope="local")

            def at(c: PrimExpr, n: int) -> tuple[PrimExpr]:
                return (vec(mul(c, lanes), n),)
            init = each_slot(1, width, lanes, lambda r, c, n: BufferStore(acc, at(c, n), splat(imm(0.0, "float32"), n)))

            def tap(ky: PrimExpr, kx: PrimExpr) -> Stmt:
                return each_slot(1, width, lanes, lambda r, c, n: BufferStore(acc, at(c, n), Call("fma", [
                    splat(weight(ky, kx), n), pixels(ky, kx, add(q0, mul(c, lanes)), n), BufferLoad(acc, at(c, n))])))
            taps = loop("ky", kernel[0], lambda ky: loop("kx", kernel[1], lambda kx: tap(ky, kx), "unrolled"), "unrolled")
            out = each_slot(1, width, lanes, lambda r, c, n: BufferStore(
                wide, (vec(add(q0, mul(c, lanes)), n),), BufferLoad(acc, at(c, n))))
            return Allocate(acc, seq([init, taps, out]))
        span = STEP_VECTORS * lanes
        s = Var("s", INDEX)
        steps = [For(s, const(0), const(positions // span), "serial", step(mul(s, span), span))] \
            if positions >= span else []
        if positions % span:
            steps.append(step(const(positions - positions % span), positions % span))
        rows = For(y, const(0), const(oh), "serial", seq(row_pieces(ow, lanes, lambda x0, n: store(
            (b, c, y, vec(x0, n)), BufferLoad(wide, (vec(add(mul(y, wq), x0), n),))))))
        copies = [stmt for py in range(sh) for px in range(sw) for stmt in phase(py, px)]
        body = Allocate(plane, Allocate(wide, seq([*copies, *steps, rows])))
        return For(b, const(0), const(n_ext), "serial", For(c, const(0), const(c_ext), "serial", body))
    return Scheduled(out_shape, dtype, emit, "conv2d")


def weights_of(wb: Buffer, c: PrimExpr, kernel_layout: str) -> Callable[[PrimExpr, PrimExpr], PrimExpr]:
    """Channel `c`'s weight at kernel position (ky, kx), read from `wb` in `kernel_layout`."""
    return lambda ky, kx: BufferLoad(wb, in_blocked((c, const(0), ky, kx), "OIHW", kernel_layout))

