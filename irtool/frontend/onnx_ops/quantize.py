"""Quantized operators, as onnxruntime's quantizer writes them (QDQ: QuantizeLinear /
DequantizeLinear around float operators; QOperator: QLinearConv, QLinearMatMul; dynamic:
DynamicQuantizeLinear, MatMulInteger, ConvInteger).

QuantizeLinear and DequantizeLinear become `qnn.quantize` / `qnn.dequantize` (per tensor, per
axis, blocked). An integer product subtracts the zero points in int32 first (nothing when a
zero point is a constant 0: symmetric int8 weights stay int8 for the kernel) and is the usual
`nn.dense` / `nn.batch_matmul` / `nn.conv2d` accumulating in int32; the QLinear operators then
requantize: `saturate(round(acc · (scale_a · scale_b / scale_y)) + zero_point_y)`.
Float8, int4, int2 and float4 codes are refused as unsupported.
"""

from __future__ import annotations

import numpy as np

from irtool.frontend.onnx_values import Builder, Node, Unsupported, Value, relay_dtype
from irtool.ir.expr import Call, Constant, Expr, Op, Var
from irtool.ir.types import TensorType
from irtool.frontend.onnx_ops.common import (CONVERTERS, converter, int_list, norm_axis, onnx_dtype, required,
                                             reshaped, scalar)
from irtool.frontend.onnx_ops.conv import spatial_pads, spatial_sizes
from irtool.frontend.onnx_ops.nn import matmul

_CODES = ("int8", "uint8", "int16", "uint16")


def _code_dtype(b: Builder, node: Node, zero: Value | None) -> str:
    """The codes' dtype: the zero point's, else `output_dtype` (opset 21), else uint8."""
    dtype = zero.dtype if zero is not None else "uint8"
    if zero is None and b.opset >= 21 and node.attr("output_dtype"):
        dtype = onnx_dtype(int(node.attr("output_dtype")), "output_dtype")  # type: ignore[call-overload]
    if dtype not in _CODES:
        raise Unsupported(f"{dtype} codes (irtool quantizes to {', '.join(_CODES)})")
    return dtype


def _param(b: Builder, node: Node, x: Value, p: Value, what: str) -> Value:
    """A scale or zero point in the form the qnn operators take: one value (per tensor), a vector
    along the node's axis, or (blocked quantization) repeated over its blocks to x's shape."""
    if p.ndim == 0 or p.shape == (1,):
        return reshaped(b, p, ())
    axis = _axis(b, node, x)
    block = int(node.attr("block_size", 0)) if b.opset >= 21 else 0  # type: ignore[call-overload]
    if not block:
        if p.ndim != 1 or p.shape[0] != x.shape[axis]:
            raise Unsupported(f"a {what} of shape {p.shape} for axis {axis} of a tensor of shape {x.shape}")
        return p
    blocks = -(-x.shape[axis] // block)
    if p.ndim != x.ndim or p.shape[axis] != blocks or any(
            d != e for i, (d, e) in enumerate(zip(p.shape, x.shape)) if i != axis):
        raise Unsupported(f"a {what} of shape {p.shape} for blocks of {block} along axis {axis} of {x.shape}")
    indices = b.const(np.arange(x.shape[axis], dtype=np.int64) // block)
    return b.call("take", [p, indices], axis=axis)


def _axis(b: Builder, node: Node, x: Value) -> int:
    """The axis of per-axis and blocked parameters (ignored per tensor; 1 before opset 13)."""
    return norm_axis(int(node.attr("axis", 1)) if b.opset >= 13 else 1, x.ndim)  # type: ignore[call-overload]


def _qnn_axis(b: Builder, node: Node, x: Value, scale: Value) -> int:
    return -1 if scale.ndim == 0 or scale.shape == (1,) else _axis(b, node, x)


def quantize(b: Builder, x: Value, scale: Value, zero: Value, axis: int, dtype: str) -> Value:
    return b.call("qnn.quantize", [x, scale, zero], axis=axis, out_dtype=dtype)


@converter("QuantizeLinear")
def _quantize_linear(b: Builder, node: Node) -> list[Value | None]:
    x, scale, zero = required(node, 0, "x"), required(node, 1, "y_scale"), node.input(2)
    dtype = _code_dtype(b, node, zero)
    axis = _qnn_axis(b, node, x, scale)
    precision = node.attr("precision") if b.opset >= 23 else None
    if precision:
        real = onnx_dtype(int(precision), "precision")  # type: ignore[call-overload]
        if not real.startswith(("float", "bfloat")):
            raise Unsupported(f"precision {real}")
        x, scale = b.call("cast", [x], dtype=real), b.call("cast", [scale], dtype=real)
    zero = zero if zero is not None else scalar(b, 0, dtype)
    return [quantize(b, x, _param(b, node, x, scale, "scale"), _param(b, node, x, zero, "zero point"), axis, dtype)]


@converter("DequantizeLinear")
def _dequantize_linear(b: Builder, node: Node) -> list[Value | None]:
    x, scale, zero = required(node, 0, "x"), required(node, 1, "x_scale"), node.input(2)
    if x.dtype not in _CODES + ("int32",):
        raise Unsupported(f"{x.dtype} codes (irtool dequantizes {', '.join(_CODES)} and int32)")
    axis = _qnn_axis(b, node, x, scale)
    out = ""
    if b.opset >= 23 and node.attr("output_dtype"):
        out = onnx_dtype(int(node.attr("output_dtype")), "output_dtype")  # type: ignore[call-overload]
    zero = zero if zero is not None else scalar(b, 0, x.dtype)
    return [b.call("qnn.dequantize", [x, _param(b, node, x, scale, "scale"), _param(b, node, x, zero, "zero point")],
                   axis=axis, out_dtype=out)]


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(b: Builder, node: Node) -> list[Value | None]:
    """uint8 codes over [min(x, 0), max(x, 0)]: scale = (max − min) / 255 (1/255 when the range
    is empty), zero point = saturate(round(−min / scale))."""
    x = required(node, 0, "x")
    if x.dtype != "float32":
        raise Unsupported(f"DynamicQuantizeLinear of {x.dtype}")
    zero = scalar(b, 0.0, "float32")
    high = b.call("maximum", [b.call("max", [x]), zero])
    low = b.call("minimum", [b.call("min", [x]), zero])
    span = b.call("subtract", [high, low])
    span = b.call("where", [b.call("equal", [span, zero]), scalar(b, 1.0, "float32"), span])
    scale = b.call("divide", [span, scalar(b, 255.0, "float32")])
    zero_point = quantize(b, b.call("negative", [low]), scale, scalar(b, 0, "uint8"), -1, "uint8")
    return [quantize(b, x, scale, zero_point, -1, "uint8"), scale, zero_point]


def _is_zero(v: Value | None) -> bool:
    return v is None or (v.const is not None and not v.from_param and not np.any(v.const))


def _centered(b: Builder, x: Value, zero: Value | None, what: str) -> Value:
    """x − zero_point in int32 (x itself without a zero point)."""
    if x.dtype not in ("int8", "uint8"):
        raise Unsupported(f"{what} of {x.dtype} (int8 or uint8 expected)")
    if zero is None:
        return x
    if zero.dtype != x.dtype:
        raise Unsupported(f"a {zero.dtype} zero point for {x.dtype} {what}")
    return b.call("subtract", [b.call("cast", [x], dtype="int32"), b.call("cast", [zero], dtype="int32")])


def _per_row(b: Builder, a: Value, zero: Value | None) -> Value | None:
    """MatMulInteger's zero point of A: per tensor, or per row (M values for a 2-d A, (…, M, 1)
    beyond), as a value that broadcasts to A."""
    if zero is None or zero.ndim == 0 or zero.shape == (1,):
        return zero if zero is None else reshaped(b, zero, ())
    if a.ndim == 2 and zero.shape == (a.shape[0],):
        return reshaped(b, zero, (a.shape[0], 1))
    if zero.ndim == a.ndim and zero.shape[-1] == 1:
        return zero
    raise Unsupported(f"a zero point of shape {zero.shape} for A of shape {a.shape}")


def _per_column(b: Builder, w: Value, zero: Value | None) -> Value | None:
    """The zero point of B (per tensor, or per column: N values, (…, 1, N) beyond)."""
    if zero is None or zero.ndim == 0 or zero.shape == (1,):
        return zero if zero is None else reshaped(b, zero, ())
    if zero.shape[-1] == w.shape[-1] and (zero.ndim == 1 or zero.shape[-2] == 1):
        return zero
    raise Unsupported(f"a zero point of shape {zero.shape} for B of shape {w.shape}")


def integer_matmul(b: Builder, a: Value, a_zero: Value | None, w: Value, w_zero: Value | None) -> Value:
    """(A − a_zero) · (B − b_zero) accumulated in int32. uint8 A with one zero point times int8
    B without one is the byte product of the codes minus a_zero · Σ B per column, which the
    int8 kernels compute four products to a lane (lower/schedules/int8.py)."""
    a_zero, w_zero = (None if _is_zero(z) else z for z in (a_zero, w_zero))
    if (a.dtype, w.dtype) == ("uint8", "int8") and w_zero is None and w.ndim == 2 and a.ndim >= 2 and (
            a_zero is None or a_zero.ndim == 0 or a_zero.shape == (1,)) and (a_zero is None or a_zero.dtype == "uint8"):
        out = matmul(b, a, w, out_dtype="int32")
        if a_zero is None:
            return out
        return b.call("subtract", [out, _zero_point_times_sums(b, reshaped(b, a_zero, ()), w, (0,), (w.shape[1],))])
    return matmul(b, _centered(b, a, _per_row(b, a, a_zero), "A"), _centered(b, w, _per_column(b, w, w_zero), "B"),
                  out_dtype="int32")


def _channel_vector(b: Builder, v: Value, channels: int, trailing: int, what: str) -> Value:
    """A per-tensor or per-output-channel parameter of a convolution, shaped to broadcast over
    its (N, O, spatial...) result."""
    if v.ndim == 0 or v.shape == (1,):
        return reshaped(b, v, ())
    if v.shape != (channels,):
        raise Unsupported(f"a {what} of shape {v.shape} for {channels} output channels")
    return reshaped(b, v, (channels,) + (1,) * trailing)


def _zero_point_times_sums(b: Builder, x_zero: Value, w: Value, axes: tuple[int, ...], shape: tuple[int, ...]) -> Value:
    """x_zero · Σ w over `axes` in int32, shaped `shape` (what the byte product of X and W adds
    beyond (X − x_zero) · W); a constant when both are."""
    if x_zero.const is not None and w.const is not None and not (x_zero.from_param or w.from_param):
        sums = w.const.astype(np.int64).sum(axis=axes)
        return b.const((sums * int(np.asarray(x_zero.const).reshape(()))).astype(np.int32).reshape(shape))
    sums = b.call("sum", [b.call("cast", [w], dtype="int32")], axis=axes)
    return reshaped(b, b.call("multiply", [b.call("cast", [x_zero], dtype="int32"), sums]), shape)


def _byte_conv(b: Builder, node: Node, x: Value, x_zero: Value | None, w: Value) -> Value | None:
    """A 2-d, ungrouped conv of uint8 X and int8 W (no weight zero point) as the byte product
    the int8 kernels compute (lower/schedules/int8.py): X padded with its zero point, the conv of
    the codes in int32, minus x_zero · Σ W per output channel. None for other forms."""
    if (x.dtype, w.dtype, x.ndim, w.ndim) != ("uint8", "int8", 4, 4) or int(node.attr("group", 1)) != 1:  # type: ignore[call-overload]
        return None
    kernel = list(w.shape[2:])
    strides = int_list(node.attr("strides")) or [1, 1]
    dilations = int_list(node.attr("dilations")) or [1, 1]
    top, left, bottom, right = spatial_pads(node, spatial_sizes(x), kernel, strides, dilations)
    if top or left or bottom or right:
        pad_value = reshaped(b, x_zero, ()) if x_zero is not None else scalar(b, 0, "uint8")
        x = b.call("nn.pad", [x, pad_value], pad_width=((0, 0), (0, 0), (top, bottom), (left, right)))
    out = b.call("nn.conv2d", [x, w], strides=tuple(strides), dilation=tuple(dilations), channels=w.shape[0],
                 kernel_size=tuple(kernel), out_dtype="int32")
    if x_zero is None:
        return out
    return b.call("subtract", [out, _zero_point_times_sums(b, reshaped(b, x_zero, ()), w, (1, 2, 3),
                                                             (w.shape[0], 1, 1))])


def integer_conv(b: Builder, node: Node, x: Value, x_zero: Value | None, w: Value, w_zero: Value | None,
                 bias: Value | None = None) -> Value:
    """Conv of (X − x_zero) and (W − w_zero) in int32, with the Conv converter's attributes
    (its padding then pads X − x_zero with zeros, i.e. X with its zero point); uint8 X and
    symmetric int8 W as a byte product (`_byte_conv`)."""
    x_zero, w_zero = (None if _is_zero(z) else z for z in (x_zero, w_zero))
    if x_zero is not None and x_zero.ndim and x_zero.shape != (1,):
        raise Unsupported(f"a zero point of shape {x_zero.shape} for X (one value expected)")
    if x_zero is not None and x_zero.dtype != x.dtype:
        raise Unsupported(f"a {x_zero.dtype} zero point for {x.dtype} X")
    if w_zero is None and (byte := _byte_conv(b, node, x, x_zero, w)) is not None:
        return byte if bias is None else b.call("nn.bias_add", [byte, bias], axis=1)
    data = _centered(b, x, None if x_zero is None else reshaped(b, x_zero, ()), "X")
    w_zero = None if w_zero is None else _channel_vector(b, w_zero, w.shape[0], w.ndim - 1, "zero point")
    weight = _centered(b, w, w_zero, "W")
    data, weight = (v if v.dtype == "int32" else b.call("cast", [v], dtype="int32") for v in (data, weight))
    out = CONVERTERS["Conv"](b, Node("Conv", node.name, [data, weight, bias], node.attrs, 1, [True]))[0]
    assert out is not None
    return out


@converter("MatMulInteger")
def _matmul_integer(b: Builder, node: Node) -> list[Value | None]:
    return [integer_matmul(b, required(node, 0, "A"), node.input(2), required(node, 1, "B"), node.input(3))]


@converter("ConvInteger")
def _conv_integer(b: Builder, node: Node) -> list[Value | None]:
    return [integer_conv(b, node, required(node, 0, "x"), node.input(2), required(node, 1, "w"), node.input(3))]


def _requantize(b: Builder, acc: Value, factor: Value, zero: Value, dtype: str) -> Value:
    """saturate(round(acc · factor) + zero) as `dtype` codes, the product in float32 (the
    factor's own type when wider)."""
    real = "float64" if factor.dtype == "float64" else "float32"
    factor = factor if factor.dtype == real else b.call("cast", [factor], dtype=real)
    scaled = b.call("multiply", [b.call("cast", [acc], dtype=real), factor])
    return quantize(b, scaled, scalar(b, 1.0, real), zero, -1, dtype)


def _output_zero(b: Builder, zero: Value | None, fallback: str) -> tuple[Value, str]:
    dtype = zero.dtype if zero is not None else fallback
    if dtype not in ("int8", "uint8"):
        raise Unsupported(f"{dtype} output codes")
    return (reshaped(b, zero, ()) if zero is not None else scalar(b, 0, dtype)), dtype


@converter("QLinearMatMul")
def _qlinear_matmul(b: Builder, node: Node) -> list[Value | None]:
    a, a_scale, a_zero = required(node, 0, "a"), required(node, 1, "a_scale"), node.input(2)
    w, w_scale, w_zero = required(node, 3, "b"), required(node, 4, "b_scale"), node.input(5)
    y_scale, (y_zero, dtype) = required(node, 6, "y_scale"), _output_zero(b, node.input(7), a.dtype)
    acc = integer_matmul(b, a, a_zero, w, w_zero)
    scales = [reshaped(b, s, ()) if s.shape == (1,) else s for s in (a_scale, w_scale, y_scale)]
    if scales[1].ndim == 1 and scales[1].shape != (acc.shape[-1],):
        raise Unsupported(f"a b_scale of shape {w_scale.shape} for {acc.shape[-1]} columns")
    factor = b.call("divide", [b.call("multiply", scales[:2]), scales[2]])
    return [_requantize(b, acc, factor, y_zero, dtype)]


@converter("QLinearConv")
def _qlinear_conv(b: Builder, node: Node) -> list[Value | None]:
    x, x_scale, x_zero = required(node, 0, "x"), required(node, 1, "x_scale"), node.input(2)
    w, w_scale, w_zero = required(node, 3, "w"), required(node, 4, "w_scale"), node.input(5)
    y_scale, (y_zero, dtype) = required(node, 6, "y_scale"), _output_zero(b, node.input(7), x.dtype)
    bias = node.input(8)
    if bias is not None and bias.dtype != "int32":
        raise Unsupported(f"a {bias.dtype} bias (int32 expected)")
    acc = integer_conv(b, node, x, x_zero, w, w_zero, bias)
    trailing = acc.ndim - 2
    w_scale = _channel_vector(b, w_scale, w.shape[0], trailing, "w_scale")
    factor = b.call("divide", [b.call("multiply", [reshaped(b, x_scale, ()), w_scale]), reshaped(b, y_scale, ())])
    return [_requantize(b, acc, factor, y_zero, dtype)]


def _operand(e: Expr) -> Value | None:
    """An argument of a call as a Value (None when its type is not known yet)."""
    if isinstance(e, Constant):
        return Value(e, TensorType(e.data.shape, relay_dtype(e.data.dtype)), e.data)
    ty = e.type_annotation if isinstance(e, Var) else e.checked_type   # a graph input is a Var
    return Value(e, ty) if isinstance(ty, TensorType) else None


def _dequantized(v: Value) -> tuple[Value, Value, Value, int] | None:
    """(codes, scale, zero point, axis) when `v` is `qnn.dequantize` of codes (DequantizeLinear)."""
    e = v.expr
    if not (isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == "qnn.dequantize"):
        return None
    operands = [_operand(a) for a in e.args]
    if any(o is None for o in operands) or e.attrs.get("out_dtype", "") not in ("", "float32"):
        return None
    codes, scale, zero = operands
    assert codes is not None and scale is not None and zero is not None
    return codes, scale, zero, int(e.attrs.get("axis", 1))  # type: ignore[call-overload]


def dequantized_conv(b: Builder, node: Node, x: Value, w: Value, bias: Value | None) -> Value | None:
    """Conv of dequantized uint8 X (one scale) and dequantized int8 W (a scale per tensor or per
    output channel, zero points 0), as the QDQ format writes it, computed on the codes as
    QLinearConv is: (conv of the codes in int32) · (s_x · s_w), plus the bias. This is what
    onnxruntime runs for the same nodes, so the requantized codes after it agree to the
    rounding of the scale products; a float conv of the dequantized values rounds its sums
    differently. None for any other Conv (converted as given)."""
    xq, wq = _dequantized(x), _dequantized(w)
    if xq is None or wq is None or x.ndim != 4:
        return None
    (xc, xs, xz, _), (wc, ws, wz, w_axis) = xq, wq
    if (xc.dtype, wc.dtype) != ("uint8", "int8") or xs.ndim or xz.ndim or not _is_zero(wz):
        return None
    if ws.ndim and not (ws.shape == (w.shape[0],) and w_axis % 4 == 0):
        return None
    acc = integer_conv(b, node, xc, xz, wc, None)
    factor = b.call("multiply", [xs, _channel_vector(b, ws, w.shape[0], 2, "w_scale")])
    out = b.call("multiply", [b.call("cast", [acc], dtype="float32"), factor])
    return out if bias is None else b.call("nn.bias_add", [out, bias], axis=1)
