"""The TIR verifier: well-typed kernels pass; each rule's violation is a located error."""

from __future__ import annotations

import pytest

from irtool.analysis.tir_verify import verify_primfunc
from irtool.core.span import Span
from irtool.ir.tir import (Allocate, BinaryOp, Buffer, BufferLoad, BufferStore, For, IntImm, LetStmt, PrimFunc,
                           Var, seq)
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse_primfunc

HEADER = ("primfn @k(%A: Buffer[(4, 8), float32], %B: Buffer[(8), int32], %V: Buffer[(2), float32x4]) {\n")


def check(stmts: str) -> None:
    verify_primfunc(parse_primfunc(HEADER + stmts + "\n}\n", "v.tir"), "k")


def test_a_well_typed_kernel_passes() -> None:
    check("""\
for %i in range(0, 4) {
  let %s: float32 = float32(%B[%i]) * 0.5f;
  for %j in vectorized(0, 2) {
    %A[%i, ramp(%j * 4, 1, 4)] = %A[%i, ramp(%j * 4, 1, 4)] + broadcast(%s, 4);
  }
  %V[floormod(%i, 2)] = select(broadcast(%s > 0f, 4), %A[%i, ramp(0, 2, 4)], broadcast(-inff, 4));
  if (%i < 2 == True) { %B[%i] = int32(sqrt(%A[%i, 0])) / 2; }
}
assert(not(%B[0] != 0), "B[0] must be zero");
for %n in range(0i64, 4i64) { %B[int32(%n)] = max(%B[0], -1); }""")


@pytest.mark.parametrize(("stmts", "message", "line", "col"), [
    ("%B[0] = %A[0, 0];", "storing a float32 value into `%B`, whose elements here are int32", 2, 1),
    ("%B[0] = %B[1] + 1i64;", "operands of `+` have different dtypes: int32 and int64", 2, 9),
    ("%A[0, 0] = floordiv(%A[0, 1], 2f);", "`floordiv` needs integer operands, found float32", 2, 12),
    ("%B[%A[0, 0]] = 1;", "index of `%B` must be an integer, found float32", 2, 4),
    ("%B[0, 1] = 1;", "buffer `%B` has 1 dimension(s), indexed with 2", 2, 1),
    ("%A[0, ramp(0, 1, 4)] = 1f;", "storing a float32 value into `%A`, whose elements here are float32x4", 2, 1),
    ("%A[ramp(0, 1, 2), ramp(0, 1, 4)] = broadcast(1f, 4);", "vector indices of `%A` have different lanes (2 and 4)",
     2, 19),
    ("%V[ramp(0, 1, 2)] = broadcast(1f, 8);", "buffer `%V` of vector dtype float32x4 takes scalar indices only", 2, 1),
    ("if (%B[0]) { }", "an `if` condition must be a scalar bool, found int32", 2, 5),
    ("assert(%A[0, ramp(0, 1, 4)] > broadcast(0f, 4), \"x\");", "assert condition must be a scalar bool", 2, 8),
    ("for %i in range(0, 4i64) { }", "loop bounds of `%i` must be int32, found int64", 2, 20),
    ("for %i in range(0f, 4f) { }", "loop variable `%i` must be a scalar integer, not float32", 2, 5),
    ("let %x: int64 = 1;", "`let %x: int64` is given a int32 value", 2, 1),
    ("%A[0, 0] = exp(%B[0]);", "`exp` needs float arguments of one dtype, found int32", 2, 12),
    ("%A[0, 0] = float32x4(%A[0, 1]);", "cast from float32 to float32x4 changes the number of lanes", 2, 12),
    ("%A[0, 0] = select(True, 1f, 1f64);", "select branches have different dtypes: float32 and float64", 2, 12),
    ("%A[0, 0] = if_then_else(True, 1f, 1f64);", "if_then_else branches have different dtypes", 2, 12),
    ("%A[0, 0] = if_then_else(1, 1f, 1f);", "if_then_else condition must be a scalar bool, found int32", 2, 12),
    ("%B[0] = int32(and(1, 2));", "`and` needs bool operands, found int32", 2, 15),
    ("%B[0] = int32(not(1));", "`not` needs a bool operand, found int32", 2, 15),
    ("%A[0, 0] = %A[0, 0] + broadcast(1f, 4);", "operands of `+` have different dtypes: float32 and float32x4", 2, 12),
    ("%A[ramp(0, 1i64, 4), 0] = broadcast(1f, 4);", "ramp needs scalar integer base and stride of one dtype", 2, 4),
    ("%B[0] = 300i8;", "integer literal `300i8` unrepresentable", 2, 9),
])
def test_violations_are_located(stmts: str, message: str, line: int, col: int) -> None:
    with pytest.raises(DiagnosticError) as info:
        check(stmts)
    assert message in str(info.value)
    span = info.value.span
    assert (span.source, span.line, span.col) == ("v.tir", line, col)


SPAN = Span("built.tir", 7, 3, 7, 9)


def int_buffer(name: str = "B") -> Buffer:
    return Buffer(name, (8,), "int32", span=SPAN)


def test_a_variable_used_outside_its_loop() -> None:
    buf = int_buffer()
    i = Var("i", "int32")
    body = seq([For(i, IntImm(0), IntImm(8), "serial", BufferStore(buf, [i], i)), BufferStore(buf, [i], IntImm(1))])
    with pytest.raises(DiagnosticError, match="variable `%i` is used outside its scope"):
        verify_primfunc(PrimFunc([buf], body, span=SPAN))


def test_a_loop_variable_is_never_rebound() -> None:
    buf = int_buffer()
    i = Var("i", "int32", SPAN)
    inner = For(i, IntImm(0), IntImm(2), "serial", BufferStore(buf, [i], i))
    with pytest.raises(DiagnosticError, match="variable `%i` is bound more than once") as info:
        verify_primfunc(PrimFunc([buf], For(i, IntImm(0), IntImm(4), "serial", inner)))
    assert info.value.span == SPAN
    rebound_by_let = For(i, IntImm(0), IntImm(4), "serial", LetStmt(i, IntImm(3), BufferStore(buf, [i], i)))
    with pytest.raises(DiagnosticError, match="variable `%i` is bound more than once"):
        verify_primfunc(PrimFunc([buf], rebound_by_let))


def test_an_allocation_is_visible_only_inside_its_body() -> None:
    buf = int_buffer()
    scratch = Buffer("T", (4,), "int32", scope="local")
    body = seq([Allocate(scratch, BufferStore(scratch, [IntImm(0)], IntImm(1))),
                BufferStore(buf, [IntImm(0)], BufferLoad(scratch, [IntImm(0)], SPAN))])
    with pytest.raises(DiagnosticError, match="buffer `%T` is used outside its scope") as info:
        verify_primfunc(PrimFunc([buf], body))
    assert info.value.span == SPAN


def test_node_without_span_is_reported_at_the_enclosing_statement() -> None:
    buf = int_buffer()
    store = BufferStore(buf, [IntImm(0)], BinaryOp("add", IntImm(1), IntImm(1, "int64")), SPAN)
    with pytest.raises(DiagnosticError, match="different dtypes") as info:
        verify_primfunc(PrimFunc([buf], store))
    assert info.value.span == SPAN


@pytest.mark.parametrize(("buffer", "message"), [
    (Buffer("A", (4,), "float33"), "invalid dtype `float33`"),
    (Buffer("A", (4, -1), "float32"), "invalid shape"),
    (Buffer("A", (4,), "float32", strides=(1, 1)), "has 2 strides for 1 dimensions"),
    (Buffer("A", (4,), "float32", scope="local"), "parameter `%A` must be in global scope"),
])
def test_bad_parameter_buffers(buffer: Buffer, message: str) -> None:
    with pytest.raises(DiagnosticError, match=message):
        verify_primfunc(PrimFunc([buffer], seq([])))
