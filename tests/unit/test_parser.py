"""The Relay text-format parser: literals, precedence, every construct, scoping, spans,
diagnostics, deep programs, and the TVM corpus. Expected values come from TVM's rules as
documented in the reference notes (tokenizer.h / parser.cc), not from the parser's output."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from irtool.ir import (Any, Expr, Call, Constant, Constructor, FuncType, Function, GlobalVar, If,
                       IncompleteType, IRModule, Let, Match, MetaRef, Op, PatternConstructor, PatternTuple,
                       PatternVar, PatternWildcard, RefCreate, RefRead, RefType, RefWrite, Span, TensorType, Tuple,
                       TupleGetItem, TupleType, TypeCall, TypeVar, Var)
from irtool.core.diagnostics import SOURCES, DiagnosticError, render_error
from irtool.syntax.parser import parse, parse_expr, parse_module

CORPUS = Path(__file__).resolve().parents[2] / "../shared/corpus/tvm-relay"
HEADER = '#[version = "0.0.5"]\n'


def error_of(text: str, **kwargs: object) -> DiagnosticError:
    with pytest.raises(DiagnosticError) as info:
        parse(text, "t.relay", **kwargs)  # type: ignore[arg-type]
    assert info.value.span is not None, "every parse error must be located"
    return info.value


def const(text: str) -> tuple[object, str]:
    node = parse_expr(text)
    assert isinstance(node, Constant) and node.data.shape == ()
    return node.data.item(), str(node.data.dtype)


def call_tree(expr: object) -> object:
    """Infix calls as nested tuples (op name, lhs, rhs); constants as their values."""
    if isinstance(expr, Call):
        assert isinstance(expr.op, Op)
        return (expr.op.name, *(call_tree(a) for a in expr.args))
    assert isinstance(expr, Constant)
    return expr.data.item()


# ---- Literals ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, value, dtype", [
    ("-05", -5, "int32"),
    ("9223372036854775807", 9223372036854775807, "int64"),
    ("-42i", -42, "int32"),
    ("-42i16", -42, "int16"),
    ("-42i64", -42, "int64"),
    ("2147483647", 2147483647, "int32"),
    ("2147483648", 2147483648, "int64"),      # too big for int32, unsuffixed: int64
    ("-2147483648", -2147483648, "int32"),
    ("---10", -10, "int32"),                  # odd run of '-': negative
    ("--10", 10, "int32"),
    ("7i8", 7, "int8"),
    ("True", True, "bool"),
    ("False", False, "bool"),
])
def test_integer_and_bool_literals(text: str, value: object, dtype: str) -> None:
    assert const(text) == (value, dtype)


@pytest.mark.parametrize("text, value, dtype", [
    ("1.56667f", np.float32(1.56667), "float32"),
    ("-10.0f", -10.0, "float32"),
    ("1e-1f", np.float32(0.1), "float32"),
    ("1E+1f", 10.0, "float32"),
    ("1.0e-1f", np.float32(0.1), "float32"),
    ("3f16", 3.0, "float16"),
    ("3f32", 3.0, "float32"),
    ("3f64", 3.0, "float64"),
    ("2.5f64", 2.5, "float64"),
    ("65504f16", 65504.0, "float16"),
    ("65519.99f16", 65504.0, "float16"),   # above the maximum, but nearer it than infinity
])
def test_float_literals(text: str, value: float, dtype: str) -> None:
    got, got_dtype = const(text)
    assert got_dtype == dtype
    assert got == pytest.approx(float(value), rel=1e-7)


def test_inff_is_float32_infinity() -> None:
    assert const("inff") == (math.inf, "float32")
    assert const("-inff") == (-math.inf, "float32")


@pytest.mark.parametrize("text, fragment", [
    ("1.5", "invalid integer number `1.5`"),
    ("32768i16", "unrepresentable in width 16"),
    ("-32769i16", "unrepresentable in width 16"),
    ("2147483648i32", "unrepresentable in width 32"),
    ("99999999999999999999", "unrepresentable in width 32"),
    ("65520f16", "unrepresentable in width 16"),   # halfway from 65504 to 2**16 rounds (to even) up
    ("3.40283e+38f32", "unrepresentable in width 32"),
    ("1e999f64", "unrepresentable in width 64"),
    ("1f8", "invalid float width 8"),
    ("1i7", "invalid integer width 7"),
    ("1-1", "invalid integer number `1-1`"),    # '-' is a number character, as in TVM
    ("1.2.3f", "invalid floating point number"),
])
def test_bad_literals_are_located_errors(text: str, fragment: str) -> None:
    err = error_of(text)
    assert fragment in str(err)
    assert err.span == Span("t.relay", 1, 1, 1, len(text) + 1)


def test_float_needs_its_suffix_hint() -> None:
    assert "needs an `f` suffix" in str(error_of("let %x = 2.5; %x"))


# ---- Precedence and associativity ---------------------------------------------------------------------

@pytest.mark.parametrize("text, tree", [
    ("1 * 1 + 1 < 1 == 1", ("equal", ("less", ("add", ("multiply", 1, 1), 1), 1), 1)),
    ("1 == (1 < (1 + (1 * 1)))", ("equal", 1, ("less", 1, ("add", 1, ("multiply", 1, 1))))),
    ("1 + 2 * 3", ("add", 1, ("multiply", 2, 3))),
    ("1 - 2 - 3", ("subtract", ("subtract", 1, 2), 3)),
    ("8 / 4 / 2", ("divide", ("divide", 8, 4), 2)),
    ("1 / 2 * 3", ("multiply", ("divide", 1, 2), 3)),
    ("(1 + 2) * 3", ("multiply", ("add", 1, 2), 3)),
    ("1 < 2 == 3 > 4", ("equal", ("less", 1, 2), ("greater", 3, 4))),
    ("1 <= 2 != 3 >= 4", ("not_equal", ("less_equal", 1, 2), ("greater_equal", 3, 4))),
    ("1 + 2 - 3 + 4", ("add", ("subtract", ("add", 1, 2), 3), 4)),
    ("1 - -2", ("subtract", 1, -2)),
])
def test_infix_precedence_and_left_associativity(text: str, tree: object) -> None:
    assert call_tree(parse_expr(text)) == tree


def test_minus_before_digit_is_part_of_the_literal() -> None:
    # `%a -1` is two operands in a row (TVM's tokenizer), hence a syntax error at `-1`.
    err = error_of("free_var %a: int32; %a -1")
    assert err.span is not None and (err.span.col, err.span.end_col) == (24, 26)


def test_infix_calls_have_no_attributes() -> None:
    call = parse_expr("free_var %a: float32; %a * %a")
    assert isinstance(call, Call) and call.op == Op("multiply") and len(call.attrs) == 0
    assert call.args[0] is call.args[1]


# ---- Constructs ----------------------------------------------------------------------------------------

def test_let_binds_a_var_and_scopes_it_to_the_body() -> None:
    expr = parse_expr("let %x: int32 = 1;\nlet %y = 2;\n(%x, %y)")
    assert isinstance(expr, Let) and expr.var.name_hint == "x"
    assert expr.var.type_annotation == TensorType((), "int32")
    inner = expr.body
    assert isinstance(inner, Let) and inner.var.type_annotation is None
    assert isinstance(inner.body, Tuple)
    assert inner.body.fields[0] is expr.var and inner.body.fields[1] is inner.var


def test_let_value_sees_the_binder_for_recursion() -> None:
    expr = parse_expr("let %f = fn (%n: int32) { %f(%n) }; %f(1)")
    assert isinstance(expr, Let) and isinstance(expr.value, Function)
    assert isinstance(expr.value.body, Call) and expr.value.body.op is expr.var


def test_let_scope_ends_with_its_expression() -> None:
    err = error_of("(let %a = 1; %a); %a")
    assert "undefined variable `%a`" in str(err)
    assert err.span == Span("t.relay", 1, 19, 1, 21)


def test_sequence_is_a_let_of_an_anonymous_variable() -> None:
    expr = parse_expr("(); ()")
    assert isinstance(expr, Let) and expr.var.name_hint == ""
    assert isinstance(expr.var.type_annotation, IncompleteType)
    assert isinstance(expr.value, Tuple) and isinstance(expr.body, Tuple)


def test_graph_bindings_share_the_same_object() -> None:
    expr = parse_expr("%0 = (); %1 = 1; (%0, %0, %1)")
    assert isinstance(expr, Tuple) and len(expr.fields) == 3
    assert expr.fields[0] is expr.fields[1]
    assert isinstance(expr.fields[0], Tuple) and isinstance(expr.fields[2], Constant)


def test_graph_numbers_are_unique_and_bound_before_use() -> None:
    err = error_of("%0 = 1; %0 = 2; %0")
    assert "`%0` is already defined" in str(err)
    assert err.span == Span("t.relay", 1, 9, 1, 11)
    assert err.diagnostics[0].notes[0].span == Span("t.relay", 1, 1, 1, 3)
    err = error_of("%1 = %0; %1")
    assert "used before it is defined" in str(err) and err.span == Span("t.relay", 1, 6, 1, 8)


@pytest.mark.parametrize("text, arity", [("()", 0), ("(0,)", 1), ("(0, 1)", 2), ("(0, 1, 2,)", 3)])
def test_tuples(text: str, arity: int) -> None:
    expr = parse_expr(text)
    assert isinstance(expr, Tuple) and len(expr.fields) == arity


def test_parenthesised_expression_is_not_a_tuple() -> None:
    assert isinstance(parse_expr("(1)"), Constant)


def test_projection_and_free_var() -> None:
    expr = parse_expr("free_var %x: float32; %x((%x,).0, %x)")
    assert isinstance(expr, Call) and isinstance(expr.op, Var)
    x = expr.op
    assert x.type_annotation == TensorType((), "float32")
    proj = expr.args[0]
    assert isinstance(proj, TupleGetItem) and proj.index == 0
    assert isinstance(proj.tuple_value, Tuple) and proj.tuple_value.fields[0] is x and expr.args[1] is x


def test_untyped_free_var_is_incomplete() -> None:
    expr = parse_expr("free_var %x; %x")
    assert isinstance(expr, Var) and isinstance(expr.type_annotation, IncompleteType)


def test_function_literal_with_attributes_and_return_type() -> None:
    fn = parse_expr('fn (%x: int32, %y {virtual_device=meta[VirtualDevice][0]}, Primitive=1, Compiler="c") '
                    "-> int32 { %x }", metadata={"VirtualDevice": [{"device_type": 1}]})
    assert isinstance(fn, Function) and [p.name_hint for p in fn.params] == ["x", "y"]
    assert dict(fn.attrs) == {"Primitive": 1, "Compiler": "c"} and fn.ret_type == TensorType((), "int32")
    assert dict(fn.params[1].attrs) == {"virtual_device": MetaRef("VirtualDevice", 0)}
    assert fn.body is fn.params[0]


def test_curried_calls() -> None:
    expr = parse_expr("let %f = fn (%x) { fn (%y) { %x * %y } }; %f(0)(1)")
    assert isinstance(expr, Let)
    outer = expr.body
    assert isinstance(outer, Call) and isinstance(outer.op, Call) and outer.op.op is expr.var


def test_operator_attributes_are_normalised() -> None:
    expr = parse_expr("free_var %x: Tensor[(1, 3, 8, 8), float32]; free_var %w: Tensor[(4, 3, 3, 3), float32];"
                      "nn.conv2d(%x, %w, padding=[1, 1], groups=1, channels=4, data_layout=\"NCHW\")")
    assert isinstance(expr, Call) and expr.op == Op("nn.conv2d")
    # groups=1 and data_layout="NCHW" are the defaults, so only the others remain, as tuples.
    assert dict(expr.attrs) == {"padding": (1, 1), "channels": 4}


def test_unknown_attribute_and_unknown_operator_suggest_names() -> None:
    err = error_of("free_var %x: float32; nn.relu(%x, alpha=1)")
    assert "no attribute `alpha`" in str(err)
    err = error_of("free_var %x: float32; nn.conv2(%x, %x)")
    assert "unknown operator `nn.conv2`" in str(err) and "did you mean `nn.conv2d`?" in str(err)
    assert err.span == Span("t.relay", 1, 23, 1, 31)


def test_non_operator_callee_keeps_attributes_as_written() -> None:
    mod = parse_module(HEADER + "def @f(%x) { %x }\ndef @main() { @f(1, name=\"n\", k=[1, 2.5f]) }")
    call = mod["main"].body
    assert isinstance(call, Call) and call.op == GlobalVar("f")
    assert dict(call.attrs) == {"name": "n", "k": (1, 2.5)}


def test_attribute_value_kinds() -> None:
    fn = parse_expr("fn (A=1, B=-2.5f, C=True, D=\"s\", E=[], F=[[0, 1], [2]], G=None, H=nullptr, "
                    "I=(3), relay.reshape_only=1, J=1e-05f) { () }")
    assert isinstance(fn, Function)
    assert dict(fn.attrs) == {"A": 1, "B": -2.5, "C": True, "D": "s", "E": (), "F": ((0, 1), (2,)),
                              "G": None, "H": None, "I": 3, "relay.reshape_only": 1, "J": 1e-05}
    assert type(fn.attrs["C"]) is bool and type(fn.attrs["A"]) is int


def test_integer_list_token_means_the_same_as_a_spelled_out_list() -> None:
    # `[1, 2]` is lexed as one INT_LIST token; with a comment inside it takes the generic rule.
    fast = parse_expr("fn (A=[1, --2, -3,], B=[ 4 ]) { () }")
    slow = parse_expr("fn (A=[1, /* c */ --2, -3,], B=[/**/4]) { () }")
    assert isinstance(fast, Function) and isinstance(slow, Function)
    assert dict(fast.attrs) == dict(slow.attrs) == {"A": (1, 2, -3), "B": (4,)}


def test_duplicate_attribute_is_an_error() -> None:
    err = error_of("fn (A=1, A=2) { () }")
    assert "duplicate attribute `A`" in str(err) and err.span == Span("t.relay", 1, 10, 1, 11)


def test_if_else() -> None:
    expr = parse_expr("if (True) {\n    0\n} else {\n    1\n}")
    assert isinstance(expr, If) and isinstance(expr.cond, Constant)
    assert expr.true_branch.data.item() == 0 and expr.false_branch.data.item() == 1


def test_if_branch_scopes_do_not_leak() -> None:
    err = error_of("if (True) {\n    let %x = ();\n    ()\n} else {\n    %x\n}")
    assert err.span == Span("t.relay", 5, 5, 5, 7)


def test_blocks_and_refs() -> None:
    mod = parse_module(HEADER + "def @main(%x: float32) {\n  %0 = ref(%x);\n  ref_write(%0, 1f);\n"
                       "  { ref_read(%0) }\n}")
    body = mod["main"].body
    assert isinstance(body, Let) and isinstance(body.value, RefWrite)
    ref = body.value.ref
    assert isinstance(ref, RefCreate) and ref.value is mod["main"].params[0]
    assert isinstance(body.body, RefRead) and body.body.ref is ref


ADT = HEADER + "type List[A] {\n  Cons(A, List[A]),\n  Nil,\n}\n"


def test_type_definitions_and_constructors() -> None:
    mod = parse_module(ADT + "type Box[T] { constructor(T) }\ntype Empty { }\nextern type T[A]\n")
    lst = mod.type_defs["List"]
    assert [c.name for c in lst.constructors] == ["Cons", "Nil"] and [c.tag for c in lst.constructors] == [0, 1]
    assert lst.type_params == (TypeVar("A"),)
    assert lst.constructors[0].inputs == (TypeVar("A"), TypeCall("List", (TypeVar("A"),)))
    assert mod.type_defs["Empty"].constructors == [] and mod.type_defs["T"].extern
    assert set(mod.constructors) == {"Cons", "Nil", "constructor"}


def test_constructors_in_expressions() -> None:
    mod = parse_module(ADT + "def @single(%x: int32) -> List[int32] { Cons(%x, Nil) }\n"
                       "def @ctor[A]() -> fn (A, List[A]) -> List[A] { Cons }\n"
                       "def @nil() { Nil() }")
    body = mod["single"].body
    assert isinstance(body, Call) and isinstance(body.op, Constructor) and body.op.name == "Cons"
    nil = body.args[1]   # a 0-ary constructor used as a value is applied: Call(Nil, [])
    assert isinstance(nil, Call) and nil.op.name == "Nil" and nil.args == ()
    assert isinstance(mod["ctor"].body, Constructor)
    assert mod["ctor"].ret_type == FuncType((TypeVar("A"), TypeCall("List", (TypeVar("A"),))),
                                            TypeCall("List", (TypeVar("A"),)))
    explicit = mod["nil"].body
    assert isinstance(explicit, Call) and explicit.op.name == "Nil" and explicit.args == ()


def test_match_patterns_and_clause_scopes() -> None:
    mod = parse_module(ADT + "def @f(%xs: List[int32]) -> int32 {\n  match? (%xs) {\n"
                       "    Cons(_, %rest: List[int32]) => { (); 1 },\n    Cons(%h, (Nil)) => %h,\n"
                       "    (%a, ()) => %a,\n    Nil => 0\n  }\n}")
    m = mod["f"].body
    assert isinstance(m, Match) and not m.complete and len(m.clauses) == 4
    first, second, third, fourth = m.clauses
    assert isinstance(first.lhs, PatternConstructor) and isinstance(first.lhs.patterns[0], PatternWildcard)
    rest = first.lhs.patterns[1]
    assert isinstance(rest, PatternVar) and rest.var.type_annotation == TypeCall("List", (TensorType((), "int32"),))
    assert isinstance(second.lhs.patterns[1], PatternTuple)   # `(Nil)` is a 1-tuple pattern, as in TVM
    assert second.rhs is second.lhs.patterns[0].var
    assert isinstance(third.lhs, PatternTuple) and third.rhs is third.lhs.patterns[0].var
    assert isinstance(fourth.lhs, PatternConstructor) and fourth.lhs.patterns == ()
    total = parse_module(ADT + "def @g(%l: List[int32]) { match (%l) { _ => 0, } }")["g"].body
    assert isinstance(total, Match) and total.complete


@pytest.mark.parametrize("text, fragment, col", [
    ("match (%l) { Cons(%h, %t) => %h, Nil => %h }", "undefined variable `%h`", 41),
    ("match (%l) { Foo => 0 }", "undefined constructor `Foo`", 14),
    ("match (%l) { Cons(%h) => 0 }", "takes 2 field(s)", 14),
    ("match (%l) { Cons(%h, %h) => 0 }", "duplicate pattern variable `%h`", 23),   # at the second
])
def test_pattern_errors(text: str, fragment: str, col: int) -> None:
    err = error_of(ADT + f"def @f(%l: List[int32]) {{ {text} }}")
    assert fragment in str(err) and err.span is not None and err.span.col == col + 26


def test_types() -> None:
    fn = parse_expr("fn [A](%a: Tensor[(1, ?, 3), float32], %b: Tensor[(3), int8], %c: (int32,), %d: (int32),"
                    " %e: (), %f: fn (int32, A) -> bool, %g: _, %h: int8x4, %i: uint1x4, %j: int, "
                    "%k: Tensor[(), float16], %l: (float32, (bool, float64)), %m: ref(int32)) -> A { %a }")
    assert isinstance(fn, Function)
    types = [p.type_annotation for p in fn.params]
    assert types[0] == TensorType((1, Any(), 3), "float32")
    assert types[1] == TensorType((3,), "int8")
    assert types[2] == TupleType((TensorType((), "int32"),)) == types[3]   # `(T)` is a 1-tuple in TVM
    assert types[4] == TupleType(())
    assert types[5] == FuncType((TensorType((), "int32"), TypeVar("A")), TensorType((), "bool"))
    assert isinstance(types[6], IncompleteType)
    assert types[7] == TensorType((), "int8x4") and types[8] == TensorType((), "boolx4")   # TVM: bool is uint1
    assert types[9] == TensorType((), "int32") and types[10] == TensorType((), "float16")
    assert types[11] == TupleType((TensorType((), "float32"),
                                   TupleType((TensorType((), "bool"), TensorType((), "float64")))))
    assert types[12] == RefType(TensorType((), "int32"))
    assert fn.type_params == (TypeVar("A"),) and fn.ret_type == TypeVar("A")


def test_type_errors() -> None:
    assert "unknown dtype `floaty`" in str(error_of("let %x: Tensor[(1), floaty] = 1; %x"))
    assert "unknown dtype `int32x`" in str(error_of("let %x: int32x = 1; %x"))
    err = error_of(HEADER + "def @f(%x: Lisst[int32]) { %x }")
    assert "undefined type `Lisst`" in str(err) and err.span == Span("t.relay", 2, 12, 2, 17)
    # A type variable is in scope only inside its function.
    err = error_of(HEADER + "def @f[A](%x: A) { %x }\ndef @g(%y: A) { %y }")
    assert "undefined type `A`" in str(err) and err.span is not None and err.span.line == 3


@pytest.mark.parametrize("text", ["let %x: float33 = 1f; %x", "let %x: Tensor[(2), int0] = 1; %x",
                                  "let %x: int99999999999 = 1; %x", "let %x: bfloat8 = 1; %x",
                                  "let %x: float32x0 = 1f; %x"])
def test_dtypes_outside_the_table_are_refused_with_the_list(text: str) -> None:
    err = error_of(text)
    name = text.split(":")[1].split("=")[0].strip().removeprefix("Tensor[(2), ").rstrip("]")
    assert str(err).startswith(f"unknown dtype `{name}`; the dtypes are bool, int8, int16, int32, int64, uint8, ")
    assert "float16, float32, float64, bfloat16" in str(err)
    assert err.span is not None and err.span.col == text.index(name) + 1 and err.span.end_col - err.span.col == len(name)


@pytest.mark.parametrize("annotation, given", [("List[int32, float32]", 2), ("List", 0), ("List[List]", 0)])
def test_adt_arity_is_checked_at_the_name(annotation: str, given: int) -> None:
    err = error_of(HEADER + f"def @f(%x: {annotation}) {{ %x }}\ntype List[A] {{ Nil }}")
    assert str(err) == f"type `List` takes 1 type argument, got {given}"
    column = 12 if given != 0 or annotation == "List" else 17
    assert err.span == Span("t.relay", 2, column, 2, column + 4)


@pytest.mark.parametrize("kind, text, name, first, second", [
    ("parameter", "def @f(%x: int32, %y, %x: float32) { %x }", "%x", "%x: int32", "%x: float32"),
    ("parameter", "def @f() { fn (%a, %a) { %a } }", "%a", "%a", "%a"),
    ("type parameter", "def @f[A, B, A](%x: A) { %x }", "A", "A", "A"),
    ("type parameter", "type T[A, A] { C(A) }", "A", "A", "A"),
    ("type parameter", "def @f(%x: fn [B, B](B) -> B) { %x }", "B", "B", "B"),
    ("pattern variable", "def @f(%l: (int32, int32)) { match (%l) { (%h, %h: int32) => %h } }", "%h", "%h",
     "%h: int32"),
])
def test_a_name_bound_twice_by_one_binder_is_an_error_at_the_second(kind: str, text: str, name: str, first: str,
                                                                   second: str) -> None:
    err = error_of(HEADER + text)
    at_first = text.index(first)   # each name occurs first in its binder
    at_second = text.index(second, at_first + len(first))
    assert str(err) == f"duplicate {kind} `{name}`"
    assert err.span == Span("t.relay", 2, at_second + 1, 2, at_second + 1 + len(second))
    note = err.diagnostics[0].notes[0]
    assert note.message == "first bound here" and note.span == Span("t.relay", 2, at_first + 1, 2,
                                                                     at_first + 1 + len(first))


def test_a_free_var_declared_twice_is_an_error() -> None:
    err = error_of("free_var %x: float32;\nfree_var %x: int32;\n%x")
    assert str(err) == "duplicate `free_var %x`" and err.span == Span("t.relay", 2, 10, 2, 12)
    assert err.diagnostics[0].notes[0].span == Span("t.relay", 1, 10, 1, 12)


def test_shadowing_in_nested_binders_is_still_allowed() -> None:
    fn = parse_expr("fn (%x: int32) { let %x = 1; fn (%x: float32) { %x } }")
    assert isinstance(fn, Function)


@pytest.mark.parametrize("open_, close", [("(", ",)"), ("ref(", ")"), ("fn () -> ", ""), ("List[", "]")])
def test_written_types_nest_at_most_100_levels(open_: str, close: str, default_recursion_limit: None) -> None:
    def annotation(depth: int) -> str:
        return open_ * depth + "float32" + close * depth

    adt = "\ntype List[A] { Nil }"
    mod = parse(HEADER + f"def @f(%x: {annotation(100)}) {{ 0 }}" + adt)
    assert isinstance(mod, IRModule) and mod["f"].params[0].type_annotation.depth == 100
    deep = 5000
    err = error_of(HEADER + f"def @f(%x: {annotation(deep)}) {{ 0 }}" + adt)
    assert str(err) == "type nested too deeply (limit 100)"
    column = 12 + len(open_) * (deep - 101)   # the first type 101 levels deep, counted from the inside
    assert err.span == Span("t.relay", 2, column, 2, column + 1)


def test_meta_constants_and_metadata_section() -> None:
    text = (HEADER + "def @main() {\n  (meta[relay.Constant][0], meta[relay.Constant][1], meta[relay.Constant][0])\n}\n"
            "#[metadata]\n"
            '{"relay.Constant": [{"dtype": "float32", "shape": [2, 2], "data": [1.0, "nan", "-inf", 4]},'
            ' {"dtype": "int8", "shape": [3], "base64": "AQL/"}],'
            ' "VirtualDevice": [{"device_type": 1}]}')
    mod = parse_module(text)
    fields = mod["main"].body.fields
    first = fields[0].data
    assert first.dtype == np.float32 and first.shape == (2, 2)
    assert first[0, 0] == 1.0 and np.isnan(first[0, 1]) and first[1, 0] == -np.inf and first[1, 1] == 4.0
    assert fields[1].data.dtype == np.int8 and fields[1].data.tolist() == [1, 2, -1]   # bytes 01 02 ff
    assert np.array_equal(fields[2].data, first, equal_nan=True)
    assert mod.metadata == {"VirtualDevice": [{"device_type": 1}]}


def test_init_meta_table_entries_follow_the_files() -> None:
    extra = {"relay.Constant": [np.arange(3, dtype=np.int64)]}
    expr = parse_expr("meta[relay.Constant][0]", metadata=extra)
    assert isinstance(expr, Constant) and expr.data.tolist() == [0, 1, 2]


@pytest.mark.parametrize("text, fragment", [
    ("meta[type_key][1337]", "no entry in the meta table for `type_key`"),
    ("meta[relay.Constant][1]", "out of bounds"),
    ("meta[VirtualDevice][0]", "cannot be used as an expression"),
])
def test_meta_reference_errors(text: str, fragment: str) -> None:
    err = error_of(text, metadata={"relay.Constant": [np.zeros(1)], "VirtualDevice": [{}]})
    assert fragment in str(err) and err.span == Span("t.relay", 1, 1, 1, len(text) + 1)


def test_bad_metadata_json_is_located_at_the_marker() -> None:
    err = error_of(HEADER + "def @f() { () }\n#[metadata]\n{not json")
    assert "not valid JSON" in str(err) and err.span == Span("t.relay", 3, 1, 3, 12)


# ---- Modules and globals -------------------------------------------------------------------------------

def test_module_detection() -> None:
    assert isinstance(parse(""), IRModule) and isinstance(parse(HEADER), IRModule)
    assert isinstance(parse(HEADER + "def @f() { () }"), IRModule)
    assert isinstance(parse(HEADER + "()"), Tuple)
    assert "expected one of" in str(pytest.raises(DiagnosticError, parse_module, "()").value)
    assert "unexpected `def`" in str(pytest.raises(DiagnosticError, parse_expr, "def @f() { () }").value)


def test_globals_may_be_used_before_their_definition() -> None:
    mod = parse_module(HEADER + "def @main(%x: int32) { @id(%x) }\ndef @id(%x: int32) -> int32 { %x }")
    call = mod["main"].body
    assert isinstance(call, Call) and call.op == GlobalVar("id")
    assert list(mod.functions) == ["main", "id"]


def test_undefined_global_is_reported_at_its_use() -> None:
    err = error_of(HEADER + "def @main() {\n  @ids(1)\n}\ndef @id(%x) { %x }")
    assert "undefined global `@ids`; did you mean `@id`?" in str(err)
    assert err.span == Span("t.relay", 3, 3, 3, 7)


def test_duplicate_definition_names_the_earlier_one() -> None:
    err = error_of(HEADER + "def @f() { () }\ndef @f() { 1 }")
    assert "duplicate definition of global `@f`" in str(err)
    assert err.span == Span("t.relay", 3, 5, 3, 7)
    note = err.diagnostics[0].notes[0]
    assert note.span is not None and note.span.line == 2


def test_duplicate_types_and_constructors() -> None:
    assert "constructor named `Lmao` was previously defined" in str(error_of("type Ayy { Lmao }\ntype Haha { Lmao }"))
    assert "duplicate definition of type `List`" in str(error_of(ADT + "type List { Other }"))


def test_version_header_must_be_0_0_5() -> None:
    err = error_of('#[version = "0.0.4"]\ndef @f() { () }')
    assert "unsupported text format version" in str(err)


def test_let_binder_must_be_a_local() -> None:
    assert "expected a local variable" in str(error_of("let @x = 1; ()"))
    assert "expected a local variable" in str(error_of("let x = 1; ()"))


# ---- Spans, sources and never-a-traceback ------------------------------------------------------------------

def test_spans_cover_each_node() -> None:
    expr = parse_expr("let %x = add(1, 2);\n(%x, %x.0)", "s.relay")
    assert isinstance(expr, Let)
    assert expr.span == Span("s.relay", 1, 1, 2, 11)
    assert expr.var.span == Span("s.relay", 1, 5, 1, 7)
    call = expr.value
    assert call.span == Span("s.relay", 1, 10, 1, 19)
    assert call.op.span == Span("s.relay", 1, 10, 1, 13)
    assert call.args[1].span == Span("s.relay", 1, 17, 1, 18)
    assert expr.body.span == Span("s.relay", 2, 1, 2, 11)
    assert expr.body.fields[1].span == Span("s.relay", 2, 6, 2, 10)


def test_line_offset_shifts_spans_and_source_lines() -> None:
    err = error_of("();\n%nope", line_offset=10)
    assert err.span == Span("t.relay", 12, 1, 12, 6)
    assert SOURCES.line("t.relay", 12) == "%nope"
    rendered = render_error(err)
    assert rendered.startswith("t.relay:12:1: error: undefined variable `%nope`")
    assert rendered.splitlines()[1:] == ["%nope", "^~~~~"]


@pytest.mark.parametrize("text", [
    "/* never closed", '"open string', "#[pragma]", "fn (", "let %x = ;", "%0 =", "(((", "}",
    "\x00", "def", "type", "match (1) {", "1 +", "Tensor", "@", "%", "meta[x]", "[" * 5000 + "1",
    "fn (A=" + "[" * 100000 + "1" + "]" * 100000 + ") { () }",
    "nn.conv2d(1, 2, padding=\"same\")", "nn.conv2d(1, 2, padding=[1, 2, 3])",
], ids=lambda text: repr(text[:24]))
def test_bad_input_is_always_a_located_diagnostic(text: str) -> None:
    error_of(text)


def test_nested_comments_and_annotations_are_skipped() -> None:
    expr = parse_expr("/* a /* nested */ comment */ // line\n(1 /* ty=int32 */, 2) // end")
    assert isinstance(expr, Tuple) and len(expr.fields) == 2
    assert expr.span == Span("<string>", 2, 1, 2, 22)


def test_grammar_table_cache_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from irtool.grammar import grammar_text
    from irtool.syntax import parse_engine
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    text = grammar_text("relay")
    first = parse_engine.load_table(text, ["module", "expression"])    # computed, then cached
    assert len(list((tmp_path / "irtool").glob("grammar-*.json"))) == 1
    second = parse_engine.load_table(text, ["module", "expression"])   # read back from the cache
    assert second.states == first.states and second.rules == first.rules
    assert second.literals == first.literals and second.end_states == first.end_states


# ---- Deep programs -----------------------------------------------------------------------------------------

def test_deep_let_chain_parses_at_default_recursion_limit(default_recursion_limit: None) -> None:
    n = 200_000
    text = HEADER + "def @main(%x: int32) {\n" + "".join(f"  let %v{i} = add(%x, {i});\n" for i in range(n)) + \
        f"  %v{n - 1}\n}}\n"
    body = parse_module(text)["main"].body
    for i in range(n):
        assert isinstance(body, Let) and body.var.name_hint == f"v{i}"
        body = body.body
    assert body is not None and isinstance(body, Var) and body.name_hint == f"v{n - 1}"


def test_deep_graph_chain_parses_at_default_recursion_limit(default_recursion_limit: None) -> None:
    n = 200_000
    text = HEADER + "def @main(%x: float32) {\n  %0 = negative(%x);\n" + \
        "".join(f"  %{i} = negative(%{i - 1});\n" for i in range(1, n)) + f"  %{n - 1}\n}}\n"
    node = parse_module(text)["main"].body
    depth = 0
    while isinstance(node, Call):
        depth += 1
        node = node.args[0]
    assert depth == n and isinstance(node, Var) and node.name_hint == "x"


# ---- The TVM corpus -----------------------------------------------------------------------------------------

def corpus_files(sub: str = "") -> list[Path]:
    folder = CORPUS / sub
    return sorted(folder.glob("*.relay")) if folder.is_dir() else []


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the TVM Relay corpus is not present")
def test_corpus_counts() -> None:
    assert len(corpus_files()) == 177 and len(corpus_files("invalid")) == 11


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the TVM Relay corpus is not present")
@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_program_parses(path: Path) -> None:
    # INDEX.md says how TVM's tests parsed each program: `module` (parse) or `expr` (parse_expr).
    entry = {line.split("|")[1].strip(" `"): line.split("|")[4].strip()
             for line in (CORPUS / "INDEX.md").read_text().splitlines() if line.startswith("| `")}
    result = parse(path.read_text(), path.name)
    assert isinstance(result, IRModule if entry[path.name] == "module" else Expr)


# TVM refuses a float literal above its width's largest value; irtool only one that rounds to infinity.
ROUNDS_TO_MAX = "067_test_float_literal.relay"   # 65505f16


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the TVM Relay corpus is not present")
@pytest.mark.parametrize("path", [p for p in corpus_files("invalid") if p.name != ROUNDS_TO_MAX],
                         ids=lambda p: p.name)
def test_corpus_invalid_program_is_rejected_with_a_location(path: Path) -> None:
    with pytest.raises(DiagnosticError) as info:
        parse(path.read_text(), path.name)
    span = info.value.span
    assert span is not None and span.source == path.name and span.line >= 1
    assert render_error(info.value).startswith(f"{path.name}:{span.line}:{span.col}: error: ")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the TVM Relay corpus is not present")
def test_corpus_float16_literal_above_the_maximum_rounds_to_it() -> None:
    expr = parse_expr((CORPUS / "invalid" / ROUNDS_TO_MAX).read_text())
    assert isinstance(expr, Constant) and expr.data.dtype == np.float16 and expr.data == np.finfo(np.float16).max
