"""Structural equality of PrimFuncs: names and spans do not matter, everything else does."""

from __future__ import annotations

import pytest

from irtool.ir.tir import BufferStore, For, IntImm, PrimFunc, Var, seq
from irtool.ir.tir_equality import tir_structural_equal, tir_structural_hash
from irtool.syntax.parser import parse_primfunc

BASE = """primfn @k(%A: Buffer[(4, 4), float32], %B: Buffer[(4), int32], global_symbol="k") {
  for %i in range(0, 4) {
    for %j in vectorized(0, 4) {
      let %x: float32 = %A[%i, %j] * 2f;
      %A[%j, %i] = %x;
    }
    %B[%i] = floordiv(%i, 2);
  }
}
"""


def parsed(text: str) -> PrimFunc:
    return parse_primfunc(text, "eq.tir")


def test_renamed_and_reformatted_functions_are_equal() -> None:
    other = parsed(BASE.replace("%i", "%row").replace("%j", "%col").replace("%x", "%t").replace("%A", "%In")
                   .replace("\n    ", "\n      ").replace("2f;", "2.0f;").replace("@k", "@other"))
    base = parsed(BASE)
    assert tir_structural_equal(base, other)
    assert tir_structural_hash(base) == tir_structural_hash(other)


@pytest.mark.parametrize(("old", "new"), [
    ("%A[%j, %i] = %x;", "%A[%i, %j] = %x;"),             # which binder an index refers to
    ("vectorized", "range"),                               # loop kind
    ("* 2f", "* 3f"),                                      # literal value
    ("floordiv(%i, 2)", "floormod(%i, 2)"),                # operator
    ("range(0, 4) {\n    for", "range(1, 4) {\n    for"),  # loop bound
    ("Buffer[(4), int32]", "Buffer[(4), int32, align=64]"),  # buffer declaration
    ("global_symbol=\"k\"", "global_symbol=\"f\""),        # function attributes
    ("let %x: float32 = %A[%i, %j] * 2f;", "let %x: float32 = %A[%i, %j] * 2f;\n      %B[0] = 1;"),
])
def test_any_other_difference_is_unequal(old: str, new: str) -> None:
    assert old in BASE
    base, other = parsed(BASE), parsed(BASE.replace(old, new, 1))
    assert not tir_structural_equal(base, other)


def test_negative_zero_differs_from_zero() -> None:
    one = parsed("primfn @k(%A: Buffer[(1), float32]) {\n  %A[0] = 0f;\n}\n")
    two = parsed("primfn @k(%A: Buffer[(1), float32]) {\n  %A[0] = -0f;\n}\n")
    assert not tir_structural_equal(one, two)


def test_swapping_which_buffer_is_which_is_unequal() -> None:
    text = "primfn @k(%A: Buffer[(4), int32], %B: Buffer[(4), int32]) {\n  %A[0] = %B[1];\n}\n"
    assert not tir_structural_equal(parsed(text), parsed(text.replace("%A[0] = %B[1]", "%B[0] = %A[1]")))


def test_a_free_variable_does_not_equal_a_bound_one() -> None:
    buf_text = "primfn @k(%B: Buffer[(4), int32]) {\n  for %i in range(0, 4) {\n    %B[%i] = %i;\n  }\n}\n"
    bound = parsed(buf_text)
    loop = bound.body
    stranger = Var("i", "int32")
    other = PrimFunc(bound.params, seq([For(loop.var, IntImm(0), IntImm(4), "serial",
                                            BufferStore(bound.params[0], [loop.var], stranger))]))
    assert not tir_structural_equal(bound, other)
