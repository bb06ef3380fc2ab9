"""Layer, group, RMS, mean-variance and Lp normalisation, and Lp pooling.

LayerNormalization and GroupNormalization become TVM's `nn.layer_norm` / `nn.group_norm` (one
kernel: two passes for the statistics, one for the result); the others are reductions and
elementwise arithmetic. `stash_type` is the precision of the statistics: a half-precision
input is normalised in float32 and converted back before the scale and bias, as ONNX defines.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from irtool.frontend.onnx_ops.common import converter, int_list, norm_axis, regrouped, required, reshaped, scalar
from irtool.frontend.onnx_ops.conv import _pool
from irtool.frontend.onnx_values import Builder, DynamicShape, Node, Unsupported, Value

# ONNX's stash_type (a TensorProto element type) as a dtype.
_STASH = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}


def _stash(node: Node) -> str:
    code = int(node.attr("stash_type", 1))  # type: ignore[call-overload]
    if code not in _STASH:
        raise Unsupported(f"stash_type {code}")
    return _STASH[code]


def _cast(b: Builder, x: Value, dtype: str) -> Value:
    return x if x.dtype == dtype else b.call("cast", [x], dtype=dtype)


def _as_vector(b: Builder, v: Value, trailing: tuple[int, ...], dtype: str) -> Value:
    """A scale or bias that broadcasts to the normalised `trailing` shape, as one vector."""
    if v.shape != trailing:
        if tuple(np.broadcast_shapes(v.shape, trailing)) != trailing:
            raise Unsupported(f"a scale or bias of shape {v.shape} for normalised axes {trailing}")
        v = b.call("add", [v, b.call("zeros", [], shape=trailing, dtype=v.dtype)])
    return _cast(b, reshaped(b, v, (math.prod(trailing),)), dtype)


def _statistics(b: Builder, x: Value, axes: tuple[int, ...], epsilon: float) -> tuple[Value, Value]:
    """(mean, 1 / sqrt(var + epsilon)) over `axes`, kept as size-1 axes."""
    mean = b.call("mean", [x], axis=axes, keepdims=True)
    centered = b.call("subtract", [x, mean])
    var = b.call("mean", [b.call("multiply", [centered, centered])], axis=axes, keepdims=True)
    return mean, b.call("rsqrt", [b.call("add", [var, scalar(b, epsilon, x.dtype)])])


@converter("LayerNormalization")
def _layer_norm(b: Builder, node: Node) -> list[Value | None]:
    x, gamma = required(node, 0, "X"), required(node, 1, "Scale")
    axis = norm_axis(int(node.attr("axis", -1)), x.ndim)  # type: ignore[call-overload]
    epsilon = float(node.attr("epsilon", 1e-5))  # type: ignore[arg-type]
    stash = _stash(node)
    trailing, lead = x.dims[axis:], x.dims[:axis]
    symbolic = [i for i in range(axis, x.ndim) if not isinstance(x.dims[i], int)]
    if symbolic:
        raise DynamicShape(f"it normalises over the symbolic axis {symbolic[0]} of {x.tensor}")
    beta = node.input(2)
    statistics: tuple[Value, Value] | None = None
    if not x.tensor.is_static and len(trailing) > 1:
        # No regrouping of the `?` axes (native code reshapes to one `?` only): the statistics
        # are reductions over the normalised axes, which keep the leading ones row by row.
        xs = _cast(b, x, stash)
        statistics = _statistics(b, xs, tuple(range(axis, x.ndim)), epsilon)
        normed = b.call("multiply", [b.call("subtract", [xs, statistics[0]]), statistics[1]])
        y = b.call("multiply", [_cast(b, normed, x.dtype), gamma])
        if beta is not None:
            y = b.call("add", [y, beta])
    else:
        rows = regrouped(b, _cast(b, x, stash), len(lead), (math.prod(trailing),))  # type: ignore[arg-type]
        if stash == x.dtype:  # the affine step fused into the kernel
            g = _as_vector(b, gamma, trailing, stash)  # type: ignore[arg-type]
            bias = _as_vector(b, beta, trailing, stash) if beta is not None else g  # type: ignore[arg-type]
            normed = b.call("nn.layer_norm", [rows, g, bias], axis=-1, epsilon=epsilon, center=beta is not None)
            y = regrouped(b, normed, len(lead), trailing)  # type: ignore[arg-type]
        else:
            ones = b.call("ones", [], shape=(rows.dims[-1],), dtype=stash)
            normed = b.call("nn.layer_norm", [rows, ones, ones], axis=-1, epsilon=epsilon, center=False, scale=False)
            y = b.call("multiply", [_cast(b, regrouped(b, normed, len(lead), trailing), x.dtype), gamma])  # type: ignore[arg-type]
            if beta is not None:
                y = b.call("add", [y, beta])
    outs: list[Value | None] = [y]
    if any(node.used_outputs[1:]):  # training-style statistics, computed on their own
        outs += statistics or _statistics(b, _cast(b, x, stash), tuple(range(axis, x.ndim)), epsilon)
    return outs + [None] * (node.num_outputs - len(outs))


@converter("GroupNormalization")
def _group_norm(b: Builder, node: Node) -> list[Value | None]:
    x, gamma, beta = required(node, 0, "X"), required(node, 1, "scale"), required(node, 2, "bias")
    if x.ndim < 2:
        raise Unsupported(f"a rank-{x.ndim} input")
    groups = int(node.attr("num_groups"))  # type: ignore[call-overload]
    channels = x.shape[1]
    if groups < 1 or channels % groups:
        raise Unsupported(f"{channels} channels in {groups} groups")
    epsilon = float(node.attr("epsilon", 1e-5))  # type: ignore[arg-type]
    if b.opset < 21:  # scale and bias per group: repeat each for the group's channels
        spread = b.const(np.arange(channels, dtype=np.int64) // (channels // groups))
        gamma, beta = (b.call("take", [v, spread], axis=0) for v in (gamma, beta))
    stash = _stash(node) if b.opset >= 21 else x.dtype
    if stash == x.dtype:
        return [b.call("nn.group_norm", [x, gamma, beta], num_groups=groups, epsilon=epsilon)]
    ones = b.call("ones", [], shape=(channels,), dtype=stash)
    normed = b.call("nn.group_norm", [_cast(b, x, stash), ones, ones], num_groups=groups, epsilon=epsilon,
                    center=False, scale=False)
    along = (channels,) + (1,) * (x.ndim - 2)
    y = b.call("multiply", [_cast(b, normed, x.dtype), reshaped(b, gamma, along)])
    return [b.call("add", [y, reshaped(b, beta, along)])]


@converter("RMSNormalization")
def _rms_norm(b: Builder, node: Node) -> list[Value | None]:
    """x / sqrt(mean(x²) + epsilon) · scale over the axes from `axis` on."""
    x, gamma = required(node, 0, "X"), required(node, 1, "scale")
    axis = norm_axis(int(node.attr("axis", -1)), x.ndim)  # type: ignore[call-overload]
    stash = _stash(node)
    xs = _cast(b, x, stash)
    square_mean = b.call("mean", [b.call("multiply", [xs, xs])], axis=tuple(range(axis, x.ndim)), keepdims=True)
    epsilon = scalar(b, float(node.attr("epsilon", 1e-5)), stash)  # type: ignore[arg-type]
    normed = b.call("multiply", [xs, b.call("rsqrt", [b.call("add", [square_mean, epsilon])])])
    return [b.call("multiply", [_cast(b, normed, x.dtype), gamma])]


@converter("MeanVarianceNormalization")
def _mean_variance_norm(b: Builder, node: Node) -> list[Value | None]:
    """(x - mean) / (sqrt(var) + 1e-9) over `axes`, as ONNX's function body."""
    x = required(node, 0, "X")
    axes = tuple(sorted(norm_axis(a, x.ndim) for a in int_list(node.attr("axes", [0, 2, 3]))))
    mean = b.call("mean", [x], axis=axes, keepdims=True)
    centered = b.call("subtract", [x, mean])
    std = b.call("sqrt", [b.call("mean", [b.call("multiply", [centered, centered])], axis=axes, keepdims=True)])
    return [b.call("divide", [centered, b.call("add", [std, scalar(b, 1e-9, x.dtype)])])]


@converter("LpNormalization")
def _lp_norm(b: Builder, node: Node) -> list[Value | None]:
    """x / ||x||_p along `axis`, and 0 where the norm is 0."""
    x = required(node, 0, "input")
    axis = norm_axis(int(node.attr("axis", -1)), x.ndim)  # type: ignore[call-overload]
    p = int(node.attr("p", 2))  # type: ignore[call-overload]
    if p not in (1, 2):
        raise Unsupported(f"p = {p} (ONNX allows 1 and 2)")
    if p == 1:
        norm = b.call("sum", [b.call("abs", [x])], axis=(axis,), keepdims=True)
    else:
        norm = b.call("sqrt", [b.call("sum", [b.call("multiply", [x, x])], axis=(axis,), keepdims=True)])
    zero = scalar(b, 0, x.dtype)
    return [b.call("where", [b.call("equal", [norm, zero]), zero, b.call("divide", [x, norm])])]


@converter("LpPool")
def _lp_pool(b: Builder, node: Node) -> list[Value | None]:
    """(sum over the window of |x|^p)^(1/p): the window sum is an average pool that counts the
    zero padding, times the window size."""
    x = required(node, 0, "X")
    if int(node.attr("ceil_mode", 0)):
        raise Unsupported("ceil_mode (its last windows are shorter than the kernel)")
    p = float(node.attr("p", 2))  # type: ignore[arg-type]
    if p <= 0:
        raise Unsupported(f"p = {p}")
    magnitude = b.call("abs", [x])
    powered = (b.call("multiply", [x, x]) if p == 2 else magnitude if p == 1
               else b.call("power", [magnitude, scalar(b, p, x.dtype)]))
    counted = dataclasses.replace(node, inputs=[powered], attrs={**node.attrs, "count_include_pad": 1})
    mean = _pool(b, counted, "nn.avg_pool2d")[0]
    assert mean is not None
    total = b.call("multiply", [mean, scalar(b, math.prod(int_list(node.attr("kernel_shape"))), x.dtype)])
    if p == 2:
        return [b.call("sqrt", [total])]
    return [total if p == 1 else b.call("power", [total, scalar(b, 1 / p, x.dtype)])]
