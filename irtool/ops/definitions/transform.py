"""Shape-manipulating (injective) operators, tensor creation and layout transforms."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from irtool.ir.expr import AttrValue
from irtool.ir.types import Any, Dim, TensorType, TupleType, Type
from irtool.ops.attrs import non_negative, one_of, positive
from irtool.ops.definitions._common import (
    as_array, broadcast_shapes, check_rank, dims_equal, is_known, norm_axis, np_dtype, prod, tensor_arg,
    tuple_of_tensors)
from irtool.ops.registry import AttrField, OpDef, OpPattern, TypeRelError, Value, register

Attrs = Mapping[str, AttrValue]


# ---------------------------------------------------------------------------------- reshape

def reshape_dims(op: str, shape: Sequence[Dim], newshape: Sequence[int],
                 allowzero: bool = False) -> tuple[Dim, ...]:
    """TVM's newshape language: 0 copies a dim, -1 infers one, -2 copies the rest,
    -3 merges two consecutive dims, -4 splits one dim into the next two values (one may be -1).

    Dims that are copied or merged from the input cancel out when inferring the -1 (as in
    TVM), so `[0, -1]` on `(?, 3, 4)` gives `(?, 12)`.
    """
    check_rank(op, len(newshape), "newshape")
    out: list[Dim] = []
    used_in: set[int] = set()
    used_out: set[int] = set()
    src = 0
    infer_at = -1
    i = 0

    def take(count: int) -> list[Dim]:
        nonlocal src
        if src + count > len(shape):
            raise TypeRelError(f"{op}: newshape {list(newshape)} uses more dimensions than the "
                               f"input shape {tuple(shape)} has")
        used_in.update(range(src, src + count))
        dims = list(shape[src:src + count])
        src += count
        return dims

    while i < len(newshape):
        v = newshape[i]
        if v > 0 or (v == 0 and allowzero):
            out.append(v)
            src += 1
        elif v == 0:
            used_out.add(len(out))
            out.extend(take(1))
        elif v == -1:
            if infer_at >= 0:
                raise TypeRelError(f"{op}: newshape {list(newshape)} has more than one -1")
            infer_at = len(out)
            out.append(1)
            src += 1
        elif v == -2:
            rest = take(len(shape) - src) if src < len(shape) else []
            used_out.update(range(len(out), len(out) + len(rest)))
            out.extend(rest)
        elif v == -3:
            a, b = take(2)
            used_out.add(len(out))
            out.append(prod((a, b)))
        elif v == -4:
            if i + 2 >= len(newshape):
                raise TypeRelError(f"{op}: -4 in newshape {list(newshape)} must be followed by "
                                   "two values")
            (d,) = take(1)
            d1, d2 = newshape[i + 1], newshape[i + 2]
            if d1 == -1 and d2 == -1 or d1 < -1 or d2 < -1 or 0 in (d1, d2):
                raise TypeRelError(f"{op}: -4 in newshape {list(newshape)} needs two positive "
                                   "factors, at most one of them -1")
            used_out.update((len(out), len(out) + 1))
            if is_known(d):
                if d1 == -1:
                    d1 = d // d2  # type: ignore[operator]
                elif d2 == -1:
                    d2 = d // d1  # type: ignore[operator]
                if d1 * d2 != d:
                    raise TypeRelError(f"{op}: cannot split dimension {d} into {d1} x {d2}")
                out.extend((d1, d2))
            else:
                out.extend((Any() if d1 == -1 else d1, Any() if d2 == -1 else d2))
            i += 2
        else:
            raise TypeRelError(f"{op}: invalid value {v} in newshape {list(newshape)}")
        i += 1
    if infer_at >= 0:
        free_in = prod([d for k, d in enumerate(shape) if k not in used_in])
        free_out = prod([d for k, d in enumerate(out) if k not in used_out and k != infer_at])
        if not (is_known(free_in) and is_known(free_out)):
            out[infer_at] = Any()
        elif free_out == 0 or free_in % free_out != 0:  # type: ignore[operator]
            raise TypeRelError(f"{op}: cannot reshape {tuple(shape)} to {list(newshape)}")
        else:
            out[infer_at] = free_in // free_out  # type: ignore[operator]
    total, result = prod(shape), prod(out)
    if is_known(total) and is_known(result) and total != result:
        raise TypeRelError(f"{op}: cannot reshape {tuple(shape)} ({total} elements) to "
                           f"{tuple(out)} ({result} elements)")
    return tuple(out)


def _reshape_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    x = tensor_arg("reshape", types, 0, "data")
    return TensorType(reshape_dims("reshape", x.shape, attrs["newshape"],  # type: ignore[arg-type]
                                   bool(attrs["allowzero"])), x.dtype)


def _reshape(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    return x.reshape(reshape_dims("reshape", x.shape, attrs["newshape"],  # type: ignore[arg-type]
                                  bool(attrs["allowzero"])))


register(OpDef("reshape", 1,
               (AttrField("newshape", "int_list", required=True),
                AttrField("allowzero", "bool", False)),
               OpPattern.INJECTIVE, _reshape_rel, _reshape,
               description="reshape with TVM's special values 0, -1, -2, -3, -4",
               extra={"reshape_only": True}))

# --------------------------------------------------------------- transpose, squeeze, expand


def _transpose_axes(op: str, ndim: int, axes: AttrValue) -> list[int]:
    if axes is None or axes == ():
        return list(range(ndim))[::-1]
    assert isinstance(axes, tuple)
    if len(axes) != ndim:
        raise TypeRelError(f"{op}: axes {list(axes)} do not match rank {ndim}")
    perm = [norm_axis(op, a, ndim) for a in axes]
    if sorted(perm) != list(range(ndim)):
        raise TypeRelError(f"{op}: axes {list(axes)} are not a permutation")
    return perm


def _transpose_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    x = tensor_arg("transpose", types, 0, "data")
    perm = _transpose_axes("transpose", x.ndim, attrs["axes"])
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype)


register(OpDef("transpose", 1, (AttrField("axes", "int_list", None, optional=True),),
               OpPattern.INJECTIVE, _transpose_rel,
               lambda args, attrs: np.transpose(
                   args[0], _transpose_axes("transpose", args[0].ndim, attrs["axes"])).copy(),
               description="permutes axes (reverses them by default)"))


def _squeeze_axes(op: str, shape: Sequence[Dim], axis: AttrValue) -> list[int]:
    if axis is None:
        return [i for i, d in enumerate(shape) if d == 1]
    assert isinstance(axis, tuple)
    axes = [norm_axis(op, a, len(shape)) for a in axis]
    for a in axes:
        if is_known(shape[a]) and shape[a] != 1:
            raise TypeRelError(f"{op}: cannot squeeze axis {a} of extent {shape[a]}")
    return axes


def _squeeze_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    x = tensor_arg("squeeze", types, 0, "data")
    axes = _squeeze_axes("squeeze", x.shape, attrs["axis"])
    return TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)


register(OpDef("squeeze", 1, (AttrField("axis", "int_list", None, optional=True),),
               OpPattern.INJECTIVE, _squeeze_rel,
               lambda args, attrs: np.squeeze(
                   args[0], tuple(_squeeze_axes("squeeze", args[0].shape, attrs["axis"]))),
               description="removes axes of extent 1 (all of them by default)",
               extra={"reshape_only": True}))


def _expand_shape(op: str, shape: Sequence[Dim], attrs: Attrs) -> tuple[Dim, ...]:
    ndim = len(shape)
    axis = int(attrs["axis"])  # type: ignore[arg-type]
    if not -ndim - 1 <= axis <= ndim:
        raise TypeRelError(f"{op}: axis {axis} is out of range for a tensor of rank {ndim}")
    pivot = axis + ndim + 1 if axis < 0 else axis
    n = int(attrs["num_newaxis"])  # type: ignore[arg-type]
    check_rank(op, ndim + n, f"num_newaxis={n}")
    return tuple(shape[:pivot]) + (1,) * n + tuple(shape[pivot:])


register(OpDef("expand_dims", 1,
               (AttrField("axis", "int", required=True),
                AttrField("num_newaxis", "int", 1, check=non_negative)),
               OpPattern.BROADCAST,
               lambda types, attrs: TensorType(
                   _expand_shape("expand_dims", tensor_arg("expand_dims", types, 0).shape, attrs),
                   tensor_arg("expand_dims", types, 0).dtype),
               lambda args, attrs: args[0].reshape(_expand_shape("expand_dims", args[0].shape, attrs)),
               description="inserts num_newaxis axes of extent 1 at axis",
               extra={"reshape_only": True}))

# ------------------------------------------------------------------- concatenate and split


def _concatenate_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "concatenate"
    fields = tuple_of_tensors(op, types[0])
    if not fields:
        raise TypeRelError(f"{op}: needs at least one tensor")
    first = fields[0]
    axis = norm_axis(op, int(attrs["axis"]), first.ndim)  # type: ignore[arg-type]
    for t in fields[1:]:
        if t.ndim != first.ndim or t.dtype != first.dtype:
            raise TypeRelError(f"{op}: cannot concatenate {first} with {t}")
        for i, (a, b) in enumerate(zip(first.shape, t.shape)):
            if i != axis and not dims_equal(a, b):
                raise TypeRelError(f"{op}: {first} and {t} differ on axis {i} (concatenating "
                                   f"on axis {axis})")
    shape = list(first.shape)
    for i in range(first.ndim):
        if i != axis:
            shape[i] = next((t.shape[i] for t in fields if is_known(t.shape[i])), first.shape[i])
    total = prod([t.shape[axis] for t in fields])
    shape[axis] = sum(t.shape[axis] for t in fields) if is_known(total) else Any()  # type: ignore[misc]
    return TensorType(tuple(shape), first.dtype)


register(OpDef("concatenate", 1, (AttrField("axis", "int", 0),), OpPattern.INJECTIVE,
               _concatenate_rel,
               lambda args, attrs: np.concatenate(args[0], axis=int(attrs["axis"])),
               description="joins the tensors of one tuple argument along an axis"))


def _split_bounds(op: str, extent: Dim, spec: AttrValue) -> list[tuple[int, Dim]]:
    """(start, end) of each piece; an unknown end is Any."""
    if isinstance(spec, int):
        if is_known(extent):
            if extent % spec != 0:  # type: ignore[operator]
                raise TypeRelError(f"{op}: {extent} is not divisible into {spec} sections")
            size = extent // spec  # type: ignore[operator]
            return [(k * size, (k + 1) * size) for k in range(spec)]
        return [(0, Any()) for _ in range(spec)]
    assert isinstance(spec, tuple)
    starts = [0, *spec]
    if any(b < a for a, b in zip(starts, starts[1:])):
        raise TypeRelError(f"{op}: indices {list(spec)} must be increasing")
    if is_known(extent) and spec and spec[-1] > extent:  # type: ignore[operator]
        raise TypeRelError(f"{op}: index {spec[-1]} is beyond the axis extent {extent}")
    return [(a, b) for a, b in zip(starts, list(spec) + [extent])]


def _split_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "split"
    x = tensor_arg(op, types, 0, "data")
    axis = norm_axis(op, int(attrs["axis"]), x.ndim)  # type: ignore[arg-type]
    pieces = []
    for start, end in _split_bounds(op, x.shape[axis], attrs["indices_or_sections"]):
        size: Dim
        if isinstance(attrs["indices_or_sections"], int) and not is_known(end):
            size = Any()
        else:
            size = end - start if is_known(end) else Any()  # type: ignore[operator]
        shape = list(x.shape)
        shape[axis] = size
        pieces.append(TensorType(tuple(shape), x.dtype))
    return TupleType(tuple(pieces))


def _split(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    spec = attrs["indices_or_sections"]
    return tuple(np.split(x, spec if isinstance(spec, int) else list(spec), axis=axis))  # type: ignore[arg-type]


register(OpDef("split", 1,
               (AttrField("indices_or_sections", "int_or_list", required=True,
                          check=lambda v: positive(v) if isinstance(v, int) else non_negative(v)),
                AttrField("axis", "int", 0)),
               OpPattern.INJECTIVE, _split_rel, _split,
               description="splits into equal sections or at indices; returns a tuple"))

# ------------------------------------------------------------------------- strided_slice


def _slices(op: str, shape: Sequence[Dim], attrs: Attrs) -> list[tuple[int | None, int | None, int] | None]:
    """Per axis (begin, end, stride) in Python slice terms, or None for an untouched axis.

    As in TVM, missing begin/end entries mean the whole axis and missing strides are 1.
    """
    begin, end = list(attrs["begin"]), list(attrs["end"])  # type: ignore[arg-type]
    strides = list(attrs["strides"] or ())  # type: ignore[arg-type]
    axes_attr = attrs["axes"]
    if axes_attr is None:
        n = max(len(begin), len(end), len(strides))
        if n > len(shape):
            raise TypeRelError(f"{op}: begin {begin}, end {end} and strides {strides} slice more "
                               f"axes than the rank {len(shape)}")
        axes = list(range(n))
    else:
        axes = [norm_axis(op, a, len(shape)) for a in axes_attr]  # type: ignore[union-attr]
        if not len(begin) == len(end) == len(axes) or len(set(axes)) != len(axes):
            raise TypeRelError(f"{op}: begin {begin}, end {end} and axes {list(axes_attr)} "  # type: ignore[arg-type]
                               "must have one entry per distinct axis")
    size_mode = attrs["slice_mode"] == "size"
    out: list[tuple[int | None, int | None, int] | None] = [None] * len(shape)
    for k, axis in enumerate(axes):
        stride = strides[k] if k < len(strides) and not size_mode else 1
        if stride == 0:
            raise TypeRelError(f"{op}: a stride of 0 is not allowed")
        b = begin[k] if k < len(begin) else None
        e = end[k] if k < len(end) else None
        if size_mode and e is not None:
            start = b or 0
            extent = shape[axis]
            if start < 0 and is_known(extent):
                start += extent  # type: ignore[operator]
            e = None if e < 0 else start + e
        out[axis] = (b, e, stride)
    return out


def _slice_extent(extent: Dim, sl: tuple[int | None, int | None, int] | None) -> Dim:
    if sl is None:
        return extent
    if not is_known(extent):
        return Any()
    return len(range(*slice(*sl).indices(extent)))  # type: ignore[arg-type]


def _strided_slice_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    x = tensor_arg("strided_slice", types, 0, "data")
    sls = _slices("strided_slice", x.shape, attrs)
    return TensorType(tuple(_slice_extent(d, s) for d, s in zip(x.shape, sls)), x.dtype)


def _strided_slice(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    sls = _slices("strided_slice", x.shape, attrs)
    index = tuple(slice(None) if s is None else slice(*s) for s in sls)
    return x[index].copy()


register(OpDef("strided_slice", 1,
               (AttrField("begin", "int_list", required=True),
                AttrField("end", "int_list", required=True),
                AttrField("strides", "int_list", None, optional=True),
                AttrField("slice_mode", "str", "end", check=one_of("end", "size")),
                AttrField("axes", "int_list", None, optional=True)),
               OpPattern.INJECTIVE, _strided_slice_rel, _strided_slice,
               description="python-style slicing on each axis"))

# ------------------------------------------------------------------------------------ take


def _take_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "take"
    x, idx = tensor_arg(op, types, 0, "data"), tensor_arg(op, types, 1, "indices")
    if not idx.dtype.startswith(("int", "uint")):
        raise TypeRelError(f"{op}: indices must be integers, got {idx}")
    if attrs["axis"] is None:
        return TensorType(idx.shape, x.dtype)
    axis = norm_axis(op, int(attrs["axis"]), x.ndim)  # type: ignore[arg-type]
    b = int(attrs["batch_dims"])  # type: ignore[arg-type]
    b = b + idx.ndim if b < 0 else b
    if not 0 <= b <= min(axis, idx.ndim):
        raise TypeRelError(f"{op}: batch_dims {attrs['batch_dims']} is out of range")
    for i in range(b):
        if not dims_equal(x.shape[i], idx.shape[i]):
            raise TypeRelError(f"{op}: batch dimension {i} differs between {x} and {idx}")
    return TensorType(x.shape[:axis] + idx.shape[b:] + x.shape[axis + 1:], x.dtype)


def _take(args: list[Value], attrs: Attrs) -> Value:
    x, idx = args
    if attrs["axis"] is None:
        x = x.reshape(-1)
        axis = 0
    else:
        axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    n = x.shape[axis]
    idx = idx.astype(np.int64)
    idx = np.mod(idx, n) if attrs["mode"] == "wrap" else np.clip(idx, 0, n - 1)
    b = int(attrs["batch_dims"]) if attrs["axis"] is not None else 0  # type: ignore[arg-type]
    b = b + idx.ndim if b < 0 else b
    if b == 0:
        return np.take(x, idx, axis=axis)
    # Batched gather: the first b axes of data and indices walk together.
    batch = x.shape[:b]
    xb = x.reshape((-1,) + x.shape[b:])
    ib = idx.reshape((-1,) + idx.shape[b:])
    parts = [np.take(xb[k], ib[k], axis=axis - b) for k in range(xb.shape[0])]
    stacked = np.stack(parts) if parts else np.empty((0,), x.dtype)
    return stacked.reshape(batch + stacked.shape[1:])


register(OpDef("take", 2,
               (AttrField("batch_dims", "int", 0),
                AttrField("axis", "int", None, optional=True),
                AttrField("mode", "str", "clip", check=one_of("clip", "wrap", "fast"))),
               OpPattern.INJECTIVE, _take_rel, _take,
               description="gathers entries along an axis (flattened data without one)"))

# ---------------------------------------------------------------------------- creation


def _init_shape(op: str, attrs: Attrs) -> tuple[int, ...]:
    shape = attrs["shape"]
    if shape is None:
        raise TypeRelError(f"{op}: needs a static `shape` attribute")
    check_rank(op, len(shape), "shape")  # type: ignore[arg-type]
    return tuple(shape)  # type: ignore[arg-type]


def _init_rel(op: str, has_fill: bool) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        dtype = str(attrs["dtype"])
        if has_fill:
            fill = tensor_arg(op, types, 0, "fill_value")
            if fill.ndim != 0:
                raise TypeRelError(f"{op}: fill_value must be a scalar, got {fill}")
            dtype = dtype or fill.dtype
        return TensorType(_init_shape(op, attrs), dtype or "float32")
    return rel


def _init_compute(op: str, value: float | None) -> Callable[[list[Value], Attrs], Value]:
    def compute(args: list[Value], attrs: Attrs) -> Value:
        fill = args[0] if value is None else value
        dtype = str(attrs["dtype"]) or (str(args[0].dtype) if value is None else "float32")
        return np.full(_init_shape(op, attrs), fill, dtype=np_dtype(dtype))
    return compute


INIT_ATTRS = (AttrField("shape", "int_list", None, optional=True, check=non_negative),
              AttrField("dtype", "dtype", ""))

for _name, _value in (("zeros", 0.0), ("ones", 1.0), ("full", None)):
    register(OpDef(_name, 1 if _value is None else 0, INIT_ATTRS, OpPattern.ELEMWISE,
                   _init_rel(_name, _value is None), _init_compute(_name, _value),
                   description=f"a new tensor filled with {_value if _value is not None else 'fill_value'}"))


def _like_rel(op: str, has_fill: bool) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        x = tensor_arg(op, types, 0, "data")
        if has_fill:
            fill = tensor_arg(op, types, 1, "fill_value")
            if fill.ndim != 0:
                raise TypeRelError(f"{op}: fill_value must be a scalar, got {fill}")
        return x
    return rel


for _name, _value in (("zeros_like", 0), ("ones_like", 1), ("full_like", None)):
    register(OpDef(
        _name, 1 if _value is not None else 2, (), OpPattern.ELEMWISE,
        _like_rel(_name, _value is None),
        (lambda args, attrs, v=_value: np.full(args[0].shape, args[1] if v is None else v,
                                               dtype=args[0].dtype)),
        description="a tensor shaped like the argument"))

# --------------------------------------------------------------------- layout_transform

_LAYOUT_TOKEN = re.compile(r"(\d*)([A-Za-z])")


def parse_layout(layout: str) -> list[tuple[str, int | None]]:
    """`NCHW16c` -> [(N, None), (C, None), (H, None), (W, None), (c, 16)]; ValueError if invalid."""
    items: list[tuple[str, int | None]] = []
    pos = 0
    for m in _LAYOUT_TOKEN.finditer(layout):
        if m.start() != pos:
            break
        pos = m.end()
        digits, letter = m.groups()
        if letter.isupper():
            if digits:
                raise ValueError(f"primal axis {letter} cannot have a factor")
            items.append((letter, None))
        else:
            if not digits or int(digits) <= 0:
                raise ValueError(f"sub-axis {letter} needs a positive factor")
            items.append((letter, int(digits)))
    if pos != len(layout) or not layout:
        raise ValueError("not a layout")
    letters = [a for a, _ in items]
    if len(set(letters)) != len(letters):
        raise ValueError("repeats an axis")
    for a, _ in items:
        if a.islower() and a.upper() not in letters:
            raise ValueError(f"sub-axis {a} has no primal axis {a.upper()}")
    return items


def _layout_check(v: AttrValue) -> str | None:
    try:
        parse_layout(str(v))
    except ValueError as e:
        return f"is not a valid layout ({e})"
    return None


def _primals(layout: list[tuple[str, int | None]]) -> list[str]:
    return [a for a, _ in layout if a.isupper()]


def _factors(layout: list[tuple[str, int | None]]) -> dict[str, int]:
    return {a.upper(): f for a, f in layout if f is not None}


def _layouts(op: str, attrs: Attrs, ndim: int) -> tuple[list, list]:
    src, dst = parse_layout(str(attrs["src_layout"])), parse_layout(str(attrs["dst_layout"]))
    if sorted(_primals(src)) != sorted(_primals(dst)):
        raise TypeRelError(f"{op}: {attrs['src_layout']} and {attrs['dst_layout']} do not have "
                           "the same primal axes")
    if len(src) != ndim:
        raise TypeRelError(f"{op}: layout {attrs['src_layout']} does not match rank {ndim}")
    return src, dst


def _layout_transform_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "layout_transform"
    x = tensor_arg(op, types, 0, "data")
    src, dst = _layouts(op, attrs, x.ndim)
    dims = dict(zip((a for a, _ in src), x.shape))
    for a, f in src:
        if f is not None and is_known(dims[a]) and dims[a] != f:
            raise TypeRelError(f"{op}: axis {a} of {x} must have extent {f} in layout "
                               f"{attrs['src_layout']}")
    primal = {a: prod((dims[a], dims.get(a.lower(), 1))) for a in _primals(src)}
    out: list[Dim] = []
    dst_factors = _factors(dst)
    for a, f in dst:
        if f is not None:
            out.append(f)
            continue
        full = primal[a]
        factor = dst_factors.get(a, 1)
        if is_known(full) and full % factor != 0:  # type: ignore[operator]
            raise TypeRelError(f"{op}: axis {a} of extent {full} is not divisible by {factor}")
        out.append(full // factor if is_known(full) else Any())  # type: ignore[operator]
    return TensorType(tuple(out), x.dtype)


def _layout_transform(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    src, dst = _layouts("layout_transform", attrs, x.ndim)
    src_names = [a for a, _ in src]
    order = _primals(src)
    # Unblock: each primal axis followed by its sub-axis, then merge the pairs.
    perm: list[int] = []
    merged: list[int] = []
    for a in order:
        perm.append(src_names.index(a))
        extent = x.shape[src_names.index(a)]
        if a.lower() in src_names:
            perm.append(src_names.index(a.lower()))
            extent *= x.shape[src_names.index(a.lower())]
        merged.append(extent)
    plain = np.transpose(x, perm).reshape(merged)
    # Block for the destination, then order the axes as it lists them.
    dst_factors = _factors(dst)
    split_shape: list[int] = []
    labels: list[str] = []
    for a, extent in zip(order, merged):
        factor = dst_factors.get(a)
        if factor is None:
            split_shape.append(extent)
            labels.append(a)
        else:
            split_shape += [extent // factor, factor]
            labels += [a, a.lower()]
    blocked = plain.reshape(split_shape)
    return np.transpose(blocked, [labels.index(a) for a, _ in dst]).copy()


register(OpDef("layout_transform", 1,
               (AttrField("src_layout", "str", required=True, check=_layout_check),
                AttrField("dst_layout", "str", required=True, check=_layout_check)),
               OpPattern.INJECTIVE, _layout_transform_rel, _layout_transform,
               description="re-lays out a tensor, e.g. NCHW <-> NHWC or NCHW <-> NCHW16c"))

# --------------------------------------------------------------------- collapse_sum_like


def _collapse_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "collapse_sum_like"
    x, like = tensor_arg(op, types, 0, "data"), tensor_arg(op, types, 1, "collapse_type")
    if like.ndim > x.ndim or broadcast_shapes(op, x, like) != x.shape:
        raise TypeRelError(f"{op}: cannot collapse {x} to the shape of {like}")
    return TensorType(like.shape, x.dtype)


def _collapse_sum_like(args: list[Value], attrs: Attrs) -> Value:
    x, like = args
    lead = x.ndim - like.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(like.shape)
                                      if d == 1 and x.shape[lead + i] != 1)
    return as_array(np.sum(x, axis=axes, dtype=x.dtype).reshape(like.shape), str(x.dtype))


register(OpDef("collapse_sum_like", 2, (), OpPattern.COMM_REDUCE, _collapse_rel, _collapse_sum_like,
               description="sums a broadcast result back to the shape of the second argument"))
