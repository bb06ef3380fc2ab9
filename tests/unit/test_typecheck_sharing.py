"""Type inference over types that are DAGs, the nesting limit and the kind check of annotations.

A chain `let %aI = (%aI-1, %aI-1)` has a type of 2**N leaves written out: inference must treat
it as the N+1 objects it is (issue #18, case 3a). Nesting limits count levels of tuple, function,
`ref` and ADT types (`MAX_TYPE_DEPTH`); expected columns are counted from the program text.
"""

from __future__ import annotations

import time

import pytest

from irtool.analysis.typecheck import infer_types
from irtool.core.diagnostics import DiagnosticError
from irtool.ir import Function, IRModule, Let, TensorType, TupleType, Type, Var
from irtool.ir.types import MAX_TYPE_DEPTH
from irtool.syntax.parser import parse

HEADER = '#[version = "0.0.5"]\n'
LIST = HEADER + "type List[A] {\n  Cons(A, List[A]),\n  Nil,\n}\n"
WRAP = "def @wrap[A](%x: A) -> (A,) {\n  (%x,)\n}\n"
F32 = TensorType((), "float32")


def doubling_chain(n: int, name: str = "a", base: str = "float32") -> str:
    """The issue's generator: `let %aI = (%aI-1, %aI-1);` for I = 1..n."""
    return "".join(f"  let %{name}{i} = (%{name}{i - 1}, %{name}{i - 1});\n" for i in range(1, n + 1))


def fails(text: str) -> DiagnosticError:
    prog = parse(text, "t.relay")
    with pytest.raises(DiagnosticError) as info:
        infer_types(prog)
    assert info.value.span is not None and info.value.span.source == "t.relay", info.value
    return info.value


def test_a_doubling_chain_of_depth_25_checks_in_linear_time() -> None:
    text = HEADER + "def @main(%a0: float32) {\n" + doubling_chain(25) + "  %a25\n}\n"
    mod = parse(text)
    start = time.process_time()
    infer_types(mod)
    elapsed = time.process_time() - start
    assert elapsed < 10, f"{elapsed:.1f} s: a tree walk of 2**25 leaves took minutes"   # linear: ~0.01 s
    node = mod["main"].body
    for i in range(1, 26):
        assert isinstance(node, Let) and node.var.name_hint == f"a{i}"
        t = node.var.checked_type
        assert isinstance(t, TupleType) and t.depth == i and t.fields[0] is t.fields[1]   # shared, not copied
        node = node.body
    assert mod["main"].checked_type.ret_type == node.checked_type   # type: ignore[union-attr]


def test_two_separately_built_doubling_types_unify() -> None:
    body = doubling_chain(40) + doubling_chain(40, "b") + \
        "  if (%c) { %a40 } else { %b40 }\n"
    mod = parse(HEADER + "def @main(%c: bool, %a0: float32, %b0: float32) {\n" + body + "}\n")
    infer_types(mod)
    assert mod["main"].checked_type.ret_type.depth == 40   # type: ignore[union-attr]


def test_a_mismatch_between_exponential_types_has_a_short_message() -> None:
    err = fails(HEADER + "def @main(%c: bool, %a0: float32, %b0: int32) {\n" + doubling_chain(40) +
                doubling_chain(40, "b") + "  if (%c) { %a40 } else { %b40 }\n}\n")
    assert str(err).startswith("if branches differ: expected " + "(" * 40 + "float32, float32), ")
    assert len(str(err)) < 4200 and "..." in str(err)
    assert (err.span.line, err.span.col) == (82, 7)   # type: ignore[union-attr]  # %b40, where it is bound


def test_a_value_may_nest_100_levels_and_no_more() -> None:
    def program(n: int) -> str:
        return HEADER + WRAP + "def @main(%y: float32) {\n  let %r = " + "@wrap(" * n + "%y" + ")" * n + \
            ";\n  0f\n}\n"

    mod = parse(program(MAX_TYPE_DEPTH))
    infer_types(mod)
    assert mod["main"].body.var.checked_type.depth == MAX_TYPE_DEPTH   # type: ignore[union-attr]
    err = fails(program(MAX_TYPE_DEPTH + 1))
    assert str(err) == "type of call to @wrap nested too deeply (limit 100)"
    assert (err.span.line, err.span.col) == (6, 12)   # type: ignore[union-attr]  # the outermost call


def test_holes_bound_to_deep_types_are_refused_without_recursion(default_recursion_limit: None) -> None:
    # %y has no annotation: each call's result is a hole over the previous one, so the depth only
    # shows when the holes are bound; the call at level 101 from the inside is reported.
    n = 5000
    text = HEADER + WRAP + "def @main(%y) {\n  " + "@wrap(" * n + "%y" + ")" * n + "\n}\n"
    start = time.process_time()
    err = fails(text)
    assert time.process_time() - start < 10
    assert str(err) == "type of call to @wrap nested too deeply (limit 100)"
    assert (err.span.line, err.span.col) == (6, 3 + 6 * (n - 101))   # type: ignore[union-attr]


def test_nested_tuple_expressions_are_refused_at_the_first_too_deep_one(default_recursion_limit: None) -> None:
    n = 3000
    err = fails(HEADER + "def @main(%x: float32) {\n  " + "(" * n + "%x" + ",)" * n + "\n}\n")
    assert str(err) == "type of tuple nested too deeply (limit 100)"
    assert err.span.line == 3 and err.span.col == 3 + n - 101 and err.span.end_col == err.span.col + 1   # type: ignore


def test_nested_functions_are_refused_by_the_depth_of_their_type() -> None:
    n = 150
    err = fails(HEADER + "def @main(%x: float32) {\n  " + "fn () { " * n + "%x" + " }" * n + "\n}\n")
    assert str(err) == "type of function nested too deeply (limit 100)"
    assert err.span.col == 3 + 8 * (n - 101)   # type: ignore[union-attr]  # the 101st from the inside


def test_annotations_are_kind_checked_in_a_lone_expression() -> None:
    mod = parse(LIST + "def @main() { Nil }")
    assert isinstance(mod, IRModule)
    for text, message, col in [
        ("fn (%l: List[float32, int32]) { %l }", "type `List` takes 1 type argument, got 2", 5),
        ("fn (%l: List) { %l }", "type `List` takes 1 type argument, got 0", 5),
        ("fn (%t: Tree[float32]) { %t }", "undefined type `Tree`", 5),
        ("fn (%x: float32) -> (List[float32, float32],) { %x }", "type `List` takes 1 type argument, got 2", 1),
    ]:
        expr = parse(text, "t.relay")
        with pytest.raises(DiagnosticError) as info:
            infer_types(expr, mod)
        assert str(info.value) == message and info.value.span.col == col, text   # type: ignore[union-attr]


def test_a_built_annotation_deeper_than_the_limit_is_refused_at_its_binder() -> None:
    deep: Type = F32
    for _ in range(MAX_TYPE_DEPTH + 1):
        deep = TupleType((deep,))
    x = Var("x", deep, span=parse("fn (%x) { %x }", "t.relay").params[0].span)   # type: ignore[union-attr]
    with pytest.raises(DiagnosticError) as info:
        infer_types(Function([x], x))
    assert str(info.value) == "type annotation nested too deeply (limit 100)" and info.value.span == x.span
