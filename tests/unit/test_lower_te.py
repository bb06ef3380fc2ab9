"""The tensor-expression builder: where reductions are computed, what is shared, what is staged."""

from __future__ import annotations

import numpy as np

from irtool.eval.tir_interp import run_primfunc
from irtool.ir.expr import Attrs
from irtool.ir.tir import Allocate, BinaryOp, Buffer, BufferStore, For, PrimFunc, children
from irtool.lower.te import (Builder, Compute, Element, Idx, Placeholder, Reduce, acc_load, acc_store, all_of, clamp,
                             const, imm, in_range, select, sub)


def _row_sum(x: Placeholder) -> Reduce:
    def fbody(ctx: Element, idx: Idx):
        acc = ctx.accumulator("float32", imm(0, "float32"), "s")
        ctx.loop((x.shape[1],), ("k",), lambda r: acc_store(acc, BinaryOp("add", acc_load(acc), ctx.load(x, (idx[0], r[0])))))
        return acc_load(acc)
    return Reduce((x.shape[0],), "float32", fbody, "rowsum")


def _build(outputs: list[tuple[object, Buffer]], inputs: list[Buffer]) -> PrimFunc:
    body = Builder().function_body(outputs)  # type: ignore[arg-type]
    return PrimFunc([*inputs, *(b for _, b in outputs)], body, Attrs({"num_outputs": len(outputs)}))


def _nodes(func: PrimFunc) -> list[object]:
    out, stack = [], [func.body]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(children(n))
    return out


def test_reduction_read_at_the_nest_index_accumulates_inline() -> None:
    a = Buffer("a", (3, 4), "float32")
    x = Placeholder(a)
    s = _row_sum(x)
    # relu(rowsum) + rowsum: the same accumulator serves both reads.
    out = Compute((3,), "float32", lambda ctx, i: BinaryOp("add", BinaryOp("max", ctx.load(s, i), imm(0, "float32")),
                                                            ctx.load(s, i)))
    func = _build([(out, Buffer("o", (3,), "float32"))], [a])
    allocs = [n for n in _nodes(func) if isinstance(n, Allocate)]
    assert [(b.buffer.scope, b.buffer.shape) for b in allocs] == [("local", (1,))]
    data = np.arange(12, dtype="float32").reshape(3, 4) - 5
    o = np.zeros(3, "float32")
    run_primfunc(func, [data, o])
    sums = data.sum(axis=1)
    np.testing.assert_array_equal(o, np.maximum(sums, 0) + sums)


def test_reduction_read_elsewhere_is_one_stage_shared_by_every_reader() -> None:
    a = Buffer("a", (3, 4), "float32")
    x = Placeholder(a)
    s = _row_sum(x)
    # x / rowsum, broadcast over the row: the sum is a (3,) stage computed once.
    out = Compute((3, 4), "float32", lambda ctx, i: BinaryOp("div", ctx.load(x, i), ctx.load(s, (i[0],))))
    func = _build([(out, Buffer("o", (3, 4), "float32")), (s, Buffer("o2", (3,), "float32"))], [a])
    stages = [n.buffer for n in _nodes(func) if isinstance(n, Allocate) and n.buffer.scope == "global"]
    assert [b.shape for b in stages] == [(3,)]
    data = np.arange(1, 13, dtype="float32").reshape(3, 4)
    o, o2 = np.zeros((3, 4), "float32"), np.zeros(3, "float32")
    run_primfunc(func, [data, o, o2])
    np.testing.assert_allclose(o, data / data.sum(axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(o2, data.sum(axis=1))


def test_stage_tensors_are_materialized_once() -> None:
    a = Buffer("a", (4,), "float32")
    x = Placeholder(a)
    def pad(ctx: Element, i: Idx):
        inside = all_of(in_range(sub(i[0], 1), 0, 4))
        return select(inside, ctx.load(x, (clamp(sub(i[0], 1), 0, 3),)), imm(0, "float32"))
    padded = Compute((6,), "float32", pad, "pad", stage=True)
    out = Compute((4,), "float32", lambda ctx, i: BinaryOp("add", ctx.load(padded, (i[0],)),
                                                            ctx.load(padded, (BinaryOp("add", i[0], const(2)),))))
    func = _build([(out, Buffer("o", (4,), "float32"))], [a])
    stores = [n for n in _nodes(func) if isinstance(n, BufferStore)]
    assert sorted(s.buffer.name for s in stores) == ["o", "pad"]
    assert sum(isinstance(n, For) for n in _nodes(func)) == 2
    data = np.array([1, 2, 3, 4], "float32")
    o = np.zeros(4, "float32")
    run_primfunc(func, [data, o])
    p = np.pad(data, 1)
    np.testing.assert_array_equal(o, p[:4] + p[2:])
