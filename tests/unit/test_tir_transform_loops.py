"""Loop transformations and buffer flattening: exact output structure for small nests (written
out by hand), results against numpy, and the located errors for illegal requests."""

from __future__ import annotations

import numpy as np
import pytest

from irtool.eval.tir_interp import run_primfunc
from irtool.ir.module import IRModule
from irtool.core.span import Span
from irtool.ir.tir import (Allocate, BinaryOp, Broadcast, Buffer, BufferLoad, BufferStore, FloatImm, For, IfThenElse,
                           IntImm, LetStmt, PrimExpr, PrimFunc, Ramp, Var, seq)
from irtool.ir.tir_equality import tir_structural_equal
from irtool.passes import parse_pipeline, run
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse_module
from irtool.tir_transform.flatten import flat_extent, flatten_buffers
from irtool.tir_transform.loops import reorder, set_kind, split


def i32(v: int) -> IntImm:
    return IntImm(v, "int32")


def op(name: str, a: PrimExpr, b: PrimExpr) -> BinaryOp:
    return BinaryOp(name, a, b)


SPAN = Span("kernel.tir", 3, 3, 3, 20)


def copy_kernel(n: int, begin: int = 0) -> PrimFunc:
    """out[i - begin] = a[i - begin] * 2 for i in [begin, begin + n)."""
    a, out = Buffer("a", (n,), "int32"), Buffer("out", (n,), "int32")
    i = Var("i", "int32")
    idx = i if begin == 0 else op("sub", i, i32(begin))
    return PrimFunc([a, out], For(i, i32(begin), i32(begin + n), "serial",
                                  BufferStore(out, [idx], op("mul", BufferLoad(a, [idx]), i32(2))), SPAN))


def run_copy(func: PrimFunc, n: int) -> np.ndarray:
    a = np.arange(n, dtype=np.int32) + 1
    out = np.zeros(n, np.int32)
    run_primfunc(func, [a, out])
    return out


# ---- split -----------------------------------------------------------------------------------------

def test_split_divisible_has_no_guard() -> None:
    got = split(copy_kernel(8), "k", "i", 4)
    a, out = got.params
    io, ii = Var("i_outer", "int32"), Var("i_inner", "int32")
    idx = op("add", op("mul", io, i32(4)), ii)
    want = PrimFunc([a, out], For(io, i32(0), i32(2), "serial", For(ii, i32(0), i32(4), "serial",
                    BufferStore(out, [idx], op("mul", BufferLoad(a, [idx]), i32(2))))))
    assert tir_structural_equal(got, want)
    outer = got.body
    assert isinstance(outer, For) and outer.var.name == "i_outer" and outer.body.var.name == "i_inner"
    assert run_copy(got, 8).tolist() == [2 * v for v in range(1, 9)]


def test_split_non_divisible_guards() -> None:
    got = split(copy_kernel(7, begin=2), "k", "i", 3)
    a, out = got.params
    io, ii = Var("i_outer", "int32"), Var("i_inner", "int32")
    i = op("add", op("add", op("mul", io, i32(3)), ii), i32(2))
    idx = op("sub", i, i32(2))
    want = PrimFunc([a, out], For(io, i32(0), i32(3), "serial", For(ii, i32(0), i32(3), "serial", IfThenElse(
        op("lt", i, i32(9)), BufferStore(out, [idx], op("mul", BufferLoad(a, [idx]), i32(2)))))))
    assert tir_structural_equal(got, want)
    assert run_copy(got, 7).tolist() == [2 * v for v in range(1, 8)]


def test_split_with_tail() -> None:
    got = split(copy_kernel(7), "k", "i", 3, tail=True)
    a, out = got.params
    io, ii, i = Var("i_outer", "int32"), Var("i_inner", "int32"), Var("i", "int32")
    idx = op("add", op("mul", io, i32(3)), ii)
    want = PrimFunc([a, out], seq([
        For(io, i32(0), i32(2), "serial", For(ii, i32(0), i32(3), "serial",
            BufferStore(out, [idx], op("mul", BufferLoad(a, [idx]), i32(2))))),
        For(i, i32(6), i32(7), "serial", BufferStore(out, [i], op("mul", BufferLoad(a, [i]), i32(2))))]))
    assert tir_structural_equal(got, want)
    assert run_copy(got, 7).tolist() == [2 * v for v in range(1, 8)]


def test_split_binds_computed_bounds_once() -> None:
    """A bound read from memory is evaluated once, before the loops, as the original did."""
    n = Buffer("n", (1,), "int32")
    out = Buffer("out", (8,), "int32")
    i = Var("i", "int32")
    func = PrimFunc([n, out], For(i, i32(0), BufferLoad(n, [i32(0)]), "serial", seq([
        BufferStore(out, [i], i32(1)), BufferStore(n, [i32(0)], i32(3))])))
    got = split(func, "k", "i", 2)
    assert isinstance(got.body, LetStmt) and got.body.var.name == "i_end"
    for fn in (func, got):
        nn, arr = np.array([6], np.int32), np.zeros(8, np.int32)
        run_primfunc(fn, [nn, arr])
        assert arr.tolist() == [1] * 6 + [0] * 2 and nn.tolist() == [3]


def test_split_duplicated_body_binds_fresh_variables() -> None:
    a = Buffer("a", (5,), "float32")
    i, t = Var("i", "int32"), Var("t", "float32")
    body = LetStmt(t, BufferLoad(a, [i]), BufferStore(a, [i], op("add", t, t)))
    got = split(PrimFunc([a], For(i, i32(0), i32(5), "serial", body)), "k", "i", 2, tail=True)
    main, tail = got.body.stmts
    main_let = main.body.body
    assert isinstance(main_let, LetStmt) and main_let.var is not t and tail.body.var is t
    arr = np.arange(5, dtype=np.float32)
    run_primfunc(got, [arr])
    assert arr.tolist() == [0, 2, 4, 6, 8]


@pytest.mark.parametrize("factor", [0, -2])
def test_split_factor_must_be_positive(factor: int) -> None:
    with pytest.raises(DiagnosticError, match="split factor") as info:
        split(copy_kernel(4), "k", "i", factor)
    assert info.value.span == SPAN


def test_missing_loop_lists_the_loops() -> None:
    with pytest.raises(DiagnosticError, match=r"no loop `%j` in @k \(its loops: %i\)"):
        split(copy_kernel(4), "k", "j", 2)


# ---- reorder ---------------------------------------------------------------------------------------

def matmul() -> tuple[PrimFunc, Var, Var, Var]:
    """C[i, j] += A[i, k] * B[k, j] over i, j, k (C starts zeroed by the caller)."""
    A, B, C = Buffer("A", (2, 3), "float32"), Buffer("B", (3, 4), "float32"), Buffer("C", (2, 4), "float32")
    i, j, k = Var("i", "int32"), Var("j", "int32"), Var("k", "int32")
    update = BufferStore(C, [i, j], op("add", BufferLoad(C, [i, j]),
                                       op("mul", BufferLoad(A, [i, k]), BufferLoad(B, [k, j]))))
    nest = For(i, i32(0), i32(2), "serial", For(j, i32(0), i32(4), "serial", For(k, i32(0), i32(3), "serial",
                                                                                  update, SPAN), SPAN), SPAN)
    return PrimFunc([A, B, C], nest), i, j, k


def run_matmul(func: PrimFunc) -> np.ndarray:
    A = np.arange(6, dtype=np.float32).reshape(2, 3) / 3
    B = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    C = np.zeros((2, 4), np.float32)
    run_primfunc(func, [A, B, C])
    return C


def test_reorder_swaps_spatial_loops_and_moves_the_reduction_out() -> None:
    func, *_ = matmul()
    want = run_matmul(func)
    got = reorder(func, "mm", ["k", "i"])      # the i and k slots swap: k, j, i
    order = [got.body.var.name, got.body.body.var.name, got.body.body.body.var.name]
    assert order == ["k", "j", "i"]
    assert run_matmul(got).tobytes() == want.tobytes()
    got = reorder(func, "mm", ["j", "i"])
    assert [got.body.var.name, got.body.body.var.name] == ["j", "i"]
    assert run_matmul(got).tobytes() == want.tobytes()


def test_reorder_refuses_to_change_update_order() -> None:
    """S[0] accumulates over i then j; swapping the loops changes the float sum order."""
    A, S = Buffer("A", (3, 3), "float32"), Buffer("S", (1,), "float32")
    i, j = Var("i", "int32"), Var("j", "int32")
    nest = For(i, i32(0), i32(3), "serial", For(j, i32(0), i32(3), "serial", BufferStore(
        S, [i32(0)], op("add", BufferLoad(S, [i32(0)]), BufferLoad(A, [i, j])))), SPAN)
    with pytest.raises(DiagnosticError, match="same element of `%S`") as info:
        reorder(PrimFunc([A, S], nest), "s", ["j", "i"])
    assert info.value.span == SPAN


def test_reorder_refuses_shifted_accesses() -> None:
    A = Buffer("A", (4, 4), "int32")
    i, j = Var("i", "int32"), Var("j", "int32")
    nest = For(i, i32(1), i32(4), "serial", For(j, i32(0), i32(4), "serial", BufferStore(
        A, [i, j], BufferLoad(A, [op("sub", i, i32(1)), j]))), SPAN)
    with pytest.raises(DiagnosticError, match="accessed at different indices"):
        reorder(PrimFunc([A], nest), "s", ["j", "i"])


def test_reorder_needs_a_perfect_nest_and_independent_bounds() -> None:
    A = Buffer("A", (4, 4), "int32")
    i, j = Var("i", "int32"), Var("j", "int32")
    inner = For(j, i32(0), i32(4), "serial", BufferStore(A, [i, j], i32(1)), SPAN)
    imperfect = For(i, i32(0), i32(4), "serial", seq([BufferStore(A, [i, i32(0)], i32(0)), inner]), SPAN)
    with pytest.raises(DiagnosticError, match="not perfectly nested"):
        reorder(PrimFunc([A], imperfect), "s", ["j", "i"])
    i2, j2 = Var("i", "int32"), Var("j", "int32")
    triangle = For(i2, i32(0), i32(4), "serial", For(j2, i32(0), i2, "serial", BufferStore(A, [i2, j2], i32(1)),
                                                      SPAN), SPAN)
    with pytest.raises(DiagnosticError, match="bounds of `%j` depend on `%i`") as info:
        reorder(PrimFunc([A], triangle), "s", ["j", "i"])
    assert info.value.span == SPAN


# ---- loop kinds ------------------------------------------------------------------------------------

def test_kinds_are_set_when_legal() -> None:
    func, *_ = matmul()
    got = set_kind(func, "mm", "j", "parallel")
    assert got.body.body.kind == "parallel" and got.body.kind == "serial"
    got = set_kind(got, "mm", "k", "unrolled")
    assert got.body.body.body.kind == "unrolled"
    assert run_matmul(got).tobytes() == run_matmul(func).tobytes()


def test_kinds_refused_when_iterations_share_elements() -> None:
    func, *_ = matmul()
    with pytest.raises(DiagnosticError, match=r"cannot vectorize loop `%k`: every iteration updates the same "
                                              r"elements of `%C`") as info:
        set_kind(func, "mm", "k", "vectorized")
    assert info.value.span == SPAN
    n = Buffer("n", (1,), "int32")
    out = Buffer("out", (8,), "int32")
    i = Var("i", "int32")
    dynamic = PrimFunc([n, out], For(i, i32(0), BufferLoad(n, [i32(0)]), "serial", BufferStore(out, [i], i32(1)),
                                     SPAN))
    with pytest.raises(DiagnosticError, match="extent is not a constant"):
        set_kind(dynamic, "d", "i", "vectorized")


# ---- flatten ---------------------------------------------------------------------------------------

def test_flatten_row_major_and_strided() -> None:
    a = Buffer("a", (2, 3), "float32")
    b = Buffer("b", (2, 3), "float32", strides=(8, 2), align=64)
    i, j = Var("i", "int32"), Var("j", "int32")
    func = PrimFunc([a, b], For(i, i32(0), i32(2), "serial", For(j, i32(0), i32(3), "serial",
                                BufferStore(b, [i, j], BufferLoad(a, [i, j])))))
    got = flatten_buffers(func)
    fa, fb = got.params
    assert (fa.shape, fb.shape, fb.strides, fb.align) == ((6,), (13,), None, 64)
    i2, j2 = Var("i", "int32"), Var("j", "int32")
    want = PrimFunc([fa, fb], For(i2, i32(0), i32(2), "serial", For(j2, i32(0), i32(3), "serial", BufferStore(
        fb, [op("add", op("mul", i2, i32(8)), op("mul", j2, i32(2)))],
        BufferLoad(fa, [op("add", op("mul", i2, i32(3)), j2)])))))
    assert tir_structural_equal(got, want)
    src = np.arange(6, dtype=np.float32)
    dst = np.full(13, -1, np.float32)
    run_primfunc(got, [src, dst])
    assert dst.tolist() == [0, -1, 1, -1, 2, -1, -1, -1, 3, -1, 4, -1, 5]


def test_flatten_vector_index_becomes_a_ramp() -> None:
    a = Buffer("a", (2, 8), "float32")
    i = Var("i", "int32")
    load = BufferLoad(a, [i, Ramp(i32(4), i32(1), 4)])
    out = Buffer("o", (2,), "float32x4")
    func = PrimFunc([a, out], For(i, i32(0), i32(2), "serial", BufferStore(out, [i], load)))
    got = flatten_buffers(func)
    store = got.body.body
    index = store.value.indices[0]
    assert isinstance(index, Ramp) and index.lanes == 4 and index.stride.value == 1
    assert got.params[1] is out    # a dense 1-d buffer is already flat
    arr = np.arange(16, dtype=np.float32)
    res = np.zeros((2, 4), np.float32)
    run_primfunc(got, [arr, res])
    assert res.tolist() == [[4, 5, 6, 7], [12, 13, 14, 15]]


def test_flatten_widens_to_int64_indices() -> None:
    a = Buffer("a", (2, 3), "int8")
    i = Var("i", "int64")
    func = PrimFunc([a], For(i, IntImm(0, "int64"), IntImm(2, "int64"), "serial",
                             BufferStore(a, [i, IntImm(1, "int32")], IntImm(1, "int8"))))
    got = flatten_buffers(func)
    assert got.body.body.indices[0].dtype == "int64"
    assert flat_extent(Buffer("z", (3, 0), "int8")) == 0


def test_flatten_allocations_and_scope() -> None:
    out = Buffer("out", (2, 2), "int32")
    tmp = Buffer("tmp", (2, 2), "int32", scope="local")
    i, j = Var("i", "int32"), Var("j", "int32")
    body = Allocate(tmp, For(i, i32(0), i32(2), "serial", For(j, i32(0), i32(2), "serial", seq([
        BufferStore(tmp, [i, j], op("add", op("mul", i, i32(10)), j)),
        BufferStore(out, [j, i], BufferLoad(tmp, [i, j]))]))))
    got = flatten_buffers(PrimFunc([out], body), params=False)
    assert got.params[0] is out
    assert isinstance(got.body, Allocate) and got.body.buffer.shape == (4,) and got.body.buffer.scope == "local"
    arr = np.zeros((2, 2), np.int32)
    run_primfunc(got, [arr])
    assert arr.tolist() == [[0, 10], [1, 11]]


def test_negative_strides_are_refused() -> None:
    a = Buffer("a", (2, 2), "int32", strides=(-2, 1), span=SPAN)
    with pytest.raises(DiagnosticError, match="negative stride") as info:
        flatten_buffers(PrimFunc([a], BufferStore(a, [i32(0), i32(0)], i32(1))))
    assert info.value.span == SPAN


# ---- the passes on a lowered module ---------------------------------------------------------------

RELAY = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 6), float32], %y: Tensor[(2, 6), float32]) -> Tensor[(2, 6), float32] {
  %0 = add(%x, %y);
  multiply(nn.relu(%0), 2f)
}
"""


def lowered() -> tuple[IRModule, str]:
    mod = run(parse_module(RELAY, "ew.relay"), "fuse-ops,lower")
    names = [n for n in mod.functions if n != "main"]
    assert len(names) == 1
    return mod, names[0]


def test_pipeline_on_lowered_module_keeps_relay_signature() -> None:
    mod, name = lowered()
    loops = [s for s in ("i0", "i1")]
    out = run(mod, f"tir-split{{loop={loops[1]},factor=4}},tir-flatten-buffers,tir-simplify,"
                   f"tir-parallelize{{loop={loops[0]}}},tir-unroll{{loop={loops[1]}_inner}}")
    func = out.functions[name]
    assert [p.shape for p in func.params] == [(2, 6)] * 3     # Relay calls it: shapes are its type
    assert func.body.kind == "parallel"
    x = np.arange(12, dtype=np.float32).reshape(2, 6) - 5
    y = np.ones((2, 6), np.float32)
    res = np.zeros((2, 6), np.float32)
    run_primfunc(func, [x, y, res])
    assert res.tolist() == (np.maximum(x + y, 0) * 2).tolist()


def test_loop_pass_errors() -> None:
    mod, name = lowered()
    with pytest.raises(DiagnosticError, match="no primfn in the module has loop"):
        run(mod, "tir-vectorize{loop=zz}")
    with pytest.raises(DiagnosticError, match=rf"no loop `%zz` in @{name}"):
        run(mod, f"tir-unroll{{loop=zz,function={name}}}")
    with pytest.raises(DiagnosticError, match="needs a loop name"):
        parse_pipeline("tir-split{factor=4}")[0].apply(mod)
    with pytest.raises(DiagnosticError, match="at least two distinct loop names"):
        run(mod, "tir-reorder{loops=i0}")


# ---- explicit vectorization -------------------------------------------------------------------------

def test_vectorize_builds_ramps_and_broadcasts() -> None:
    a, out = Buffer("a", (2, 4), "float32"), Buffer("out", (2, 4), "float32")
    i, j = Var("i", "int32"), Var("j", "int32")
    value = op("add", op("mul", BufferLoad(a, [i, j]), FloatImm(2.0, "float32")), BufferLoad(a, [i, i32(0)]))
    func = PrimFunc([a, out], For(i, i32(0), i32(2), "serial", For(j, i32(0), i32(4), "serial",
                                                                  BufferStore(out, [i, j], value))))
    got = set_kind(func, "k", "j", "vectorized", lower=True)
    ramp = Ramp(i32(0), i32(1), 4)
    i2 = Var("i", "int32")
    want_value = op("add", op("mul", BufferLoad(a, [i2, ramp]), Broadcast(FloatImm(2.0, "float32"), 4)),
                    Broadcast(BufferLoad(a, [i2, i32(0)]), 4))
    want = PrimFunc([a, out], For(i2, i32(0), i32(2), "serial", BufferStore(out, [i2, ramp], want_value)))
    assert tir_structural_equal(got, want)
    src = np.arange(8, dtype=np.float32).reshape(2, 4)
    res = np.zeros((2, 4), np.float32)
    run_primfunc(got, [src, res])
    assert res.tolist() == (src * 2 + src[:, :1]).tolist()


def test_vectorize_keeps_a_mark_when_there_is_no_vector_form() -> None:
    """An `if` on the loop variable needs masks: the loop is only marked."""
    out = Buffer("out", (4,), "int32")
    j = Var("j", "int32")
    func = PrimFunc([out], For(j, i32(0), i32(4), "serial", IfThenElse(op("lt", j, i32(2)),
                                                                      BufferStore(out, [j], i32(1)))))
    got = set_kind(func, "k", "j", "vectorized", lower=True)
    assert isinstance(got.body, For) and got.body.kind == "vectorized" and got.body.body is func.body.body
    mod = IRModule()
    mod.add_function("k", func)  # type: ignore[arg-type]
    marked = run(mod, "tir-vectorize{loop=j explicit=false}").functions["k"]
    assert isinstance(marked.body, For) and marked.body.kind == "vectorized"
