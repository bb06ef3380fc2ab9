"""Data-dependent indexing: gathers, scatters, one-hot, top-k, scans, ranges, triangles,
einsum, sequence reversal, and the depth/space block moves (TVM's names and attributes).

Indices may be negative and count from the end of their axis, as ONNX's do; an index outside
[-n, n) is an error of the program's input (the reference raises, native code returns a failed
assertion), never a read or write out of bounds.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from irtool.ir.expr import AttrValue
from irtool.ir.types import Any, Dim, TensorType, TupleType, Type
from irtool.ops.attrs import one_of, positive
from irtool.ops.definitions._common import (as_array, check_domain, dims_equal, is_known, norm_axis, np_dtype, prod,
                                            tensor_arg, tuple_of_tensors)
from irtool.ops.registry import AttrField, OpDef, OpPattern, TypeRelError, Value, register

Attrs = Mapping[str, AttrValue]


def index_arg(op: str, types: Sequence[Type], i: int, what: str = "indices") -> TensorType:
    t = tensor_arg(op, types, i, what)
    if not t.dtype.startswith(("int", "uint")):
        raise TypeRelError(f"{op}: {what} must be integers, got {t}")
    return t


def checked_indices(op: str, idx: np.ndarray, n: int, what: str) -> np.ndarray:
    """`idx` as int64 positions in [0, n): negatives count from the end; anything else outside
    [-n, n) is refused (the message is what both backends report)."""
    wide = idx.astype(np.int64)
    bad = (wide < -n) | (wide >= n)
    if np.any(bad):
        raise ValueError(f"{op}: index {int(wide[bad].reshape(-1)[0])} is out of range for {what} of extent {n}")
    return np.where(wide < 0, wide + n, wide)


# ------------------------------------------------------------------------- gather (elements)

def _gather_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "gather"
    x, idx = tensor_arg(op, types, 0, "data"), index_arg(op, types, 1)
    if x.ndim != idx.ndim or x.ndim == 0:
        raise TypeRelError(f"{op}: indices {idx} must have the rank of data {x} (at least 1)")
    axis = norm_axis(op, int(attrs["axis"]), x.ndim)  # type: ignore[arg-type]
    for i, (a, b) in enumerate(zip(x.shape, idx.shape)):
        if i != axis and is_known(a) and is_known(b) and b > a:  # type: ignore[operator]
            raise TypeRelError(f"{op}: indices {idx} are longer than data {x} on axis {i}")
    return TensorType(idx.shape, x.dtype)


def _gather(args: list[Value], attrs: Attrs) -> Value:
    x, idx = args
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    where = list(np.indices(idx.shape, sparse=True))
    where[axis] = checked_indices("gather", idx, x.shape[axis], f"axis {axis}")
    return x[tuple(where)]


register(OpDef("gather", 2, (AttrField("axis", "int", 0),), OpPattern.INJECTIVE, _gather_rel, _gather,
               description="out[i, j] = data[indices[i, j], j] (axis 0): ONNX GatherElements"))


# ---------------------------------------------------------------------------------- gather_nd

def _gather_nd_parts(op: str, x: TensorType, idx: TensorType, attrs: Attrs) -> tuple[int, int]:
    """(batch_dims, M): TVM's layout, indices (M, B..., Y...) index data (B..., X_0..X_M-1, rest...)."""
    if idx.ndim < 1:
        raise TypeRelError(f"{op}: indices {idx} need at least one axis (the index tuples)")
    b = int(attrs["batch_dims"])  # type: ignore[arg-type]
    m = idx.shape[0]
    if not is_known(m):
        raise TypeRelError(f"{op}: the index tuple length (axis 0 of {idx}) must be static")
    if attrs["index_rank"] is not None and attrs["index_rank"] != m:
        raise TypeRelError(f"{op}: index_rank={attrs['index_rank']} but indices {idx} hold tuples of {m}")
    if not 0 <= b < idx.ndim or not 1 <= m <= x.ndim - b:  # type: ignore[operator]
        raise TypeRelError(f"{op}: index tuples of {m} with batch_dims={b} do not fit data {x}")
    for i in range(b):
        if not dims_equal(x.shape[i], idx.shape[1 + i]):
            raise TypeRelError(f"{op}: batch dimension {i} differs between {x} and {idx}")
    return b, int(m)  # type: ignore[arg-type]


def _gather_nd_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "gather_nd"
    x, idx = tensor_arg(op, types, 0, "data"), index_arg(op, types, 1)
    b, m = _gather_nd_parts(op, x, idx, attrs)
    return TensorType(idx.shape[1:] + x.shape[b + m:], x.dtype)


def _gather_nd(args: list[Value], attrs: Attrs) -> Value:
    x, idx = args
    b, m = _gather_nd_parts("gather_nd", TensorType(x.shape, str(x.dtype)), TensorType(idx.shape, str(idx.dtype)),
                            attrs)
    lookups = idx.shape[1 + b:]
    where: list[np.ndarray] = []
    for i in range(b):  # batch axes walk with the indices' own axes 1..b
        shape = [1] * (idx.ndim - 1)
        shape[i] = x.shape[i]
        where.append(np.arange(x.shape[i]).reshape(shape))
    for k in range(m):
        where.append(checked_indices("gather_nd", idx[k], x.shape[b + k], f"axis {b + k}"))
    out = x[tuple(where)]
    return out.reshape(idx.shape[1:1 + b] + lookups + x.shape[b + m:])


register(OpDef("gather_nd", 2,
               (AttrField("batch_dims", "int", 0), AttrField("index_rank", "int", None, optional=True)),
               OpPattern.INJECTIVE, _gather_nd_rel, _gather_nd,
               description="gathers slices of data named by index tuples along indices' axis 0"))


# ------------------------------------------------------------------------------- scatters

SCATTER_REDUCTIONS = ("update", "add", "mul", "min", "max")
# The numpy ufunc whose `.at` applies updates in order, repeated positions included.
_UFUNCS: dict[str, np.ufunc] = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}


def scatter_into(data: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    """A copy of `data` with `updates` applied at `where` in row-major order of `updates`; a
    repeated position sees every update (the last one wins with `update`), as the native loop."""
    out = data.copy()
    if reduction == "update":
        flat_pos = np.ravel_multi_index(tuple(np.broadcast_arrays(*where)), data.shape).reshape(-1)
        view = out.reshape(-1)
        view[flat_pos] = updates.reshape(-1)  # numpy assigns in order: the last write of a position stays
    else:
        _UFUNCS[reduction].at(out, where, updates)
    return out


def _scatter_elements_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "scatter_elements"
    x = tensor_arg(op, types, 0, "data")
    idx, upd = index_arg(op, types, 1), tensor_arg(op, types, 2, "updates")
    if idx.ndim != x.ndim or x.ndim == 0:
        raise TypeRelError(f"{op}: indices {idx} must have the rank of data {x} (at least 1)")
    if len(idx.shape) != len(upd.shape) or not all(dims_equal(a, b) for a, b in zip(idx.shape, upd.shape)):
        raise TypeRelError(f"{op}: updates {upd} must have the shape of indices {idx}")
    if upd.dtype != x.dtype:
        raise TypeRelError(f"{op}: updates {upd} must have the dtype of data {x}")
    axis = norm_axis(op, int(attrs["axis"]), x.ndim)  # type: ignore[arg-type]
    for i, (a, b) in enumerate(zip(x.shape, idx.shape)):
        if i != axis and is_known(a) and is_known(b) and b > a:  # type: ignore[operator]
            raise TypeRelError(f"{op}: indices {idx} are longer than data {x} on axis {i}")
    return x


def _scatter_elements(args: list[Value], attrs: Attrs) -> Value:
    x, idx, upd = args
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    where = list(np.indices(idx.shape, sparse=True))
    where[axis] = checked_indices("scatter_elements", idx, x.shape[axis], f"axis {axis}")
    return scatter_into(x, tuple(where), upd, str(attrs["reduction"]))


register(OpDef("scatter_elements", 3,
               (AttrField("axis", "int", 0),
                AttrField("reduction", "str", "update", check=one_of(*SCATTER_REDUCTIONS))),
               OpPattern.OPAQUE, _scatter_elements_rel, _scatter_elements,
               description="data with updates[i, j] written (or combined) at [indices[i, j], j] (axis 0)"))


def _scatter_nd_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "scatter_nd"
    x = tensor_arg(op, types, 0, "data")
    idx, upd = index_arg(op, types, 1), tensor_arg(op, types, 2, "updates")
    if idx.ndim < 1 or not is_known(idx.shape[0]) or not 1 <= idx.shape[0] <= x.ndim:  # type: ignore[operator]
        raise TypeRelError(f"{op}: indices {idx} must hold tuples of 1 to {x.ndim} indices along axis 0")
    m = int(idx.shape[0])  # type: ignore[arg-type]
    want = idx.shape[1:] + x.shape[m:]
    if len(upd.shape) != len(want) or not all(dims_equal(a, b) for a, b in zip(upd.shape, want)):
        raise TypeRelError(f"{op}: updates {upd} must have shape {tuple(want)} (indices {idx}, data {x})")
    if upd.dtype != x.dtype:
        raise TypeRelError(f"{op}: updates {upd} must have the dtype of data {x}")
    return x


def _scatter_nd(args: list[Value], attrs: Attrs) -> Value:
    x, idx, upd = args
    m = idx.shape[0]
    lead = idx.ndim - 1
    where: list[np.ndarray] = []
    for k in range(m):
        pos = checked_indices("scatter_nd", idx[k], x.shape[k], f"axis {k}")
        where.append(pos.reshape(pos.shape + (1,) * (x.ndim - m)))
    for k in range(m, x.ndim):  # the slice each tuple names
        shape = [1] * (lead + x.ndim - m)
        shape[lead + k - m] = x.shape[k]
        where.append(np.arange(x.shape[k]).reshape(shape))
    return scatter_into(x, tuple(where), upd, str(attrs["mode"]))


register(OpDef("scatter_nd", 3, (AttrField("mode", "str", "update", check=one_of(*SCATTER_REDUCTIONS)),),
               OpPattern.OPAQUE, _scatter_nd_rel, _scatter_nd,
               description="data with slices of updates written (or combined) at index tuples along indices' axis 0"))


# ------------------------------------------------------------------------------------ one_hot

def _one_hot_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "one_hot"
    idx = index_arg(op, types, 0)
    on, off = tensor_arg(op, types, 1, "on_value"), tensor_arg(op, types, 2, "off_value")
    if on.ndim or off.ndim or on.dtype != off.dtype:
        raise TypeRelError(f"{op}: on_value {on} and off_value {off} must be scalars of one dtype")
    axis = int(attrs["axis"])  # type: ignore[arg-type]
    if not -idx.ndim - 1 <= axis <= idx.ndim:
        raise TypeRelError(f"{op}: axis {axis} is out of range for a result of rank {idx.ndim + 1}")
    pos = axis % (idx.ndim + 1)
    dtype = str(attrs["dtype"]) or on.dtype
    return TensorType(idx.shape[:pos] + (int(attrs["depth"]),) + idx.shape[pos:], dtype)  # type: ignore[arg-type]


def _one_hot(args: list[Value], attrs: Attrs) -> Value:
    idx, on, off = args
    depth = int(attrs["depth"])  # type: ignore[arg-type]
    pos = int(attrs["axis"]) % (idx.ndim + 1)  # type: ignore[arg-type]
    hot = np.expand_dims(idx.astype(np.int64), pos) == np.arange(depth).reshape((-1,) + (1,) * (idx.ndim - pos))
    dtype = str(attrs["dtype"]) or str(on.dtype)
    return as_array(np.where(hot, on, off), dtype)


register(OpDef("one_hot", 3,
               (AttrField("depth", "int", required=True, check=positive), AttrField("axis", "int", -1),
                AttrField("dtype", "dtype", "")),
               OpPattern.INJECTIVE, _one_hot_rel, _one_hot,
               description="on_value where the new axis's position equals the index, off_value elsewhere"))


# --------------------------------------------------------------------------------------- topk

def topk_count(k: int, extent: int) -> int:
    """TVM's k: below 1 means the whole axis; more than the axis is refused by the relation."""
    return extent if k < 1 else k


def _topk_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "topk"
    x = check_domain(op, tensor_arg(op, types, 0, "data"), "numeric")
    if x.ndim == 0:
        raise TypeRelError(f"{op}: data must have at least one axis, got {x}")
    axis = norm_axis(op, int(attrs["axis"]), x.ndim)  # type: ignore[arg-type]
    extent = x.shape[axis]
    k = int(attrs["k"])  # type: ignore[arg-type]
    if k >= 1 and is_known(extent) and k > extent:  # type: ignore[operator]
        raise TypeRelError(f"{op}: k={k} is more than the {extent} elements of axis {axis} of {x}")
    if not str(attrs["dtype"]).startswith(("int", "uint")):
        raise TypeRelError(f"{op}: the indices' dtype must be an integer type, got {attrs['dtype']!r}")
    count: Dim = k if k >= 1 else extent
    shape = x.shape[:axis] + (count,) + x.shape[axis + 1:]
    values, indices = TensorType(shape, x.dtype), TensorType(shape, str(attrs["dtype"]))
    return {"both": TupleType((values, indices)), "values": values, "indices": indices}[str(attrs["ret_type"])]


def topk_order(x: np.ndarray, axis: int, ascending: bool) -> np.ndarray:
    """Positions along `axis` in result order: equal values keep their index order, and NaN
    ranks above every number (first when descending, last when ascending), as native code."""
    if ascending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    flipped = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return np.flip(n - 1 - flipped, axis)


def _topk(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    k = topk_count(int(attrs["k"]), x.shape[axis])  # type: ignore[arg-type]
    order = np.take(topk_order(x, axis, bool(attrs["is_ascend"])), np.arange(k), axis=axis)
    values = np.take_along_axis(x, order, axis)
    indices = as_array(order, str(attrs["dtype"]))
    return {"both": (values, indices), "values": values, "indices": indices}[str(attrs["ret_type"])]


register(OpDef("topk", 1,
               (AttrField("k", "int", 1), AttrField("axis", "int", -1),
                AttrField("ret_type", "str", "both", check=one_of("both", "values", "indices")),
                AttrField("is_ascend", "bool", False), AttrField("dtype", "dtype", "int32")),
               OpPattern.OPAQUE, _topk_rel, _topk,
               description="the k largest (or smallest) values along an axis, sorted, and their indices"))


# ------------------------------------------------------------------------- cumsum, cumprod

def _scan_rel(op: str) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        x = check_domain(op, tensor_arg(op, types, 0, "data"), "numeric")
        dtype = str(attrs["dtype"]) or x.dtype
        if attrs["axis"] is None:
            return TensorType((prod(x.shape),), dtype)
        norm_axis(op, int(attrs["axis"]), x.ndim)  # type: ignore[arg-type]
        return TensorType(x.shape, dtype)
    return rel


def _scan(ufunc: np.ufunc, identity: int) -> Callable[[list[Value], Attrs], Value]:
    def compute(args: list[Value], attrs: Attrs) -> Value:
        x = args[0]
        dtype = np_dtype(str(attrs["dtype"]) or str(x.dtype))
        if attrs["axis"] is None:
            x, axis = x.reshape(-1), 0
        else:
            axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
        with np.errstate(all="ignore"):
            out = ufunc.accumulate(x.astype(dtype), axis=axis, dtype=dtype)
            if attrs["exclusive"]:  # shift by one: the first element is the identity
                out = np.concatenate([np.full_like(np.take(out, [0], axis), identity),
                                      np.take(out, np.arange(x.shape[axis] - 1), axis)], axis=axis)
        return as_array(out, str(dtype))
    return compute


SCAN_ATTRS = (AttrField("axis", "int", None, optional=True, doc="None: over the flattened data"),
              AttrField("dtype", "dtype", ""), AttrField("exclusive", "bool", False))
register(OpDef("cumsum", 1, SCAN_ATTRS, OpPattern.OPAQUE, _scan_rel("cumsum"), _scan(np.add, 0),
               description="running sum along an axis (exclusive: without the element itself)"))
register(OpDef("cumprod", 1, SCAN_ATTRS, OpPattern.OPAQUE, _scan_rel("cumprod"), _scan(np.multiply, 1),
               description="running product along an axis (exclusive: without the element itself)"))


# ------------------------------------------------------------------------------------- arange

def arange_length(start: float, stop: float, step: float) -> float:
    """max(ceil((stop - start) / step), 0), in double precision as onnxruntime counts (inf when
    the quotient overflows)."""
    q = (stop - start) / step
    return max(math.ceil(q), 0) if math.isfinite(q) else math.inf


def _arange_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    start, stop, step = (float(attrs[k]) for k in ("start", "stop", "step"))  # type: ignore[arg-type]
    dtype = str(attrs["dtype"])
    if dtype in ("", "bool"):
        raise TypeRelError(f"arange: dtype must be a numeric type, got {dtype!r}")
    if step == 0 or not all(math.isfinite(v) for v in (start, stop, step)):
        raise TypeRelError(f"arange: start {start}, stop {stop} and step {step} must be finite, step non-zero")
    n = arange_length(start, stop, step)
    if n > 2 ** 31 - 1:
        raise TypeRelError(f"arange: from {start} to {stop} by {step} is too many elements")
    return TensorType((int(n),), dtype)


def _arange(args: list[Value], attrs: Attrs) -> Value:
    dtype = np_dtype(str(attrs["dtype"]))
    start, stop, step = (float(attrs[k]) for k in ("start", "stop", "step"))  # type: ignore[arg-type]
    i = np.arange(int(arange_length(start, stop, step)))
    if np.issubdtype(dtype, np.floating):  # start + i * step in the dtype, as the native loop
        return (dtype.type(start) + i.astype(dtype) * dtype.type(step)).astype(dtype)
    return as_array(int(start) + i * int(step), str(dtype))


register(OpDef("arange", 0,
               (AttrField("start", "float", 0.0), AttrField("stop", "float", required=True),
                AttrField("step", "float", 1.0), AttrField("dtype", "dtype", "float32")),
               OpPattern.ELEMWISE, _arange_rel, _arange,
               description="start + i * step for i below ceil((stop - start) / step); static bounds"))


# -------------------------------------------------------------------------------------- trilu

def _trilu_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "trilu"
    x, k = tensor_arg(op, types, 0, "data"), index_arg(op, types, 1, "k")
    if x.ndim < 2 or k.ndim != 0:
        raise TypeRelError(f"{op}: data {x} must have rank >= 2 and k {k} must be a scalar")
    return x


def _trilu(args: list[Value], attrs: Attrs) -> Value:
    x, k = args
    rows, cols = np.indices(x.shape[-2:], sparse=True)
    diag = cols - rows
    keep = diag >= int(k) if attrs["upper"] else diag <= int(k)
    return np.where(keep, x, np.zeros((), x.dtype))


register(OpDef("trilu", 2, (AttrField("upper", "bool", True),), OpPattern.INJECTIVE, _trilu_rel, _trilu,
               description="the upper (or lower) triangle of the last two axes from diagonal k; zeros elsewhere"))


# ------------------------------------------------------------------------------------- einsum

Labels = list[str]


def parse_einsum(op: str, equation: str, ranks: Sequence[int]) -> tuple[list[Labels], Labels]:
    """Each operand's subscripts and the result's as label lists, numpy's rules: `...` stands
    for broadcast axes (right-aligned, labels `.0`, `.1`, ...), and an implicit result is the
    broadcast axes then the subscripts used once, in ASCII order."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise TypeRelError(f"{op}: equation {equation!r} names {len(terms)} operands, got {len(ranks)}")

    def letters(term: str, where: str) -> str:
        plain = term.replace("...", "", 1)
        if not all(c in string.ascii_letters for c in plain):
            raise TypeRelError(f"{op}: cannot read the {where} subscripts {term!r} of {equation!r}")
        return plain
    dots = 0
    for term, rank in zip(terms, ranks):
        extra = rank - len(letters(term, "operand"))
        if extra < 0 or (extra and "..." not in term):
            raise TypeRelError(f"{op}: subscripts {term!r} do not match an operand of rank {rank}")
        dots = max(dots, extra)
    broadcast = [f".{i}" for i in range(dots)]

    def labels(term: str, rank: int) -> Labels:
        head, _, tail = term.partition("...")
        if "..." not in term:
            return list(term)
        return list(head) + broadcast[dots - (rank - len(head) - len(tail)):] + list(tail)
    subs = [labels(t, r) for t, r in zip(terms, ranks)]
    used = [c for s in subs for c in s]
    if not arrow:
        return subs, broadcast + sorted(c for c in set(used) if used.count(c) == 1 and c[0] != ".")
    letters(rhs, "result")
    if dots and "..." not in rhs:
        raise TypeRelError(f"{op}: the result of {equation!r} must keep the broadcast axes `...`")
    out = labels(rhs, len(rhs.replace("...", "")) + dots)
    if len(set(out)) != len(out) or any(c not in used for c in out):
        raise TypeRelError(f"{op}: the result subscripts of {equation!r} repeat or name no operand's")
    return subs, out


def einsum_extents(op: str, subs: Sequence[Labels], shapes: Sequence[Sequence[Dim]]) -> dict[str, Dim]:
    """The extent of every label; an extent of 1 broadcasts against any other."""
    extents: dict[str, Dim] = {}
    for term, shape in zip(subs, shapes):
        for c, d in zip(term, shape):
            have = extents.get(c)
            if have is None or have == 1:
                extents[c] = d
            elif d != 1 and not dims_equal(have, d):
                raise TypeRelError(f"{op}: subscript {c!r} has extents {have} and {d}")
    return extents


def _einsum_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "einsum"
    fields = tuple_of_tensors(op, types[0])
    if not fields:
        raise TypeRelError(f"{op}: needs at least one operand")
    dtype = fields[0].dtype
    for t in fields:
        check_domain(op, t, "numeric")
        if t.dtype != dtype:
            raise TypeRelError(f"{op}: operands {fields[0]} and {t} have different dtypes")
    subs, out = parse_einsum(op, str(attrs["equation"]), [t.ndim for t in fields])
    extents = einsum_extents(op, subs, [t.shape for t in fields])
    return TensorType(tuple(extents[c] for c in out), dtype)


def _einsum(args: list[Value], attrs: Attrs) -> Value:
    operands = list(args[0])
    dtype = str(operands[0].dtype)
    return as_array(np.einsum(str(attrs["equation"]), *operands, dtype=dtype), dtype)


register(OpDef("einsum", 1, (AttrField("equation", "str", required=True),), OpPattern.OUT_ELEMWISE_FUSABLE,
               _einsum_rel, _einsum,
               description="Einstein summation of a tuple of operands (numpy's equation syntax)"))


# --------------------------------------------------------------------------- reverse_sequence

def _reverse_sequence_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "reverse_sequence"
    x, lengths = tensor_arg(op, types, 0, "data"), index_arg(op, types, 1, "seq_lengths")
    if x.ndim < 2:
        raise TypeRelError(f"{op}: data must have rank >= 2, got {x}")
    seq = norm_axis(op, int(attrs["seq_axis"]), x.ndim, "seq_axis")  # type: ignore[arg-type]
    batch = norm_axis(op, int(attrs["batch_axis"]), x.ndim, "batch_axis")  # type: ignore[arg-type]
    if seq == batch:
        raise TypeRelError(f"{op}: seq_axis and batch_axis are both {seq}")
    if lengths.ndim != 1 or not dims_equal(lengths.shape[0], x.shape[batch]):
        raise TypeRelError(f"{op}: seq_lengths {lengths} must have one entry per batch (axis {batch} of {x})")
    return x


def _reverse_sequence(args: list[Value], attrs: Attrs) -> Value:
    x, lengths = args
    seq = int(attrs["seq_axis"]) % x.ndim  # type: ignore[arg-type]
    batch = int(attrs["batch_axis"]) % x.ndim  # type: ignore[arg-type]
    n = x.shape[seq]
    # TVM clamps each length into [1, n]; the first `length` positions are reversed.
    lengths = np.clip(lengths.astype(np.int64), 1, n)
    shape = [1] * x.ndim
    shape[batch] = -1
    length = lengths.reshape(shape)
    at = np.arange(n).reshape([-1 if a == seq else 1 for a in range(x.ndim)])
    source = np.where(at < length, length - 1 - at, at)
    where = list(np.indices(x.shape, sparse=True))
    where[seq] = source
    return x[tuple(np.broadcast_arrays(*where))]


register(OpDef("reverse_sequence", 2, (AttrField("seq_axis", "int", 1), AttrField("batch_axis", "int", 0)),
               OpPattern.INJECTIVE, _reverse_sequence_rel, _reverse_sequence,
               description="reverses the first seq_lengths[b] elements along seq_axis of each batch b"))


# ------------------------------------------------------------------ depth_to_space, space_to_depth

SUBPIXEL_ATTRS = (AttrField("block_size", "int", required=True, check=positive),
                  AttrField("layout", "str", "NCHW", check=one_of("NCHW")),
                  AttrField("mode", "str", "DCR", check=one_of("DCR", "CRD")))


def subpixel_shape(op: str, shape: Sequence[Dim], attrs: Attrs) -> tuple[Dim, ...]:
    """The result shape of a depth/space move of an NCHW `shape`."""
    b = int(attrs["block_size"])  # type: ignore[arg-type]
    if len(shape) != 4:
        raise TypeRelError(f"{op}: data must have rank 4 (NCHW), got shape {tuple(shape)}")
    n, c, h, w = shape
    if op == "nn.depth_to_space":
        if is_known(c) and c % (b * b):  # type: ignore[operator]
            raise TypeRelError(f"{op}: {c} channels are not divisible by block_size^2 = {b * b}")
        return (n, c // (b * b) if is_known(c) else Any(), h * b if is_known(h) else Any(),  # type: ignore[operator]
                w * b if is_known(w) else Any())  # type: ignore[operator]
    for d, what in ((h, "height"), (w, "width")):
        if is_known(d) and d % b:  # type: ignore[operator]
            raise TypeRelError(f"{op}: the {what} {d} is not divisible by block_size {b}")
    return (n, c * b * b if is_known(c) else Any(), h // b if is_known(h) else Any(),  # type: ignore[operator]
            w // b if is_known(w) else Any())  # type: ignore[operator]


def _subpixel_rel(op: str) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        x = tensor_arg(op, types, 0, "data")
        return TensorType(subpixel_shape(op, x.shape, attrs), x.dtype)
    return rel


def _depth_to_space(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    b = int(attrs["block_size"])  # type: ignore[arg-type]
    n, c, h, w = x.shape
    if attrs["mode"] == "DCR":  # channel = (by * b + bx) * C' + c'
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:  # CRD: channel = c' * b * b + by * b + bx
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    b = int(attrs["block_size"])  # type: ignore[arg-type]
    n, c, h, w = x.shape
    t = x.reshape(n, c, h // b, b, w // b, b)
    t = t.transpose(0, 3, 5, 1, 2, 4) if attrs["mode"] == "DCR" else t.transpose(0, 1, 3, 5, 2, 4)
    return t.reshape(n, c * b * b, h // b, w // b)


register(OpDef("nn.depth_to_space", 1, SUBPIXEL_ATTRS, OpPattern.INJECTIVE, _subpixel_rel("nn.depth_to_space"),
               _depth_to_space, description="moves channel blocks into block_size x block_size pixels"))
register(OpDef("nn.space_to_depth", 1, SUBPIXEL_ATTRS, OpPattern.INJECTIVE, _subpixel_rel("nn.space_to_depth"),
               _space_to_depth, description="moves block_size x block_size pixels into channels"))
