"""Helpers shared by the operator families: argument checks, broadcasting, axes, dtypes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from irtool.ir.types import Any, Dim, TensorType, TupleType, Type
from irtool.ops.registry import TypeRelError

# The most dimensions a tensor may have (numpy's NPY_MAXDIMS is 64 as well). Ranks an attribute
# decides (`expand_dims`' num_newaxis, a `reshape` newshape, a `zeros` shape) are checked against
# it before any shape is built, so an absurd attribute is an error at the call, not a hang.
MAX_RANK = 64


def check_rank(op: str, rank: int, what: str) -> None:
    """Refuses a result rank above MAX_RANK; `what` names the attribute that asks for it."""
    if rank > MAX_RANK:
        raise TypeRelError(f"{op}: {what} asks for a tensor of rank {rank}; at most {MAX_RANK} "
                           "dimensions are supported")


def tensor_arg(op: str, types: Sequence[Type], i: int, what: str = "") -> TensorType:
    t = types[i]
    if not isinstance(t, TensorType):
        label = what or f"argument {i}"
        raise TypeRelError(f"{op}: {label} must be a tensor, got {t}")
    return t


def tuple_of_tensors(op: str, t: Type) -> list[TensorType]:
    if not isinstance(t, TupleType) or not all(isinstance(f, TensorType) for f in t.fields):
        raise TypeRelError(f"{op}: expects a tuple of tensors, got {t}")
    return list(t.fields)  # type: ignore[arg-type]


def is_known(d: Dim) -> bool:
    return isinstance(d, int)


def dims_equal(a: Dim, b: Dim) -> bool:
    """Equal, or at least one unknown (an unknown dimension may be anything at run time)."""
    return not (is_known(a) and is_known(b)) or a == b


def broadcast_shapes(op: str, a: TensorType, b: TensorType) -> tuple[Dim, ...]:
    """Numpy broadcasting of two shapes; an unknown dim meets n as n, meets 1 or ? as ?."""
    n = max(a.ndim, b.ndim)
    sa = (1,) * (n - a.ndim) + a.shape
    sb = (1,) * (n - b.ndim) + b.shape
    out: list[Dim] = []
    for x, y in zip(sa, sb):
        if x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif is_known(x) and is_known(y):
            if x != y:
                raise TypeRelError(f"{op}: cannot broadcast {a} with {b}")
            out.append(x)
        elif is_known(x):
            out.append(x)
        elif is_known(y):
            out.append(y)
        else:
            out.append(Any())
    return tuple(out)


def same_dtype(op: str, *ts: TensorType) -> str:
    dtype = ts[0].dtype
    for t in ts[1:]:
        if t.dtype != dtype:
            raise TypeRelError(f"{op}: dtype mismatch between {ts[0]} and {t}")
    return dtype


def norm_axis(op: str, axis: int, ndim: int, what: str = "axis") -> int:
    """A possibly negative axis as an index in [0, ndim)."""
    if not -ndim <= axis < ndim:
        raise TypeRelError(f"{op}: {what} {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim


def prod(dims: Sequence[Dim]) -> Dim:
    total = 1
    for d in dims:
        if not is_known(d):
            return Any()
        total *= d  # type: ignore[operator]
    return total


def np_dtype(dtype: str) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeRelError(f"dtype {dtype} has no numpy equivalent") from None


def as_array(value: object, dtype: str) -> np.ndarray:
    """A result as an ndarray of exactly `dtype` (numpy likes to widen scalars and reductions)."""
    return np.asarray(value, dtype=np_dtype(dtype))


def int_pair(v: object) -> tuple[int, int]:
    """A 2-d window attribute given as one integer or a list of one or two."""
    if isinstance(v, int):
        return v, v
    t = tuple(v)  # type: ignore[arg-type]
    return (t[0], t[0]) if len(t) == 1 else (t[0], t[1])


def padding4(v: object) -> tuple[int, int, int, int]:
    """TVM's 2-d padding forms as (top, left, bottom, right): [p], [h, w] or [t, l, b, r]."""
    if isinstance(v, int):
        return v, v, v, v
    t = tuple(v)  # type: ignore[arg-type]
    if len(t) == 1:
        return t[0], t[0], t[0], t[0]
    if len(t) == 2:
        return t[0], t[1], t[0], t[1]
    return t[0], t[1], t[2], t[3]


# Dtype domains an operator accepts: name -> (predicate, description for errors).
DOMAINS = {
    "any": (lambda d: True, "tensor"),
    "numeric": (lambda d: d != "bool", "numeric tensor"),
    "float": (lambda d: d.startswith(("float", "bfloat")), "floating-point tensor"),
    "integer": (lambda d: d.startswith(("int", "uint")), "integer tensor"),
}


def check_domain(op: str, t: TensorType, domain: str, what: str = "") -> TensorType:
    ok, label = DOMAINS[domain]
    if not ok(t.dtype):
        article = "an" if label[0] in "aeiou" else "a"
        raise TypeRelError(f"{op}: {what + ' ' if what else ''}expects {article} {label}, got {t}")
    return t
