"""Global pooling of an NCHW float32 plane with a vector of partial results: the scalar nest
is one chain of dependent adds (a float sum cannot be reordered without fast-math), so it ran
at one element per add latency, 1.2 GFLOP/s on znver4. Here each row is swept in vectors of the
target's lanes into one accumulator vector, whose lanes are combined once at the end: the
squeeze-excite blocks of EfficientNet and MobileNetV3 pool every expanded feature map."""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import Allocate, BinaryOp, Buffer, BufferLoad, BufferStore, For, PrimExpr, Stmt, Var, seq
from irtool.lower.schedules.pad import row_pieces
from irtool.lower.schedules.tile import Store, splat, vec
from irtool.lower.te import INDEX, Builder, Placeholder, Scheduled, Tensor, const, imm


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
