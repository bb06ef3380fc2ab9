"""Row reductions in independent partial results (softmax's max and sum, normalisation's statistics).

One accumulator folded once per element is a dependency chain: the loop runs at the latency of
one add (or max) per element, and LLVM may not reorder a float fold into vector lanes. Here each
statistic keeps `LANES` accumulators along the innermost reduced axis, which LLVM's SLP
vectorizer turns into one vector operation per `LANES` elements; the tail goes into the first
lane, and the lanes combine as a balanced tree. That reassociates a sum (acceptable for the
statistics of a row); a max is the same whatever the order.
"""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import BinaryOp, Buffer, PrimExpr, Stmt
from irtool.lower.te import Element, Idx, Reduce, acc_load, acc_store, add, cast, const, imm, mul

LANES = 8  # partial results per statistic


def lane_reduce(shape: tuple[int, ...], dtype: str, extents: tuple[int, ...],
                value: Callable[[Element, Idx], PrimExpr], element_of: Callable[[Idx, Idx], Idx],
                combine: str, finish: Callable[[PrimExpr], PrimExpr] | None = None, name: str = "red",
                acc_dtype: str | None = None) -> Reduce:
    """Statistics of shape `shape`: statistic `s` folds `value(ctx, element_of(s, r))` with the
    binary TIR operator `combine` ("add" from 0, or "max"/"min" from the first element) over
    the positions `r` of `extents`, in `acc_dtype` (default `dtype`), and is `finish(total)`
    (default: the total in `dtype`)."""
    wide = acc_dtype or dtype
    outer, inner = extents[:-1], extents[-1]
    names = [f"r{k}" for k in range(len(extents))]

    def fbody(ctx: Element, idx: Idx) -> PrimExpr:
        def at(r: Idx, pos: PrimExpr) -> PrimExpr:
            return cast(wide, value(ctx, element_of(idx, r[:-1] + (pos,))))
        start = imm(0, wide) if combine == "add" else at(tuple(const(0) for _ in extents), const(0))
        accs = [ctx.accumulator(wide, start, f"{name}_acc{lane}") for lane in range(LANES)]

        def fold(acc: Buffer, r: Idx, pos: PrimExpr) -> Stmt:
            return acc_store(acc, BinaryOp(combine, acc_load(acc), at(r, pos)))
        if inner >= LANES:
            ctx.loop(outer + (inner // LANES,), names, lambda r: [
                fold(acc, r, add(mul(r[-1], LANES), lane)) for lane, acc in enumerate(accs)])
        if inner % LANES:
            ctx.loop(outer + (inner % LANES,), names, lambda r: fold(accs[0], r, add(r[-1], inner // LANES * LANES)))
        parts = [acc_load(a) for a in accs]
        while len(parts) > 1:  # a balanced combination of the lanes
            parts = [BinaryOp(combine, parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
        return finish(parts[0]) if finish is not None else cast(dtype, parts[0])
    return Reduce(shape, dtype, fbody, name)
