"""Normalisation, softmax and the matrix products (Gemm, MatMul).
"""

from __future__ import annotations

import math

import numpy as np

from irtool.frontend.onnx_values import Builder, DynamicShape, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import (broadcast_to, converter, norm_axis, over_axis, required, reshaped, scalar,
                                             transposed)

@converter("BatchNormalization")
def _batch_norm(b: Builder, node: Node) -> list[Value | None]:
    """From opset 15 the statistics (and scale, bias) may have another float type than X, and
    are converted to X's. Training mode (opset 14 on) normalises by the batch's own statistics."""
    training = b.opset >= 14 and bool(int(node.attr("training_mode", 0)))  # type: ignore[call-overload]
    if any(node.used_outputs[1:]) and not training:
        raise Unsupported("training-mode outputs (running mean/var, saved statistics)")
    if int(node.attr("training_mode", 0)) and not training:  # type: ignore[call-overload]
        raise Unsupported("training_mode=1")
    if b.opset < 7 and not int(node.attr("is_test", 0)):  # type: ignore[call-overload]
        raise Unsupported("training mode (is_test=0, the default before opset 7)")
    if b.opset < 9 and not int(node.attr("spatial", 1)):  # type: ignore[call-overload]
        raise Unsupported("spatial=0 (per-activation statistics)")
    args = [required(node, i, what) for i, what in enumerate(("X", "scale", "B", "mean", "var"))]
    x, stats_dtype = args[0], args[3].dtype
    args = args[:1] + [v if v.dtype == x.dtype else b.call("cast", [v], dtype=x.dtype) for v in args[1:]]
    running: list[Value | None] = []
    if training:
        batch = _batch_statistics(b, x)
        momentum = float(node.attr("momentum", 0.9))  # type: ignore[arg-type]
        for given, current in zip(args[3:], batch):
            mixed = b.call("add", [b.call("multiply", [given, scalar(b, momentum, x.dtype)]),
                                   b.call("multiply", [current, scalar(b, 1 - momentum, x.dtype)])])
            running.append(mixed if stats_dtype == x.dtype else b.call("cast", [mixed], dtype=stats_dtype))
        args[3:] = batch
    out = b.call("nn.batch_norm", args, axis=1, epsilon=float(node.attr("epsilon", 1e-5)))  # type: ignore[arg-type]
    outs = [b.item(out, 0)] + running
    return outs + [None] * (node.num_outputs - len(outs))


def _batch_statistics(b: Builder, x: Value) -> list[Value]:
    """The per-channel mean and (population) variance of an (N, C, ...) batch."""
    if x.ndim < 2:
        raise Unsupported(f"training mode on a rank-{x.ndim} input")
    axes = tuple(i for i in range(x.ndim) if i != 1)
    mean = b.call("mean", [x], axis=axes)
    centered = b.call("subtract", [x, reshaped(b, mean, mean.shape + (1,) * (x.ndim - 2))])
    return [mean, b.call("mean", [b.call("multiply", [centered, centered])], axis=axes)]


@converter("InstanceNormalization")
def _instance_norm(b: Builder, node: Node) -> list[Value | None]:
    """(x − mean) / sqrt(var + ε) · scale + B, statistics per sample and channel."""
    x, scale, bias = required(node, 0, "input"), required(node, 1, "scale"), required(node, 2, "B")
    if x.ndim < 3:
        raise Unsupported(f"a rank-{x.ndim} input")
    axes = tuple(range(2, x.ndim))
    centered = b.call("subtract", [x, b.call("mean", [x], axis=axes, keepdims=True)])
    variance = b.call("mean", [b.call("multiply", [centered, centered])], axis=axes, keepdims=True)
    eps = scalar(b, float(node.attr("epsilon", 1e-5)), x.dtype)  # type: ignore[arg-type]
    normed = b.call("divide", [centered, b.call("sqrt", [b.call("add", [variance, eps])])])
    trailing = (1,) * (x.ndim - 2)
    scaled = b.call("multiply", [normed, reshaped(b, scale, scale.shape + trailing)])
    return [b.call("add", [scaled, reshaped(b, bias, bias.shape + trailing)])]


@converter("LRN")
def _lrn(b: Builder, node: Node) -> list[Value | None]:
    size = int(node.attr("size"))  # type: ignore[arg-type]
    if size % 2 == 0:
        raise Unsupported(f"an even LRN size ({size}): its window is asymmetric")
    return [b.call("nn.lrn", [required(node, 0, "X")], size=size, axis=1,
                   bias=float(node.attr("bias", 1.0)), alpha=float(node.attr("alpha", 1e-4)),  # type: ignore[arg-type]
                   beta=float(node.attr("beta", 0.75)))]  # type: ignore[arg-type]


def _softmax(b: Builder, node: Node, op: str) -> list[Value | None]:
    return [over_axis(b, node, required(node, 0, "input"), lambda x, axis: b.call(op, [x], axis=axis))]


@converter("Softmax")
def _softmax_op(b: Builder, node: Node) -> list[Value | None]:
    return _softmax(b, node, "nn.softmax")


@converter("LogSoftmax")
def _log_softmax(b: Builder, node: Node) -> list[Value | None]:
    return _softmax(b, node, "nn.log_softmax")


@converter("Gemm")
def _gemm(b: Builder, node: Node) -> list[Value | None]:
    a, w = required(node, 0, "A"), required(node, 1, "B")
    if a.ndim != 2 or w.ndim != 2:
        raise Unsupported(f"Gemm of shapes {a.shape} and {w.shape}")
    if int(node.attr("transA", 0)):
        a = transposed(b, a, (1, 0))
    # nn.dense(a, w) is a · wᵀ, so an untransposed B needs a transpose.
    if not int(node.attr("transB", 0)):
        w = transposed(b, w, (1, 0))
    out = b.call("nn.dense", [a, w], units=w.dims[0])
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))  # type: ignore[arg-type]
    if alpha != 1.0:
        out = b.call("multiply", [out, scalar(b, alpha, out.dtype)])
    c = node.input(2)
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = b.call("multiply", [c, scalar(b, beta, c.dtype)])
        if b.opset < 7 and not node.attr("broadcast", 0) and c.dims != out.dims:
            raise Unsupported(f"C of shape {c.tensor} without broadcast=1")
        if c.ndim == 1 and c.dims[0] == out.dims[1]:
            out = b.call("nn.bias_add", [out, c], axis=1)
        else:
            out = b.call("add", [out, c])
    return [out]


@converter("MatMul")
def _matmul(b: Builder, node: Node) -> list[Value | None]:
    return [matmul(b, required(node, 0, "A"), required(node, 1, "B"))]


def matmul(b: Builder, a: Value, w: Value, out_dtype: str = "", transpose_b: bool = False) -> Value:
    """numpy's `matmul(a, w)` (1-d operands, broadcasting batch dimensions); `transpose_b` reads
    w's last two axes swapped (attention's Q·Kᵀ without a transpose).

    A 2-d weight (a graph initializer, or computed from one) is one `nn.dense` of every row of
    `a` against its transpose, which is computed once (hoisted out of the run, and packed into
    the kernel's panels by `alter-layout`). Any other 2-d right operand is a batch of one row
    block (`nn.batch_matmul` reads it as it is, no transpose per call). Otherwise the batch
    dimensions are flattened into one `nn.batch_matmul`: a side whose batch dimensions are all 1
    stays a batch of one, which the kernel broadcasts; a side that broadcasts only partly ((3, 1)
    against (1, 2)) is expanded to the full batch first."""
    if a.ndim == 0 or w.ndim == 0:
        raise Unsupported("MatMul of a scalar")
    if not (a.tensor.is_static and w.tensor.is_static):
        return _symbolic_matmul(b, a, w, out_dtype, transpose_b)
    a2 = reshaped(b, a, (1,) + a.shape) if a.ndim == 1 else a
    w2 = reshaped(b, w, w.shape + (1,)) if w.ndim == 1 else w
    k = a2.dims[-1]
    n, k2 = w2.shape[-2:] if transpose_b else w2.shape[-2:][::-1]
    if k != k2:
        raise Unsupported(f"MatMul of shapes {a.tensor} and {w.tensor}")
    if w2.ndim == 2 and (transpose_b or w2.from_param or w2.const is not None):
        # (..., k) · (k, n): the leading axes are rows of one dense product (a 2-d A may be dynamic).
        rows = a2 if a2.ndim == 2 else reshaped(b, a2, (math.prod(a2.shape[:-1]), k))
        weight = w2 if transpose_b else transposed(b, w2, (1, 0))
        out = b.call("nn.dense", [rows, weight], units=n, out_dtype=out_dtype)
        out = out if a2.ndim == 2 else reshaped(b, out, a2.shape[:-1] + (n,))
    elif w2.ndim == 2:
        rows = reshaped(b, a2, (1, math.prod(a2.shape[:-1]), k))
        out = b.call("nn.batch_matmul", [rows, reshaped(b, w2, (1, k, n))], out_dtype=out_dtype)
        out = reshaped(b, out, a2.shape[:-1] + (n,))
    else:
        m = a2.shape[-2]
        batch_a, batch_w = a2.shape[:-2], w2.shape[:-2]
        try:
            batch = tuple(np.broadcast_shapes(batch_a, batch_w))
        except ValueError:
            raise Unsupported(f"MatMul of shapes {a.shape} and {w.shape}: the batch dimensions do not "
                              "broadcast") from None

        def flat(x: Value, x_batch: tuple[int, ...]) -> Value:
            if math.prod(x_batch) != 1 and x_batch != batch:
                x = broadcast_to(b, x, batch + x.shape[-2:])
            size = 1 if math.prod(x_batch) == 1 else math.prod(batch)
            return reshaped(b, x, (size,) + x.shape[-2:])
        out = b.call("nn.batch_matmul", [flat(a2, batch_a), flat(w2, batch_w)], out_dtype=out_dtype,
                     transpose_b=transpose_b)
        out = reshaped(b, out, batch + (m, n))
    if a.ndim > 1 and w.ndim > 1:
        return out
    shape = list(out.shape)
    if a.ndim == 1:
        del shape[-2]
    if w.ndim == 1:
        del shape[-1]
    return reshaped(b, out, shape)


def _symbolic_matmul(b: Builder, a: Value, w: Value, out_dtype: str, transpose_b: bool) -> Value:
    """`matmul` with symbolic (`?`) sizes, kept without reshapes that would need them: a 2-d
    right operand is one `nn.dense` over all the leading axes of A (native code takes them as
    rows), two rank-3 operands are one `nn.batch_matmul`. The contracted axis must be known;
    1-d operands and batches of rank 2 or more are refused naming the symbolic axes."""
    if a.ndim < 2 or w.ndim < 2:
        raise DynamicShape(f"it multiplies {a.tensor} by {w.tensor}: a 1-d operand with symbolic sizes")
    k_axes = ((a, a.ndim - 1), (w, w.ndim - 1 if transpose_b else w.ndim - 2))
    for side, axis in k_axes:
        if not isinstance(side.dims[axis], int):
            raise DynamicShape(f"it contracts the symbolic axis {axis} of {side.tensor}")
    n = w.dims[-2] if transpose_b else w.dims[-1]
    if a.dims[-1] != w.dims[k_axes[1][1]]:
        raise Unsupported(f"MatMul of shapes {a.tensor} and {w.tensor}")
    if w.ndim == 2:
        w_t = w if transpose_b else transposed(b, w, (1, 0))
        lead = a.dims[:-1]
        if len(lead) == 1 or sum(not isinstance(d, int) for d in lead) != 1:
            return b.call("nn.dense", [a, w_t], units=n, out_dtype=out_dtype)
        # One `?` among several leading axes: rows of a 2-d dense as the static path has them
        # (native code tiles a 2-d dense; the reshapes name the `?` as -1).
        rows = b.call("reshape", [a], newshape=(-1, a.dims[-1]))
        out = b.call("nn.dense", [rows, w_t], units=n, out_dtype=out_dtype)
        return b.call("reshape", [out], newshape=tuple(d if isinstance(d, int) else -1 for d in lead) + (n,))
    if a.ndim == 3 and w.ndim == 3:
        return b.call("nn.batch_matmul", [a, w], out_dtype=out_dtype, transpose_b=transpose_b)
    symbolic = [f"axis {i} of {x.tensor}" for x in (a, w) for i, d in enumerate(x.dims) if not isinstance(d, int)]
    raise DynamicShape(f"it multiplies batches of rank {max(a.ndim, w.ndim) - 2} with symbolic sizes "
                       f"({', '.join(symbolic)}): only rank-3 operands or a 2-d right one keep them")
