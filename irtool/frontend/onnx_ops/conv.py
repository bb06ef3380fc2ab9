"""Convolutions (1-d to 3-d, grouped, dilated, transposed), Col2Im (a transposed convolution),
pooling (MaxPool's Indices too) and MaxUnpool.

2-d is native (`nn.conv2d`, `nn.max_pool2d`, ...); 1-d inserts a unit height; 3-d slices the
depth axis into the batch and sums or reduces the 2-d results along depth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from irtool.frontend.onnx_values import Builder, DynamicShape, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import (broadcast_to, converter, int_list, required, reshaped, scalar, transposed)

def spatial_sizes(x: Value) -> list[int]:
    """The spatial sizes of an (N, C, ...) tensor, which every window computation needs."""
    sizes = x.dims[2:]
    if not all(isinstance(d, int) for d in sizes):
        raise DynamicShape(f"it needs the spatial sizes of {x.tensor}")
    return list(sizes)  # type: ignore[arg-type]


def _spatial_pads(node: Node, in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
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


def _conv3d(b: Builder, x: Value, w: Value, strides: list[int], dilations: list[int], pads: list[int],
            groups: int) -> Value:
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
                      groups=groups, channels=w.shape[0], kernel_size=(kh, kw))
        total = conv if total is None else b.call("add", [total, conv])
    assert total is not None
    return _depth_out_of_batch(b, total, x.shape[0])


@converter("Conv")
def _conv(b: Builder, node: Node) -> list[Value | None]:
    x, w = required(node, 0, "X"), required(node, 1, "W")
    rank = spatial_rank(x, "convolution", 3)
    if w.ndim != x.ndim:
        raise Unsupported(f"W has rank {w.ndim}, but X has rank {x.ndim}")
    kernel = list(w.shape[2:])
    strides = int_list(node.attr("strides")) or [1] * rank
    dilations = int_list(node.attr("dilations")) or [1] * rank
    pads = _spatial_pads(node, spatial_sizes(x), kernel, strides, dilations)
    bias = node.input(2)
    if rank == 3:
        out = _conv3d(b, x, w, strides, dilations, pads, int(node.attr("group", 1)))  # type: ignore[call-overload]
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
    whose in/out channel axes are swapped per group (3-d: the convolution is `_conv3d`'s)."""
    x, w = required(node, 0, "X"), required(node, 1, "W")
    rank = spatial_rank(x, "transposed convolution", 3)
    groups = int(node.attr("group", 1))  # type: ignore[call-overload]
    kernel = list(w.shape[2:])
    strides = int_list(node.attr("strides")) or [1] * rank
    dilations = int_list(node.attr("dilations")) or [1] * rank
    out_pad = int_list(node.attr("output_padding")) or [0] * rank
    pads = _conv_transpose_pads(node, spatial_sizes(x), kernel, strides, dilations, out_pad)
    out = conv_transpose(b, x, w, groups, strides, dilations, pads, out_pad)
    bias = node.input(2)
    return [out if bias is None else b.call("nn.bias_add", [out, bias], axis=1)]


def conv_transpose(b: Builder, x: Value, w: Value, groups: int, strides: list[int], dilations: list[int],
                   pads: list[int], out_pad: list[int]) -> Value:
    """ConvTranspose of an (N, C, ...) input with 1 to 3 spatial axes (pads [begin..., end...])."""
    rank = x.ndim - 2
    kernel = list(w.shape[2:])
    if rank == 1:
        x, w = as_2d(b, x), as_2d(b, w)
        kernel, strides, dilations, out_pad = [1] + kernel, [1] + strides, [1] + dilations, [0] + out_pad
        pads = [0, pads[0], 0, pads[1]]
    x = _spread_and_pad(b, x, strides, [d * (k - 1) - p for d, k, p in zip(dilations, kernel, pads[:len(kernel)])],
                        [d * (k - 1) - p + e for d, k, p, e in zip(dilations, kernel, pads[len(kernel):], out_pad)])
    cin, mg = w.shape[:2]
    weight = reshaped(b, w, (groups, cin // groups, mg) + tuple(kernel))
    weight = transposed(b, weight, (0, 2, 1) + tuple(range(3, weight.ndim)))
    weight = reshaped(b, weight, (groups * mg, cin // groups) + tuple(kernel))
    for axis, k in enumerate(kernel, start=2):
        if k > 1:
            weight = b.call("take", [weight, b.const(np.arange(k - 1, -1, -1, dtype=np.int64))], axis=axis)
    if len(kernel) == 3:
        return _conv3d(b, x, weight, [1, 1, 1], dilations, [0] * 6, groups)
    out = b.call("nn.conv2d", [x, weight], dilation=tuple(dilations), groups=groups, channels=groups * mg,
                 kernel_size=tuple(kernel))
    return from_2d(b, out) if rank == 1 else out


def _spread_and_pad(b: Builder, x: Value, strides: Sequence[int], before: Sequence[int],
                    after: Sequence[int]) -> Value:
    """The input of a transposed convolution's plain convolution: x spread out by `strides`
    (stride − 1 zeros between neighbours), then padded by `before`/`after` per spatial axis
    (a negative amount crops)."""
    n, c, *sizes = x.shape
    if any(s != 1 for s in strides):
        interleaved = tuple(v for size in sizes for v in (size, 1))
        spread = reshaped(b, x, (n, c) + interleaved)
        spread = b.call("nn.pad", [spread, scalar(b, 0, x.dtype)],
                        pad_width=((0, 0), (0, 0)) + tuple(p for s in strides for p in ((0, 0), (0, s - 1))))
        spread = reshaped(b, spread, (n, c) + tuple(size * s for size, s in zip(sizes, strides)))
        x = b.call("strided_slice", [spread], begin=(0,) * (2 + len(sizes)),
                   end=(n, c) + tuple((size - 1) * s + 1 for size, s in zip(sizes, strides)))
    if any(v > 0 for v in list(before) + list(after)):
        x = b.call("nn.pad", [x, scalar(b, 0, x.dtype)],
                   pad_width=((0, 0), (0, 0)) + tuple((max(0, lo), max(0, hi)) for lo, hi in zip(before, after)))
    if any(v < 0 for v in list(before) + list(after)):  # `pads` larger than the kernel extent crop instead
        padded = x.shape[2:]
        x = b.call("strided_slice", [x], begin=(0, 0) + tuple(max(0, -lo) for lo in before),
                   end=(n, c) + tuple(size - max(0, -hi) for size, hi in zip(padded, after)))
    return x


@converter("Col2Im")
def _col2im(b: Builder, node: Node) -> list[Value | None]:
    """Sliding blocks summed back into an image: the (N, C·∏block, L) columns, read as a
    (N, C·∏block, L₁, L₂, ...) grid of block positions, are a transposed convolution (groups C)
    whose kernel is one-hot: column j of a block lands at offset j (row-major) of the block."""
    x = required(node, 0, "input")
    image = int_list(b.static(required(node, 1, "image_shape"), "image_shape"))
    block = int_list(b.static(required(node, 2, "block_shape"), "block_shape"))
    rank = len(image)
    if len(block) != rank or not 1 <= rank <= 3:
        raise Unsupported(f"image_shape {image} with block_shape {block} (irtool has 1 to 3 spatial axes)")
    strides = int_list(node.attr("strides")) or [1] * rank
    dilations = int_list(node.attr("dilations")) or [1] * rank
    pads = int_list(node.attr("pads")) or [0] * (2 * rank)
    if x.ndim != 3 or len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        raise Unsupported(f"a {x.tensor} input with strides {strides}, dilations {dilations}, pads {pads}")
    n, rows, length = x.shape
    size = math.prod(block)
    extents = [(k - 1) * d + 1 for k, d in zip(block, dilations)]
    grid = [(i + lo + hi - e) // s + 1 for i, lo, hi, e, s in zip(image, pads[:rank], pads[rank:], extents, strides)]
    if not size or rows % size or min(grid) < 1 or math.prod(grid) != length:
        raise Unsupported(f"a {x.tensor} input does not hold the blocks of {block} in an image of {image} "
                          f"(strides {strides}, dilations {dilations}, pads {pads})")
    channels = rows // size
    one_hot = np.eye(size, dtype=np.dtype(x.dtype)).reshape([size, 1] + block)
    weight = b.const(np.tile(one_hot, (channels,) + (1,) * (rank + 1)))
    # The image may end past the last block (a remainder of the stride): output_padding fills it.
    extra = [i + lo + hi - ((g - 1) * s + e) for i, lo, hi, g, s, e in zip(image, pads[:rank], pads[rank:], grid, strides, extents)]
    return [conv_transpose(b, reshaped(b, x, (n, rows) + tuple(grid)), weight, channels, strides, dilations, pads, extra)]


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
    pads = _spatial_pads(node, sizes, kernel, strides, dilations)
    indices = None
    if len(node.used_outputs) > 1 and node.used_outputs[1]:
        indices = _max_indices(b, x, kernel, strides, dilations, pads, ceil_mode, int(node.attr("storage_order", 0)))  # type: ignore[call-overload]
    if rank == 3:
        return [_pool3d(b, node, op, x, kernel, strides, dilations, pads, ceil_mode), indices]
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
    return [out, indices]


def _max_indices(b: Builder, x: Value, kernel: list[int], strides: list[int], dilations: list[int],
                 pads: list[int], ceil_mode: bool, storage_order: int) -> Value:
    """MaxPool's Indices output: for each window, the flat index into x of its first largest
    element (row-major window order, as onnx.reference and onnxruntime), the spatial part in
    row-major (`storage_order` 0) or column-major (1) order.

    Each of the ∏kernel window taps is a strided slice of x padded with the lowest value; the
    `argmax` over the stacked taps picks a tap, and a constant table maps (tap, window) to the
    tap's flat position in the input."""
    n, c, *sizes = x.shape
    rank = len(sizes)
    outs = [pooled_size(size, pads[i], pads[i + rank], k, s, d, ceil_mode)
            for i, (size, k, s, d) in enumerate(zip(sizes, kernel, strides, dilations))]
    after = [max(0, (o - 1) * s + (k - 1) * d + 1 - size - lo)
             for o, s, k, d, size, lo in zip(outs, strides, kernel, dilations, sizes, pads[:rank])]
    lowest = -np.inf if x.dtype.startswith("float") else np.iinfo(x.dtype).min
    padded = b.call("nn.pad", [x, scalar(b, lowest, x.dtype)],
                    pad_width=((0, 0), (0, 0)) + tuple(zip(pads[:rank], after)))
    taps, table = [], []
    order = np.arange(math.prod(sizes), dtype=np.int64).reshape(sizes if not storage_order else sizes[::-1])
    flat = order if not storage_order else order.transpose()
    for offset in np.ndindex(*kernel):
        begin = [k * d for k, d in zip(offset, dilations)]
        tap = b.call("strided_slice", [padded], begin=(0, 0) + tuple(begin),
                     end=(n, c) + tuple(lo + (o - 1) * s + 1 for lo, o, s in zip(begin, outs, strides)),
                     strides=(1, 1) + tuple(strides))
        taps.append(b.call("expand_dims", [tap], axis=2))
        where = np.meshgrid(*[np.arange(o) * s + k * d - lo for o, s, k, d, lo in
                              zip(outs, strides, offset, dilations, pads[:rank])], indexing="ij")
        inside = np.all([(p >= 0) & (p < size) for p, size in zip(where, sizes)], axis=0)
        table.append(np.where(inside, flat[tuple(np.clip(p, 0, size - 1) for p, size in zip(where, sizes))], 0))
    stacked = taps[0] if len(taps) == 1 else b.call("concatenate", [b.tuple(taps)], axis=2)
    choice = b.call("argmax", [stacked], axis=(2,), keepdims=True)
    choice = choice if choice.dtype == "int64" else b.call("cast", [choice], dtype="int64")
    positions = broadcast_to(b, b.const(np.stack(table)[None, None]), (n, c, len(table)) + tuple(outs))
    spatial = b.call("squeeze", [b.call("gather", [positions, choice], axis=2)], axis=(2,))
    planes = (np.arange(n * c, dtype=np.int64) * math.prod(sizes)).reshape((n, c) + (1,) * rank)
    return b.call("add", [spatial, b.const(planes)])


def _pool3d(b: Builder, node: Node, op: str, x: Value, kernel: list[int], strides: list[int],
            dilations: list[int], pads: list[int], ceil_mode: bool) -> Value:
    """3-d pooling as 2-d pooling of each depth slice, then a window reduction along depth.

    Exact for max; for average, every depth slice's window has the same height/width count,
    so the 3-d mean is the sum of the slices' means over the depth positions ONNX counts,
    divided by their number: the positions in the padded input, or in the input alone without
    `count_include_pad` (a ceil-mode window's positions past the end padding never count)."""
    is_max = op == "nn.max_pool2d"
    include_pad = bool(node.attr("count_include_pad", 0))
    depth = x.shape[2]
    out_depth = pooled_size(depth, pads[0], pads[3], kernel[0], strides[0], dilations[0], ceil_mode)
    past_end = max(0, (out_depth - 1) * strides[0] + (kernel[0] - 1) * dilations[0] + 1 - (depth + pads[0] + pads[3]))
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
    if is_max:
        return total
    low, high = (0, depth) if not include_pad else (-pads[0], depth + pads[3])
    counts = [sum(low <= o * strides[0] + k * dilations[0] - pads[0] < high for k in range(kd)) for o in range(out_depth)]
    if len(set(counts)) == 1:
        return total if counts[0] == 1 else b.call("divide", [total, scalar(b, counts[0], x.dtype)])
    divisor = np.asarray(counts, dtype=np.dtype(x.dtype)).reshape(1, 1, out_depth, 1, 1)
    return b.call("divide", [total, b.const(np.maximum(divisor, 1))])


@converter("MaxPool")
def _max_pool(b: Builder, node: Node) -> list[Value | None]:
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


@converter("MaxUnpool")
def _max_unpool(b: Builder, node: Node) -> list[Value | None]:
    """Each value of X written at its flat index (MaxPool's Indices) into zeros of the unpooled
    shape, one `scatter_elements` over the flattened output."""
    x, indices = required(node, 0, "X"), required(node, 1, "I")
    rank = x.ndim - 2
    kernel = int_list(node.attr("kernel_shape"))
    strides = int_list(node.attr("strides")) or [1] * rank
    pads = int_list(node.attr("pads")) or [0] * (2 * rank)
    if rank < 1 or len(kernel) != rank or len(strides) != rank or len(pads) != 2 * rank:
        raise Unsupported(f"a {x.tensor} input with kernel_shape {kernel}, strides {strides}, pads {pads}")
    if indices.shape != x.shape:
        raise Unsupported(f"indices of shape {indices.shape} for X of shape {x.shape}")
    shape = tuple(x.shape[:2]) + tuple((size - 1) * s - lo - hi + k for size, s, lo, hi, k in
                                       zip(x.shape[2:], strides, pads[:rank], pads[rank:], kernel))
    given = node.input(2)
    target = shape if given is None else tuple(int_list(b.static(given, "output_shape")))
    if len(target) != len(shape) or any(t < d for t, d in zip(target, shape)):
        raise Unsupported(f"output_shape {list(target)} is smaller than the inferred {list(shape)}")
    wide = indices if indices.dtype == "int64" else b.call("cast", [indices], dtype="int64")
    zeros = b.call("zeros", [], shape=(math.prod(shape),), dtype=x.dtype)
    flat = b.call("scatter_elements", [zeros, reshaped(b, wide, (math.prod(x.shape),)),
                                       reshaped(b, x, (math.prod(x.shape),))], axis=0)
    out = reshaped(b, flat, shape)
    if target == shape:
        return [out]
    # A larger output_shape: the unpooled values at its origin, zeros after them (onnx.reference,
    # whose results the node tests expect; onnxruntime reads the indices in output_shape instead).
    return [b.call("nn.pad", [out, scalar(b, 0, x.dtype)], pad_width=tuple((0, t - d) for t, d in zip(target, shape)))]
