"""The Relay type of a lowered PrimFunc, which `call_lowered(@f, (args))` is checked against."""

from __future__ import annotations

from irtool.ir.tir import PrimFunc
from irtool.ir.types import FuncType, TensorType, TupleType, Type


def num_outputs(func: PrimFunc) -> int:
    """How many trailing parameters are outputs (the `num_outputs` attribute; 1 by default)."""
    value = func.attrs.get("num_outputs", 1)
    return int(value) if isinstance(value, int) else 1


def primfunc_type(func: PrimFunc) -> FuncType:
    """`fn (inputs...) -> output` (a tuple of the outputs when there are several)."""
    k = num_outputs(func)
    tensors = [TensorType(p.shape, p.dtype) for p in func.params]
    inputs, outputs = tensors[:len(tensors) - k], tensors[len(tensors) - k:]
    ret: Type = outputs[0] if k == 1 else TupleType(tuple(outputs))
    return FuncType(tuple(inputs), ret)
