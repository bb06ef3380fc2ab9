"""Buffer flattening: every multi-dimensional (or strided) buffer becomes a 1-d buffer and each
access `%A[i, j]` becomes `%A[i * s0 + j * s1]` with the buffer's strides (row-major when it
has none). The flat buffer is as long as the largest offset + 1, so explicit strides with gaps
(padded rows) keep their layout. Dtype, alignment and scope are kept; vector-dtype buffers stay
vectors per element; 0-d and dense 1-d buffers are already flat and stay as they are.

Offsets are int32 unless an index is 64-bit (or unsigned 32-bit) or the buffer has more than
2**31 - 1 elements; then int64. Vector indices (ramps) keep their lanes; the scalar dimensions
are broadcast to them and the simplifier folds `ramp * broadcast + broadcast` back into a ramp.
"""

from __future__ import annotations

from irtool.ir.tir import (Allocate, Broadcast, Buffer, BufferLoad, BufferStore, Cast, PrimExpr, PrimFunc, Stmt,
                           BinaryOp, element_of, lanes_of, with_lanes)
from irtool.core.diagnostics import DiagnosticError
from irtool.tir_transform.fold import make_const
from irtool.tir_transform.mutator import TirRewriter
from irtool.tir_transform.simplify import simplify_expr

_INT32_MAX = 2**31 - 1
_WIDE_INDEX = ("int64", "uint32", "uint64")


def layout_strides(buf: Buffer) -> tuple[int, ...]:
    """The buffer's strides in elements: explicit ones, or dense row-major."""
    if buf.strides is not None:
        return buf.strides
    strides: list[int] = []
    step = 1
    for dim in reversed(buf.shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def flat_extent(buf: Buffer) -> int:
    """Elements a flat buffer needs to hold every element of `buf` at its strided offset."""
    if any(d == 0 for d in buf.shape):
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(buf.shape, layout_strides(buf)))


def needs_flattening(buf: Buffer) -> bool:
    return len(buf.shape) > 1 or (len(buf.shape) == 1 and layout_strides(buf) != (1,))


def linear_index(indices: tuple[PrimExpr, ...], strides: tuple[int, ...], extent: int) -> PrimExpr:
    """`sum(index_k * stride_k)` in one integer dtype (see the module docstring)."""
    wide = extent > _INT32_MAX or any(element_of(i.dtype) in _WIDE_INDEX for i in indices)
    base = "int64" if wide else "int32"
    lanes = max(lanes_of(i.dtype) for i in indices)
    dtype = with_lanes(base, lanes)
    total: PrimExpr | None = None
    for index, stride in zip(indices, strides):
        if element_of(index.dtype) != base:
            index = Cast(with_lanes(base, lanes_of(index.dtype)), index, index.span)
        if lanes > 1 and lanes_of(index.dtype) == 1:
            index = Broadcast(index, lanes, index.span)
        term = BinaryOp("mul", index, make_const(stride, dtype, index.span), index.span)
        total = term if total is None else BinaryOp("add", total, term, index.span)
    assert total is not None, "a flattened buffer has at least one dimension"
    return simplify_expr(total)


class _Flattener(TirRewriter):
    def __init__(self) -> None:
        super().__init__()
        # id of an original buffer -> (the original, its flat replacement)
        self.flat: dict[int, tuple[Buffer, Buffer]] = {}

    def add(self, buf: Buffer) -> Buffer:
        if not needs_flattening(buf):
            return buf
        if any(s < 0 for s in layout_strides(buf)):
            raise DiagnosticError(f"cannot flatten buffer `%{buf.name}`: it has a negative stride", buf.span)
        new = Buffer(buf.name, (flat_extent(buf),), buf.dtype, None, buf.align, buf.scope, buf.span)
        self.flat[id(buf)] = (buf, new)
        return new

    def access(self, buf: Buffer, indices: tuple[PrimExpr, ...]) -> tuple[Buffer, tuple[PrimExpr, ...]]:
        entry = self.flat.get(id(buf))
        if entry is None:
            return buf, indices
        old, new = entry
        return new, (linear_index(indices, layout_strides(old), new.shape[0]),)

    def visit_expr(self, node: PrimExpr) -> PrimExpr:
        if isinstance(node, BufferLoad) and id(node.buffer) in self.flat:
            buf, indices = self.access(node.buffer, node.indices)
            return BufferLoad(buf, indices, node.span)
        return node

    def pre(self, stmt: Stmt) -> Stmt | None:
        if isinstance(stmt, Allocate):
            self.add(stmt.buffer)
        return stmt

    def post(self, original: Stmt, rebuilt: Stmt) -> Stmt | None:
        if isinstance(rebuilt, BufferStore) and id(rebuilt.buffer) in self.flat:
            buf, indices = self.access(rebuilt.buffer, rebuilt.indices)
            return BufferStore(buf, indices, rebuilt.value, rebuilt.span)
        if isinstance(rebuilt, Allocate) and id(rebuilt.buffer) in self.flat:
            return Allocate(self.flat[id(rebuilt.buffer)][1], rebuilt.body, rebuilt.span)
        return rebuilt


def flatten_buffers(func: PrimFunc, params: bool = True) -> PrimFunc:
    """`func` with its allocated buffers (and, with `params`, its parameters) flattened."""
    flattener = _Flattener()
    new_params = tuple(flattener.add(p) if params else p for p in func.params)
    body = flattener.rewrite_stmt(func.body)
    if body is func.body and all(a is b for a, b in zip(new_params, func.params)):
        return func
    return PrimFunc(new_params, func.body if body is None else body, func.attrs, func.span)
