"""Type inference: one test per construct, the error messages and their locations, and scale."""

from __future__ import annotations

import time

import numpy as np
import pytest

from irtool.analysis.typecheck import infer_expr_type, infer_types
from irtool.ir import (Any, Call, Constant, Expr, FuncType, Function, GlobalVar, IncompleteType, IRModule, Let, Op,
                       RefType, TensorType, Tuple, TupleType, Type, TypeCall, TypeVar, Var, post_order)
from irtool.ops import registry
from irtool.ops.registry import OpDef
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse

HEADER = '#[version = "0.0.5"]\n'
LIST = HEADER + "type List[A] {\n  Cons(A, List[A]),\n  Nil,\n}\n"

F32 = TensorType((), "float32")
I32 = TensorType((), "int32")
BOOL = TensorType((), "bool")


def t(shape: tuple[int, ...], dtype: str = "float32") -> TensorType:
    return TensorType(shape, dtype)


def check(text: str) -> IRModule | Expr:
    prog = parse(text, "test.relay")
    infer_types(prog)
    return prog


def fails(text: str) -> DiagnosticError:
    prog = parse(text, "test.relay")
    with pytest.raises(DiagnosticError) as info:
        infer_types(prog)
    return info.value


def where(err: DiagnosticError) -> tuple[int, int]:
    assert err.span is not None, f"error without a location: {err}"
    assert err.span.source == "test.relay"
    return err.span.line, err.span.col


def has_hole(ty: Type) -> bool:
    if isinstance(ty, IncompleteType):
        return True
    if isinstance(ty, TupleType):
        return any(has_hole(f) for f in ty.fields)
    if isinstance(ty, FuncType):
        return any(has_hole(a) for a in ty.arg_types) or has_hole(ty.ret_type)
    if isinstance(ty, TypeCall):
        return any(has_hole(a) for a in ty.args)
    if isinstance(ty, RefType):
        return has_hole(ty.value)
    return False


def assert_all_typed(root: Expr) -> None:
    """Every expression except operator callees carries a complete type."""
    for node in post_order(root):
        if isinstance(node, Op):
            continue
        assert node.checked_type is not None, node
        assert not has_hole(node.checked_type), (node, node.checked_type)


# ---- constants, operators ------------------------------------------------------------------------

def test_constants_get_their_array_type() -> None:
    assert infer_expr_type(Constant(np.zeros((2, 3), "float16"))) == t((2, 3), "float16")
    assert infer_expr_type(Constant(np.array(True))) == BOOL
    assert check("-42i64").checked_type == TensorType((), "int64")  # type: ignore[union-attr]
    assert check("3f16").checked_type == TensorType((), "float16")  # type: ignore[union-attr]


def test_operator_call_uses_the_relation_and_broadcasts() -> None:
    mod = check(HEADER + "def @f(%a: Tensor[(1, 3), float32], %b: Tensor[(4, 3), float32]) {\n"
                "  %0 = add(%a, %b);\n  nn.relu(%0)\n}\n")
    assert isinstance(mod, IRModule)
    f = mod["f"]
    assert f.body.checked_type == t((4, 3))
    assert f.checked_type == FuncType((t((1, 3)), t((4, 3))), t((4, 3)))
    assert_all_typed(f)


def test_broadcast_error_names_both_sides_at_the_call() -> None:
    err = fails(HEADER + "def @f(%a: Tensor[(1, 3), float32], %b: Tensor[(4), float32]) {\n"
                "  add(%a, %b)\n}\n")
    assert str(err) == "add: cannot broadcast Tensor[(1, 3), float32] with Tensor[(4), float32]"
    assert where(err) == (3, 3)


def test_comparison_of_bool_with_int_is_an_operator_error() -> None:
    err = fails("(1 < 1) == 1")
    assert str(err).startswith("equal: ")
    assert "bool" in str(err) and "int32" in str(err)


def test_unknown_operator_and_operator_without_relation(monkeypatch: pytest.MonkeyPatch) -> None:
    x = Var("x", F32)
    with pytest.raises(DiagnosticError, match="unknown operator test.nosuch"):
        infer_types(Function([x], Call(Op("test.nosuch"), [x])))
    registry.get_op("add")  # load the real registry before patching it
    monkeypatch.setitem(registry.REGISTRY, "test.norel", OpDef("test.norel", 1))
    with pytest.raises(DiagnosticError, match="^no type relation for operator test.norel$"):
        infer_types(Function([x], Call(Op("test.norel"), [x])))


def test_operator_arity_is_checked() -> None:
    x = Var("x", F32)
    with pytest.raises(DiagnosticError, match="add takes 2 arguments, got 1"):
        infer_types(Function([x], Call(Op("add"), [x])))


def test_bare_operator_is_a_located_error() -> None:
    err = fails("nn.global_avg_pool2d")
    assert "nn.global_avg_pool2d used as a value" in str(err)
    assert where(err) == (1, 1)


def test_operator_relation_waits_for_argument_types() -> None:
    # %y has no annotation: add cannot run until the call %f(...) fixes %y's type.
    prog = check("free_var %a: Tensor[(2, 2), float32];\n"
                 "let %f = fn (%y) { add(%y, %y) };\n%f(%a)")
    assert prog.checked_type == t((2, 2))  # type: ignore[union-attr]
    assert_all_typed(prog)  # type: ignore[arg-type]


def test_identity_relation_lets_types_flow_back_from_its_result() -> None:
    # %a and %b are only known through %h(%z), which reaches them through on_device's result.
    mod = check(HEADER + "def @main(%x: bool, %y: Tensor[(5, 7), float32], %z: Tensor[(5, 7), float32]) {\n"
                "  let %f = fn (%a) { add(%a, %y) };\n  let %g = fn (%b) { subtract(%b, %y) };\n"
                "  let %h = on_device(if (%x) { %f } else { %g });\n  %h(%z)\n}\n")
    t57 = t((5, 7))
    assert mod["main"].checked_type == FuncType((BOOL, t57, t57), t57)  # type: ignore[index]
    assert_all_typed(mod["main"])  # type: ignore[index]


def test_relation_result_checked_against_later_constraint() -> None:
    err = fails("free_var %a: Tensor[(2, 2), float32];\n"
                "let %f = fn (%y) -> Tensor[(3), float32] { add(%y, %y) };\n%f(%a)")
    assert str(err) == "type mismatch: expected Tensor[(3), float32], found Tensor[(2, 2), float32]"


# ---- annotations, let, functions, calls ------------------------------------------------------------

def test_type_mismatch_names_both_sides_at_the_body() -> None:
    err = fails(HEADER + "def @f(%x: Tensor[(3), float32]) -> Tensor[(3), float32] {\n  1\n}\n")
    assert str(err) == "type mismatch: expected Tensor[(3), float32], found int32"
    assert where(err) == (3, 3)


def test_let_annotation_mismatch_is_located_at_the_value() -> None:
    err = fails("let %x: int8 = (); %x")
    assert str(err) == "type mismatch: expected int8, found ()"
    assert where(err) == (1, 16)


def test_unannotated_let_and_hole_annotation_take_the_value_type() -> None:
    prog = check("let %x = (1, 2f);\nlet %y: _ = %x.1;\n%y")
    assert isinstance(prog, Let)
    assert prog.var.checked_type == TupleType((I32, F32))
    assert prog.checked_type == F32


def test_unannotated_parameter_is_solved_by_the_call() -> None:
    prog = check("let %id = fn (%x) { %x };\n10 * %id(10)")
    assert isinstance(prog, Let) and isinstance(prog.value, Function)
    assert prog.value.checked_type == FuncType((I32,), I32)


def test_closures_and_currying() -> None:
    prog = check("let %curried = fn (%x) { fn (%y) { %x * %y } };\n%curried(0)(1)")
    assert isinstance(prog, Let)
    assert prog.var.checked_type == FuncType((I32,), FuncType((I32,), I32))
    assert prog.checked_type == I32


def test_unsolvable_parameter_is_reported_by_name() -> None:
    err = fails("fn (%x, %y) { %x + %y }")
    assert str(err) == "cannot infer type of %x"
    assert where(err) == (1, 5)


def test_wrong_argument_count_and_type() -> None:
    err = fails("let %f = fn (%x: int32) { %x };\n%f(1, 2)")
    assert str(err) == "wrong number of arguments: %f takes 1, got 2"
    err = fails("let %f = fn (%x: int32) { %x };\n%f(1f)")
    assert str(err) == "type mismatch: expected int32, found float32"
    assert where(err) == (2, 4)


def test_calling_a_non_function() -> None:
    err = fails("free_var %x: float32; %x((%x,).0, %x)")
    assert str(err) == "cannot call %x: it has type float32, not a function"


def test_self_application_fails_the_occurs_check() -> None:
    err = fails("fn (%f) { %f(%f) }")
    assert str(err).startswith("type mismatch")


def test_dynamic_dimension_unifies_with_any_dimension_but_not_rank() -> None:
    mod = check(HEADER + "def @f(%x: Tensor[(?, 3), float32]) -> Tensor[(5, 3), float32] { %x }\n")
    assert mod["f"].checked_type == FuncType((TensorType((Any(), 3), "float32"),), t((5, 3)))  # type: ignore[index]
    err = fails(HEADER + "def @f(%x: Tensor[(?, 3), float32]) -> Tensor[(3), float32] { %x }\n")
    assert str(err) == "type mismatch: expected Tensor[(3), float32], found Tensor[(?, 3), float32]"


# ---- tuples, if, refs ----------------------------------------------------------------------------

def test_tuples_and_projection() -> None:
    prog = check("free_var %a: Tensor[(2), float32];\nlet %p = ((%a, 1), %a).0;\n%p.1")
    assert prog.checked_type == I32  # type: ignore[union-attr]
    err = fails("(1, 2).2")
    assert str(err) == "tuple index 2 out of range for (int32, int32)"
    err = fails("let %x = 1; %x.0")
    assert str(err) == "cannot project field 0 from a value of type int32"


def test_projection_of_a_not_yet_known_tuple_waits() -> None:
    prog = check("let %f = fn (%p) { %p.1 };\n%f((1, 2f))")
    assert prog.checked_type == F32  # type: ignore[union-attr]


def test_if_types_and_errors() -> None:
    mod = check(HEADER + "def @f(%b: bool) {\n  if (%b) { 1 } else { 0 }\n}\n")
    assert mod["f"].checked_type == FuncType((BOOL,), I32)  # type: ignore[index]
    err = fails("if (1) { 2 } else { 3 }")
    assert str(err) == "if condition must be a bool scalar: expected bool, found int32"
    assert where(err) == (1, 5)
    err = fails("if (True) { 2 } else { 3f }")
    assert str(err) == "if branches differ: expected int32, found float32"
    assert where(err) == (1, 24)


def test_condition_solves_an_unannotated_variable_to_bool() -> None:
    prog = check("let %f = fn (%c) { if (%c) { 1 } else { 2 } };\n%f")
    assert prog.checked_type == FuncType((BOOL,), I32)  # type: ignore[union-attr]


def test_refs() -> None:
    mod = check(HEADER + "def @main(%x: float32) {\n  %0 = ref(%x);\n  ref_write(%0, 1f);\n  ref_read(%0)\n}\n")
    main = mod["main"]  # type: ignore[index]
    assert main.checked_type == FuncType((F32,), F32)
    assert isinstance(main.body, Let)
    assert main.body.value.checked_type == TupleType(())  # ref_write returns ()
    assert main.body.value.ref.checked_type == RefType(F32)  # type: ignore[attr-defined]
    err = fails("let %r = ref(1); ref_write(%r, 2f)")
    assert str(err) == "type mismatch: expected ref(float32), found ref(int32)"


def test_unannotated_global_parameter_solved_by_its_caller() -> None:
    mod = check(HEADER + "def @f(%r) -> int {\n  let %v = ref_read(%r);\n  let %u = ref_write(%r, %v + 1);\n"
                "  %v\n}\ndef @main() -> int {\n  let %r = ref(0);\n  @f(%r)\n}\n")
    assert mod["f"].params[0].checked_type == RefType(I32)  # type: ignore[index]
    mod = check(HEADER + "def @f(%x) { %x + 1 }\ndef @main() { @f(2) }\n")
    assert mod["f"].checked_type == FuncType((I32,), I32)  # type: ignore[index]


# ---- globals, recursion, polymorphism ------------------------------------------------------------

def test_recursion_through_a_global() -> None:
    mod = check(HEADER + "def @sum(%n: int32) -> int32 {\n"
                "  if (%n == 0) { 0 } else { %n + @sum(%n - 1) }\n}\n")
    f = mod["sum"]  # type: ignore[index]
    assert f.checked_type == FuncType((I32,), I32)
    assert_all_typed(f)


def test_recursive_let_bound_function() -> None:
    mod = check(HEADER + "def @main() {\n  let %f = fn (%n: int, %data: int) -> int {\n"
                "    if (%n == 0) { %data } else { %f(%n - 1, %data + 1) }\n  };\n  %f(2, 10000)\n}\n")
    assert mod["main"].checked_type == FuncType((), I32)  # type: ignore[index]


def test_undefined_global() -> None:
    with pytest.raises(DiagnosticError, match="undefined global @g"):
        infer_types(Call(GlobalVar("g"), []))


def test_polymorphic_identity_is_instantiated_at_each_use() -> None:
    for ret in ("-> A ", ""):  # with and without the return annotation
        mod = check(HEADER + f"def @id[A](%x: A) {ret}{{ %x }}\n"
                    "def @main(%f: float32) { (@id(%f), @id(1), @id(@id)(True)) }\n")
        main = mod["main"]  # type: ignore[index]
        assert main.body.checked_type == TupleType((F32, I32, BOOL))
        a = TypeVar("A")
        assert mod["id"].checked_type == FuncType((a,), a, (a,))  # type: ignore[index]


def test_polymorphic_body_is_checked_against_its_type_variables() -> None:
    err = fails(HEADER + "def @bad[A](%x: A) -> A { 1 }\n")
    assert str(err) == "type mismatch: expected A, found int32"


def test_explicit_type_arguments_are_used() -> None:
    mod = IRModule()
    a = TypeVar("A")
    x = Var("x", a)
    mod.add_function("id", Function([x], x, a, (a,)))
    call = Call(GlobalVar("id"), [Constant(np.array(1, "int32"))], type_args=(F32,))
    with pytest.raises(DiagnosticError, match="expected float32, found int32"):
        infer_types(call, mod)
    call = Call(GlobalVar("id"), [Constant(np.array(1, "int32"))], type_args=(F32, F32))
    with pytest.raises(DiagnosticError, match="@id takes 1 type arguments, got 2"):
        infer_types(call, mod)


def test_lone_expression_uses_the_inferred_signatures_of_a_module() -> None:
    mod = check(HEADER + "def @f(%x) { %x + 1 }\ndef @main() { @f(2) }\n")
    assert isinstance(mod, IRModule)
    assert infer_expr_type(Call(GlobalVar("f"), [Constant(np.array(5, "int32"))]), mod) == I32


def test_polymorphic_let_bound_function_is_instantiated_per_call() -> None:
    prog = check("let %id = fn [A](%x: A) -> A { %x };\n(%id(1), %id(2f))")
    assert prog.checked_type == TupleType((I32, F32))  # type: ignore[union-attr]


def test_polymorphic_function_value_passed_where_a_monomorphic_one_is_expected() -> None:
    mod = check(HEADER + "def @simple[A, B](%f: fn(A) -> B, %xs: A) -> B { %f(%xs) }\n"
                "def @main(%l: Tensor[(5, 5), float32]) {\n"
                "  %0 = fn[A](%x: A) -> A { %x };\n  @simple(%0, %l)\n}\n")
    assert mod["main"].checked_type == FuncType((t((5, 5)),), t((5, 5)))  # type: ignore[index]


# ---- ADTs and match ------------------------------------------------------------------------------

def test_list_map_and_length() -> None:
    mod = check(LIST + "def @id[A](%x: A) -> A { %x }\n"
                "def @map[A, B](%f: fn(A) -> B, %xs: List[A]) -> List[B] {\n"
                "  match (%xs) {\n    Cons(%x, %rest) => Cons(%f(%x), @map(%f, %rest)),\n    Nil => Nil,\n  }\n}\n"
                "def @length[A](%xs: List[A]) -> int32 {\n"
                "  match (%xs) {\n    Cons(_, %rest) => 1 + @length(%rest),\n    Nil => 0,\n  }\n}\n"
                "def @main(%l: List[float32]) { (@map(@id, %l), @length(Cons(1, Nil))) }\n")
    assert mod["main"].body.checked_type == TupleType((TypeCall("List", (F32,)), I32))  # type: ignore[index]
    a = TypeVar("A")
    match = mod["map"].body  # type: ignore[index]
    x, rest = match.clauses[0].lhs.bound_vars()
    assert (x.checked_type, rest.checked_type) == (a, TypeCall("List", (a,)))
    for f in mod.functions.values():  # type: ignore[union-attr]
        assert_all_typed(f)


def test_constructor_value_has_its_polymorphic_type() -> None:
    mod = check(LIST + "def @main[A]() -> fn (A, List[A]) -> List[A] {\n  Cons\n}\n")
    a = TypeVar("A")
    assert mod["main"].body.checked_type == FuncType((a, TypeCall("List", (a,))), TypeCall("List", (a,)), (a,))  # type: ignore[index]


def test_pattern_of_wrong_type_is_located_at_the_pattern() -> None:
    err = fails(LIST + "type Box[T] { Box(T) }\n"
                "def @f(%b: Box[int32]) -> int32 {\n  match (%b) {\n    Nil => 0,\n  }\n}\n")
    assert str(err) == "pattern of type List[_] cannot match a value of type Box[int32]"
    assert where(err) == (9, 5)


def test_match_clauses_must_agree_and_tuple_patterns_are_typed() -> None:
    err = fails(LIST + "def @f(%l: List[int32]) {\n  match (%l) {\n    Cons(%h, _) => %h,\n    Nil => 1f,\n  }\n}\n")
    assert str(err) == "match clauses differ: expected int32, found float32"
    mod = check(LIST + "def @f(%a: (List[()], ())) -> int {\n  match (%a) {\n"
                "    (Cons((), Nil), ()) => 1,\n    _ => 2,\n  }\n}\n")
    assert mod["f"].checked_type == FuncType((TupleType((TypeCall("List", (TupleType(()),)), TupleType(()))),), I32)  # type: ignore[index]


def test_constructor_argument_mismatch() -> None:
    err = fails(LIST + "def @f() -> List[int32] { Cons(1f, Nil) }\n")
    assert str(err) == "type mismatch: expected List[int32], found List[float32]"


# ---- DAGs and scale ------------------------------------------------------------------------------

def test_shared_nodes_are_typed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    add = registry.get_op("add")
    assert add is not None and add.type_rel is not None
    calls = 0
    real = add.type_rel

    def counting(args, attrs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return real(args, attrs)

    monkeypatch.setattr(add, "type_rel", counting)
    x = Var("x", t((2,)))
    node: Expr = x
    for _ in range(60):  # 2**60 paths: only a memoised walk finishes
        node = Call(Op("add"), [node, node])
    assert infer_expr_type(Function([x], node)) == FuncType((t((2,)),), t((2,)))
    assert calls == 60


def _chain(n: int, as_lets: bool) -> Function:
    x = Var("x", t((4,)))
    if not as_lets:
        cur: Expr = x
        for _ in range(n):
            cur = Call(Op("add"), [cur, x])
        return Function([x], cur)
    bindings = []
    cur = x
    for i in range(n):
        v = Var(f"v{i}")
        bindings.append((v, Call(Op("add"), [cur, x])))
        cur = v
    body: Expr = cur
    for v, value in reversed(bindings):
        body = Let(v, value, body)
    return Function([x], body)


@pytest.mark.parametrize("as_lets", [False, True], ids=["graph", "let"])
def test_long_chains_with_the_default_recursion_limit(as_lets: bool, default_recursion_limit: None) -> None:
    f = _chain(200_000, as_lets)
    infer_types(f)
    assert f.checked_type == FuncType((t((4,)),), t((4,)))
    node = f.body
    while isinstance(node, Let):  # every let of the chain is typed
        assert node.var.checked_type == t((4,))
        node = node.body


def test_hundred_thousand_node_chain_takes_seconds() -> None:
    f = _chain(100_000, as_lets=False)
    start = time.process_time()  # CPU time: other processes on the machine do not count
    infer_types(f)
    elapsed = time.process_time() - start
    assert f.checked_type == FuncType((t((4,)),), t((4,)))
    assert elapsed < 10, f"{elapsed:.1f} s for 100k nodes"


def test_checked_types_replace_stale_ones() -> None:
    x = Var("x", F32)
    body = Tuple([x, x])
    body.checked_type = I32
    infer_types(Function([x], body))
    assert body.checked_type == TupleType((F32, F32))


@pytest.mark.parametrize(("param", "call", "says"), [
    ("Tensor[(3, 0), float32]", "max(%x, axis=[1])",
     "max: axis 1 of float32 tensor of shape (3, 0) has no elements"),
    ("Tensor[(0, 0), float32]", "min(%x, axis=1)", "min of no elements is undefined (it has no identity)"),
    ("Tensor[(2, 0), float32]", "max(%x)", "max: axis 1 of float32"),
    ("Tensor[(3, 0), float32]", "argmax(%x, axis=[1])", "argmax of no elements is undefined"),
    ("Tensor[(3, 0, 2), int32]", "argmin(%x, axis=[1, 2])", "argmin: axis 1 of int32"),
    ("Tensor[(1, 2, 0, 3), float32]", "nn.global_max_pool2d(%x)", "nn.global_max_pool2d: axis 2"),
    ("Tensor[(1, 0, 3, 2), float32]", 'nn.global_max_pool2d(%x, layout="NHWC")', "nn.global_max_pool2d: axis 1"),
    ("Tensor[(3, 0), int32]", "mean(%x, axis=[1])", "an integer mean of no elements is undefined (0 / 0)"),
])
def test_reductions_without_a_value_over_empty_axes_are_located_errors(param: str, call: str, says: str) -> None:
    """numpy raises for these at run time and native code read garbage: refused for every backend."""
    err = fails(HEADER + f"def @main(%x: {param}) {{\n  {call}\n}}\n")
    assert says in str(err)
    assert where(err) == (3, 3)


@pytest.mark.parametrize(("param", "call", "shape"), [
    ("Tensor[(0, 3), float32]", "max(%x, axis=[1])", (0,)),          # the reduced axis has elements
    ("Tensor[(3, 0), float32]", "sum(%x, axis=[1])", (3,)),          # an identity: 0
    ("Tensor[(3, 0), int32]", "prod(%x, axis=[1])", (3,)),           # an identity: 1
    ("Tensor[(3, 0), float32]", "mean(%x, axis=[1])", (3,)),         # NaN, as numpy
    ("Tensor[(1, 2, 0, 3), float32]", "nn.global_avg_pool2d(%x)", (1, 2, 1, 1)),
    ("Tensor[(3, 0), float32]", "nn.softmax(%x)", (3, 0)),
])
def test_reductions_with_a_value_over_empty_axes_type_check(param: str, call: str, shape: tuple[int, ...]) -> None:
    prog = check(HEADER + f"def @main(%x: {param}) {{\n  {call}\n}}\n")
    assert prog["main"].checked_type.ret_type.shape == shape  # type: ignore[index, union-attr]
