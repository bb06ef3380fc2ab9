"""Reductions over a set of axes (`axis`, `keepdims`, `exclude` as in TVM), built by one factory."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from irtool.ir.expr import AttrValue
from irtool.ir.types import TensorType, Type
from irtool.ops.definitions._common import as_array, check_domain, norm_axis, tensor_arg
from irtool.ops.registry import AttrField, OpDef, OpPattern, TypeRelError, Value, register

Attrs = Mapping[str, AttrValue]

REDUCE_ATTRS = (
    AttrField("axis", "int_or_list", None, optional=True, doc="axes to reduce; None = all"),
    AttrField("keepdims", "bool", False),
    AttrField("exclude", "bool", False, doc="reduce every axis except the given ones"),
)
ARG_REDUCE_ATTRS = (
    AttrField("axis", "int_or_list", None, optional=True),
    AttrField("keepdims", "bool", False),
    AttrField("select_last_index", "bool", False),
    AttrField("exclude", "bool", False),
)


def reduce_axes(op: str, attrs: Attrs, ndim: int) -> tuple[int, ...]:
    """The sorted axes a reduction removes."""
    axis = attrs["axis"]
    if axis is None:
        given: tuple[int, ...] = ()
        chosen = tuple(range(ndim))
    else:
        given = (axis,) if isinstance(axis, int) else tuple(axis)  # type: ignore[arg-type]
        normalized = [norm_axis(op, a, ndim) for a in given]
        if len(set(normalized)) != len(normalized):
            raise TypeRelError(f"{op}: axis {list(given)} names an axis twice")
        chosen = tuple(sorted(normalized))
    if attrs["exclude"] and axis is not None:  # TVM ignores `exclude` without `axis`
        return tuple(i for i in range(ndim) if i not in chosen)
    return chosen


def reduce_shape(op: str, x: TensorType, attrs: Attrs) -> tuple:
    axes = reduce_axes(op, attrs, x.ndim)
    if attrs["keepdims"]:
        return tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return tuple(d for i, d in enumerate(x.shape) if i not in axes)


# Reductions that have no value over no elements (numpy raises at run time, and native code
# would read past an empty buffer), refused at type inference in every backend.
NO_IDENTITY = ("max", "min", "argmax", "argmin", "nn.global_max_pool2d")
MEANS = ("mean", "nn.global_avg_pool2d")


def check_not_empty(op: str, x: TensorType, axes: Sequence[int]) -> None:
    """Refuses `op` over reduced axes with no elements when its result would be undefined: a
    reduction without an identity, or an integer mean (0 / 0). A float mean of nothing is NaN
    (as numpy's) and a sum or product is its identity."""
    empty = [a for a in axes if isinstance(x.shape[a], int) and x.shape[a] == 0]
    if not empty:
        return
    where = f"axis {empty[0]} of {x.dtype} tensor of shape {tuple(x.shape)} has no elements"
    if op in NO_IDENTITY:
        raise TypeRelError(f"{op}: {where}; {op} of no elements is undefined (it has no identity)")
    if op in MEANS and x.dtype.startswith(("int", "uint", "bool")):
        raise TypeRelError(f"{op}: {where}; an integer mean of no elements is undefined (0 / 0)")


def _reduce_rel(name: str, out_dtype: str | None,
                domain: str = "any") -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        x = check_domain(name, tensor_arg(name, types, 0), domain)
        check_not_empty(name, x, reduce_axes(name, attrs, x.ndim))
        return TensorType(reduce_shape(name, x, attrs), out_dtype or x.dtype)
    return rel


def mean_in_dtype(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """The mean over `axis`, computed in `x`'s dtype. Over no elements it is the canonical quiet
    NaN (positive, as the native code's constant; numpy's 0 / 0 gives the CPU's, which on x86 is
    negative), so both backends agree bit for bit; integer means of nothing are refused."""
    count = int(np.prod([x.shape[a] for a in axis]))
    total = np.sum(x, axis=axis, dtype=x.dtype, keepdims=keepdims)
    if count == 0:
        return np.full(total.shape, np.nan, x.dtype)
    if np.issubdtype(x.dtype, np.integer):
        return np.fix(total / count)  # TVM divides integers with truncation
    return total / x.dtype.type(count)


# name -> numpy reduction taking (x, axis tuple, keepdims)
REDUCTIONS: dict[str, Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]] = {
    "sum": lambda x, ax, k: np.sum(x, axis=ax, dtype=x.dtype, keepdims=k),
    "prod": lambda x, ax, k: np.prod(x, axis=ax, dtype=x.dtype, keepdims=k),
    "max": lambda x, ax, k: np.max(x, axis=ax, keepdims=k),
    "min": lambda x, ax, k: np.min(x, axis=ax, keepdims=k),
    "mean": mean_in_dtype,
}


def _reduce_compute(name: str, fn: Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]
                    ) -> Callable[[list[Value], Attrs], Value]:
    def compute(args: list[Value], attrs: Attrs) -> Value:
        x = args[0]
        axes = reduce_axes(name, attrs, x.ndim)
        return as_array(fn(x, axes, bool(attrs["keepdims"])), str(x.dtype))
    return compute


for _name, _fn in REDUCTIONS.items():
    _domain = "any" if _name in ("max", "min") else "numeric"
    register(OpDef(_name, 1, REDUCE_ATTRS, OpPattern.COMM_REDUCE, _reduce_rel(_name, None, _domain),
                   _reduce_compute(_name, _fn), description=f"{_name} over axes"))


def _arg_reduce_compute(name: str, pick: Callable[..., np.ndarray]
                        ) -> Callable[[list[Value], Attrs], Value]:
    """Index of the extreme element over the reduced axes, flattened row-major (int32)."""
    def compute(args: list[Value], attrs: Attrs) -> Value:
        x = args[0]
        axes = reduce_axes(name, attrs, x.ndim)
        kept = [i for i in range(x.ndim) if i not in axes]
        moved = np.transpose(x, kept + list(axes))
        flat = moved.reshape(moved.shape[:len(kept)] + (-1,))
        if attrs["select_last_index"]:
            index = flat.shape[-1] - 1 - pick(flat[..., ::-1], axis=-1)
        else:
            index = pick(flat, axis=-1)
        out_shape = reduce_shape(name, TensorType(x.shape, str(x.dtype)), attrs)
        return as_array(index, "int32").reshape(out_shape)
    return compute


register(OpDef("argmax", 1, ARG_REDUCE_ATTRS, OpPattern.COMM_REDUCE, _reduce_rel("argmax", "int32"),
               _arg_reduce_compute("argmax", np.argmax), description="index of the maximum"))
register(OpDef("argmin", 1, ARG_REDUCE_ATTRS, OpPattern.COMM_REDUCE, _reduce_rel("argmin", "int32"),
               _arg_reduce_compute("argmin", np.argmin), description="index of the minimum"))
