"""`tir-simplify` and its pieces: constant folding under the interpreter's exact semantics,
algebraic identities, range-based rules and the statement cleanups. Expected results are
written out by hand (and folded values checked against numpy / the interpreter)."""

from __future__ import annotations

import numpy as np
import pytest

from irtool.eval.tir_interp import run_primfunc
from irtool.ir.module import IRModule
from irtool.ir.tir import (AssertStmt, BinaryOp, Broadcast, Buffer, BufferLoad, BufferStore, Cast, Evaluate,
                           FloatImm, For, IfThenElse, IntImm, LetStmt, Not, PrimExpr, PrimFunc, Ramp, Select, SeqStmt,
                           Stmt, Var, seq)
from irtool.ir.tir_equality import tir_structural_equal
from irtool.passes import parse_pipeline, run
from irtool.core.diagnostics import DiagnosticError
from irtool.tir_transform.fold import fold_binary, fold_cast, fold_intrinsic, wrap
from irtool.tir_transform.simplify import simplify_expr, simplify_primfunc


def i32(v: int) -> IntImm:
    return IntImm(v, "int32")


def f32(v: float) -> FloatImm:
    return FloatImm(v, "float32")


def op(name: str, a: PrimExpr, b: PrimExpr) -> BinaryOp:
    return BinaryOp(name, a, b)


def same_expr(a: PrimExpr, b: PrimExpr) -> bool:
    """Structural equality of two expressions (through a one-store function)."""
    out_a, out_b = Buffer("o", (), a.dtype), Buffer("o", (), b.dtype)
    return tir_structural_equal(PrimFunc([out_a], BufferStore(out_a, [], a)),
                                PrimFunc([out_b], BufferStore(out_b, [], b)))


# ---- folding ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("op_name", "a", "b", "dtype", "want"), [
    ("add", 127, 1, "int8", -128),          # wraps like numpy int8
    ("mul", 200, 2, "uint8", 144),
    ("sub", 0, 1, "uint32", 2**32 - 1),
    ("div", -7, 2, "int32", -3),            # truncating
    ("floordiv", -7, 2, "int32", -4),
    ("floormod", -7, 2, "int32", 1),
    ("min", -3, 2, "int64", -3),
    ("lt", 2, 3, "int32", 1),
    ("eq", 2, 3, "int32", 0),
    ("and", 1, 0, "bool", 0),
])
def test_fold_binary_ints(op_name: str, a: int, b: int, dtype: str, want: int) -> None:
    assert fold_binary(op_name, a, b, dtype) == want


def test_fold_refuses_what_would_fail_or_has_no_literal() -> None:
    assert fold_binary("div", 5, 0, "int32") is None            # a run-time error stays one
    assert fold_binary("floormod", 5, 0, "int32") is None
    assert fold_binary("sub", float("inf"), float("inf"), "float32") is None   # NaN has no literal
    assert fold_intrinsic("sqrt", [-1.0], "float32") is None


def test_fold_floats_round_in_their_dtype() -> None:
    want = float(np.float32(0.1) + np.float32(0.2))
    assert fold_binary("add", float(np.float32(0.1)), float(np.float32(0.2)), "float32") == want
    assert want != 0.1 + 0.2
    assert fold_binary("div", 1.0, 0.0, "float32") == float("inf")
    assert fold_intrinsic("exp", [1.0], "float32") == float(np.exp(np.float32(1.0)))


def test_fold_casts() -> None:
    assert fold_cast(-2.7, "float32", "int32") == -2            # truncation toward zero
    assert fold_cast(300, "int32", "uint8") == 44
    assert fold_cast(5, "int32", "bool") == 1
    assert fold_cast(16777217, "int32", "float32") == 16777216.0
    assert wrap(2**31, "int32") == -(2**31)


# ---- expression rules ------------------------------------------------------------------------------

X = Var("x", "int32")
Y = Var("y", "int32")
F = Var("f", "float32")


@pytest.mark.parametrize(("before", "after"), [
    (op("mul", X, i32(1)), X),
    (op("add", i32(0), X), X),
    (op("mul", X, i32(0)), i32(0)),
    (op("floordiv", X, i32(1)), X),
    (op("floormod", X, i32(1)), i32(0)),
    (op("add", op("add", X, i32(3)), i32(4)), op("add", X, i32(7))),
    (op("sub", op("add", X, i32(3)), i32(5)), op("sub", X, i32(2))),
    (op("add", i32(2), X), op("add", X, i32(2))),
    (op("mul", op("mul", X, i32(3)), i32(4)), op("mul", X, i32(12))),
    (op("sub", X, X), i32(0)),
    (op("max", X, X), X),
    (op("add", op("mul", i32(2), i32(3)), X), op("add", X, i32(6))),
    (Select(op("lt", i32(1), i32(2)), X, Y), X),
    (Not(Not(op("lt", X, Y))), op("lt", X, Y)),
    (Cast("int32", X), X),
    (Cast("int8", i32(300)), IntImm(44, "int8")),
    (op("mul", F, f32(1.0)), F),
    (op("div", F, f32(1.0)), F),
    (op("sub", F, f32(0.0)), F),
    (op("add", F, f32(-0.0)), F),
    (op("and", op("lt", X, Y), IntImm(0, "bool")), IntImm(0, "bool")),
    (op("or", IntImm(0, "bool"), op("lt", X, Y)), op("lt", X, Y)),
    (Ramp(X, i32(0), 4), Broadcast(X, 4)),
    (op("add", Broadcast(i32(2), 4), Broadcast(i32(3), 4)), Broadcast(i32(5), 4)),
    (op("mul", Ramp(X, i32(1), 4), Broadcast(i32(3), 4)), Ramp(op("mul", X, i32(3)), i32(3), 4)),
    (op("add", Ramp(X, i32(1), 4), Broadcast(i32(0), 4)), Ramp(X, i32(1), 4)),
])
def test_expression_rules(before: PrimExpr, after: PrimExpr) -> None:
    assert same_expr(simplify_expr(before), after)


@pytest.mark.parametrize("kept", [
    op("add", F, f32(0.0)),        # -0 + 0 is +0: not an identity for floats
    op("mul", F, f32(0.0)),        # inf * 0 is NaN
    op("sub", F, f32(-0.0)),
    op("div", X, i32(0)),          # keeps its run-time error
    op("floordiv", X, i32(4)),     # x unbounded
    op("add", op("add", F, f32(1.0)), f32(2.0)),   # no float reassociation
])
def test_non_identities_are_kept(kept: PrimExpr) -> None:
    assert simplify_expr(kept) is kept


def test_range_rules() -> None:
    i, j = Var("i", "int32"), Var("j", "int32")
    ranges = {i: (0, 7), j: (0, 3)}
    flat = op("add", op("mul", i, i32(4)), j)        # i * 4 + j, with 0 <= j < 4
    assert same_expr(simplify_expr(op("floordiv", flat, i32(4)), ranges), i)
    assert same_expr(simplify_expr(op("floormod", flat, i32(4)), ranges), j)
    assert same_expr(simplify_expr(op("floordiv", j, i32(4)), ranges), i32(0))
    assert same_expr(simplify_expr(op("floormod", op("add", j, i32(8)), i32(4)), ranges), j)
    assert same_expr(simplify_expr(op("lt", flat, i32(32)), ranges), IntImm(1, "bool"))
    assert same_expr(simplify_expr(op("ge", j, i32(4)), ranges), IntImm(0, "bool"))
    assert same_expr(simplify_expr(op("min", j, i32(3)), ranges), j)
    assert same_expr(simplify_expr(op("max", j, i32(3)), ranges), i32(3))
    # undecided with these bounds
    assert simplify_expr(op("lt", flat, i32(31)), ranges).op == "lt"


def test_range_rules_respect_wrapping() -> None:
    """Bounds that leave the dtype's range prove nothing (the value may wrap)."""
    i = Var("i", "int8")
    big = op("mul", i, IntImm(100, "int8"))           # i in [0, 3]: up to 300, wraps in int8
    e = op("lt", big, IntImm(127, "int8"))
    assert simplify_expr(e, {i: (0, 3)}) is e


# ---- statements ------------------------------------------------------------------------------------

def test_loop_cleanup_and_substitution() -> None:
    out = Buffer("out", (4, 3), "int32")
    i, j, k, t = (Var(n, "int32") for n in "ijkt")
    body = For(i, i32(0), i32(4), "serial", seq([
        For(j, i32(2), i32(3), "serial", BufferStore(out, [i, j], op("mul", i, i32(1)))),   # extent 1
        For(k, i32(5), i32(5), "serial", BufferStore(out, [i, k], i32(0))),                   # extent 0
        IfThenElse(op("lt", i32(1), i32(0)), BufferStore(out, [i, i32(0)], i32(9)),
                   BufferStore(out, [i, i32(1)], i32(7))),
        LetStmt(t, i32(5), BufferStore(out, [i, i32(0)], op("add", t, i))),               # let of a literal
        Evaluate(i32(0)),
        AssertStmt(op("le", i, i32(9)), "in range"),
    ]))
    got = simplify_primfunc(PrimFunc([out], body))
    i2 = Var("i", "int32")
    want = PrimFunc([out], For(i2, i32(0), i32(4), "serial", seq([
        BufferStore(out, [i2, i32(2)], i2),
        BufferStore(out, [i2, i32(1)], i32(7)),
        BufferStore(out, [i2, i32(0)], op("add", i2, i32(5))),
    ])))
    assert tir_structural_equal(got, want)


def test_dead_let_chains_are_removed() -> None:
    a = Buffer("a", (4,), "float32")
    out = Buffer("out", (4,), "float32")
    u, v, w = (Var(n, "float32") for n in "uvw")
    body = LetStmt(u, BufferLoad(a, [i32(0)]),
                   LetStmt(v, op("add", u, BufferLoad(a, [i32(1)])),
                           LetStmt(w, op("mul", v, v),
                                   BufferStore(out, [i32(0)], BufferLoad(a, [i32(2)])))))
    got = simplify_primfunc(PrimFunc([a, out], body))
    assert tir_structural_equal(got, PrimFunc([a, out], BufferStore(out, [i32(0)], BufferLoad(a, [i32(2)]))))


def test_used_lets_and_loads_stay() -> None:
    a = Buffer("a", (4,), "float32")
    u = Var("u", "float32")
    body = LetStmt(u, BufferLoad(a, [i32(0)]), BufferStore(a, [i32(1)], op("add", u, u)))
    func = PrimFunc([a], body)
    assert simplify_primfunc(func) is func


def test_if_with_empty_then_negates() -> None:
    a = Buffer("a", (4,), "int32")
    x = Var("x", "int32")
    cond = op("lt", BufferLoad(a, [i32(0)]), i32(2))
    body = For(x, i32(0), i32(4), "serial", IfThenElse(cond, SeqStmt(()), BufferStore(a, [x], i32(1))))
    got = simplify_primfunc(PrimFunc([a], body))
    x2 = Var("x", "int32")
    want = For(x2, i32(0), i32(4), "serial", IfThenElse(Not(op("lt", BufferLoad(a, [i32(0)]), i32(2))),
                                                         BufferStore(a, [x2], i32(1))))
    assert tir_structural_equal(got, PrimFunc([a], want))
    arr = np.array([0, 5, 5, 5], np.int32)
    run_primfunc(got, [arr])
    assert arr.tolist() == [0, 5, 5, 5]


def test_everything_removed_leaves_an_empty_body() -> None:
    a = Buffer("a", (4,), "int32")
    x = Var("x", "int32")
    got = simplify_primfunc(PrimFunc([a], For(x, i32(3), i32(1), "serial", BufferStore(a, [x], i32(1)))))
    assert type(got.body) is SeqStmt and not got.body.stmts


# ---- the pass --------------------------------------------------------------------------------------

def _module(**funcs: PrimFunc) -> IRModule:
    mod = IRModule()
    for name, f in funcs.items():
        mod.add_function(name, f)  # type: ignore[arg-type]
    return mod


def test_pass_runs_on_every_primfn_or_the_named_one() -> None:
    a = Buffer("a", (2,), "int32")
    x = Var("x", "int32")
    messy = PrimFunc([a], For(x, i32(0), i32(2), "serial", BufferStore(a, [x], op("add", x, i32(0)))))
    mod = _module(f=messy, g=messy)
    out = run(mod, "tir-simplify")
    assert out.functions["f"] is not messy and out.functions["g"] is not messy
    assert mod.functions["f"] is messy          # the input module is left alone
    only = run(mod, "tir-simplify{function=g}")
    assert only.functions["f"] is messy and only.functions["g"] is not messy


def test_unknown_function_is_a_diagnostic() -> None:
    a = Buffer("a", (2,), "int32")
    mod = _module(kernel=PrimFunc([a], BufferStore(a, [i32(0)], i32(1))))
    with pytest.raises(DiagnosticError, match="no primfn `@kernle` in the module; did you mean `@kernel`"):
        parse_pipeline("tir-simplify{function=kernle}")[0].apply(mod)


def test_deep_expressions_and_long_let_chains() -> None:
    """Fused kernels make deep trees and long `let` chains: no recursion proportional to them."""
    a = Buffer("a", (1,), "int32")
    deep: PrimExpr = BufferLoad(a, [i32(0)])
    for _ in range(20000):
        deep = op("add", deep, i32(1))
    folded = simplify_expr(deep)
    assert same_expr(folded, op("add", BufferLoad(a, [i32(0)]), i32(20000)))
    # let v0 = a[0]; let v1 = v0 * 3; ... ; a[0] = v_last  (all used), plus a dead chain
    chain = [Var(f"v{k}", "int32") for k in range(3000)]
    dead = [Var(f"d{k}", "int32") for k in range(3000)]
    body: Stmt = BufferStore(a, [i32(0)], chain[-1])
    for k in range(len(dead) - 1, -1, -1):
        body = LetStmt(dead[k], op("mul", BufferLoad(a, [i32(0)]) if k == 0 else dead[k - 1], i32(3)), body)
    for k in range(len(chain) - 1, -1, -1):
        body = LetStmt(chain[k], op("mul", BufferLoad(a, [i32(0)]) if k == 0 else chain[k - 1], i32(3)), body)
    got = simplify_primfunc(PrimFunc([a], body))
    lets = 0
    node = got.body
    while isinstance(node, LetStmt):
        lets += 1
        node = node.body
    assert lets == len(chain) and isinstance(node, BufferStore)
    arr = np.array([1], np.int32)
    run_primfunc(got, [arr])
    assert arr[0] == np.array([pow(3, 3000, 2**32)], np.uint32).view(np.int32)[0]   # int32 wraps
