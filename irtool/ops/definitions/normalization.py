"""Layer and group normalisation (TVM's `nn.layer_norm`, `nn.group_norm`): statistics per row or
per group, then `(x - mean) / sqrt(var + epsilon) * gamma + beta`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from irtool.ir.expr import AttrValue
from irtool.ir.types import TensorType, Type
from irtool.ops.attrs import positive
from irtool.ops.definitions._common import as_array, check_domain, dims_equal, is_known, norm_axis, tensor_arg
from irtool.ops.registry import AttrField, OpDef, OpPattern, TypeRelError, Value, register

Attrs = Mapping[str, AttrValue]


def _affine_vectors(op: str, types: Sequence[Type], x: TensorType, axis: int) -> None:
    for i, what in ((1, "gamma"), (2, "beta")):
        t = tensor_arg(op, types, i, what)
        if t.ndim != 1 or not dims_equal(t.shape[0], x.shape[axis]) or t.dtype != x.dtype:
            raise TypeRelError(f"{op}: {what} must be a {x.dtype} vector of the {x.shape[axis]} entries "
                               f"of axis {axis} of {x}, got {t}")


def normalized(x: np.ndarray, axes: tuple[int, ...], epsilon: float) -> np.ndarray:
    """(x - mean) * 1 / sqrt(var + epsilon) over `axes`, in x's dtype (the native order)."""
    dt = x.dtype.type
    mean = np.mean(x, axis=axes, keepdims=True, dtype=x.dtype)
    centered = x - mean
    var = np.mean(centered * centered, axis=axes, keepdims=True, dtype=x.dtype)
    return centered * (dt(1) / np.sqrt(var + dt(epsilon)))


def _along(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    return v.reshape([-1 if a == axis else 1 for a in range(ndim)])


def _affine(out: np.ndarray, args: list[Value], attrs: Attrs, axis: int) -> np.ndarray:
    _, gamma, beta = args
    if attrs["scale"]:
        out = out * _along(gamma, axis, out.ndim)
    if attrs["center"]:
        out = out + _along(beta, axis, out.ndim)
    return out


def _layer_norm_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.layer_norm"
    x = check_domain(op, tensor_arg(op, types, 0, "data"), "float")
    axis = norm_axis(op, int(attrs["axis"]), x.ndim)  # type: ignore[arg-type]
    _affine_vectors(op, types, x, axis)
    if x.shape[axis] == 0:
        raise TypeRelError(f"{op}: axis {axis} of {x} has no elements to normalise")
    return x


def _layer_norm(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    out = normalized(x, (axis,), float(attrs["epsilon"]))  # type: ignore[arg-type]
    return as_array(_affine(out, args, attrs, axis), str(x.dtype))


NORM_ATTRS = (AttrField("epsilon", "float", 1e-5), AttrField("center", "bool", True),
              AttrField("scale", "bool", True))
register(OpDef("nn.layer_norm", 3, (AttrField("axis", "int", -1),) + NORM_ATTRS, OpPattern.OUT_ELEMWISE_FUSABLE,
               _layer_norm_rel, _layer_norm,
               description="normalises along one axis: (x - mean) / sqrt(var + epsilon) * gamma + beta"))


def _group_norm_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.group_norm"
    x = check_domain(op, tensor_arg(op, types, 0, "data"), "float")
    axis = norm_axis(op, int(attrs["axis"]), x.ndim)  # type: ignore[arg-type]
    _affine_vectors(op, types, x, axis)
    groups = int(attrs["num_groups"])  # type: ignore[arg-type]
    channels = x.shape[axis]
    if is_known(channels) and channels % groups:  # type: ignore[operator]
        raise TypeRelError(f"{op}: {channels} channels (axis {axis} of {x}) do not split into {groups} groups")
    return x


def _group_norm(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    groups = int(attrs["num_groups"])  # type: ignore[arg-type]
    # (..., G, C/G, ...): the statistics of a group cover its channels and every later axis.
    split = x.reshape(x.shape[:axis] + (groups, x.shape[axis] // groups) + x.shape[axis + 1:])
    out = normalized(split, tuple(range(axis + 1, split.ndim)), float(attrs["epsilon"]))  # type: ignore[arg-type]
    return as_array(_affine(out.reshape(x.shape), args, attrs, axis), str(x.dtype))


register(OpDef("nn.group_norm", 3, (AttrField("num_groups", "int", required=True, check=positive),
                                    AttrField("axis", "int", 1)) + NORM_ATTRS,
               OpPattern.OUT_ELEMWISE_FUSABLE, _group_norm_rel, _group_norm,
               description="normalises groups of channels (and every later axis) of data"))
