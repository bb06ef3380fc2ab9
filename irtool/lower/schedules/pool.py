"""Pooling of NCHW float32 planes in vectors.

Global pooling sweeps each plane with a vector of partial results: the scalar nest
is one chain of dependent adds (a float sum cannot be reordered without fast-math), so it ran
at one element per add latency, 1.2 GFLOP/s on znver4. Here each row is swept in vectors of the
target's lanes into one accumulator vector, whose lanes are combined once at the end: the
squeeze-excite blocks of EfficientNet and MobileNetV3 pool every expanded feature map.

Windowed pooling (`pool2d_nchw`) vectorizes along the output row, as the depthwise conv does:
the scalar nest with a bounds check and a `select` per tap ran SqueezeNet's 3x3/2 max pools at
3-9 GFLOP/s and ResNet-50's stem pool at 3 (znver5)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from irtool.ir.tir import (
    Allocate,
    BinaryOp,
    Buffer,
    BufferLoad,
    BufferStore,
    For,
    PrimExpr,
    Ramp,
    Stmt,
    Var,
    seq,
)
from irtool.lower.schedules.pad import cover, row_pieces
from irtool.lower.schedules.tile import Store, splat, vec
from irtool.lower.te import INDEX, Builder, Placeholder, Scheduled, Tensor, add, const, imm, mul

# Windows of more taps keep the rule's loop nest (one unrolled chain per output vector).
MAX_TAPS = 64


def global_pool_nchw(x: Tensor, is_max: bool, lanes: int, finish: Callable[[PrimExpr], PrimExpr]) -> Scheduled | None:
    """The (N, C, 1, 1) max or sum of each plane of `x`, passed through `finish` (the mean's
    division), or None unless `x` is a float32 NCHW parameter with planes (a computed input
    stays in the rule's nest, which fuses it)."""
    if type(x) is not Placeholder or x.dtype != "float32" or x.ndim != 4 or min(x.shape) == 0:
        return None
    n, c, h, w = x.shape
    op = "max" if is_max else "add"
    width = min(lanes, w)

    def emit(builder: Builder, store: Store) -> Stmt:
        xb = builder.buffer_of(x)
        b, ch, y = Var("b", INDEX), Var("c", INDEX), Var("y", INDEX)
        acc = Buffer("pool_acc", (width,), x.dtype, scope="local")

        def piece(x0: PrimExpr, k: int) -> Stmt:
            at = vec(const(0), k)
            return BufferStore(acc, (at,), BinaryOp(op, BufferLoad(acc, (at,)), BufferLoad(xb, (b, ch, y, vec(x0, k)))))
        init = BufferStore(acc, (vec(const(0), width),), splat(imm(float("-inf") if is_max else 0.0, x.dtype), width))
        total: PrimExpr = BufferLoad(acc, (const(0),))
        for lane in range(1, width):
            total = BinaryOp(op, total, BufferLoad(acc, (const(lane),)))
        rows = For(y, const(0), const(h), "serial", seq(row_pieces(w, lanes, piece)))
        plane = Allocate(acc, seq([init, rows, store((b, ch, const(0), const(0)), finish(total))]))
        return For(b, const(0), const(n), "serial", For(ch, const(0), const(c), "serial", plane))
    return Scheduled((n, c, 1, 1), x.dtype, emit, "pool")


@dataclass(frozen=True)
class Window:
    """One axis of a pooling window: `kernel` taps `dilation` apart, outputs `stride` apart,
    `before` padding positions before the data's `size` and `after` (explicit) ones past it."""

    size: int
    kernel: int
    stride: int
    dilation: int
    before: int
    after: int

    def first(self, o: int) -> int:
        """The data position of output `o`'s first tap (negative inside the leading padding)."""
        return o * self.stride - self.before

    def taps(self, o: int) -> list[int]:
        """The taps of output `o` that read data."""
        return [t for t in range(self.kernel) if 0 <= self.first(o) + t * self.dilation < self.size]

    def counted(self, o: int, include_pad: bool) -> int:
        """How many taps of output `o` an average divides by: those over data, or also those over
        the explicit padding (never the ceil-mode extension past it)."""
        if not include_pad:
            return len(self.taps(o))
        return sum(-self.before <= self.first(o) + t * self.dilation < self.size + self.after
                   for t in range(self.kernel))

    def inner(self, outputs: int) -> tuple[int, int]:
        """[start, stop) of the outputs whose every tap reads data; the others are edges."""
        start = min(-(-self.before // self.stride), outputs)
        last = self.size - 1 - (self.kernel - 1) * self.dilation + self.before
        stop = min(last // self.stride + 1, outputs) if last >= 0 else 0
        return start, max(start, stop)


def pool2d_nchw(x: Tensor, is_max: bool, windows: tuple[Window, Window], out_shape: tuple[int, ...],
                include_pad: bool, lanes: int) -> Scheduled | None:
    """Max or average pooling of float32 NCHW `x` vectorized along each output row (input
    columns contiguous at unit stride, two loads and a shuffle at stride 2), the window
    written out as one balanced tree (max) or sum (average) per vector, or None for other dtypes and windows over
    `MAX_TAPS` taps (the rule's nest then).

    The padding is never read: outputs whose window reaches past the data (the first and last
    rows and columns, ceil mode's last window) are emitted one by one, each with its own list
    of the taps over data and its own count, so no tap needs a bounds check or a `select`. A
    window over the whole plane (ResNet's last 7x7 average) is a global pool: the unrolled
    chain of 49 scalar adds per channel ran at 1.5 GFLOP/s."""
    rows, cols = windows
    if x.dtype != "float32" or x.ndim != 4 or min(out_shape) == 0:
        return None
    if all(a.kernel == a.size and a.before == a.after == 0 for a in windows):   # a global pool
        whole = global_pool_nchw(x, is_max, lanes, lambda t: t if is_max else BinaryOp(
            "div", t, imm(rows.size * cols.size, x.dtype)))
        if whole is not None:
            return whole
    if rows.kernel * cols.kernel > MAX_TAPS:
        return None
    n_ext, c_ext, oh, ow = out_shape
    fill = imm(float("-inf") if is_max else 0.0, x.dtype)
    stride = const(cols.stride)

    def strided(col: PrimExpr, n: int) -> PrimExpr:
        return Ramp(col, stride, n) if n > 1 else col

    def emit(builder: Builder, store: Store) -> Stmt:
        xb = builder.buffer_of(x)
        b, ch = Var("b", INDEX), Var("c", INDEX)

        def tap(oy: PrimExpr, ky: int, x0: PrimExpr, kx: int, n: int) -> PrimExpr:
            return BufferLoad(xb, (b, ch, add(mul(oy, rows.stride), ky * rows.dilation - rows.before),
                                   strided(add(mul(x0, cols.stride), kx * cols.dilation - cols.before), n)))

        def output(oy: PrimExpr, y_taps: list[int], y_count: int, x0: PrimExpr, x_taps: list[int], x_count: int,
                   n: int) -> Stmt:
            """The `n` outputs from column x0 of row oy, reading the taps given per axis."""
            at = (b, ch, oy, vec(x0, n))
            if not y_taps or not x_taps:
                return store(at, splat(fill, n))
            taps = [tap(oy, ky, x0, kx, n) for ky in y_taps for kx in x_taps]
            if is_max:
                return store(at, window_max(taps))
            value = taps[0]
            for t in taps[1:]:
                value = BinaryOp("add", value, t)
            return store(at, BinaryOp("div", value, splat(imm(max(y_count * x_count, 1), x.dtype), n)))

        def row(oy: PrimExpr, y_taps: list[int], y_count: int) -> Stmt:
            start, stop = cols.inner(ow)

            def edge(o: int) -> Stmt:
                return output(oy, y_taps, y_count, const(o), cols.taps(o), cols.counted(o, include_pad), 1)
            middle = cover(stop - start, lanes, lambda x0, n: output(
                oy, y_taps, y_count, add(x0, start), list(range(cols.kernel)), cols.kernel, n))
            return seq([edge(o) for o in range(start)] + middle + [edge(o) for o in range(stop, ow)])

        start, stop = rows.inner(oh)
        oy = Var("oy", INDEX)

        def edge_row(o: int) -> Stmt:
            return row(const(o), rows.taps(o), rows.counted(o, include_pad))
        inner = [For(oy, const(start), const(stop), "serial", row(oy, list(range(rows.kernel)), rows.kernel))]
        plane = seq([edge_row(o) for o in range(start)] + (inner if stop > start else [])
                    + [edge_row(o) for o in range(stop, oh)])
        return For(b, const(0), const(n_ext), "serial", For(ch, const(0), const(c_ext), "serial", plane))
    return Scheduled(out_shape, x.dtype, emit, "pool")


def window_max(taps: list[PrimExpr]) -> PrimExpr:
    """The NaN-propagating maximum of `taps` (numpy's, the interpreter's: TIR's `max` of floats)
    as a balanced tree: the pairs are independent, where the rule's nest was one chain of
    dependent `max` through a scalar accumulator (SqueezeNet's pools at 9 GFLOP/s on znver5).
    Each tap appears once in the printed TIR (a tree of `select(a > b, a, b)` with a NaN test per
    tap printed every tap once per level it climbed: ResNet-50's stem pool was 362 lines)."""
    level = list(taps)
    while len(level) > 1:
        pairs = [BinaryOp("max", a, b) for a, b in zip(level[::2], level[1::2])]
        level = pairs + level[len(pairs) * 2:]
    return level[0]
