"""Elementwise and broadcasting operators, activations, Cast, Dropout and Identity.
"""

from __future__ import annotations

import numpy as np

from irtool.frontend.onnx_values import Builder, Node, Unsupported, Value, relay_dtype
from irtool.frontend.onnx_ops.activations import softplus
from irtool.frontend.onnx_ops.common import (converter, norm_axis, required, reshaped, scalar)

_UNARY = {"Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
          "Sqrt": "sqrt", "Neg": "negative", "Abs": "abs", "Floor": "floor", "Ceil": "ceil",
          "Erf": "erf", "Not": "logical_not", "Round": "round"}
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
    if b.opset >= 12:
        training = node.input(2)
        if training is not None and bool(np.any(b.static(training, "training_mode"))):
            raise Unsupported("training-mode dropout")
    elif b.opset < 7 and not node.attr("is_test", 0) and node.used_outputs[1:2] == [True]:
        raise Unsupported("training-mode dropout (is_test=0) with its mask used")
    return [required(node, 0, "data"), None]


@converter("LeakyRelu")
def _leaky_relu(b: Builder, node: Node) -> list[Value | None]:
    return [b.call("nn.leaky_relu", [required(node, 0, "X")], alpha=float(node.attr("alpha", 0.01)))]  # type: ignore[arg-type]


@converter("PRelu")
def _prelu(b: Builder, node: Node) -> list[Value | None]:
    x, slope = required(node, 0, "X"), required(node, 1, "slope")
    channels = x.shape[1] if x.ndim >= 2 else None
    if channels is not None and slope.shape == (channels,) + (1,) * (x.ndim - 2) and slope.ndim >= 1:
        return [b.call("nn.prelu", [x, reshaped(b, slope, (channels,))], axis=1)]
    # General unidirectional broadcast: where(x < 0, slope * x, x).
    negative = b.call("less", [x, scalar(b, 0, x.dtype)])
    return [b.call("where", [negative, b.call("multiply", [x, slope]), x])]


@converter("Clip")
def _clip(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "input")
    if b.opset < 11:
        lo, hi = node.attr("min"), node.attr("max")
    else:
        lo = None if node.input(1) is None else float(b.static(node.input(1), "min"))
        hi = None if node.input(2) is None else float(b.static(node.input(2), "max"))
    if lo is not None and hi is not None:
        return [b.call("clip", [x], a_min=float(lo), a_max=float(hi))]  # type: ignore[arg-type]
    out = x
    if lo is not None:
        out = b.call("maximum", [out, scalar(b, float(lo), x.dtype)])  # type: ignore[arg-type]
    if hi is not None:
        out = b.call("minimum", [out, scalar(b, float(hi), x.dtype)])  # type: ignore[arg-type]
    return [out]


@converter("Cast")
def _cast(b: Builder, node: Node) -> list[Value | None]:
    from onnx import helper
    to = int(node.attr("to"))  # type: ignore[arg-type]
    try:
        dtype = relay_dtype(np.dtype(helper.tensor_dtype_to_np_dtype(to)))
    except (KeyError, TypeError):
        raise Unsupported(f"cast to ONNX type {to}") from None
    if dtype not in ("bool", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
                     "uint8", "uint16", "uint32", "uint64"):
        raise Unsupported(f"cast to {dtype}")
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
    inner = _expm1_where_negative(b, x, float(node.attr("alpha", 1.67326319217681884765625)))  # type: ignore[arg-type]
    gamma = float(node.attr("gamma", 1.05070102214813232421875))  # type: ignore[arg-type]
    return [b.call("multiply", [inner, scalar(b, gamma, x.dtype)])]


@converter("Softplus")
def _softplus(b: Builder, node: Node) -> list[Value | None]:
    return [softplus(b, required(node, 0, "X"))]


@converter("Softsign")
def _softsign(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "input")
    denominator = b.call("add", [b.call("abs", [x]), scalar(b, 1.0, x.dtype)])
    return [b.call("divide", [x, denominator])]
