"""The Relay type of a lowered PrimFunc, which `call_lowered(@f, (args))` is checked against."""

from __future__ import annotations

from irtool.ir.tir import PrimFunc
from irtool.ir.types import Any, FuncType, TensorType, TupleType, Type

# The PrimFunc attribute of a batch-1 kernel (irtool/lower/batch.py): one flag per buffer
# (inputs, constants, outputs), 1 when its axis 0 is the run-time batch, which codegen steps
# row by row, 0 when every row shares it.
BATCH_BUFFERS = "batch_buffers"
# On a batch-1 kernel: the name of the same group's kernel at `batch_tile_rows` rows, which runs
# first on whole tiles of the batch.
BATCH_TILE_KERNEL, BATCH_TILE_ROWS = "batch_tile", "batch_tile_rows"

def num_outputs(func: PrimFunc) -> int:
    """How many trailing parameters are outputs (the `num_outputs` attribute; 1 by default)."""
    value = func.attrs.get("num_outputs", 1)
    return int(value) if isinstance(value, int) else 1


def batch_flags(func: PrimFunc) -> tuple[int, ...]:
    """Per buffer, 1 when axis 0 is the run-time batch of a batch-1 kernel (`batch_buffers`, set
    by irtool/lower/batch.py), else 0; all 0 for a kernel of static shapes."""
    flags = func.attrs.get(BATCH_BUFFERS)
    if not isinstance(flags, tuple):
        return (0,) * len(func.params)
    return tuple(int(bool(f)) for f in flags)


def primfunc_type(func: PrimFunc) -> FuncType:
    """`fn (inputs...) -> output` (a tuple of the outputs when there are several); a batched
    buffer's axis 0 is `?`."""
    k = num_outputs(func)
    tensors = [TensorType((Any(), *p.shape[1:]) if batched else p.shape, p.dtype)
               for p, batched in zip(func.params, batch_flags(func))]
    inputs, outputs = tensors[:len(tensors) - k], tensors[len(tensors) - k:]
    ret: Type = outputs[0] if k == 1 else TupleType(tuple(outputs))
    return FuncType(tuple(inputs), ret)
