"""Compute rules of `qnn.quantize` and `qnn.dequantize` (definitions/quantize.py): elementwise,
with each scale and zero point read per tensor, per channel or broadcast."""

from __future__ import annotations

from irtool.ir.tir import BinaryOp, Call, PrimExpr
from irtool.ir.types import Type
from irtool.lower.rules._rule import Attrs, broadcast_index, out_tensor_type, rule, shape_of
from irtool.lower.te import Compute, Element, Idx, Tensor, cast, imm, select
from irtool.ops.definitions.quantize import ROUNDED_LIMIT, along_axis, code_range, real_dtype


def _param(ctx: Element, t: Tensor, idx: Idx, axis: int) -> PrimExpr:
    """The scale or zero point of the data element at `idx`."""
    if along_axis(t.shape):
        return ctx.load(t, (idx[axis],))
    return ctx.load(t, broadcast_index(t, idx))


def _clamp(x: PrimExpr, low: int, high: int) -> PrimExpr:
    return BinaryOp("min", BinaryOp("max", x, imm(low, x.dtype)), imm(high, x.dtype))


@rule("qnn.quantize")
def _quantize(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, scale, zero = args
    axis = int(attrs["axis"]) % max(x.ndim, 1)  # type: ignore[arg-type]
    dtype = out_tensor_type(out).dtype
    real = real_dtype(x.dtype, scale.dtype)
    low, high = code_range(dtype)

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        q = Call("round", (BinaryOp("div", cast(real, ctx.load(x, idx)), cast(real, _param(ctx, scale, idx, axis))),))
        q = select(BinaryOp("ne", q, q), imm(0, real), q)       # NaN quantizes like 0
        code = BinaryOp("add", cast("int32", _clamp(q, -ROUNDED_LIMIT, ROUNDED_LIMIT)),
                        cast("int32", _param(ctx, zero, idx, axis)))
        return cast(dtype, _clamp(code, low, high))
    return Compute(shape_of(out), dtype, f, "quantize")


@rule("qnn.dequantize")
def _dequantize(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, scale, zero = args
    axis = int(attrs["axis"]) % max(x.ndim, 1)  # type: ignore[arg-type]
    dtype = out_tensor_type(out).dtype
    real = real_dtype("float32", scale.dtype)

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        centered = BinaryOp("sub", cast(real, ctx.load(x, idx)), cast(real, _param(ctx, zero, idx, axis)))
        return cast(dtype, BinaryOp("mul", centered, cast(real, _param(ctx, scale, idx, axis))))
    return Compute(shape_of(out), dtype, f, "dequantize")
