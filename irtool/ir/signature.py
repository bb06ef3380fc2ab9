"""The Relay type of a lowered PrimFunc, which `call_lowered(@f, (args))` is checked against."""

from __future__ import annotations

import math
from collections.abc import Sequence

from irtool.ir.tir import PrimFunc
from irtool.ir.types import Any, FuncType, TensorType, TupleType, Type

# The PrimFunc attribute of a batch-1 kernel (irtool/lower/batch.py): per buffer (inputs,
# constants, outputs) the length of its *row prefix* on the kernel, the leading axes whose
# extents multiply to the run-time row count which codegen steps it by (1: axis 0 is the batch,
# or the group's whole prefix flattened into one axis), 0 when every row shares the buffer.
BATCH_BUFFERS = "batch_buffers"
# Per buffer, the extent of each row-prefix axis of the group's Relay type as an `Extent`; on the
# batch-1 kernel, whose buffers have 1 on those axes (or one axis of 1 for all of them). An
# input's `?` on axis a of buffer b is `(1, b, a)`.
BATCH_DIMS = "batch_dims"
# Pairs of extents that must be equal at run time (else status 5): operands whose prefixes an
# operator pairs row by row, and the row counts of the buffers.
BATCH_CHECKS = "batch_checks"
# On a batch-1 kernel: the name of the same group's kernel at `batch_tile_rows` rows, which runs
# first on whole tiles of the batch.
BATCH_TILE_KERNEL, BATCH_TILE_ROWS = "batch_tile", "batch_tile_rows"

def num_outputs(func: PrimFunc) -> int:
    """How many trailing parameters are outputs (the `num_outputs` attribute; 1 by default)."""
    value = func.attrs.get("num_outputs", 1)
    return int(value) if isinstance(value, int) else 1


# A run-time extent: `(factor, b1, a1, b2, a2, ...)`, the static factor times axis a_i of input
# buffer b_i for each pair (the product of an input's prefix when a reshape merges it).
Extent = tuple[int, ...]


def extent_product(extents: Sequence[Extent]) -> Extent:
    """The product of extents, its input dims in sorted order (so equal products compare equal)."""
    pairs = sorted(e[k:k + 2] for e in extents for k in range(1, len(e), 2))
    return (math.prod(e[0] for e in extents), *(v for pair in pairs for v in pair))


def batch_flags(func: PrimFunc) -> tuple[int, ...]:
    """Per buffer, the length of its row prefix on a batch-1 kernel (`batch_buffers`, set by
    irtool/lower/batch.py), 0 for a buffer every row shares; all 0 for a kernel of static shapes."""
    flags = func.attrs.get(BATCH_BUFFERS)
    if not isinstance(flags, tuple):
        return (0,) * len(func.params)
    return tuple(max(0, int(f)) for f in flags)


def _extents(value: object) -> tuple[Extent, ...]:
    return tuple(tuple(int(v) for v in e) for e in value) if isinstance(value, tuple) else ()


def batch_dims(func: PrimFunc) -> tuple[tuple[Extent, ...], ...]:
    """Per buffer, the extents of its row-prefix axes (`batch_dims`); a buffer with a prefix but
    no recorded extents has `?` on each of them with no way to compute it (empty extents)."""
    value = func.attrs.get(BATCH_DIMS)
    dims = tuple(_extents(v) for v in value) if isinstance(value, tuple) else ()
    return tuple(dims[k] if k < len(dims) and (len(dims[k]) == n or n == 1 and dims[k]) else ((),) * n
                 for k, n in enumerate(batch_flags(func)))


def batch_checks(func: PrimFunc) -> tuple[tuple[Extent, Extent], ...]:
    """The pairs of extents a call of a batch-1 kernel compares before running it."""
    value = func.attrs.get(BATCH_CHECKS)
    pairs = [_extents(pair) for pair in value] if isinstance(value, tuple) else []
    return tuple((p[0], p[1]) for p in pairs if len(p) == 2)


def primfunc_type(func: PrimFunc) -> FuncType:
    """`fn (inputs...) -> output` (a tuple of the outputs when there are several); a row-prefix
    axis of a batched buffer is `?` unless its extent is static."""
    k = num_outputs(func)
    tensors = [TensorType((*(e[0] if len(e) == 1 else Any() for e in prefix), *p.shape[n:]), p.dtype)
               for p, prefix, n in zip(func.params, batch_dims(func), batch_flags(func))]
    inputs, outputs = tensors[:len(tensors) - k], tensors[len(tensors) - k:]
    ret: Type = outputs[0] if k == 1 else TupleType(tuple(outputs))
    return FuncType(tuple(inputs), ret)
