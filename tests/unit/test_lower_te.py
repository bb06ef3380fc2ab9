"""The tensor-expression builder: where reductions are computed, what is shared, what is staged."""

from __future__ import annotations

import numpy as np

from irtool.eval.tir_interp import run_primfunc
from irtool.ir.expr import Attrs
from irtool.ir.tir import (
    Allocate,
    BinaryOp,
    Broadcast,
    Buffer,
    BufferLoad,
    BufferStore,
    For,
    PrimFunc,
    Ramp,
    children,
)
from irtool.lower.schedules import RegisterTile, dense_tiled
from irtool.lower.te import (
    Builder,
    Compute,
    Element,
    Idx,
    Placeholder,
    Reduce,
    Scheduled,
    acc_load,
    acc_store,
    all_of,
    clamp,
    const,
    imm,
    in_range,
    select,
    sub,
)


def _row_sum(x: Placeholder) -> Reduce:
    def fbody(ctx: Element, idx: Idx):
        acc = ctx.accumulator("float32", imm(0, "float32"), "s")
        ctx.loop((x.shape[1],), ("k",), lambda r: acc_store(acc, BinaryOp("add", acc_load(acc), ctx.load(x, (idx[0], r[0])))))
        return acc_load(acc)
    return Reduce((x.shape[0],), "float32", fbody, "rowsum")


def _build(outputs: list[tuple[object, Buffer]], inputs: list[Buffer]) -> PrimFunc:
    body = Builder().function_body(outputs)  # type: ignore[arg-type]
    return PrimFunc([*inputs, *(b for _, b in outputs)], body, Attrs({"num_outputs": len(outputs)}))


def _nodes(root: object) -> list[object]:
    """Every node under a PrimFunc's body (or under any TIR node)."""
    out, stack = [], [root.body if isinstance(root, PrimFunc) else root]
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


# ---- Scheduled tensors: epilogues fused into the tile's store, or a stage when read elsewhere

TILE = RegisterTile(4, 3, vectors=2)   # 3 rows x 2 vectors of 4 lanes: 10 columns leave a 2-lane tail


def _dense_case() -> tuple[Scheduled, list[Buffer], list[np.ndarray]]:
    xb, wb, bb = Buffer("x", (7, 5), "float32"), Buffer("w", (10, 5), "float32"), Buffer("bias", (10,), "float32")
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(b.shape).astype("float32") for b in (xb, wb, bb)]
    t = dense_tiled(Placeholder(xb), Placeholder(wb), "float32", TILE)
    assert t is not None
    return t, [xb, wb, bb], arrays


def _globals(func: PrimFunc) -> list[tuple[int, ...]]:
    return [n.buffer.shape for n in _nodes(func) if isinstance(n, Allocate) and n.buffer.scope == "global"]


def test_epilogue_read_at_the_output_index_runs_on_the_tile_before_its_store() -> None:
    t, inputs, (x, w, bias) = _dense_case()
    b = Placeholder(inputs[2])
    out = Compute(t.shape, "float32", lambda ctx, i: BinaryOp(
        "max", BinaryOp("add", ctx.load(t, i), ctx.load(b, (i[1],))), imm(0, "float32")))
    o = Buffer("o", t.shape, "float32")
    func = _build([(out, o)], inputs)
    assert _globals(func) == [(5, 8)]   # only the scratch for one packed weight panel (K x NR): no (7, 10) stage
    stores = [n for n in _nodes(func) if isinstance(n, BufferStore) and n.buffer is o]
    # one store per tile slot, vector ones indexed by a ramp; the bias is a vector load there
    assert any(isinstance(s.indices[-1], Ramp) for s in stores)
    bias_loads = [n for s in stores for n in _nodes(s.value) if isinstance(n, BufferLoad) and n.buffer is inputs[2]]
    assert bias_loads and any(isinstance(ld.indices[0], Ramp) for ld in bias_loads)
    y = np.full(t.shape, np.nan, np.float32)
    run_primfunc(func, [x, w, bias, y])
    np.testing.assert_allclose(y, np.maximum(x @ w.T + bias, 0), rtol=1e-5, atol=1e-5)


def test_per_row_operand_is_broadcast_into_the_vector_epilogue() -> None:
    t, inputs, (x, w, _) = _dense_case()
    rb = Buffer("r", (7,), "float32")
    r = np.arange(7, dtype="float32")
    r_in = Placeholder(rb)
    out = Compute(t.shape, "float32", lambda ctx, i: BinaryOp("mul", ctx.load(t, i), ctx.load(r_in, (i[0],))))
    o = Buffer("o", t.shape, "float32")
    func = _build([(out, o)], [*inputs[:2], rb])
    assert any(isinstance(n, Broadcast) and isinstance(n.value, BufferLoad) and n.value.buffer is rb
               for n in _nodes(func))
    y = np.full(t.shape, np.nan, np.float32)
    run_primfunc(func, [x, w, r, y])
    np.testing.assert_allclose(y, (x @ w.T) * r[:, None], rtol=1e-5, atol=1e-5)


def test_scheduled_tensor_read_at_another_index_is_a_stage() -> None:
    t, inputs, (x, w, _) = _dense_case()
    # the transpose reads element (j, i) at output (i, j): not the tile's own index
    out = Compute((10, 7), "float32",
                  lambda ctx, i: BinaryOp("add", ctx.load(t, (i[1], i[0])), ctx.load(t, (i[1], i[0]))))
    o = Buffer("o", (10, 7), "float32")
    func = _build([(out, o)], inputs[:2])
    assert (7, 10) in _globals(func)
    y = np.full((10, 7), np.nan, np.float32)
    run_primfunc(func, [x, w, y])
    np.testing.assert_allclose(y, 2 * (x @ w.T).T, rtol=1e-5, atol=1e-5)


def test_scheduled_tensor_read_by_two_outputs_is_computed_by_one_fused_nest_and_one_stage() -> None:
    t, inputs, (x, w, _) = _dense_case()
    relu = Compute(t.shape, "float32", lambda ctx, i: BinaryOp("max", ctx.load(t, i), imm(0, "float32")))
    neg = Compute(t.shape, "float32", lambda ctx, i: BinaryOp("sub", imm(0, "float32"), ctx.load(t, i)))
    o1, o2 = Buffer("o1", t.shape, "float32"), Buffer("o2", t.shape, "float32")
    func = _build([(relu, o1), (neg, o2)], inputs[:2])
    assert _globals(func).count((7, 10)) == 1
    y1, y2 = np.full(t.shape, np.nan, np.float32), np.full(t.shape, np.nan, np.float32)
    run_primfunc(func, [x, w, y1, y2])
    ref = x @ w.T
    np.testing.assert_allclose(y1, np.maximum(ref, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y2, -ref, rtol=1e-5, atol=1e-5)
