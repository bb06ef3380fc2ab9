"""Elementwise and broadcasting operators, activations, Cast, Dropout and Identity.

Opsets before 7 broadcast only with `broadcast=1` (B aligned at `axis`), and before 7 Dropout
and BatchNormalization default to training mode (`is_test=0`), which is refused.
"""

from __future__ import annotations

import numpy as np

from irtool.frontend.onnx_dtypes import dtype_of, elem_type_named, onnx_type_name
from irtool.frontend.onnx_values import Builder, Node, Unsupported, Value
from irtool.frontend.onnx_ops.activations import softplus
from irtool.frontend.onnx_ops.common import (converter, norm_axis, required, reshaped, scalar)

_UNARY = {"Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
          "Sqrt": "sqrt", "Neg": "negative", "Abs": "abs", "Floor": "floor", "Ceil": "ceil",
          "Erf": "erf", "Not": "logical_not", "Round": "nearbyint"}
_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power",
           "Equal": "equal", "Greater": "greater", "Less": "less", "And": "logical_and",
           "Or": "logical_or", "GreaterOrEqual": "greater_equal", "LessOrEqual": "less_equal"}
# The math functions and bit operations of irtool/ops/definitions/math.py and bitwise.py.
_UNARY |= {op: op.lower() for op in ("Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
                                     "Atanh", "Sign", "IsNaN")} | {"BitwiseNot": "bitwise_not"}
_BINARY |= {"Xor": "logical_xor", "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


@converter(*_UNARY)
def _unary(b: Builder, node: Node) -> list[Value | None]:
    return [b.call(_UNARY[node.op_type], [required(node, 0, "X")])]


@converter(*_BINARY)
def _binary(b: Builder, node: Node) -> list[Value | None]:
    x, y = required(node, 0, "A"), required(node, 1, "B")
    if b.opset < 7 and node.attr("broadcast", 0) and node.attr("axis") is not None and y.ndim < x.ndim:
        start = norm_axis(int(node.attr("axis")), x.ndim)  # type: ignore[call-overload, arg-type]
        trailing = x.ndim - start - y.ndim
        if trailing < 0:
            raise Unsupported(f"broadcast axis {node.attr('axis')} does not fit shapes {x.shape} and {y.shape}")
        y = reshaped(b, y, y.shape + (1,) * trailing)
    if node.op_type == "Pow" and y.dtype != x.dtype:
        if y.dtype.startswith("float") and not x.dtype.startswith("float"):
            # An integer base with a float exponent is computed in floating point, then truncated.
            power = b.call("power", [b.call("cast", [x], dtype=y.dtype), y])
            return [b.call("cast", [power], dtype=x.dtype)]
        y = b.call("cast", [y], dtype=x.dtype)
    return [b.call(_BINARY[node.op_type], [x, y])]


@converter("Sum", "Max", "Min", "Mean")
def _variadic(b: Builder, node: Node) -> list[Value | None]:
    op = {"Sum": "add", "Mean": "add", "Max": "maximum", "Min": "minimum"}[node.op_type]
    args = [v for v in node.inputs if v is not None]
    if not args:
        raise Unsupported("no inputs")
    out = args[0]
    for v in args[1:]:
        out = b.call(op, [out, v])
    if node.op_type == "Mean" and len(args) > 1:
        out = b.call("divide", [out, scalar(b, len(args), out.dtype)])
    return [out]


@converter("Identity")
def _identity(b: Builder, node: Node) -> list[Value | None]:
    return [required(node, 0, "input")]


@converter("Dropout")
def _dropout(b: Builder, node: Node) -> list[Value | None]:
    """Inference dropout: the data, and from opset 12 an all-true mask (before, onnxruntime and
    onnx.reference disagree about the inference mask, so it is refused). Training mode with
    ratio 0 drops nothing and scales by 1/(1 − 0), so it is the same; another ratio is random."""
    x = required(node, 0, "data")
    if b.opset >= 12:
        training = node.input(2)
        if training is not None and bool(np.any(b.static(training, "training_mode"))):
            ratio_in = node.input(1)
            ratio = 0.5 if ratio_in is None else float(np.asarray(b.static(ratio_in, "ratio")).reshape(-1)[0])
            if ratio != 0:
                raise Unsupported(f"training-mode dropout with ratio {ratio} (random)")
    elif b.opset < 7 and not node.attr("is_test", 0):
        raise Unsupported("training-mode dropout (is_test=0, the default before opset 7)")
    mask = None
    if node.used_outputs[1:2] == [True]:
        if b.opset < 12:
            raise Unsupported("the mask output before opset 12")
        mask = b.call("cast", [b.call("ones_like", [x])], dtype="bool")
    return [x, mask]


@converter("LeakyRelu")
def _leaky_relu(b: Builder, node: Node) -> list[Value | None]:
    return [b.call("nn.leaky_relu", [required(node, 0, "X")], alpha=float(node.attr("alpha", 0.01)))]  # type: ignore[arg-type]


@converter("PRelu")
def _prelu(b: Builder, node: Node) -> list[Value | None]:
    x, slope = required(node, 0, "X"), required(node, 1, "slope")
    channels = x.dims[1] if x.ndim >= 2 else None
    if isinstance(channels, int) and slope.dims == (channels,) + (1,) * (x.ndim - 2):
        return [b.call("nn.prelu", [x, reshaped(b, slope, (channels,))], axis=1)]
    # General unidirectional broadcast: where(x < 0, slope * x, x).
    negative = b.call("less", [x, scalar(b, 0, x.dtype)])
    return [b.call("where", [negative, b.call("multiply", [x, slope]), x])]


_FLT_MAX = float(np.finfo(np.float32).max)


@converter("Clip")
def _clip(b: Builder, node: Node) -> list[Value | None]:
    """min(max(x, min), max): bounds from attributes before opset 11 (±FLT_MAX by default from
    opset 6), from optional inputs after, which may be tensors computed at run time."""
    x = required(node, 0, "input")
    bounds: list[Value | None] = []
    for k, key in ((1, "min"), (2, "max")):
        if b.opset < 11:
            value = node.attr(key, None if b.opset < 6 else (-_FLT_MAX if key == "min" else _FLT_MAX))
            bounds.append(None if value is None else scalar(b, float(value), x.dtype))  # type: ignore[arg-type]
        else:
            bound = node.input(k)
            if bound is not None and bound.ndim != 0 and bound.shape != (1,):
                raise Unsupported(f"{key} of shape {bound.shape} (it must be a scalar)")
            bounds.append(bound if bound is None or bound.ndim == 0 else reshaped(b, bound, ()))
    lo, hi = bounds
    if (lo is not None and hi is not None and x.dtype.startswith("float") and lo.const is not None
            and hi.const is not None and float(lo.const) <= float(hi.const)):
        return [b.call("clip", [x], a_min=float(lo.const), a_max=float(hi.const))]
    out = x
    if lo is not None:
        out = b.call("maximum", [out, lo])
    if hi is not None:  # after the lower bound: min > max clips everything to max, as ONNX says
        out = b.call("minimum", [out, hi])
    return [out]


@converter("Cast")
def _cast(b: Builder, node: Node) -> list[Value | None]:
    """Only between irtool's dtypes (`saturate` and `round_mode` concern float8 targets only)."""
    to = node.attr("to")
    elem = elem_type_named(to) if isinstance(to, str) else int(to)  # type: ignore[call-overload]  # opset 1: "FLOAT"
    dtype = None if elem is None else dtype_of(elem)
    if dtype is None:
        raise Unsupported(subject=f"Cast to {to if elem is None else onnx_type_name(elem)}")
    return [b.call("cast", [required(node, 0, "input")], dtype=dtype)]


@converter("Where")
def _where(b: Builder, node: Node) -> list[Value | None]:
    return [b.call("where", [required(node, 0, "condition"), required(node, 1, "X"), required(node, 2, "Y")])]


# ------------------------------------------------------------------------- activations built from primitives

def _expm1_where_negative(b: Builder, x: Value, alpha: float) -> Value:
    """where(x < 0, alpha·(exp(x) − 1), x): the negative branch of Elu and Selu."""
    one = scalar(b, 1.0, x.dtype)
    negative = b.call("multiply", [scalar(b, alpha, x.dtype), b.call("subtract", [b.call("exp", [x]), one])])
    return b.call("where", [b.call("less", [x, scalar(b, 0, x.dtype)]), negative, x])


@converter("Elu")
def _elu(b: Builder, node: Node) -> list[Value | None]:
    return [_expm1_where_negative(b, required(node, 0, "X"), float(node.attr("alpha", 1.0)))]  # type: ignore[arg-type]


@converter("Selu")
def _selu(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "X")
    # Opset 1's defaults are shorter decimals than opset 6's.
    alpha, gamma = (1.6732, 1.0507) if b.opset < 6 else (1.67326319217681884765625, 1.05070102214813232421875)
    inner = _expm1_where_negative(b, x, float(node.attr("alpha", alpha)))  # type: ignore[arg-type]
    gamma = float(node.attr("gamma", gamma))  # type: ignore[arg-type]
    return [b.call("multiply", [inner, scalar(b, gamma, x.dtype)])]


@converter("Softplus")
def _softplus(b: Builder, node: Node) -> list[Value | None]:
    return [softplus(b, required(node, 0, "X"))]


@converter("Softsign")
def _softsign(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "input")
    denominator = b.call("add", [b.call("abs", [x]), scalar(b, 1.0, x.dtype)])
    return [b.call("divide", [x, denominator])]
