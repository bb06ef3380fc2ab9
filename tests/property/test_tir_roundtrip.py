"""TIR round trips: random PrimFuncs print, re-parse to a structurally equal function (modulo
names), print identically again, and pass the verifier before and after."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import modules
from support.tir_strategies import primfuncs

from irtool.analysis.tir_verify import verify_primfunc
from irtool.ir.equality import structural_equal
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.ir.tir_equality import tir_structural_equal, tir_structural_hash
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
@given(primfuncs())
def test_equality_and_hash_ignore_names(func: PrimFunc) -> None:
    text = print_module(_module(func))
    # Printed names are unique in a function, so renaming every one of them keeps the meaning.
    renamed_text = re.sub(r"%([A-Za-z_][A-Za-z0-9_/]*)", r"%renamed_\1", text)
    renamed = parse_module(renamed_text, "renamed.tir").functions["kernel"]
    assert tir_structural_equal(renamed, func)
    assert tir_structural_hash(renamed) == tir_structural_hash(func)
    if "%" in text:
        assert print_module(_module(renamed)) != text


@settings()
@given(modules(), st.lists(primfuncs(max_depth=2), max_size=2))
def test_modules_mixing_defs_and_primfns_round_trip(mod: IRModule, kernels: list[PrimFunc]) -> None:
    mixed = mod.copy()
    for i, func in enumerate(kernels):
        mixed.add_function(f"kernel_{i}", func)  # type: ignore[arg-type]
    text = print_module(mixed)
    parsed = parse_module(text, "mixed.relay")
    assert structural_equal(parsed, mixed), text
    assert sorted(parsed.functions) == sorted(mixed.functions)
    assert print_module(parsed) == text
