"""Linear quantization (TVM's `qnn.quantize` and `qnn.dequantize`): the conversions between
real numbers and int8/uint8/int16/uint16 codes `q = saturate(round(x / scale) + zero_point)`,
`x = (q - zero_point) * scale`. Integer matrix products and convolutions of the codes are the
plain `nn.dense` / `nn.batch_matmul` / `nn.conv2d` with `out_dtype="int32"`.

`scale` and `zero_point` are scalars (per tensor), vectors along `axis` (per channel), or
tensors of the data's rank that broadcast to it (blocked quantization, with each scale
repeated over its block). Rounding is half to even (as ONNX and onnxruntime; what TVM's
quantize does on LLVM targets), saturating at the code range; a NaN quantizes like 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from irtool.ir.expr import AttrValue
from irtool.ir.types import TensorType, Type
from irtool.ops.attrs import one_of
from irtool.ops.definitions._common import (as_array, broadcast_shapes, check_domain, norm_axis, np_dtype,
                                            tensor_arg)
from irtool.ops.registry import AttrField, OpDef, OpPattern, TypeRelError, Value, register

Attrs = Mapping[str, AttrValue]

CODES = ("int8", "uint8", "int16", "uint16")
# round(x / scale) is clamped to this magnitude before it becomes an int32 and the zero point is
# added, so that every code saturates without overflowing (codes and zero points are 16-bit).
ROUNDED_LIMIT = 1 << 17


def code_range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def real_dtype(*dtypes: str) -> str:
    """The float type the arithmetic runs in, as numpy promotes the operands: the widest float
    (an integer operand makes it float64, as numpy's int32 / float32 does; float16 with
    bfloat16 meet in float32)."""
    widths = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}
    if any(d not in widths for d in dtypes):
        return "float64"
    widest = max(dtypes, key=lambda d: widths[d])
    if widths[widest] == 16 and len(set(dtypes)) > 1:
        return "float32"
    return widest


def along_axis(param: Sequence[object]) -> bool:
    """Whether a scale or zero point of shape `param` is one value per channel of the `axis`
    (a vector of more than one value); any other shape broadcasts with the data."""
    return len(param) == 1 and param[0] != 1


def _param(op: str, data: TensorType, t: TensorType, axis: int, what: str) -> None:
    if t.ndim == 0 or t.shape == (1,):
        return
    if along_axis(t.shape):
        if data.ndim == 0 or t.shape[0] != data.shape[axis]:
            raise TypeRelError(f"{op}: a {what} of {t.shape[0]} values for axis {axis} of {data}")
        return
    if t.ndim != data.ndim or broadcast_shapes(op, data, t) != data.shape:
        raise TypeRelError(f"{op}: the {what} {t} neither is one value per channel nor broadcasts to {data}")


def _params_rel(op: str, types: Sequence[Type], attrs: Attrs) -> tuple[TensorType, TensorType, TensorType, int]:
    data = tensor_arg(op, types, 0, "data")
    scale = check_domain(op, tensor_arg(op, types, 1, "scale"), "float", "scale")
    zero = check_domain(op, tensor_arg(op, types, 2, "zero_point"), "integer", "zero_point")
    axis = norm_axis(op, int(attrs["axis"]), max(data.ndim, 1))  # type: ignore[arg-type]
    _param(op, data, scale, axis, "scale")
    _param(op, data, zero, axis, "zero_point")
    return data, scale, zero, axis


def expand_param(x: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """A scale or zero point as an array that broadcasts to the data's `shape`."""
    if along_axis(x.shape):
        dims = [1] * len(shape)
        dims[axis] = x.shape[0]
        return x.reshape(dims)
    return x.reshape(()) if x.ndim == 1 else x


def _quantize_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "qnn.quantize"
    data, scale, zero, _ = _params_rel(op, types, attrs)
    check_domain(op, data, "numeric", "data")
    return TensorType(data.shape, str(attrs["out_dtype"]))


def _quantize(args: list[Value], attrs: Attrs) -> Value:
    x, scale, zero = args
    axis = int(attrs["axis"]) % max(x.ndim, 1)  # type: ignore[arg-type]
    real = np_dtype(real_dtype(str(x.dtype), str(scale.dtype)))
    with np.errstate(all="ignore"):
        rounded = np.rint(x.astype(real) / expand_param(scale, x.shape, axis).astype(real))
    rounded = np.clip(np.where(np.isnan(rounded), 0, rounded), -ROUNDED_LIMIT, ROUNDED_LIMIT).astype(np.int32)
    low, high = code_range(str(attrs["out_dtype"]))
    codes = np.clip(rounded + expand_param(zero, x.shape, axis).astype(np.int32), low, high)
    return as_array(codes, str(attrs["out_dtype"]))


register(OpDef("qnn.quantize", 3,
               (AttrField("axis", "int", -1, doc="the channel axis of a per-channel scale"),
                AttrField("out_dtype", "dtype", "int8", check=one_of(*CODES))),
               OpPattern.BROADCAST, _quantize_rel, _quantize,
               description="saturate(round_half_even(data / scale) + zero_point) as out_dtype codes"))


def _dequantize_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "qnn.dequantize"
    data, scale, zero, _ = _params_rel(op, types, attrs)
    check_domain(op, data, "integer", "data")
    if zero.dtype != data.dtype:
        raise TypeRelError(f"{op}: the zero point {zero} has another dtype than the data {data}")
    out = str(attrs["out_dtype"]) or scale.dtype
    if not out.startswith(("float", "bfloat")):
        raise TypeRelError(f"{op}: out_dtype must be a float type, got {out}")
    return TensorType(data.shape, out)


def _dequantize(args: list[Value], attrs: Attrs) -> Value:
    x, scale, zero = args
    axis = int(attrs["axis"]) % max(x.ndim, 1)  # type: ignore[arg-type]
    real = np_dtype(real_dtype("float32", str(scale.dtype)))
    centered = x.astype(real) - expand_param(zero, x.shape, axis).astype(real)
    return as_array(centered * expand_param(scale, x.shape, axis).astype(real), str(attrs["out_dtype"]) or str(scale.dtype))


register(OpDef("qnn.dequantize", 3,
               (AttrField("axis", "int", -1, doc="the channel axis of a per-channel scale"),
                AttrField("out_dtype", "dtype", "", doc="the scale's dtype when empty")),
               OpPattern.BROADCAST, _dequantize_rel, _dequantize,
               description="(data - zero_point) * scale, in float32 (or the scale's wider type)"))
