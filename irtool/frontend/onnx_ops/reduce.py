"""The norm-like reductions: ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and
ReduceLogSumExp, each an elementwise part around a Relay `sum` (or `max`, for the shift that
keeps LogSumExp finite).

Axes follow the other reductions (`reduced_axes`: an attribute before opset 18, an input from
it). With `noop_with_empty_axes` and no axes only the elementwise part is applied, as the ONNX
reference and onnxruntime do (ReduceSumSquare gives x², ReduceL2 |x|). Over an axis with no
elements the sums are 0, so L1, L2 and SumSquare give 0 and LogSum log(0) = -inf;
LogSumExp of nothing is -inf too.
"""

from __future__ import annotations

from collections.abc import Callable

from irtool.frontend.onnx_values import Builder, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import converter, empty_reduction, required, reshaped, scalar
from irtool.frontend.onnx_ops.tensor import reduced_axes

# Reduce* before/after the `sum`: (x -> summand, sum -> result).
Parts = tuple[Callable[[Builder, Value], Value], Callable[[Builder, Value], Value]]


def _same(b: Builder, v: Value) -> Value:
    return v


def _square(b: Builder, v: Value) -> Value:
    return b.call("multiply", [v, v])


_SUMS: dict[str, Parts] = {
    "ReduceL1": (lambda b, v: b.call("abs", [v]), _same),
    "ReduceL2": (_square, lambda b, v: b.call("sqrt", [v])),
    "ReduceSumSquare": (_square, _same),
    "ReduceLogSum": (_same, lambda b, v: b.call("log", [v])),
}


@converter(*_SUMS)
def _norm(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "data")
    summand, finish = _SUMS[node.op_type]
    axes = reduced_axes(b, node, x, 18)
    total = summand(b, x)
    if axes is not None:
        total = b.call("sum", [total], axis=axes, keepdims=bool(node.attr("keepdims", 1)))
    return [finish(b, total)]


@converter("ReduceLogSumExp")
def _log_sum_exp(b: Builder, node: Node) -> list[Value | None]:
    """m + log(sum(exp(x − m))) with m the maximum (0 where it is infinite, so that a row of
    -inf gives -inf and one holding +inf gives +inf instead of NaN): no exp overflows."""
    x = required(node, 0, "data")
    if not x.dtype.startswith(("float", "bfloat")):
        raise Unsupported(f"ReduceLogSumExp of {x.dtype} (it is defined for floating-point tensors)")
    axes = reduced_axes(b, node, x, 18)
    if axes is None:
        return [x]
    keepdims = bool(node.attr("keepdims", 1))
    empty = empty_reduction(b, x, axes, keepdims, float("-inf"))
    if empty is not None:
        return [empty]
    peak = b.call("max", [x], axis=axes, keepdims=True)
    shift = b.call("where", [b.call("isinf", [peak]), scalar(b, 0.0, x.dtype), peak])
    total = b.call("sum", [b.call("exp", [b.call("subtract", [x, shift])])], axis=axes, keepdims=keepdims)
    return [b.call("add", [b.call("log", [total]), reshaped(b, shift, total.shape)])]
