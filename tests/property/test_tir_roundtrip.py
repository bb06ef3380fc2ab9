"""TIR round trips: random PrimFuncs print, re-parse to a structurally equal function (modulo
names), print identically again, and pass the verifier before and after."""

from __future__ import annotations

from hypothesis import given, settings
from support.tir_strategies import primfuncs

from irtool.analysis.tir_verify import verify_primfunc
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.ir.tir_equality import canonical_form, tir_structural_equal, tir_structural_hash
from irtool.syntax.parser import parse_module
from irtool.syntax.printer import print_module


def _module(func: PrimFunc) -> IRModule:
    mod = IRModule()
    mod.add_function("kernel", func)  # type: ignore[arg-type]
    return mod


@settings()
@given(primfuncs())
def test_primfuncs_round_trip(func: PrimFunc) -> None:
    verify_primfunc(func, "kernel")
    text = print_module(_module(func))
    parsed = parse_module(text, "printed.tir").functions["kernel"]
    assert isinstance(parsed, PrimFunc)
    assert tir_structural_equal(parsed, func), text
    assert tir_structural_hash(parsed) == tir_structural_hash(func)
    verify_primfunc(parsed, "kernel")
    assert print_module(_module(parsed)) == text


@settings()
@given(primfuncs(), primfuncs())
def test_equality_agrees_with_the_printed_text(a: PrimFunc, b: PrimFunc) -> None:
    # Printing names binders canonically only up to renaming, so compare the canonical forms of
    # the re-parsed texts: equal functions must print alike, and different texts must differ.
    same = tir_structural_equal(a, b)
    assert same == (canonical_form(a) == canonical_form(b))
    if same:
        assert print_module(_module(a)) == print_module(_module(b))
