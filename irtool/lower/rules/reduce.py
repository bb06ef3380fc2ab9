"""Compute rules of the reductions (definitions/reduce.py): one accumulator per output element."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from irtool.ir.tir import BinaryOp, PrimExpr, is_float
from irtool.ir.types import Type
from irtool.lower.rules._rule import Attrs, out_tensor_type, rule, shape_of, sum_dtype
from irtool.lower.schedules.reduce_rows import trailing_sum
from irtool.lower.schedules.tile import register_tile
from irtool.lower.te import (Element, Idx, Reduce, Tensor, acc_load, acc_store, cast, const, imm, ravel, select)
from irtool.ops.definitions.reduce import reduce_axes

Combine = Callable[[PrimExpr, PrimExpr], PrimExpr]


def input_index(ndim: int, axes: Sequence[int], keepdims: bool, idx: Idx, r: Idx) -> Idx:
    """The input element that output element `idx` and reduction position `r` read."""
    out: list[PrimExpr] = []
    kept = iter(idx if not keepdims else [i for k, i in enumerate(idx) if k not in axes])
    rs = iter(r)
    for k in range(ndim):
        out.append(next(rs) if k in axes else next(kept))
    return tuple(out)


def reduction(x: Tensor, axes: Sequence[int], keepdims: bool, out: Type, combine: Combine,
              init: Callable[[Element, Idx], PrimExpr],
              finalize: Callable[[PrimExpr], PrimExpr] = lambda v: v, name: str = "red",
              wide: str | None = None) -> Reduce:
    """out[idx] = finalize(fold(combine, init, x[idx with the reduced axes running])), folded in
    the `wide` dtype (x's by default) and converted back to x's before `finalize`."""
    extents = [x.shape[a] for a in axes]
    dtype = out_tensor_type(out).dtype
    acc_dtype = wide or x.dtype

    def fbody(ctx: Element, idx: Idx) -> PrimExpr:
        zeros = tuple(const(0) for _ in axes)
        first = cast(acc_dtype, init(ctx, input_index(x.ndim, axes, keepdims, idx, zeros)))
        acc = ctx.accumulator(acc_dtype, first, f"{name}_acc")
        ctx.loop(extents, [f"k{a}" for a in axes], lambda r: acc_store(
            acc, combine(acc_load(acc), cast(acc_dtype, ctx.load(x, input_index(x.ndim, axes, keepdims, idx, r))))))
        return finalize(cast(x.dtype, acc_load(acc)))
    return Reduce(shape_of(out), dtype, fbody, name)


def _identity(value: int) -> Callable[[Tensor], Callable[[Element, Idx], PrimExpr]]:
    return lambda x: (lambda ctx, first: imm(value, x.dtype))


def _first(x: Tensor) -> Callable[[Element, Idx], PrimExpr]:
    """Starts max/min at the first element (no identity needed, NaN propagates as in numpy)."""
    return lambda ctx, first: ctx.load(x, first)


REDUCERS: dict[str, tuple[Combine, Callable[[Tensor], Callable[[Element, Idx], PrimExpr]]]] = {
    "sum": (lambda a, b: BinaryOp("add", a, b), _identity(0)),
    "prod": (lambda a, b: BinaryOp("mul", a, b), _identity(1)),
    "max": (lambda a, b: BinaryOp("max", a, b), _first),
    "min": (lambda a, b: BinaryOp("min", a, b), _first),
}


def _reduce_rule(name: str, combine: Combine, init: Callable[[Tensor], Callable[[Element, Idx], PrimExpr]]) -> None:
    @rule(name)
    def lower(args: list, attrs: Attrs, out: Type) -> Tensor:
        x = args[0]
        axes = reduce_axes(name, attrs, x.ndim)
        wide = sum_dtype(x.dtype) if name == "sum" else None   # numpy's half sums are float32
        vectors = trailing_sum(x, axes, shape_of(out), register_tile().lanes, lambda t: t) if name == "sum" else None
        return vectors or reduction(x, axes, bool(attrs["keepdims"]), out, combine, init(x), name=name, wide=wide)


for _name, (_combine, _init) in REDUCERS.items():
    _reduce_rule(_name, _combine, _init)


def mean_of(total: PrimExpr, count: int) -> PrimExpr:
    """The reference's mean: divide in the dtype for floats; for integers truncate total/count.
    Over no elements it is the reference's NaN (type inference refuses integer means of nothing)."""
    if count == 0:
        return imm(float("nan"), total.dtype)
    if is_float(total.dtype):
        return BinaryOp("div", total, imm(count, total.dtype))
    return cast(total.dtype, BinaryOp("div", cast("float64", total), imm(count, "float64")))


@rule("mean")
def _mean(args: list, attrs: Attrs, out: Type) -> Tensor:
    x = args[0]
    axes = reduce_axes("mean", attrs, x.ndim)
    count = 1
    for a in axes:
        count *= x.shape[a]
    vectors = trailing_sum(x, axes, shape_of(out), register_tile().lanes, lambda total: mean_of(total, count))
    return vectors or reduction(x, axes, bool(attrs["keepdims"]), out, REDUCERS["sum"][0], _identity(0)(x),
                                lambda total: mean_of(total, count), "mean", sum_dtype(x.dtype))


def _arg_reduce(name: str, better: str) -> None:
    @rule(name)
    def lower(args: list, attrs: Attrs, out: Type) -> Tensor:
        x = args[0]
        axes = reduce_axes(name, attrs, x.ndim)
        keepdims = bool(attrs["keepdims"])
        last = bool(attrs["select_last_index"])
        extents = [x.shape[a] for a in axes]
        or_equal = {"gt": "ge", "lt": "le"}[better]

        def update(v: PrimExpr, best: PrimExpr) -> PrimExpr:
            """Whether `v` replaces `best` (numpy: NaN wins, first or last occurrence)."""
            if not is_float(x.dtype):
                return BinaryOp(or_equal if last else better, v, best)
            nan_v, num_best = BinaryOp("ne", v, v), BinaryOp("eq", best, best)
            if last:
                return BinaryOp("or", BinaryOp("and", BinaryOp(or_equal, v, best), num_best), nan_v)
            return BinaryOp("or", BinaryOp(better, v, best), BinaryOp("and", nan_v, num_best))

        def fbody(ctx: Element, idx: Idx) -> PrimExpr:
            zeros = tuple(const(0) for _ in axes)
            best = ctx.accumulator(x.dtype, ctx.load(x, input_index(x.ndim, axes, keepdims, idx, zeros)), "best")
            where = ctx.accumulator("int32", const(0), "best_index")

            def body(r: Idx) -> list:
                v = ctx.load(x, input_index(x.ndim, axes, keepdims, idx, r))
                c = update(v, acc_load(best))
                return [acc_store(where, select(c, ravel(r, extents), acc_load(where))),
                        acc_store(best, select(c, v, acc_load(best)))]
            ctx.loop(extents, [f"k{a}" for a in axes], body)
            return acc_load(where)
        return Reduce(shape_of(out), "int32", fbody, name)


_arg_reduce("argmax", "gt")
_arg_reduce("argmin", "lt")


@rule("collapse_sum_like")
def _collapse_sum_like(args: list, attrs: Attrs, out: Type) -> Tensor:
    x = args[0]
    like = shape_of(out)
    lead = x.ndim - len(like)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(like) if d == 1 and x.shape[lead + i] != 1]

    def fbody(ctx: Element, idx: Idx) -> PrimExpr:
        def index(r: Idx) -> Idx:
            rs = iter(r)
            return tuple(next(rs) if k in axes else idx[k - lead] for k in range(x.ndim))
        acc = ctx.accumulator(x.dtype, imm(0, x.dtype), "sum_acc")
        ctx.loop([x.shape[a] for a in axes], [f"k{a}" for a in axes],
                 lambda r: acc_store(acc, BinaryOp("add", acc_load(acc), ctx.load(x, index(r)))))
        return acc_load(acc)
    return Reduce(like, x.dtype, fbody, "collapse_sum")
