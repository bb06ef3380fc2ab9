"""A float32 sum or mean over the trailing axes of a parameter (the dynamo exporter's
`ReduceMean(x, [2, 3])` of every squeeze-excite block) in vectors: the generic reduction is one
scalar accumulator, a chain of dependent adds that ran at 2 GFLOP/s (EfficientNet-B0, znver5),
1.0 ms of its 10. Here the innermost axis is swept in vectors into a local row of partial sums
up to `ROW_VECTORS` vectors wide (independent adds, each kept in a register), which are folded
once per output. The order of the additions differs from the scalar fold (as the row statistics
of `rules._lanes` do)."""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import Allocate, BinaryOp, Buffer, BufferLoad, BufferStore, PrimExpr, Stmt, seq
from irtool.lower.schedules.tile import Store, chunks, nest, splat, vec
from irtool.lower.te import Builder, Placeholder, Scheduled, Tensor, const, imm

ROW_VECTORS = 4   # partial sums per output, in vectors: one add latency (4 cycles) per vector otherwise


def trailing_sum(x: Tensor, axes: tuple[int, ...], out_shape: tuple[int, ...], lanes: int,
                 finish: Callable[[PrimExpr], PrimExpr]) -> Scheduled | None:
    """`finish` of the sum of `x` over `axes` (which must be its last ones) with the result in
    `out_shape` (reduced axes kept as 1 or dropped), or None unless `x` is a float32 parameter
    (a computed input stays in the rule's nest, which fuses it) with elements to sum."""
    ndim = len(x.shape)
    if (type(x) is not Placeholder or x.dtype != "float32" or not axes
            or tuple(axes) != tuple(range(ndim - len(axes), ndim)) or min(x.shape) == 0):
        return None
    kept, reduced = tuple(x.shape[:ndim - len(axes)]), tuple(x.shape[ndim - len(axes):])
    width = reduced[-1]
    span = min(width, ROW_VECTORS * lanes)
    keepdims = len(out_shape) == ndim

    def emit(builder: Builder, store: Store) -> Stmt:
        xb = builder.buffer_of(x)

        def plane(outer: tuple[PrimExpr, ...]) -> Stmt:
            acc = Buffer("sum_row", (span,), "float32", scope="local")

            def row(r: tuple[PrimExpr, ...]) -> Stmt:
                adds = []
                for start in range(0, width, span):
                    for x0, n in chunks(min(span, width - start), lanes):
                        here = (vec(const(x0), n),)
                        adds.append(BufferStore(acc, here, BinaryOp(
                            "add", BufferLoad(acc, here), BufferLoad(xb, (*outer, *r, vec(const(start + x0), n))))))
                return seq(adds)
            init = [BufferStore(acc, (vec(const(x0), n),), splat(imm(0.0, "float32"), n)) for x0, n in chunks(span, lanes)]
            folds, total = fold(acc, span, lanes)
            where = (*outer, *(const(0) for _ in reduced)) if keepdims else outer
            return Allocate(acc, seq([*init, nest(reduced[:-1], "r", row), *folds, store(where, finish(total))]))
        return nest(kept, "b", plane)
    return Scheduled(out_shape, "float32", emit, "mean")


def fold(acc: Buffer, span: int, lanes: int) -> tuple[list[Stmt], PrimExpr]:
    """Statements that fold the `span` partial sums of `acc` into its first elements (whole
    vectors into the first, then halves while the count is even), and the sum of what is left."""
    def add_into(n: int, source: int) -> Stmt:
        def part(x0: int) -> PrimExpr:
            return BufferLoad(acc, (vec(const(x0), n),))
        return BufferStore(acc, (vec(const(0), n),), BinaryOp("add", part(0), part(source)))
    pieces = chunks(span, lanes)
    stmts = [add_into(n, x0) for x0, n in pieces[1:]]
    count = pieces[0][1]
    while count % 2 == 0 and count > 1:
        count //= 2
        stmts.append(add_into(count, count))
    total: PrimExpr = BufferLoad(acc, (const(0),))
    for i in range(1, count):
        total = BinaryOp("add", total, BufferLoad(acc, (const(i),)))
    return stmts, total
