"""Convolutions (1-d to 3-d, grouped, dilated, transposed) and pooling.

2-d is native (`nn.conv2d`, `nn.max_pool2d`, ...); 1-d inserts a unit height; 3-d slices the
depth axis into the batch and sums or reduces the 2-d results along depth.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from irtool.frontend.onnx_values import Builder, DynamicShape, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import (converter, int_list, required, reshaped, scalar, transposed)

def spatial_sizes(x: Value) -> list[int]:
    """The spatial sizes of an (N, C, ...) tensor, which every window computation needs."""
    sizes = x.dims[2:]
    if not all(isinstance(d, int) for d in sizes):
        raise DynamicShape(f"it needs the spatial sizes of {x.tensor}")
    return list(sizes)  # type: ignore[arg-type]


def spatial_pads(node: Node, in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int]) -> list[int]:
    """Explicit [begin..., end...] padding from `pads` or `auto_pad`."""
    n = len(in_sizes)
    auto = str(node.attr("auto_pad", "NOTSET"))
    if auto in ("NOTSET", ""):
        pads = int_list(node.attr("pads")) or [0] * (2 * n)
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


def as_2d(b: Builder, x: Value) -> Value:
    """A 1-d (N, C, W) tensor as (N, C, 1, W), so the 2-d operators serve 1-d models."""
    return b.call("expand_dims", [x], axis=2)


def from_2d(b: Builder, x: Value) -> Value:
    """The (N, C, 1, W) result of a 2-d operator serving a 1-d model as (N, C, W)."""
    return b.call("squeeze", [x], axis=(2,))


def spatial_rank(x: Value, what: str, highest: int = 2) -> int:
    rank = x.ndim - 2
    if not 1 <= rank <= highest:
        raise Unsupported(f"{rank}-d {what} (irtool has 1-d to {highest}-d)")
    return rank


def _depth_slice(b: Builder, x: Value, start: int, count: int, step: int) -> Value:
    """x[:, :, start : start + (count − 1)·step + 1 : step] of an (N, C, D, ...) tensor."""
    end = list(x.shape)
    begin = [0] * x.ndim
    begin[2], end[2] = start, start + (count - 1) * step + 1
    strides = tuple([1, 1, step] + [1] * (x.ndim - 3)) if step != 1 else None
    if begin[2] == 0 and end[2] == x.shape[2]:
        return x
    return b.call("strided_slice", [x], begin=tuple(begin), end=tuple(end), strides=strides)


def _depth_into_batch(b: Builder, x: Value) -> Value:
    """(N, C, D, H, W) → (N·D, C, H, W): 2-d operators then treat each depth slice alone."""
    n, c, d, h, w = x.shape
    return reshaped(b, transposed(b, x, (0, 2, 1, 3, 4)), (n * d, c, h, w))


def _depth_out_of_batch(b: Builder, x: Value, n: int) -> Value:
    nd, c, h, w = x.shape
    return transposed(b, reshaped(b, x, (n, nd // n, c, h, w)), (0, 2, 1, 3, 4))


def _conv3d(b: Builder, node: Node, x: Value, w: Value, strides: list[int], dilations: list[int],
            pads: list[int]) -> Value:
    """A 3-d convolution as a sum over the kernel's depth of 2-d convolutions of depth slices."""
    depth_pad = (pads[0], pads[3])
    if any(depth_pad):
        x = b.call("nn.pad", [x, scalar(b, 0, x.dtype)],
                   pad_width=((0, 0), (0, 0), depth_pad, (0, 0), (0, 0)))
    kd, kh, kw = w.shape[2:]
    out_depth = (x.shape[2] - dilations[0] * (kd - 1) - 1) // strides[0] + 1
    total: Value | None = None
    for k in range(kd):
        part = _depth_into_batch(b, _depth_slice(b, x, k * dilations[0], out_depth, strides[0]))
        wk = b.call("take", [w, b.const(np.array(k, dtype=np.int64))], axis=2)
        conv = b.call("nn.conv2d", [part, wk], strides=tuple(strides[1:]),
                      padding=(pads[1], pads[2], pads[4], pads[5]), dilation=tuple(dilations[1:]),
                      groups=int(node.attr("group", 1)), channels=w.shape[0], kernel_size=(kh, kw))  # type: ignore[call-overload]
        total = conv if total is None else b.call("add", [total, conv])
    assert total is not None
    return _depth_out_of_batch(b, total, x.shape[0])


@converter("Conv")
def _conv(b: Builder, node: Node) -> list[Value | None]:
    x, w = required(node, 0, "X"), required(node, 1, "W")
    if x.dtype == "float32":
        from irtool.frontend.onnx_ops.quantize import dequantized_conv   # builds on this module
        if (integer := dequantized_conv(b, node, x, w, node.input(2))) is not None:
            return [integer]
    rank = spatial_rank(x, "convolution", 3)
    if w.ndim != x.ndim:
        raise Unsupported(f"W has rank {w.ndim}, but X has rank {x.ndim}")
    kernel = list(w.shape[2:])
    strides = int_list(node.attr("strides")) or [1] * rank
    dilations = int_list(node.attr("dilations")) or [1] * rank
    pads = spatial_pads(node, spatial_sizes(x), kernel, strides, dilations)
    bias = node.input(2)
    if rank == 3:
        out = _conv3d(b, node, x, w, strides, dilations, pads)
        return [out if bias is None else b.call("nn.bias_add", [out, bias], axis=1)]
    if rank == 1:
        x, w = as_2d(b, x), as_2d(b, w)
        kernel, strides, dilations = [1] + kernel, [1] + strides, [1] + dilations
        pads = [0, pads[0], 0, pads[1]]
    out = b.call("nn.conv2d", [x, w], strides=tuple(strides), padding=tuple(pads),
                 dilation=tuple(dilations), groups=int(node.attr("group", 1)),  # type: ignore[call-overload]
                 channels=w.shape[0], kernel_size=tuple(kernel))
    if bias is not None:
        out = b.call("nn.bias_add", [out, bias], axis=1)
    if rank == 1:
        out = from_2d(b, out)
    return [out]


def _conv_transpose_pads(node: Node, in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                         dilations: Sequence[int], out_pad: Sequence[int]) -> list[int]:
    """[begin..., end...] padding of a transposed convolution (explicit, or from output_shape/auto_pad)."""
    n = len(in_sizes)
    auto = str(node.attr("auto_pad", "NOTSET"))
    output_shape = int_list(node.attr("output_shape"))
    if auto in ("NOTSET", "") and not output_shape:
        return int_list(node.attr("pads")) or [0] * (2 * n)
    if auto == "VALID":
        return [0] * (2 * n)
    targets = output_shape[-n:] if output_shape else [size * s for size, s in zip(in_sizes, strides)]
    begin, end = [], []
    for size, k, s, d, extra, target in zip(in_sizes, kernel, strides, dilations, out_pad, targets):
        total = s * (size - 1) + extra + (k - 1) * d + 1 - target
        if total < 0:  # an output_shape past the full result: zeros after it (negative end padding)
            begin.append(0)
            end.append(total)
            continue
        lower = auto != "SAME_UPPER"  # ONNX: output_shape without auto_pad pads like SAME_LOWER
        begin.append(total - total // 2 if lower else total // 2)
        end.append(total // 2 if lower else total - total // 2)
    return begin + end


@converter("ConvTranspose")
def _conv_transpose(b: Builder, node: Node) -> list[Value | None]:
    """A transposed convolution as a plain one: spread the input out by the strides (zeros in
    between), pad by the dilated kernel extent minus `pads`, and convolve with the flipped kernel
    whose in/out channel axes are swapped per group."""
    x, w = required(node, 0, "X"), required(node, 1, "W")
    rank = spatial_rank(x, "transposed convolution")
    groups = int(node.attr("group", 1))  # type: ignore[call-overload]
    kernel = list(w.shape[2:])
    strides = int_list(node.attr("strides")) or [1] * rank
    dilations = int_list(node.attr("dilations")) or [1] * rank
    out_pad = int_list(node.attr("output_padding")) or [0] * rank
    pads = _conv_transpose_pads(node, spatial_sizes(x), kernel, strides, dilations, out_pad)
    if rank == 1:
        x, w = as_2d(b, x), as_2d(b, w)
        kernel, strides, dilations, out_pad = [1] + kernel, [1] + strides, [1] + dilations, [0] + out_pad
        pads = [0, pads[0], 0, pads[1]]
    n, c, h, wd = x.shape
    if strides != [1, 1]:
        sh, sw = strides
        spread = reshaped(b, x, (n, c, h, 1, wd, 1))
        spread = b.call("nn.pad", [spread, scalar(b, 0, x.dtype)],
                        pad_width=((0, 0), (0, 0), (0, 0), (0, sh - 1), (0, 0), (0, sw - 1)))
        spread = reshaped(b, spread, (n, c, h * sh, wd * sw))
        x = b.call("strided_slice", [spread], begin=(0, 0, 0, 0),
                   end=(n, c, (h - 1) * sh + 1, (wd - 1) * sw + 1))
    before = [d * (k - 1) - p for d, k, p in zip(dilations, kernel, pads[:2])]
    after = [d * (k - 1) - p + e for d, k, p, e in zip(dilations, kernel, pads[2:], out_pad)]
    if any(v > 0 for v in before + after):
        x = b.call("nn.pad", [x, scalar(b, 0, x.dtype)],
                   pad_width=((0, 0), (0, 0)) + tuple((max(0, lo), max(0, hi)) for lo, hi in zip(before, after)))
    if any(v < 0 for v in before + after):  # `pads` larger than the kernel extent crop instead
        _, _, ph, pw = x.shape
        x = b.call("strided_slice", [x], begin=(0, 0, max(0, -before[0]), max(0, -before[1])),
                   end=(n, c, ph - max(0, -after[0]), pw - max(0, -after[1])))
    cin, mg, kh, kw = w.shape
    weight = reshaped(b, w, (groups, cin // groups, mg, kh, kw))
    weight = reshaped(b, transposed(b, weight, (0, 2, 1, 3, 4)), (groups * mg, cin // groups, kh, kw))
    for axis, k in ((2, kh), (3, kw)):
        if k > 1:
            weight = b.call("take", [weight, b.const(np.arange(k - 1, -1, -1, dtype=np.int64))], axis=axis)
    out = b.call("nn.conv2d", [x, weight], dilation=tuple(dilations), groups=groups, channels=groups * mg,
                 kernel_size=(kh, kw))
    bias = node.input(2)
    if bias is not None:
        out = b.call("nn.bias_add", [out, bias], axis=1)
    if rank == 1:
        out = from_2d(b, out)
    return [out]


def pooled_size(size: int, begin: int, end: int, kernel: int, stride: int, dilation: int, ceil_mode: bool) -> int:
    """ONNX's output size along one axis. With `ceil_mode`, a last window that would start in
    the end padding is dropped (onnxruntime and onnx.reference agree; TVM keeps it)."""
    span = size + begin + end - ((kernel - 1) * dilation + 1)
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    return out - 1 if (out - 1) * stride >= size + begin else out


def _relay_ceil_mode(sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                     dilations: Sequence[int], pads: Sequence[int], ceil_mode: bool) -> tuple[bool, list[int]]:
    """Relay's `ceil_mode` and [begin..., end...] padding that give ONNX's output sizes.

    Relay's ceil mode (TVM's) keeps a last window that starts in the padding. Where ONNX drops it,
    the end padding shrinks by the remainder of the floor division: that removes the dropped
    window and leaves every kept one inside the padded input, so no value changes."""
    n = len(sizes)
    pads = list(pads)
    spans = [size + pads[i] + pads[i + n] - ((k - 1) * d + 1)
             for i, (size, k, d) in enumerate(zip(sizes, kernel, dilations))]
    wanted = [pooled_size(size, pads[i], pads[i + n], k, s, d, ceil_mode)
              for i, (size, k, s, d) in enumerate(zip(sizes, kernel, strides, dilations))]
    rounded_up = [span >= 0 and want == -(-span // s) + 1 and span % s != 0
                  for span, want, s in zip(spans, wanted, strides)]
    if not any(rounded_up):
        return False, pads
    for i, (span, s) in enumerate(zip(spans, strides)):
        if not rounded_up[i] and span > 0 and span % s:
            pads[i + n] -= span % s
    return True, pads


def _pool(b: Builder, node: Node, op: str) -> list[Value | None]:
    x = required(node, 0, "X")
    rank = spatial_rank(x, "pooling", 3)
    kernel = int_list(node.attr("kernel_shape"))
    strides = int_list(node.attr("strides")) or [1] * rank
    dilations = int_list(node.attr("dilations")) or [1] * rank
    ceil_mode = bool(node.attr("ceil_mode", 0))
    sizes = spatial_sizes(x)
    pads = spatial_pads(node, sizes, kernel, strides, dilations)
    if len(node.used_outputs) > 1 and node.used_outputs[1]:
        raise Unsupported("the Indices output of MaxPool")
    if rank == 3:
        return [_pool3d(b, node, op, x, kernel, strides, dilations, pads, ceil_mode), None]
    ceil_mode, pads = _relay_ceil_mode(sizes, kernel, strides, dilations, pads, ceil_mode)
    if rank == 1:
        x = as_2d(b, x)
        kernel, strides, dilations = [1] + kernel, [1] + strides, [1] + dilations
        pads = [0, pads[0], 0, pads[1]]
    attrs: dict[str, object] = dict(pool_size=tuple(kernel), strides=tuple(strides),
                                    dilation=tuple(dilations), padding=tuple(pads), ceil_mode=ceil_mode)
    if op == "nn.avg_pool2d":
        attrs["count_include_pad"] = bool(node.attr("count_include_pad", 0))
    out = b.call(op, [x], **attrs)
    if rank == 1:
        out = from_2d(b, out)
    return [out, None]


def _pool3d(b: Builder, node: Node, op: str, x: Value, kernel: list[int], strides: list[int],
            dilations: list[int], pads: list[int], ceil_mode: bool) -> Value:
    """3-d pooling as 2-d pooling of each depth slice, then a window reduction along depth.

    Exact for max; for average, every depth slice's window has the same height/width count,
    so the mean of the slices' means is the 3-d mean unless depth padding is excluded (or a
    ceil-mode window runs past it, whose count ONNX does not include either)."""
    is_max = op == "nn.max_pool2d"
    include_pad = bool(node.attr("count_include_pad", 0))
    if not is_max and (pads[0] or pads[3]) and not include_pad:
        raise Unsupported("3-d average pooling with depth padding excluded from the count")
    depth = x.shape[2]
    out_depth = pooled_size(depth, pads[0], pads[3], kernel[0], strides[0], dilations[0], ceil_mode)
    past_end = max(0, (out_depth - 1) * strides[0] + (kernel[0] - 1) * dilations[0] + 1 - (depth + pads[0] + pads[3]))
    if past_end and not is_max:
        raise Unsupported("3-d average pooling whose last depth window runs past the padding (ceil_mode)")
    plane_mode, plane_pads = _relay_ceil_mode(x.shape[3:], kernel[1:], strides[1:], dilations[1:],
                                              [pads[1], pads[2], pads[4], pads[5]], ceil_mode)
    attrs: dict[str, object] = dict(pool_size=tuple(kernel[1:]), strides=tuple(strides[1:]),
                                    dilation=tuple(dilations[1:]), padding=tuple(plane_pads), ceil_mode=plane_mode)
    if not is_max:
        attrs["count_include_pad"] = include_pad
    n = x.shape[0]
    flat = _depth_out_of_batch(b, b.call(op, [_depth_into_batch(b, x)], **attrs), n)
    if pads[0] or pads[3] or past_end:
        fill = (-np.inf if x.dtype.startswith("float") else np.iinfo(x.dtype).min) if is_max else 0
        flat = b.call("nn.pad", [flat, scalar(b, fill, x.dtype)],
                      pad_width=((0, 0), (0, 0), (pads[0], pads[3] + past_end), (0, 0), (0, 0)))
    kd = kernel[0]
    total: Value | None = None
    for k in range(kd):
        part = _depth_slice(b, flat, k * dilations[0], out_depth, strides[0])
        total = part if total is None else b.call("maximum" if is_max else "add", [total, part])
    assert total is not None
    if not is_max and kd > 1:
        total = b.call("divide", [total, scalar(b, kd, x.dtype)])
    return total


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
    x = required(node, 0, "X")
    if x.ndim == 4:
        op = "nn.global_avg_pool2d" if node.op_type == "GlobalAveragePool" else "nn.global_max_pool2d"
        return [b.call(op, [x])]
    if x.ndim < 3:
        raise Unsupported(f"global pooling of a rank-{x.ndim} tensor")
    op = "mean" if node.op_type == "GlobalAveragePool" else "max"
    return [b.call(op, [x], axis=tuple(range(2, x.ndim)), keepdims=True)]
