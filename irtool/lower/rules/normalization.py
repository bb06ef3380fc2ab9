"""Compute rules of layer and group normalisation (definitions/normalization.py).

Two reductions per row (or group) into stages, the mean and then 1 / sqrt(var + epsilon) of the
centred values, each summed in vector lanes (`_lanes`), and the result as an elementwise
expression of those: two passes over the data for the statistics and one for the output,
whatever the row length. The result inlines into
its consumers (bias, activation, residual add) and its producers into the reductions.
"""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import BinaryOp, Call, PrimExpr
from irtool.ir.types import Type
from irtool.lower.rules._lanes import lane_reduce
from irtool.lower.rules._rule import Attrs, rule
from irtool.lower.te import Compute, Element, Idx, Reduce, Tensor, add, floordiv, imm, mul

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
        return lane_reduce(stats_shape, dt, extents, value, element_of, "add", finish, what)
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
