"""The well-formedness check: binding once, scoping (also through shared nodes), globals, constructors."""

from __future__ import annotations


import numpy as np
import pytest

from irtool.analysis.wellformed import check_well_formed, shared_free_vars
from irtool.ir import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, IRModule, Let, Match, Op,
                       PatternConstructor, PatternVar, TensorType, Tuple, TypeCall, TypeData, TypeVar, Var,
                       post_order)
from irtool.core.span import Span
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse

HEADER = '#[version = "0.0.5"]\n'
F32 = TensorType((), "float32")


def one() -> Constant:
    return Constant(np.array(1, "int32"))


def add(a: Expr, b: Expr, span: Span | None = None) -> Call:
    return Call(Op("add"), [a, b], span=span)


def test_parsed_programs_with_every_binder_are_well_formed() -> None:
    mod = parse(HEADER + "type List[A] { Cons(A, List[A]), Nil }\n"
                "def @len[A](%xs: List[A]) -> int32 {\n"
                "  match (%xs) { Cons(_, %rest) => 1 + @len(%rest), Nil => 0 }\n}\n"
                "def @main(%x: int32) {\n  let %f = fn (%n: int32) -> int32 {\n"
                "    if (%n == 0) { %x } else { %f(%n - 1) }\n  };\n"
                "  %0 = %f(%x);\n  (%0, %0, @len(Cons(%0, Nil)))\n}\n", "t.relay")
    check_well_formed(mod)  # a let-bound function may call itself, as in TVM


def test_a_variable_bound_twice_is_rejected_at_the_second_binder() -> None:
    x = Var("x", span=Span("t", 2, 5, 2, 7))
    prog = Let(x, one(), Let(x, one(), x))
    with pytest.raises(DiagnosticError, match=r"^variable %x is bound more than once$") as info:
        check_well_formed(prog)
    assert info.value.span == Span("t", 2, 5, 2, 7)
    p = Var("p")
    with pytest.raises(DiagnosticError, match="%p is bound more than once"):
        check_well_formed(Function([p, p], p))


def test_sharing_a_binder_node_is_not_binding_twice() -> None:
    x = Var("x")
    f = Function([x], x)
    check_well_formed(Tuple([f, f]))


def test_use_outside_the_let_scope() -> None:
    x = Var("x")
    span = Span("t", 3, 1, 3, 9)
    prog = Tuple([Let(x, one(), x), add(x, one(), span)])
    with pytest.raises(DiagnosticError, match=r"^%x is used outside the scope of its binding in the expression$") \
            as info:
        check_well_formed(prog)
    assert info.value.span == span


def test_pattern_variable_used_outside_its_clause() -> None:
    a = TypeVar("A")
    box = Constructor("Box", (a,), "B", 0)
    mod = IRModule()
    mod.add_type(TypeData("B", (a,), [box]))
    v = Var("v")
    data = Call(box, [one()])
    match = Match(data, [Clause(PatternConstructor(box, (PatternVar(v),)), v)])
    check_well_formed(match, mod)
    with pytest.raises(DiagnosticError, match="%v is used outside the scope"):
        check_well_formed(Tuple([match, v]), mod)


def test_shared_node_escaping_its_scope_is_caught_at_the_reuse() -> None:
    # Parsed: the graph binding %0 uses %x and is reused outside the function binding %x.
    prog = parse("%1 = fn (%x: int32) { %0 = add(%x, %x); %0 }; (%1, %0)", "t.relay")
    with pytest.raises(DiagnosticError, match="%x is used outside the scope") as info:
        check_well_formed(prog)
    assert info.value.span is not None and (info.value.span.line, info.value.span.col) == (1, 28)


def test_shared_node_reused_inside_nested_scopes_is_fine() -> None:
    p, q, r = Var("p"), Var("q"), Var("r")
    shared = add(p, p)
    inner = Function([q], add(shared, q))
    body = Let(r, shared, Tuple([Call(inner, [r]), shared, Function([], shared)]))
    check_well_formed(Function([p], body))


def test_free_variables_allowed_only_in_lone_expressions() -> None:
    x = Var("x", F32)
    check_well_formed(add(x, x))
    mod = IRModule()
    mod.add_function("f", Function([], add(x, x), span=Span("t", 4, 1, 4, 20)))
    with pytest.raises(DiagnosticError, match=r"^free variable %x in @f$"):
        check_well_formed(mod)


def test_globals_must_be_defined() -> None:
    mod = IRModule()  # (the parser already rejects these; passes could still produce them)
    span = Span("t", 2, 15, 2, 22)
    mod.add_function("main", Function([], Call(GlobalVar("helper", span), [one()])))
    with pytest.raises(DiagnosticError, match="undefined global @helper") as info:
        check_well_formed(mod)
    assert info.value.span == span
    with pytest.raises(DiagnosticError, match="undefined global @g"):
        check_well_formed(Call(GlobalVar("g"), []))


def test_constructors_must_belong_to_a_defined_type() -> None:
    stray = Constructor("Stray", (), "Nowhere", 0)
    with pytest.raises(DiagnosticError, match="constructor Stray does not belong to a defined type"):
        check_well_formed(Call(stray, []))
    mod = IRModule()
    a = TypeVar("A")
    mod.add_type(TypeData("B", (a,), [Constructor("Box", (a,), "B", 0)]))
    v = Var("v", TypeCall("B", (F32,)))
    match = Match(v, [Clause(PatternConstructor(stray, ()), one())])
    mod.add_function("f", Function([v], match))
    with pytest.raises(DiagnosticError, match="constructor Stray does not belong"):
        check_well_formed(mod)


def test_shared_free_vars_of_shared_nodes() -> None:
    p, q = Var("p"), Var("q")
    shared = add(p, q)
    inner = Let(q, one(), Tuple([shared, shared]))
    root = Function([p], Tuple([inner, inner]))
    result = shared_free_vars(post_order(root))
    assert result[id(shared)] == {id(p), id(q)}
    assert result[id(inner)] == {id(p)}  # q is bound by the let itself


@pytest.mark.parametrize("as_lets", [False, True], ids=["graph", "let"])
def test_long_chains_with_the_default_recursion_limit(as_lets: bool, default_recursion_limit: None) -> None:
    x = Var("x", F32)
    if as_lets:
        names = [Var(f"v{i}") for i in range(100_000)]  # 100k lets: over 300k nodes
        body: Expr = Tuple(list(names))  # every let variable is used at the end
        prev: Expr = x
        values = []
        for v in names:
            values.append(add(prev, x))
            prev = v
        for v, value in zip(reversed(names), reversed(values)):
            body = Let(v, value, body)
    else:
        body = x
        for _ in range(200_000):
            body = add(body, x)
    check_well_formed(Function([x], body))
    # The same chain with one out-of-scope use at the very end is rejected.
    y = Var("y")
    with pytest.raises(DiagnosticError, match="%y is used outside the scope"):
        check_well_formed(Tuple([Function([y], y), Function([x], add(body, y))]))
