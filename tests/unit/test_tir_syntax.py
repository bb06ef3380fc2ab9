"""TIR text format: each construct parses to the node it names and prints back as written; syntax
and name errors are located diagnostics."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from irtool.analysis.tir_verify import verify_primfunc
from irtool.core.span import Span
from irtool.ir.tir import (Allocate, AssertStmt, BinaryOp, Broadcast, Buffer, BufferLoad, BufferStore, Call, Cast,
                           Evaluate, FloatImm, For, IfExpr, IfThenElse, IntImm, LetStmt, Not, PrimFunc, Ramp, Select,
                           SeqStmt, Var)
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse, parse_module
from irtool.syntax.printer import print_module
from irtool.syntax.parser import parse_primfunc
from irtool.syntax.tir_printer import print_primfunc

HEADER = "primfn @k(%A: Buffer[(4, 8), float32], %B: Buffer[(8), int32]) {\n"


def body_of(stmts: str) -> PrimFunc:
    return parse_primfunc(HEADER + stmts + "\n}\n", "test.tir")


def reprint(text: str) -> str:
    return print_primfunc("k", parse_primfunc(text, "test.tir"))


CANONICAL = """\
primfn @k(%A: Buffer[(4, 8), float32, strides=[8, 1], align=64], %B: Buffer[(8), int32], %S: Buffer[(), bool],
  global_symbol="k", tir.noalias=True) {
  for %i in range(0, 4) {
    for %j in vectorized(0, 2) {
      %A[%i, ramp(%j * 4, 1, 4)] = broadcast(float32(%B[%i]), 4) * %A[%i, ramp(%j * 4, 1, 4)];
    }
  }
  for %i_1 in parallel(0i64, 8i64) {
    let %n: int64 = %i_1 * 2i64;
    %B[int32(%n)] = floordiv(%B[0], -3) + floormod(7, %B[1]) - (2 - 1) / 3;
  }
  allocate %T: Buffer[(16), float32x16, scope="local"] {
    for %u in unrolled(0, 16) {
      %T[%u] = broadcast(exp(%A[0, %u]) + max(-1.5f, inff), 16);
    }
  }
  if (and(%B[0] < 3, not(%S[]))) {
    %S[] = select(%A[0, 0] >= 0f, True, if_then_else(%B[0] < 8, %B[%B[0]] == 2, False));
  } else {
    evaluate(0);
  }
  if (or(%S[], False)) {
  }
  {
    let %x: float32 = pow(%A[1, 1], 2f) - -0f;
    %A[1, 1] = %x;
  }
  %B[1] = uint8(200) == uint8(%B[2]) != False;
  assert(%B[0] <= %B[1], "B must be sorted");
}
"""


def test_canonical_text_is_a_fixed_point() -> None:
    assert reprint(CANONICAL) == CANONICAL


def test_constructs_parse_to_their_nodes() -> None:
    func = parse_primfunc(CANONICAL, "test.tir")
    a, b, s = func.params
    assert (a.name, a.shape, a.dtype, a.strides, a.align, a.scope) == ("A", (4, 8), "float32", (8, 1), 64, "global")
    assert (b.shape, b.strides, b.align, s.shape, s.dtype) == ((8,), None, 0, (), "bool")
    assert dict(func.attrs) == {"global_symbol": "k", "tir.noalias": True}
    stmts = func.body.stmts
    assert [type(x) for x in stmts] == [For, For, Allocate, IfThenElse, IfThenElse, LetStmt, BufferStore,
                                        AssertStmt]
    outer = stmts[0]
    inner = outer.body
    assert (outer.kind, inner.kind, stmts[1].kind, stmts[2].body.kind) == ("serial", "vectorized", "parallel",
                                                                          "unrolled")
    assert outer.var.dtype == "int32" and stmts[1].var.dtype == "int64"
    store = inner.body
    assert isinstance(store, BufferStore) and store.buffer is a
    assert store.indices[0] is outer.var
    ramp = store.indices[1]
    assert isinstance(ramp, Ramp) and ramp.lanes == 4 and ramp.dtype == "int32x4"
    assert isinstance(ramp.base, BinaryOp) and ramp.base.op == "mul" and ramp.base.a is inner.var
    value = store.value
    assert value.op == "mul" and value.dtype == "float32x4"
    assert isinstance(value.a, Broadcast) and isinstance(value.a.value, Cast) and value.a.value.dtype == "float32"
    assert isinstance(value.b, BufferLoad) and value.b.dtype == "float32x4"
    let = stmts[1].body
    assert isinstance(let, LetStmt) and let.var.dtype == "int64"
    rhs = let.body.value
    # `floordiv(...) + floormod(...) - (2 - 1) / 3` is `(fd + fm) - ((2 - 1) / 3)`.
    assert rhs.op == "sub" and rhs.a.op == "add" and rhs.b.op == "div" and rhs.b.a.op == "sub"
    assert (rhs.a.a.op, rhs.a.b.op) == ("floordiv", "floormod")
    assert rhs.a.a.b.value == -3
    alloc = stmts[2]
    assert (alloc.buffer.dtype, alloc.buffer.scope) == ("float32x16", "local")
    call_sum = alloc.body.body.value.value
    assert isinstance(call_sum.a, Call) and call_sum.a.name == "exp"
    assert call_sum.b.op == "max" and call_sum.b.a.value == -1.5 and call_sum.b.b.value == float("inf")
    cond = stmts[3].cond
    assert cond.op == "and" and isinstance(cond.b, Not) and cond.dtype == "bool"
    assert isinstance(stmts[3].then_body.value, Select)
    lazy = stmts[3].then_body.value.false_value
    assert isinstance(lazy, IfExpr) and lazy.dtype == "bool"
    assert isinstance(lazy.true_value.a.indices[0], BufferLoad)
    assert isinstance(stmts[3].else_body, Evaluate)
    assert isinstance(stmts[4].then_body, SeqStmt) and stmts[4].then_body.stmts == ()
    assert stmts[4].else_body is None
    # The braced block keeps the let's scope from reaching the statements after it.
    assert isinstance(stmts[5].body, BufferStore)
    neg_zero = stmts[5].value.b
    assert isinstance(neg_zero, FloatImm) and str(neg_zero.value) == "-0.0"
    literal = stmts[6].value.a.a
    assert isinstance(literal, IntImm) and (literal.value, literal.dtype) == (200, "uint8")
    assert isinstance(stmts[6].value.a.b, Cast)
    assert stmts[7].message == "B must be sorted"


def test_let_scopes_over_the_rest_of_its_block() -> None:
    func = body_of("let %x: int32 = 1;\n%B[%x] = %x;\n%B[0] = 2;")
    let = func.body
    assert isinstance(let, LetStmt)
    assert isinstance(let.body, SeqStmt) and len(let.body.stmts) == 2
    store = let.body.stmts[0]
    assert store.indices[0] is let.var and store.value is let.var


def test_let_dtype_defaults_to_the_value_dtype() -> None:
    func = body_of("let %x = 1i64;\n%B[0] = int32(%x);")
    assert func.body.var.dtype == "int64"
    assert "let %x: int64 = 1i64;" in print_primfunc("k", func)


def test_shadowed_names_bind_innermost_and_print_distinctly() -> None:
    text = HEADER + """\
  for %i in range(0, 2) {
    for %i in range(0, 3) {
      %B[%i] = %i;
    }
    %B[%i] = 1;
  }
}
"""
    func = parse_primfunc(text, "test.tir")
    outer = func.body
    inner = outer.body.stmts[0]
    assert inner.body.value is inner.var and outer.body.stmts[1].indices[0] is outer.var
    printed = print_primfunc("k", func)
    assert "for %i in range(0, 2)" in printed and "for %i_1 in range(0, 3)" in printed
    assert "%B[%i_1] = %i_1;" in printed and "%B[%i] = 1;" in printed


def test_primfn_and_def_share_a_module_and_print_sorted() -> None:
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(8), int32]) {
  %x
}

primfn @add_one(%A: Buffer[(8), int32]) {
  for %i in range(0, 8) {
    %A[%i] = %A[%i] + 1;
  }
}
"""
    mod = parse(text, "mixed.relay")
    assert isinstance(mod.functions["add_one"], PrimFunc)
    printed = print_module(mod)
    assert printed.index("primfn @add_one") < printed.index("def @main")
    assert print_module(parse_module(printed)) == printed


def test_int_list_indices_are_constant_loads() -> None:
    func = body_of("%A[1, 2] = %A[3, 0];")
    store = func.body
    assert [i.value for i in store.indices] == [1, 2]
    assert [i.value for i in store.value.indices] == [3, 0]
    assert all(i.dtype == "int32" for i in store.indices)


@pytest.mark.parametrize(("stmts", "message", "line", "col"), [
    ("%C[0] = 1f;", "undefined variable or buffer `%C`", 2, 1),
    ("%B[0] = %i;", "undefined variable or buffer `%i`", 2, 9),
    ("for %i in range(0, 4) { }\n%B[%i] = 1;", "undefined variable or buffer `%i`", 3, 4),
    ("{ let %x = 1; }\n%B[%x] = 1;", "undefined variable or buffer `%x`", 3, 4),
    ("%B[0] = %A;", "buffer `%A` used as a value", 2, 9),
    ("for %i in forever(0, 4) { }", "unknown loop kind `forever`", 2, 11),
    ("%B[0] = expp(1f);", "unknown TIR function `expp`; did you mean `exp`?", 2, 9),
    ("%B[0] = select(True, 1);", "`select` takes 3 argument(s), 2 given", 2, 9),
    ("%A[ramp(0, 1, %B[0])] = 1f;", "the lane count must be a positive integer literal", 2, 15),
    ("%B[0] = 1.5;", "a floating point literal needs an `f` suffix", 2, 9),
    ("%B[0] = 1", "unexpected `}`", 3, 1),
    ("let %x: float33 = 1f;", "unknown dtype `float33`", 2, 9),
])
def test_errors_are_located(stmts: str, message: str, line: int, col: int) -> None:
    with pytest.raises(DiagnosticError) as info:
        body_of(stmts)
    assert message in str(info.value)
    span = info.value.span
    assert (span.source, span.line, span.col) == ("test.tir", line, col)


@pytest.mark.parametrize(("params", "message"), [
    ("%A: Buffer[(4, ?), float32]", "a buffer shape holds integers only"),
    ("%A: Buffer[(4), float32, scope=\"shared\"]", "`scope` must be one of"),
    ("%A: Buffer[(4), float32, strides=[1, 1]]", "`strides` must be a list of 1 integers"),
    ("%A: Buffer[(4), float32, alignment=64]", "unknown buffer option `alignment`; did you mean `align`?"),
    ("%A: Buffer[(4), float32], %A: Buffer[(4), float32]", "duplicate parameter `%A`"),
])
def test_bad_buffers_are_rejected(params: str, message: str) -> None:
    with pytest.raises(DiagnosticError, match=message.replace("(", r"\(").replace("?", r"\?")) as info:
        parse_primfunc(f"primfn @k({params}) {{\n}}\n", "test.tir")
    assert info.value.span is not None and info.value.span.line == 1


def test_duplicate_global_between_def_and_primfn() -> None:
    text = "def @k() { 0 }\nprimfn @k() {\n}\n"
    with pytest.raises(DiagnosticError, match="duplicate definition of global `@k`") as info:
        parse_module(text, "dup.tir")
    assert info.value.span.line == 2


def test_casts_of_literals_are_literals() -> None:
    func = body_of("%B[0] = int32(uint8(7) == uint8(7));\n%A[0, 0] = float32(2f64);")
    a, b = func.body.stmts
    eq = a.value.value
    assert isinstance(eq.a, IntImm) and eq.a.dtype == "uint8"
    assert isinstance(b.value, FloatImm) and b.value.dtype == "float32"


def test_var_helpers_keep_identity() -> None:
    func = body_of("for %i in range(0, 8) { %B[%i] = %i * %i; }")
    loop = func.body
    assert isinstance(loop.var, Var)
    assert loop.body.value.a is loop.var and loop.body.value.b is loop.var


def test_the_examples_in_docs_tir_md_parse_verify_and_print_as_written() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "tir.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```\n(.*?)```", doc, re.DOTALL)
    examples = [b for b in blocks if "primfn @" in b]
    assert examples
    for text in examples:
        mod = parse_module(text, "tir.md")
        for name, func in mod.functions.items():
            verify_primfunc(func, name)
        assert print_module(mod) == text


@pytest.mark.parametrize(("literal", "text"), [
    (IntImm(-128, "int8"), "-128i8"), (IntImm(7, "int16"), "7i16"), (IntImm(2**40, "int64"), "1099511627776i64"),
    (IntImm(4294967295, "uint32"), "uint32(4294967295)"), (IntImm(1, "bool"), "True"),
    (FloatImm(0.1, "float32"), "0.1f"), (FloatImm(-0.0, "float64"), "-0f64"), (FloatImm(1e-05, "float16"), "1e-05f16"),
    (FloatImm(float("inf"), "float16"), "float16(inff)"), (FloatImm(float("-inf"), "float64"), "float64(-inff)"),
    (FloatImm(float("-inf"), "float32"), "-inff"), (FloatImm(1.5, "bfloat16"), "bfloat16(1.5f64)"),
])
def test_literals_of_every_dtype_print_and_read_back(literal: IntImm | FloatImm, text: str) -> None:
    buf = Buffer("A", (), literal.dtype)
    func = PrimFunc([buf], BufferStore(buf, [], literal))
    printed = print_primfunc("k", func)
    assert printed == f"primfn @k(%A: Buffer[(), {literal.dtype}]) {{\n  %A[] = {text};\n}}\n"
    back = parse_primfunc(printed, "lit.tir").body.value
    assert type(back) is type(literal) and back.dtype == literal.dtype
    assert repr(back.value) == repr(literal.value)


def test_a_nan_literal_is_a_located_print_error() -> None:
    buf = Buffer("A", (), "float32")
    span = Span("nan.tir", 3, 5, 3, 9)
    with pytest.raises(DiagnosticError, match="NaN literal has no text form") as info:
        print_primfunc("k", PrimFunc([buf], BufferStore(buf, [], FloatImm(float("nan"), "float32", span))))
    assert info.value.span == span
