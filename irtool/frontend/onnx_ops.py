"""ONNX operator converters: one function per op type, over opsets 6–17.

A converter receives the `Builder` (opset, typed calls) and the `Node` (input `Value`s with
static types, attributes) and returns one `Value` per ONNX output (None for an output it does
not produce, which is an error only when something reads it). Anything it cannot express
raises `Unsupported` with the reason; the importer reports all of them together.
Shapes are static: converters compute padding, slicing bounds and reshape targets in Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from irtool.frontend.onnx import Builder, Converter, Node, Unsupported, Value, relay_dtype

CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str):  # type: ignore[no-untyped-def]
    def register(fn: Converter) -> Converter:
        for op_type in op_types:
            CONVERTERS[op_type] = fn
        return fn
    return register


def _ints(value: object) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)] if value is not None else []


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise Unsupported(f"axis {axis} is out of range for rank {ndim}")
    return axis % ndim if ndim else 0


def _arg(node: Node, i: int, what: str) -> Value:
    v = node.input(i)
    if v is None:
        raise Unsupported(f"input {i} ({what}) is missing")
    return v


def _reshape(b: Builder, x: Value, shape: Sequence[int]) -> Value:
    if tuple(shape) == x.shape:
        return x
    return b.call("reshape", [x], newshape=tuple(int(d) for d in shape))


def _scalar(b: Builder, value: float, dtype: str) -> Value:
    return b.const(np.asarray(value, dtype=np.dtype(dtype) if dtype != "bool" else np.bool_))


# ------------------------------------------------------------------------- elementwise

_UNARY = {"Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
          "Sqrt": "sqrt", "Neg": "negative", "Abs": "abs", "Floor": "floor", "Ceil": "ceil",
          "Erf": "erf", "Not": "logical_not", "Round": "round"}
_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power",
           "Equal": "equal", "Greater": "greater", "Less": "less", "And": "logical_and",
           "Or": "logical_or", "GreaterOrEqual": "greater_equal", "LessOrEqual": "less_equal"}


@converter(*_UNARY)
def _unary(b: Builder, node: Node) -> list[Value | None]:
    return [b.call(_UNARY[node.op_type], [_arg(node, 0, "X")])]


@converter(*_BINARY)
def _binary(b: Builder, node: Node) -> list[Value | None]:
    x, y = _arg(node, 0, "A"), _arg(node, 1, "B")
    if b.opset < 7 and node.attr("broadcast", 0) and node.attr("axis") is not None and y.ndim < x.ndim:
        start = _axis(int(node.attr("axis")), x.ndim)  # type: ignore[call-overload, arg-type]
        trailing = x.ndim - start - y.ndim
        if trailing < 0:
            raise Unsupported(f"broadcast axis {node.attr('axis')} does not fit shapes {x.shape} and {y.shape}")
        y = _reshape(b, y, y.shape + (1,) * trailing)
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
        out = b.call("divide", [out, _scalar(b, len(args), out.dtype)])
    return [out]


@converter("Identity")
def _identity(b: Builder, node: Node) -> list[Value | None]:
    return [_arg(node, 0, "input")]


@converter("Dropout")
def _dropout(b: Builder, node: Node) -> list[Value | None]:
    if b.opset >= 12:
        training = node.input(2)
        if training is not None and bool(np.any(b.static(training, "training_mode"))):
            raise Unsupported("training-mode dropout")
    elif b.opset < 7 and not node.attr("is_test", 0) and node.used_outputs[1:2] == [True]:
        raise Unsupported("training-mode dropout (is_test=0) with its mask used")
    return [_arg(node, 0, "data"), None]


@converter("LeakyRelu")
def _leaky_relu(b: Builder, node: Node) -> list[Value | None]:
    return [b.call("nn.leaky_relu", [_arg(node, 0, "X")], alpha=float(node.attr("alpha", 0.01)))]  # type: ignore[arg-type]


@converter("PRelu")
def _prelu(b: Builder, node: Node) -> list[Value | None]:
    x, slope = _arg(node, 0, "X"), _arg(node, 1, "slope")
    channels = x.shape[1] if x.ndim >= 2 else None
    if channels is not None and slope.shape == (channels,) + (1,) * (x.ndim - 2) and slope.ndim >= 1:
        return [b.call("nn.prelu", [x, _reshape(b, slope, (channels,))], axis=1)]
    # General unidirectional broadcast: where(x < 0, slope * x, x).
    negative = b.call("less", [x, _scalar(b, 0, x.dtype)])
    return [b.call("where", [negative, b.call("multiply", [x, slope]), x])]


@converter("Clip")
def _clip(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "input")
    if b.opset < 11:
        lo, hi = node.attr("min"), node.attr("max")
    else:
        lo = None if node.input(1) is None else float(b.static(node.input(1), "min"))
        hi = None if node.input(2) is None else float(b.static(node.input(2), "max"))
    if lo is not None and hi is not None:
        return [b.call("clip", [x], a_min=float(lo), a_max=float(hi))]  # type: ignore[arg-type]
    out = x
    if lo is not None:
        out = b.call("maximum", [out, _scalar(b, float(lo), x.dtype)])  # type: ignore[arg-type]
    if hi is not None:
        out = b.call("minimum", [out, _scalar(b, float(hi), x.dtype)])  # type: ignore[arg-type]
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
    return [b.call("cast", [_arg(node, 0, "input")], dtype=dtype)]


@converter("Where")
def _where(b: Builder, node: Node) -> list[Value | None]:
    return [b.call("where", [_arg(node, 0, "condition"), _arg(node, 1, "X"), _arg(node, 2, "Y")])]


# ------------------------------------------------------------------------- nn

def _spatial_pads(node: Node, in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int], ceil_mode: bool = False) -> list[int]:
    """Explicit [begin..., end...] padding from `pads` or `auto_pad`."""
    n = len(in_sizes)
    auto = str(node.attr("auto_pad", "NOTSET"))
    if auto in ("NOTSET", ""):
        pads = _ints(node.attr("pads")) or [0] * (2 * n)
        if len(pads) != 2 * n:
            raise Unsupported(f"pads {pads} for {n} spatial axes")
        return pads
    if auto == "VALID":
        return [0] * (2 * n)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(f"auto_pad {auto}")
    begin, end = [], []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin + end


def _as_2d(b: Builder, x: Value) -> Value:
    """A 1-d (N, C, W) tensor as (N, C, 1, W), so the 2-d operators serve 1-d models."""
    return _reshape(b, x, x.shape[:2] + (1,) + x.shape[2:])


def _spatial_rank(x: Value, what: str) -> int:
    rank = x.ndim - 2
    if rank not in (1, 2):
        raise Unsupported(f"{rank}-d {what} (irtool has 1-d and 2-d)")
    return rank


@converter("Conv")
def _conv(b: Builder, node: Node) -> list[Value | None]:
    x, w = _arg(node, 0, "X"), _arg(node, 1, "W")
    rank = _spatial_rank(x, "convolution")
    kernel = list(w.shape[2:])
    strides = _ints(node.attr("strides")) or [1] * rank
    dilations = _ints(node.attr("dilations")) or [1] * rank
    pads = _spatial_pads(node, x.shape[2:], kernel, strides, dilations)
    if rank == 1:
        x, w = _as_2d(b, x), _as_2d(b, w)
        kernel, strides, dilations = [1] + kernel, [1] + strides, [1] + dilations
        pads = [0, pads[0], 0, pads[1]]
    out = b.call("nn.conv2d", [x, w], strides=tuple(strides), padding=tuple(pads),
                 dilation=tuple(dilations), groups=int(node.attr("group", 1)),  # type: ignore[call-overload]
                 channels=w.shape[0], kernel_size=tuple(kernel))
    bias = node.input(2)
    if bias is not None:
        out = b.call("nn.bias_add", [out, bias], axis=1)
    if rank == 1:
        out = _reshape(b, out, out.shape[:2] + out.shape[3:])
    return [out]


def _conv_transpose_pads(node: Node, in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                         dilations: Sequence[int], out_pad: Sequence[int]) -> list[int]:
    """[begin..., end...] padding of a transposed convolution (explicit, or from output_shape/auto_pad)."""
    n = len(in_sizes)
    auto = str(node.attr("auto_pad", "NOTSET"))
    output_shape = _ints(node.attr("output_shape"))
    if auto in ("NOTSET", "") and not output_shape:
        return _ints(node.attr("pads")) or [0] * (2 * n)
    if auto == "VALID":
        return [0] * (2 * n)
    targets = output_shape[-n:] if output_shape else [size * s for size, s in zip(in_sizes, strides)]
    begin, end = [], []
    for size, k, s, d, extra, target in zip(in_sizes, kernel, strides, dilations, out_pad, targets):
        total = s * (size - 1) + extra + (k - 1) * d + 1 - target
        if total < 0:
            raise Unsupported(f"output_shape {output_shape} is larger than the full transposed convolution")
        lower = auto != "SAME_UPPER"  # ONNX: output_shape without auto_pad pads like SAME_LOWER
        begin.append(total - total // 2 if lower else total // 2)
        end.append(total // 2 if lower else total - total // 2)
    return begin + end


@converter("ConvTranspose")
def _conv_transpose(b: Builder, node: Node) -> list[Value | None]:
    """A transposed convolution as a plain one: spread the input out by the strides (zeros in
    between), pad by the dilated kernel extent minus `pads`, and convolve with the flipped kernel
    whose in/out channel axes are swapped per group."""
    x, w = _arg(node, 0, "X"), _arg(node, 1, "W")
    rank = _spatial_rank(x, "transposed convolution")
    groups = int(node.attr("group", 1))  # type: ignore[call-overload]
    kernel = list(w.shape[2:])
    strides = _ints(node.attr("strides")) or [1] * rank
    dilations = _ints(node.attr("dilations")) or [1] * rank
    out_pad = _ints(node.attr("output_padding")) or [0] * rank
    pads = _conv_transpose_pads(node, x.shape[2:], kernel, strides, dilations, out_pad)
    if rank == 1:
        x, w = _as_2d(b, x), _as_2d(b, w)
        kernel, strides, dilations, out_pad = [1] + kernel, [1] + strides, [1] + dilations, [0] + out_pad
        pads = [0, pads[0], 0, pads[1]]
    n, c, h, wd = x.shape
    if strides != [1, 1]:
        sh, sw = strides
        spread = _reshape(b, x, (n, c, h, 1, wd, 1))
        spread = b.call("nn.pad", [spread, _scalar(b, 0, x.dtype)],
                        pad_width=((0, 0), (0, 0), (0, 0), (0, sh - 1), (0, 0), (0, sw - 1)))
        spread = _reshape(b, spread, (n, c, h * sh, wd * sw))
        x = b.call("strided_slice", [spread], begin=(0, 0, 0, 0),
                   end=(n, c, (h - 1) * sh + 1, (wd - 1) * sw + 1))
    before = [d * (k - 1) - p for d, k, p in zip(dilations, kernel, pads[:2])]
    after = [d * (k - 1) - p + e for d, k, p, e in zip(dilations, kernel, pads[2:], out_pad)]
    if any(v > 0 for v in before + after):
        x = b.call("nn.pad", [x, _scalar(b, 0, x.dtype)],
                   pad_width=((0, 0), (0, 0)) + tuple((max(0, lo), max(0, hi)) for lo, hi in zip(before, after)))
    if any(v < 0 for v in before + after):  # `pads` larger than the kernel extent crop instead
        _, _, ph, pw = x.shape
        x = b.call("strided_slice", [x], begin=(0, 0, max(0, -before[0]), max(0, -before[1])),
                   end=(n, c, ph - max(0, -after[0]), pw - max(0, -after[1])))
    cin, mg, kh, kw = w.shape
    weight = _reshape(b, w, (groups, cin // groups, mg, kh, kw))
    weight = _reshape(b, _transpose(b, weight, (0, 2, 1, 3, 4)), (groups * mg, cin // groups, kh, kw))
    for axis, k in ((2, kh), (3, kw)):
        if k > 1:
            weight = b.call("take", [weight, b.const(np.arange(k - 1, -1, -1, dtype=np.int64))], axis=axis)
    out = b.call("nn.conv2d", [x, weight], dilation=tuple(dilations), groups=groups, channels=groups * mg,
                 kernel_size=(kh, kw))
    bias = node.input(2)
    if bias is not None:
        out = b.call("nn.bias_add", [out, bias], axis=1)
    if rank == 1:
        out = _reshape(b, out, out.shape[:2] + out.shape[3:])
    return [out]


def _pool(b: Builder, node: Node, op: str) -> list[Value | None]:
    x = _arg(node, 0, "X")
    rank = _spatial_rank(x, "pooling")
    kernel = _ints(node.attr("kernel_shape"))
    strides = _ints(node.attr("strides")) or [1] * rank
    dilations = _ints(node.attr("dilations")) or [1] * rank
    ceil_mode = bool(node.attr("ceil_mode", 0))
    pads = _spatial_pads(node, x.shape[2:], kernel, strides, dilations, ceil_mode)
    if len(node.used_outputs) > 1 and node.used_outputs[1]:
        raise Unsupported("the Indices output of MaxPool")
    if rank == 1:
        x = _as_2d(b, x)
        kernel, strides, dilations = [1] + kernel, [1] + strides, [1] + dilations
        pads = [0, pads[0], 0, pads[1]]
    attrs: dict[str, object] = dict(pool_size=tuple(kernel), strides=tuple(strides),
                                    dilation=tuple(dilations), padding=tuple(pads), ceil_mode=ceil_mode)
    if op == "nn.avg_pool2d":
        attrs["count_include_pad"] = bool(node.attr("count_include_pad", 0))
    out = b.call(op, [x], **attrs)
    if rank == 1:
        out = _reshape(b, out, out.shape[:2] + out.shape[3:])
    return [out, None]


@converter("MaxPool")
def _max_pool(b: Builder, node: Node) -> list[Value | None]:
    if int(node.attr("storage_order", 0)) and node.used_outputs[1:2] == [True]:
        raise Unsupported("storage_order")
    return _pool(b, node, "nn.max_pool2d")


@converter("AveragePool")
def _avg_pool(b: Builder, node: Node) -> list[Value | None]:
    return _pool(b, node, "nn.avg_pool2d")


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "X")
    if x.ndim == 4:
        op = "nn.global_avg_pool2d" if node.op_type == "GlobalAveragePool" else "nn.global_max_pool2d"
        return [b.call(op, [x])]
    if x.ndim < 3:
        raise Unsupported(f"global pooling of a rank-{x.ndim} tensor")
    op = "mean" if node.op_type == "GlobalAveragePool" else "max"
    return [b.call(op, [x], axis=tuple(range(2, x.ndim)), keepdims=True)]


@converter("BatchNormalization")
def _batch_norm(b: Builder, node: Node) -> list[Value | None]:
    if any(node.used_outputs[1:]):
        raise Unsupported("training-mode outputs (running mean/var, saved statistics)")
    if int(node.attr("training_mode", 0)):
        raise Unsupported("training_mode=1")
    if b.opset < 9 and not int(node.attr("spatial", 1)):
        raise Unsupported("spatial=0 (per-activation statistics)")
    args = [_arg(node, i, what) for i, what in enumerate(("X", "scale", "B", "mean", "var"))]
    out = b.call("nn.batch_norm", args, axis=1, epsilon=float(node.attr("epsilon", 1e-5)))  # type: ignore[arg-type]
    return [b.item(out, 0)] + [None] * (node.num_outputs - 1)


@converter("LRN")
def _lrn(b: Builder, node: Node) -> list[Value | None]:
    size = int(node.attr("size"))  # type: ignore[arg-type]
    if size % 2 == 0:
        raise Unsupported(f"an even LRN size ({size}): its window is asymmetric")
    return [b.call("nn.lrn", [_arg(node, 0, "X")], size=size, axis=1,
                   bias=float(node.attr("bias", 1.0)), alpha=float(node.attr("alpha", 1e-4)),  # type: ignore[arg-type]
                   beta=float(node.attr("beta", 0.75)))]  # type: ignore[arg-type]


def _softmax(b: Builder, node: Node, op: str) -> list[Value | None]:
    x = _arg(node, 0, "input")
    if b.opset >= 13:
        return [b.call(op, [x], axis=_axis(int(node.attr("axis", -1)), x.ndim))]  # type: ignore[call-overload]
    # Before opset 13 the input is coerced to 2-d at `axis` and normalised over the second part.
    axis = _axis(int(node.attr("axis", 1)), x.ndim)  # type: ignore[call-overload]
    if axis == x.ndim - 1:
        return [b.call(op, [x], axis=axis)]
    flat = _reshape(b, x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))
    return [_reshape(b, b.call(op, [flat], axis=1), x.shape)]


@converter("Softmax")
def _softmax_op(b: Builder, node: Node) -> list[Value | None]:
    return _softmax(b, node, "nn.softmax")


@converter("LogSoftmax")
def _log_softmax(b: Builder, node: Node) -> list[Value | None]:
    return _softmax(b, node, "nn.log_softmax")


def _transpose(b: Builder, x: Value, axes: Sequence[int]) -> Value:
    if list(axes) == list(range(x.ndim)):
        return x
    return b.call("transpose", [x], axes=tuple(axes))


@converter("Gemm")
def _gemm(b: Builder, node: Node) -> list[Value | None]:
    a, w = _arg(node, 0, "A"), _arg(node, 1, "B")
    if a.ndim != 2 or w.ndim != 2:
        raise Unsupported(f"Gemm of shapes {a.shape} and {w.shape}")
    if int(node.attr("transA", 0)):
        a = _transpose(b, a, (1, 0))
    # nn.dense(a, w) is a · wᵀ, so an untransposed B needs a transpose.
    if not int(node.attr("transB", 0)):
        w = _transpose(b, w, (1, 0))
    out = b.call("nn.dense", [a, w], units=w.shape[0])
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))  # type: ignore[arg-type]
    if alpha != 1.0:
        out = b.call("multiply", [out, _scalar(b, alpha, out.dtype)])
    c = node.input(2)
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = b.call("multiply", [c, _scalar(b, beta, c.dtype)])
        if b.opset < 7 and not node.attr("broadcast", 0) and c.shape != out.shape:
            raise Unsupported(f"C of shape {c.shape} without broadcast=1")
        if c.ndim == 1 and c.shape[0] == out.shape[1]:
            out = b.call("nn.bias_add", [out, c], axis=1)
        else:
            out = b.call("add", [out, c])
    return [out]


@converter("MatMul")
def _matmul(b: Builder, node: Node) -> list[Value | None]:
    a, w = _arg(node, 0, "A"), _arg(node, 1, "B")
    if a.ndim == 0 or w.ndim == 0:
        raise Unsupported("MatMul of a scalar")
    a2 = _reshape(b, a, (1,) + a.shape) if a.ndim == 1 else a
    w2 = _reshape(b, w, w.shape + (1,)) if w.ndim == 1 else w
    m, k = a2.shape[-2:]
    k2, n = w2.shape[-2:]
    if k != k2:
        raise Unsupported(f"MatMul of shapes {a.shape} and {w.shape}")
    if w2.ndim == 2:
        rows = _reshape(b, a2, (math.prod(a2.shape[:-1]), k))
        out = b.call("nn.dense", [rows, _transpose(b, w2, (1, 0))], units=n)
        out = _reshape(b, out, a2.shape[:-1] + (n,))
    else:
        batch_a, batch_w = a2.shape[:-2], w2.shape[:-2]
        batch = tuple(np.broadcast_shapes(batch_a, batch_w))
        if batch_a != batch or batch_w != batch:
            raise Unsupported(f"MatMul with broadcast batch dimensions {a.shape} × {w.shape}")
        size = math.prod(batch)
        out = b.call("nn.batch_matmul", [_reshape(b, a2, (size, m, k)), _reshape(b, w2, (size, k, n))])
        out = _reshape(b, out, batch + (m, n))
    shape = list(out.shape)
    if a.ndim == 1:
        del shape[-2]
    if w.ndim == 1:
        del shape[-1]
    return [_reshape(b, out, shape)]


@converter("Pad")
def _pad(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "data")
    if b.opset < 11:
        pads, value = _ints(node.attr("pads", node.attr("paddings"))), float(node.attr("value", 0.0))  # type: ignore[arg-type]
    else:
        pads = _ints(b.static(node.input(1), "pads"))
        value_in = node.input(2)
        value = 0.0 if value_in is None else float(b.static(value_in, "constant_value"))
        if node.input(3) is not None:
            raise Unsupported("the axes input of Pad")
    mode = str(node.attr("mode", "constant"))
    if mode not in ("constant", "reflect", "edge"):
        raise Unsupported(f"pad mode {mode}")
    n = x.ndim
    if len(pads) != 2 * n:
        raise Unsupported(f"pads {pads} for a rank-{n} tensor")
    if any(p < 0 for p in pads):
        raise Unsupported(f"negative pads {pads}")
    width = tuple((pads[i], pads[i + n]) for i in range(n))
    return [b.call("nn.pad", [x, _scalar(b, value, x.dtype)], pad_width=width, pad_mode=mode)]


# ------------------------------------------------------------------------- shapes and data movement

@converter("Reshape")
def _reshape_op(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "data")
    target = _ints(node.attr("shape")) if b.opset < 5 else _ints(b.static(node.input(1), "shape"))
    allow_zero = bool(node.attr("allowzero", 0))
    shape = [x.shape[i] if d == 0 and not allow_zero else d for i, d in enumerate(target)]
    if shape.count(-1) > 1:
        raise Unsupported(f"shape {target} has more than one -1")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or math.prod(x.shape) % known:
            raise Unsupported(f"cannot reshape {x.shape} to {target}")
        shape[shape.index(-1)] = math.prod(x.shape) // known
    if math.prod(shape) != math.prod(x.shape):
        raise Unsupported(f"cannot reshape {x.shape} to {target}")
    return [_reshape(b, x, shape)]


@converter("Flatten")
def _flatten(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "input")
    axis = int(node.attr("axis", 1))  # type: ignore[call-overload]
    axis = axis + x.ndim if axis < 0 else axis
    return [_reshape(b, x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))]


@converter("Transpose")
def _transpose_op(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "data")
    perm = _ints(node.attr("perm")) or list(reversed(range(x.ndim)))
    return [_transpose(b, x, perm)]


@converter("Concat")
def _concat(b: Builder, node: Node) -> list[Value | None]:
    args = [v for v in node.inputs if v is not None]
    axis = _axis(int(node.attr("axis", 1)), args[0].ndim)  # type: ignore[call-overload]
    return [b.call("concatenate", [b.tuple(args)], axis=axis)]


@converter("Split")
def _split(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "input")
    axis = _axis(int(node.attr("axis", 0)), x.ndim)  # type: ignore[call-overload]
    if b.opset >= 13 and node.input(1) is not None:
        sizes = _ints(b.static(node.input(1), "split"))
    else:
        sizes = _ints(node.attr("split"))
    if not sizes:
        if x.shape[axis] % node.num_outputs:
            raise Unsupported(f"{x.shape[axis]} does not split into {node.num_outputs} equal parts")
        sizes = [x.shape[axis] // node.num_outputs] * node.num_outputs
    if sum(sizes) != x.shape[axis] or len(sizes) != node.num_outputs:
        raise Unsupported(f"split sizes {sizes} for an axis of {x.shape[axis]}")
    if len(sizes) == 1:
        return [x]
    indices = tuple(int(i) for i in np.cumsum(sizes)[:-1])
    parts = b.call("split", [x], indices_or_sections=indices, axis=axis)
    return [b.item(parts, i) for i in range(len(sizes))]


@converter("Slice")
def _slice(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "data")
    if b.opset < 10:
        starts, ends, axes = _ints(node.attr("starts")), _ints(node.attr("ends")), _ints(node.attr("axes"))
        steps: list[int] = []
    else:
        starts = _ints(b.static(node.input(1), "starts"))
        ends = _ints(b.static(node.input(2), "ends"))
        axes = _ints(b.static(node.input(3), "axes")) if node.input(3) is not None else []
        steps = _ints(b.static(node.input(4), "steps")) if node.input(4) is not None else []
    axes = axes or list(range(len(starts)))
    steps = steps or [1] * len(starts)
    begin, end, stride = [0] * x.ndim, list(x.shape), [1] * x.ndim
    out = x
    for start, stop, axis, step in zip(starts, ends, axes, steps):
        axis = _axis(axis, x.ndim)
        if step == 0:
            raise Unsupported("a slice step of 0")
        lo, hi, st = slice(start, stop, step).indices(x.shape[axis])
        if step > 0:
            begin[axis], end[axis], stride[axis] = lo, max(hi, lo), st
        else:  # a reversed range: gather its indices explicitly
            indices = np.arange(lo, hi, st, dtype=np.int64)
            if indices.size == 0:
                raise Unsupported("an empty reversed slice")
            out = b.call("take", [out, b.const(indices)], axis=axis)
    if (begin, end, stride) != ([0] * x.ndim, list(x.shape), [1] * x.ndim):
        strides = tuple(stride) if any(s != 1 for s in stride) else None
        out = b.call("strided_slice", [out], begin=tuple(begin), end=tuple(end), strides=strides)
    return [out]


def _axes_input(b: Builder, node: Node, since: int) -> list[int] | None:
    """Axes given as an attribute before opset `since`, as an optional input from it on."""
    if b.opset < since:
        value = node.attr("axes")
        return _ints(value) if value is not None else None
    v = node.input(1)
    return None if v is None else _ints(b.static(v, "axes"))


@converter("Squeeze")
def _squeeze(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "data")
    axes = _axes_input(b, node, 13)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = sorted(_axis(a, x.ndim) for a in axes)
    if any(x.shape[a] != 1 for a in axes):
        raise Unsupported(f"squeezing axes {axes} of shape {x.shape}")
    return [b.call("squeeze", [x], axis=tuple(axes))]


@converter("Unsqueeze")
def _unsqueeze(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "data")
    axes = _axes_input(b, node, 13)
    if not axes:
        raise Unsupported("Unsqueeze without axes")
    rank = x.ndim + len(axes)
    axes = sorted(_axis(a, rank) for a in axes)
    if len(axes) == 1:
        return [b.call("expand_dims", [x], axis=axes[0])]
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [_reshape(b, x, shape)]


@converter("Gather")
def _gather(b: Builder, node: Node) -> list[Value | None]:
    x, indices = _arg(node, 0, "data"), _arg(node, 1, "indices")
    axis = _axis(int(node.attr("axis", 0)), x.ndim)  # type: ignore[call-overload]
    if indices.const is not None:
        # ONNX counts negative indices from the end; normalise them now.
        fixed = np.where(indices.const < 0, indices.const + x.shape[axis], indices.const)
        if np.any(fixed < 0) or np.any(fixed >= x.shape[axis]):
            raise Unsupported(f"indices out of range for an axis of {x.shape[axis]}")
        indices = b.const(fixed.astype(np.int64))
        return [b.call("take", [x, indices], axis=axis)]
    return [b.call("take", [x, indices], axis=axis, mode="wrap")]


@converter("Shape")
def _shape(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "data")
    start, end = int(node.attr("start", 0)), node.attr("end")  # type: ignore[call-overload]
    dims = list(x.shape)[start:None if end is None else int(end)]  # type: ignore[call-overload]
    return [b.const(np.array(dims, dtype=np.int64))]


@converter("Size")
def _size(b: Builder, node: Node) -> list[Value | None]:
    return [b.const(np.array(math.prod(_arg(node, 0, "data").shape), dtype=np.int64))]


@converter("Constant")
def _constant(b: Builder, node: Node) -> list[Value | None]:
    for key, dtype in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in node.attrs:
            return [b.const(np.asarray(node.attrs[key], dtype=dtype))]
    raise Unsupported(f"attribute {', '.join(node.attrs) or '(none)'}")


@converter("ConstantOfShape")
def _constant_of_shape(b: Builder, node: Node) -> list[Value | None]:
    shape = tuple(_ints(b.static(node.input(0), "shape")))
    fill = node.attr("value")
    scalar = np.asarray(fill).reshape(-1)[0] if fill is not None else np.float32(0)
    value = b.const(np.asarray(scalar))
    return [b.call("full", [value], shape=shape, dtype=value.dtype)]


@converter("Expand")
def _expand(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "input")
    shape = tuple(np.broadcast_shapes(x.shape, tuple(_ints(b.static(node.input(1), "shape")))))
    if shape == x.shape:
        return [x]
    zeros = b.call("full", [_scalar(b, 0, x.dtype)], shape=shape, dtype=x.dtype)
    return [b.call("add", [x, zeros]) if x.dtype != "bool" else b.call("logical_or", [x, zeros])]


def _reduce(b: Builder, node: Node, op: str, axes_since: int) -> list[Value | None]:
    x = _arg(node, 0, "data")
    axes = _axes_input(b, node, axes_since)
    keepdims = bool(node.attr("keepdims", 1))
    if not axes:
        if axes is not None or not int(node.attr("noop_with_empty_axes", 0)):
            axes = list(range(x.ndim))
        else:
            return [x]
    return [b.call(op, [x], axis=tuple(sorted(_axis(a, x.ndim) for a in axes)), keepdims=keepdims)]


_REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min",
           "ReduceProd": "prod"}


@converter(*_REDUCE)
def _reduce_op(b: Builder, node: Node) -> list[Value | None]:
    # ReduceSum takes axes as an input from opset 13, the others from opset 18.
    return _reduce(b, node, _REDUCE[node.op_type], 13 if node.op_type == "ReduceSum" else 18)


@converter("ArgMax", "ArgMin")
def _arg_reduce(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "data")
    op = "argmax" if node.op_type == "ArgMax" else "argmin"
    out = b.call(op, [x], axis=(_axis(int(node.attr("axis", 0)), x.ndim),),  # type: ignore[call-overload]
                 keepdims=bool(node.attr("keepdims", 1)),
                 select_last_index=bool(node.attr("select_last_index", 0)))
    return [b.call("cast", [out], dtype="int64") if out.dtype != "int64" else out]


# ------------------------------------------------------------------------- activations built from primitives

def _expm1_where_negative(b: Builder, x: Value, alpha: float) -> Value:
    """where(x < 0, alpha·(exp(x) − 1), x): the negative branch of Elu and Selu."""
    one = _scalar(b, 1.0, x.dtype)
    negative = b.call("multiply", [_scalar(b, alpha, x.dtype), b.call("subtract", [b.call("exp", [x]), one])])
    return b.call("where", [b.call("less", [x, _scalar(b, 0, x.dtype)]), negative, x])


@converter("Elu")
def _elu(b: Builder, node: Node) -> list[Value | None]:
    return [_expm1_where_negative(b, _arg(node, 0, "X"), float(node.attr("alpha", 1.0)))]  # type: ignore[arg-type]


@converter("Selu")
def _selu(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "X")
    inner = _expm1_where_negative(b, x, float(node.attr("alpha", 1.67326319217681884765625)))  # type: ignore[arg-type]
    gamma = float(node.attr("gamma", 1.05070102214813232421875))  # type: ignore[arg-type]
    return [b.call("multiply", [inner, _scalar(b, gamma, x.dtype)])]


@converter("Softplus")
def _softplus(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "X")
    return [b.call("log", [b.call("add", [b.call("exp", [x]), _scalar(b, 1.0, x.dtype)])])]


@converter("Softsign")
def _softsign(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "input")
    denominator = b.call("add", [b.call("abs", [x]), _scalar(b, 1.0, x.dtype)])
    return [b.call("divide", [x, denominator])]


@converter("Tile")
def _tile(b: Builder, node: Node) -> list[Value | None]:
    x = _arg(node, 0, "input")
    repeats = _ints(b.static(node.input(1), "repeats"))
    if len(repeats) != x.ndim or any(r < 1 for r in repeats):
        raise Unsupported(f"repeats {repeats} for a rank-{x.ndim} tensor")
    out = x
    for axis, r in enumerate(repeats):
        if r > 1:
            out = b.call("concatenate", [b.tuple([out] * r)], axis=axis)
    return [out]
