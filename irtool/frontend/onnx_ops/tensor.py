"""Shapes and data movement: reshapes, slicing, gathering, padding, constants, reductions.

Shape inputs must be import-time constants; the converters compute the static result. Several
attributes became inputs over the opsets (Pad's `pads` at 11, Slice's bounds at 10, Split's
`split` and Squeeze/Unsqueeze/ReduceSum's `axes` at 13, the other reductions' `axes` at 18).
"""

from __future__ import annotations

import math

import numpy as np

from irtool.frontend.onnx_values import Builder, DynamicShape, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import (broadcast_to, converter, empty_reduction, extreme, int_list, norm_axis, required,
                                             reshaped, scalar, transposed)

@converter("Pad")
def _pad(b: Builder, node: Node) -> list[Value | None]:
    """`paddings` (opset 1) or `pads` attributes, then inputs from opset 11, `axes` from 18.
    Negative amounts (constant mode) crop."""
    x = required(node, 0, "data")
    n = x.ndim
    if b.opset < 11:
        pads, value = int_list(node.attr("pads", node.attr("paddings"))), float(node.attr("value", 0.0))  # type: ignore[arg-type]
        axes = list(range(n))
    else:
        pads = int_list(b.static(node.input(1), "pads"))
        value_in = node.input(2)
        # nn.pad takes its value as an operand, so a value computed at run time is fine.
        value = 0.0 if value_in is None else (value_in.const.reshape(-1)[0] if value_in.const is not None
                                              else reshaped(b, value_in, ()))
        axes_in = node.input(3)
        axes = [norm_axis(a, n) for a in int_list(b.static(axes_in, "axes"))] if axes_in is not None else list(range(n))
    mode = str(node.attr("mode", "constant"))
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise Unsupported(f"pad mode {mode}")
    if len(pads) != 2 * len(axes):
        raise Unsupported(f"pads {pads} for {len(axes)} axes")
    begin, end = [0] * n, [0] * n
    for k, axis in enumerate(axes):
        begin[axis], end[axis] = pads[k], pads[k + len(axes)]
    if any(p < 0 for p in begin + end):
        if mode != "constant":
            raise Unsupported(f"negative pads {pads} in {mode} mode")
        shape = x.shape
        x = b.call("strided_slice", [x], begin=tuple(max(0, -p) for p in begin),
                   end=tuple(d - max(0, -p) for d, p in zip(shape, end)))
        begin, end = [max(0, p) for p in begin], [max(0, p) for p in end]
    if not any(begin + end):
        return [x]
    if mode == "wrap":
        return [_wrap_pad(b, x, begin, end)]
    width = tuple(zip(begin, end))
    fill = value if isinstance(value, Value) else scalar(b, value, x.dtype)  # type: ignore[arg-type]
    return [b.call("nn.pad", [x, fill], pad_width=width, pad_mode=mode)]


def _wrap_pad(b: Builder, x: Value, begin: list[int], end: list[int]) -> Value:
    """Pad mode `wrap` (opset 19): each padded axis read at its positions modulo its size, one
    `take` per axis (the padding may be wider than the axis: it wraps again)."""
    for axis, (lo, hi) in enumerate(zip(begin, end)):
        if not lo and not hi:
            continue
        size = x.shape[axis]
        if not size:
            raise Unsupported(f"wrap padding of the empty axis {axis}")
        index = np.arange(-lo, size + hi, dtype=np.int64) % size
        x = b.call("take", [x, b.const(index)], axis=axis)
    return x


@converter("Reshape")
def _reshape_op(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "data")
    target = int_list(node.attr("shape")) if b.opset < 5 else int_list(b.static(node.input(1), "shape"))
    allow_zero = bool(node.attr("allowzero", 0))
    if not x.tensor.is_static and not (allow_zero and 0 in target) and target.count(-1) <= 1:
        # Relay's newshape has ONNX's meaning of 0 (copy the input's size) and -1 (infer it).
        return [b.call("reshape", [x], newshape=tuple(target))]
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
    return [reshaped(b, x, shape)]


@converter("Flatten")
def _flatten(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "input")
    axis = int(node.attr("axis", 1))  # type: ignore[call-overload]
    axis = axis + x.ndim if axis < 0 else axis
    head, tail = x.dims[:axis], x.dims[axis:]
    if x.tensor.is_static:
        return [reshaped(b, x, (math.prod(head), math.prod(tail)))]  # type: ignore[arg-type]
    # One side may hold the symbolic sizes: -1 infers it.
    if all(isinstance(d, int) for d in tail):
        return [b.call("reshape", [x], newshape=(-1, math.prod(tail)))]  # type: ignore[arg-type]
    if all(isinstance(d, int) for d in head):
        return [b.call("reshape", [x], newshape=(math.prod(head), -1))]  # type: ignore[arg-type]
    raise DynamicShape(f"it flattens {x.tensor} with symbolic sizes on both sides of axis {axis}")


@converter("Transpose")
def _transpose_op(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "data")
    perm = int_list(node.attr("perm")) or list(reversed(range(x.ndim)))
    return [transposed(b, x, perm)]


@converter("Concat")
def _concat(b: Builder, node: Node) -> list[Value | None]:
    args = [v for v in node.inputs if v is not None]
    axis = norm_axis(int(node.attr("axis", 1)), args[0].ndim)  # type: ignore[call-overload]
    return [b.call("concatenate", [b.tuple(args)], axis=axis)]


@converter("Split")
def _split(b: Builder, node: Node) -> list[Value | None]:
    """Sizes from `split` (an input in opset 1 and from 13, an attribute between), else equal parts;
    from opset 18 with `num_outputs` the parts are ceil(size / n) and the last one smaller."""
    x = required(node, 0, "input")
    axis = norm_axis(int(node.attr("axis", 0)), x.ndim)  # type: ignore[call-overload]
    extent = x.dims[axis]
    if not isinstance(extent, int):
        raise DynamicShape(f"it splits axis {axis} of {x.tensor}")
    if (b.opset >= 13 or b.opset == 1) and node.input(1) is not None:
        sizes = int_list(b.static(node.input(1), "split"))
    else:
        sizes = int_list(node.attr("split"))
    count = node.num_outputs
    if not sizes and b.opset >= 18 and node.attr("num_outputs") is not None:
        count = int(node.attr("num_outputs"))  # type: ignore[call-overload]
        if count != node.num_outputs or not 1 <= count <= max(extent, 1):
            raise Unsupported(f"num_outputs={count} for {node.num_outputs} outputs and an axis of {extent}")
        chunk = -(-extent // count)
        sizes = [min(chunk, extent - k * chunk) for k in range(count)]
    if not sizes:
        if extent % count:
            raise Unsupported(f"{extent} does not split into {count} equal parts")
        sizes = [extent // count] * count
    if sum(sizes) != extent or len(sizes) != node.num_outputs:
        raise Unsupported(f"split sizes {sizes} for an axis of {extent}")
    if len(sizes) == 1:
        return [x]
    indices = tuple(int(i) for i in np.cumsum(sizes)[:-1])
    parts = b.call("split", [x], indices_or_sections=indices, axis=axis)
    return [b.item(parts, i) for i in range(len(sizes))]


@converter("Slice")
def _slice(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "data")
    if b.opset < 10:
        starts, ends, axes = int_list(node.attr("starts")), int_list(node.attr("ends")), int_list(node.attr("axes"))
        steps: list[int] = []
    else:
        starts = int_list(b.static(node.input(1), "starts"))
        ends = int_list(b.static(node.input(2), "ends"))
        axes = int_list(b.static(node.input(3), "axes")) if node.input(3) is not None else []
        steps = int_list(b.static(node.input(4), "steps")) if node.input(4) is not None else []
    axes = axes or list(range(len(starts)))
    steps = steps or [1] * len(starts)
    if not x.tensor.is_static:
        return [_symbolic_slice(b, x, starts, ends, axes, steps)]
    begin, end, stride = [0] * x.ndim, list(x.shape), [1] * x.ndim
    out = x
    for start, stop, axis, step in zip(starts, ends, axes, steps):
        axis = norm_axis(axis, x.ndim)
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


def _symbolic_slice(b: Builder, x: Value, starts: list[int], ends: list[int], axes: list[int], steps: list[int]) -> Value:
    """Slice of a tensor with `?` axes: one `strided_slice` over the sliced axes only (its
    bounds have Python's meaning, which is ONNX's for a forward step), the others kept whole.
    A backward step needs the extent to list the indices."""
    begin, end, stride, sliced = [], [], [], []
    for start, stop, axis, step in zip(starts, ends, axes, steps):
        axis = norm_axis(axis, x.ndim)
        extent = x.dims[axis]
        if step <= 0:
            raise DynamicShape(f"it slices axis {axis} of {x.tensor} with step {step} (a forward step only)")
        if isinstance(extent, int):
            start, stop, step = slice(start, stop, step).indices(extent)
        elif (start, stop, step) == (0, stop, 1) and stop >= 2**62:
            continue   # the whole `?` axis
        begin.append(start)
        end.append(max(-2**62, min(stop, 2**62)))
        stride.append(step)
        sliced.append(axis)
    if not sliced:
        return x
    return b.call("strided_slice", [x], begin=tuple(begin), end=tuple(end), axes=tuple(sliced),
                  strides=tuple(stride) if any(s != 1 for s in stride) else None)


def _axes_input(b: Builder, node: Node, since: int) -> list[int] | None:
    """Axes given as an attribute before opset `since`, as an optional input from it on."""
    if b.opset < since:
        value = node.attr("axes")
        return int_list(value) if value is not None else None
    v = node.input(1)
    return None if v is None else int_list(b.static(v, "axes"))


@converter("Squeeze")
def _squeeze(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "data")
    axes = _axes_input(b, node, 13)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = sorted(norm_axis(a, x.ndim) for a in axes)
    if any(isinstance(x.dims[a], int) and x.dims[a] != 1 for a in axes):
        raise Unsupported(f"squeezing axes {axes} of {x.tensor}")
    return [b.call("squeeze", [x], axis=tuple(axes))]


@converter("Unsqueeze")
def _unsqueeze(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "data")
    axes = _axes_input(b, node, 13)
    if not axes:
        raise Unsupported("Unsqueeze without axes")
    rank = x.ndim + len(axes)
    axes = sorted(norm_axis(a, rank) for a in axes)
    if len(set(axes)) != len(axes):
        raise Unsupported(f"repeated axes {axes}")
    if len(axes) == 1 or not x.tensor.is_static:
        out = x
        for a in axes:  # ascending: each axis is already where the result has it
            out = b.call("expand_dims", [out], axis=a)
        return [out]
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [reshaped(b, x, shape)]


@converter("Gather")
def _gather(b: Builder, node: Node) -> list[Value | None]:
    x, indices = required(node, 0, "data"), required(node, 1, "indices")
    axis = norm_axis(int(node.attr("axis", 0)), x.ndim)  # type: ignore[call-overload]
    extent = x.dims[axis]
    if indices.const is not None and isinstance(extent, int):
        # ONNX counts negative indices from the end; normalise them now.
        fixed = np.where(indices.const < 0, indices.const + extent, indices.const)
        if np.any(fixed < 0) or np.any(fixed >= extent):
            raise Unsupported(f"indices out of range for an axis of {extent}")
        indices = b.const(fixed.astype(np.int64))
        return [b.call("take", [x, indices], axis=axis)]
    return [b.call("take", [x, indices], axis=axis, mode="wrap")]


@converter("Shape")
def _shape(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "data")
    start, end = int(node.attr("start", 0)), node.attr("end")  # type: ignore[call-overload]
    dims = list(x.shape)[start:None if end is None else int(end)]  # type: ignore[call-overload]
    return [b.const(np.array(dims, dtype=np.int64))]


@converter("Size")
def _size(b: Builder, node: Node) -> list[Value | None]:
    return [b.const(np.array(math.prod(required(node, 0, "data").shape), dtype=np.int64))]


@converter("Constant")
def _constant(b: Builder, node: Node) -> list[Value | None]:
    for key, dtype in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in node.attrs:
            return [b.const(np.asarray(node.attrs[key], dtype=dtype))]  # a tensor passed the element-type gate
    raise Unsupported(f"attribute {', '.join(node.attrs) or '(none)'}")


@converter("ConstantOfShape")
def _constant_of_shape(b: Builder, node: Node) -> list[Value | None]:
    shape = tuple(int_list(b.static(node.input(0), "shape")))
    fill = node.attr("value")
    scalar = np.asarray(fill).reshape(-1)[0] if fill is not None else np.float32(0)
    value = b.const(np.asarray(scalar))
    return [b.call("full", [value], shape=shape, dtype=value.dtype)]


@converter("Expand")
def _expand(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "input")
    target = tuple(int_list(b.static(node.input(1), "shape")))
    if not x.tensor.is_static:
        # With `?` axes only an expansion that changes no size (a broadcast shape of ones, or
        # the static sizes themselves) is known: x itself.
        lead = x.ndim - len(target)
        for axis, size in enumerate(target, lead):
            if axis < 0 or (size != 1 and x.dims[axis] != size):
                raise DynamicShape(f"it expands axis {axis} of {x.tensor} to {size}")
        return [x]
    shape = tuple(np.broadcast_shapes(x.shape, target))
    return [broadcast_to(b, x, shape)]


def reduced_axes(b: Builder, node: Node, x: Value, axes_since: int) -> tuple[int, ...] | None:
    """The sorted axes a Reduce* node reduces (axes an attribute before opset `axes_since`, an
    input from it on; none given: all of them), or None when it is the identity
    (`noop_with_empty_axes` without axes)."""
    axes = _axes_input(b, node, axes_since)
    if not axes:   # left out or empty
        return None if int(node.attr("noop_with_empty_axes", 0)) else tuple(range(x.ndim))  # type: ignore[call-overload]
    return tuple(sorted(norm_axis(a, x.ndim) for a in axes))


def _reduce(b: Builder, node: Node, op: str, axes_since: int) -> list[Value | None]:
    """Over `axes`, or all axes when there are none, unless `noop_with_empty_axes` (from the
    opset `axes` became an input) asks for the input itself."""
    x = required(node, 0, "data")
    axes = reduced_axes(b, node, x, axes_since)
    if axes is None:
        return [x]
    keepdims = bool(node.attr("keepdims", 1))
    if op in ("max", "min"):   # of nothing: the dtype's lowest (highest) value
        empty = empty_reduction(b, x, axes, keepdims, extreme(x.dtype, op == "max"))
        if empty is not None:
            return [empty]
    return [b.call(op, [x], axis=axes, keepdims=keepdims)]


_REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min",
           "ReduceProd": "prod"}


@converter(*_REDUCE)
def _reduce_op(b: Builder, node: Node) -> list[Value | None]:
    # ReduceSum takes axes as an input from opset 13, the others from opset 18.
    return _reduce(b, node, _REDUCE[node.op_type], 13 if node.op_type == "ReduceSum" else 18)


@converter("ArgMax", "ArgMin")
def _arg_reduce(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "data")
    op = "argmax" if node.op_type == "ArgMax" else "argmin"
    out = b.call(op, [x], axis=(norm_axis(int(node.attr("axis", 0)), x.ndim),),  # type: ignore[call-overload]
                 keepdims=bool(node.attr("keepdims", 1)),
                 select_last_index=bool(node.attr("select_last_index", 0)))
    return [b.call("cast", [out], dtype="int64") if out.dtype != "int64" else out]


@converter("Tile")
def _tile(b: Builder, node: Node) -> list[Value | None]:
    """`repeats` per axis; opset 1 repeats one axis (`axis` input) `tiles` times."""
    x = required(node, 0, "input")
    if b.opset < 6:
        repeats = [1] * x.ndim
        repeats[norm_axis(int(b.static(node.input(2), "axis").reshape(-1)[0]), x.ndim)] = int(
            b.static(node.input(1), "tiles").reshape(-1)[0])
    else:
        repeats = int_list(b.static(node.input(1), "repeats"))
    if len(repeats) != x.ndim or any(r < 1 for r in repeats):
        raise Unsupported(f"repeats {repeats} for a rank-{x.ndim} tensor")
    out = x
    for axis, r in enumerate(repeats):
        if r > 1:
            out = b.call("concatenate", [b.tuple([out] * r)], axis=axis)
    return [out]
