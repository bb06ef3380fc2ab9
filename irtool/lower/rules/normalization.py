"""Compute rules of layer and group normalisation (definitions/normalization.py).

Two reductions per row (or group) into stages, the mean and then 1 / sqrt(var + epsilon) of the
centred values, and the result as an elementwise expression of those: two passes over the data
for the statistics and one for the output, whatever the row length. The result inlines into
its consumers (bias, activation, residual add) and its producers into the reductions.
"""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import BinaryOp, Buffer, Call, PrimExpr, Stmt
from irtool.ir.types import Type
from irtool.lower.rules._rule import Attrs, rule
from irtool.lower.te import Compute, Element, Idx, Reduce, Tensor, acc_load, acc_store, add, floordiv, imm, mul

LANES = 8  # partial sums per statistic
# (statistics index of an element, the element a statistic's reduction position reads)
Grouping = tuple[tuple[int, ...], Callable[[Idx], Idx], Callable[[Idx, Idx], Idx], tuple[int, ...]]


def _normalize(x: Tensor, args: list, attrs: Attrs, axis: int, grouping: Grouping, name: str) -> Tensor:
    """`grouping` = (statistics shape, element index -> statistics index, (statistics index,
    reduction position) -> element index, reduction extents)."""
    stats_shape, stat_of, element_of, extents = grouping
    count = 1
    for e in extents:
        count *= e
    dt = x.dtype

    def reduce(value: Callable[[Element, Idx], PrimExpr], finish: Callable[[PrimExpr], PrimExpr], what: str) -> Reduce:
        """The sum of `value` over a group, in LANES partial sums along the innermost axis (a
        dependency chain of one add per element would bound the loop by the add's latency;
        independent lanes become one vector add), then the tail, then the partial sums."""
        outer, inner = extents[:-1], extents[-1]
        names = [f"r{k}" for k in range(len(extents))]

        def fbody(ctx: Element, idx: Idx) -> PrimExpr:
            accs = [ctx.accumulator(dt, imm(0, dt), f"{what}_acc{lane}") for lane in range(LANES)]

            def add_to(acc: Buffer, r: Idx, at: PrimExpr) -> Stmt:
                return acc_store(acc, BinaryOp("add", acc_load(acc), value(ctx, element_of(idx, r[:-1] + (at,)))))
            if inner >= LANES:
                ctx.loop(outer + (inner // LANES,), names, lambda r: [
                    add_to(acc, r, add(mul(r[-1], LANES), lane)) for lane, acc in enumerate(accs)])
            if inner % LANES:
                ctx.loop(outer + (inner % LANES,), names, lambda r: add_to(accs[0], r, add(r[-1], inner // LANES * LANES)))
            parts = [acc_load(a) for a in accs]
            while len(parts) > 1:  # a balanced sum of the lanes
                parts = [BinaryOp("add", parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
            return finish(parts[0])
        return Reduce(stats_shape, dt, fbody, what)
    mean = reduce(lambda ctx, i: ctx.load(x, i), lambda total: BinaryOp("div", total, imm(count, dt)), "mean")

    def centered(ctx: Element, i: Idx) -> PrimExpr:
        return BinaryOp("sub", ctx.load(x, i), ctx.load(mean, stat_of(i)))

    def square(ctx: Element, i: Idx) -> PrimExpr:
        c = centered(ctx, i)
        return BinaryOp("mul", c, c)
    inv_std = reduce(square, lambda total: BinaryOp("div", imm(1, dt), Call("sqrt", (BinaryOp(
        "add", BinaryOp("div", total, imm(count, dt)), imm(float(attrs["epsilon"]), dt)),))), "inv_std")  # type: ignore[arg-type]
    _, gamma, beta = args

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        out = BinaryOp("mul", centered(ctx, idx), ctx.load(inv_std, stat_of(idx)))
        if attrs["scale"]:
            out = BinaryOp("mul", out, ctx.load(gamma, (idx[axis],)))
        if attrs["center"]:
            out = BinaryOp("add", out, ctx.load(beta, (idx[axis],)))
        return out
    return Compute(x.shape, dt, f, name)


@rule("nn.layer_norm")
def _layer_norm(args: list, attrs: Attrs, out: Type) -> Tensor:
    x = args[0]
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    grouping: Grouping = (x.shape[:axis] + x.shape[axis + 1:], lambda i: i[:axis] + i[axis + 1:],
                          lambda s, r: s[:axis] + r + s[axis:], (x.shape[axis],))
    return _normalize(x, args, attrs, axis, grouping, "layer_norm")


@rule("nn.group_norm")
def _group_norm(args: list, attrs: Attrs, out: Type) -> Tensor:
    x = args[0]
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    per_group = x.shape[axis] // int(attrs["num_groups"])  # type: ignore[arg-type]
    rest = x.shape[axis + 1:]
    # Statistics per (leading axes, group); a group spans its channels and every later axis.
    grouping: Grouping = (x.shape[:axis] + (int(attrs["num_groups"]),),  # type: ignore[arg-type]
                          lambda i: i[:axis] + (floordiv(i[axis], per_group),),
                          lambda s, r: s[:axis] + (add(mul(s[axis], per_group), r[0]),) + r[1:],
                          (per_group,) + rest)
    return _normalize(x, args, attrs, axis, grouping, "group_norm")
