"""The Relay printer on hand-built IR.

Expected texts follow TVM's `astext()` layout (relay_text_printer.cc, restated in
`shared/reference/tvm-relay-semantics.md` a.3), not this printer's own output: GNF hoisting with a
file-global `%N` counter, arguments printed before the callee, `%x`/`%x1` uniquifying, scalar
literals with suffixes, `meta[relay.Constant][i]` for everything else.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from irtool.ir import (Attrs, Call, Clause, Constant, Constructor, FuncType, Function, GlobalVar, If,
                       IncompleteType, IRModule, Let, Match, MetaRef, Op, PatternConstructor, PatternTuple,
                       PatternVar, PatternWildcard, RefCreate, RefRead, RefType, RefWrite, TensorType, Tuple,
                       TupleGetItem, TupleType, TypeCall, TypeData, TypeVar, Var)
from irtool.core.diagnostics import DiagnosticError
from irtool.core.span import Span
from irtool.ir.types import Any
from irtool.syntax.printer import MAX_TYPE_TEXT, print_expr, print_module, print_program, print_type

F32 = TensorType((), "float32")
T23 = TensorType((2, 3), "float32")


def const(value: object, dtype: str) -> Constant:
    return Constant(np.array(value, dtype=dtype))


def call(op: str, *args: object, **attrs: object) -> Call:
    return Call(Op(op), list(args), Attrs(attrs))  # type: ignore[arg-type]


def module(**functions: Function) -> IRModule:
    mod = IRModule()
    for name, fn in functions.items():
        mod.add_function(name, fn)
    return mod


def list_adt() -> tuple[TypeData, Constructor, Constructor]:
    a = TypeVar("A")
    cons = Constructor("Cons", (a, TypeCall("List", (a,))), "List", 0)
    nil = Constructor("Nil", (), "List", 1)
    return TypeData("List", (a,), [cons, nil]), cons, nil


# --- graph-normal form ---------------------------------------------------------------------------

def test_operands_are_hoisted_and_the_final_call_stays_inline() -> None:
    x = Var("x", T23)
    a = call("add", x, const(1.0, "float32"))
    body = call("multiply", call("nn.relu", a), a)
    text = print_module(module(main=Function([x], body, T23)))
    assert text == (
        '#[version = "0.0.5"]\n'
        "def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {\n"
        "  %0 = add(%x, 1f);\n"
        "  %1 = nn.relu(%0);\n"
        "  multiply(%1, %0)\n"
        "}\n")


def test_arguments_print_before_a_function_callee() -> None:
    # TVM's test_call_node_order, whose expected text is in the corpus (091).
    x, y = Var("x"), Var("y")
    expr = Call(Function([x], x), [Call(Function([y], y), [const(1, "int32")])])
    assert print_expr(expr) == (
        "%0 = fn (%y) {\n"
        "  %y\n"
        "};\n"
        "%1 = %0(1);\n"
        "%2 = fn (%x) {\n"
        "  %x\n"
        "};\n"
        "%2(%1)\n")


def test_let_value_used_once_is_inline_and_a_shared_one_is_hoisted() -> None:
    # TVM's test_let_inlining (corpus 092/093).
    x = Var("x")
    assert print_expr(Let(x, Tuple([const(0, "int32"), const(0, "int32")]), x)) == "let %x = (0, 0);\n%x\n"
    shared = Tuple([const(0, "int32"), const(0, "int32")])
    assert print_expr(Let(Var("x"), shared, shared)) == "%0 = (0, 0);\nlet %x = %0;\n%0\n"


def test_counter_is_global_to_the_print_and_definitions_are_sorted() -> None:
    x, y = Var("x", F32), Var("y", F32)
    f = Function([x], call("negative", call("exp", x)))
    g = Function([y], call("log", call("sqrt", y)))
    data, _, _ = list_adt()
    mod = module(zeta=f, alpha=g)
    mod.add_type(data)
    mod.add_type(TypeData("Bool2", (), [Constructor("T2", (), "Bool2", 0)]))
    mod.add_type(TypeData("Opaque", (TypeVar("B"),), [], extern=True))
    assert print_module(mod) == (
        '#[version = "0.0.5"]\n'
        "type Bool2 {\n"
        "  T2,\n"
        "}\n"
        "\n"
        "type List[A] {\n"
        "  Cons(A, List[A]),\n"
        "  Nil,\n"
        "}\n"
        "\n"
        "extern type Opaque[B]\n"
        "\n"
        "def @alpha(%y: float32) {\n"
        "  %0 = sqrt(%y);\n"
        "  log(%0)\n"
        "}\n"
        "\n"
        "def @zeta(%x: float32) {\n"
        "  %1 = exp(%x);\n"
        "  negative(%1)\n"
        "}\n")


def test_let_chains_if_and_hoisting_inside_scopes() -> None:
    c, x = Var("c", TensorType((), "bool")), Var("x", F32)
    y = Var("y", F32)
    branch = If(c, call("add", call("exp", x), x), Let(y, call("log", x), call("negative", y)))
    fn = Function([c, x], Let(Var("z", F32), call("abs", x), branch), F32)
    assert print_module(module(main=fn)) == (
        '#[version = "0.0.5"]\n'
        "def @main(%c: bool, %x: float32) -> float32 {\n"
        "  let %z: float32 = abs(%x);\n"
        "  if (%c) {\n"
        "    %0 = exp(%x);\n"
        "    add(%0, %x)\n"
        "  } else {\n"
        "    let %y: float32 = log(%x);\n"
        "    negative(%y)\n"
        "  }\n"
        "}\n")


def test_let_values_hoist_their_operands_before_the_let_line() -> None:
    x = Var("x", F32)
    a, b = Var("a"), Var("b")
    shared = call("exp", x)
    body = Let(a, call("add", shared, x), Let(b, a, call("multiply", shared, b)))
    assert print_expr(Function([x], body)) == (
        "fn (%x: float32) {\n"
        "  %0 = exp(%x);\n"
        "  let %a = add(%0, %x);\n"
        "  let %b = %a;\n"
        "  multiply(%0, %b)\n"
        "}\n")


def test_if_condition_and_tuple_fields_are_operands() -> None:
    x = Var("x", F32)
    cond = call("less", x, const(1.0, "float32"))
    expr = Function([x], If(cond, Tuple([call("exp", x)]), Tuple([])))
    assert print_expr(expr) == (
        "fn (%x: float32) {\n"
        "  %0 = less(%x, 1f);\n"
        "  if (%0) {\n"
        "    %1 = exp(%x);\n"
        "    (%1,)\n"
        "  } else {\n"
        "    ()\n"
        "  }\n"
        "}\n")


def test_non_tail_let_and_match_are_parenthesised() -> None:
    a = Var("a", F32)
    inner = Let(a, const(1.0, "float32"), call("exp", a))
    x = Var("x")
    assert print_expr(Let(x, inner, x)) == (
        "let %x = (\n"
        "  let %a: float32 = 1f;\n"
        "  exp(%a)\n"
        ");\n"
        "%x\n")
    data, cons, nil = list_adt()
    lst = Var("l", TypeCall("List", (F32,)))
    m = Match(lst, [Clause(PatternWildcard(), const(0, "int32"))])
    r = Var("r")
    assert print_expr(Function([lst], Let(r, m, r))) == (
        "fn (%l: List[float32]) {\n"
        "  let %r = (match (%l) {\n"
        "    _ => {\n"
        "      0\n"
        "    },\n"
        "  });\n"
        "  %r\n"
        "}\n")


def test_match_with_nested_patterns_and_partial_match() -> None:
    _, cons, nil = list_adt()
    lst = Var("l", TypeCall("List", (F32,)))
    h, t = Var("h"), Var("t")
    full = Match(lst, [
        Clause(PatternConstructor(cons, (PatternVar(h), PatternConstructor(nil, ()))), h),
        Clause(PatternConstructor(cons, (PatternWildcard(), PatternVar(t))), call("exp", const(1.0, "float32"))),
        Clause(PatternConstructor(nil, ()), Call(nil, [])),
    ])
    assert print_expr(Function([lst], full)) == (
        "fn (%l: List[float32]) {\n"
        "  match (%l) {\n"
        "    Cons(%h, Nil) => {\n"
        "      %h\n"
        "    },\n"
        "    Cons(_, %t) => {\n"
        "      exp(1f)\n"
        "    },\n"
        "    Nil => {\n"
        "      Nil\n"
        "    },\n"
        "  }\n"
        "}\n")
    p, q = Var("p", F32), Var("q", F32)
    pair = Var("pair", TupleType((F32, F32)))
    partial = Match(pair, [Clause(PatternTuple((PatternVar(p), PatternVar(q))), p)], complete=False)
    assert print_expr(Function([pair], partial)).splitlines()[1:3] == [
        "  match? (%pair) {", "    (%p: float32, %q: float32) => {"]


def test_refs_projection_sequencing_and_free_vars() -> None:
    x = Var("x", TensorType((3,), "float32"))
    t = Var("t", TupleType((F32, F32)))
    r = Var("r")
    seq = Let(Var("", IncompleteType()), RefWrite(r, TupleGetItem(t, 1)), RefRead(r))
    expr = Let(r, RefCreate(TupleGetItem(t, 0)), seq)
    assert print_expr(Tuple([x, Function([t], expr)])) == (
        "free_var %x: Tensor[(3), float32];\n"
        "%2 = fn (%t: (float32, float32)) {\n"
        "  %0 = %t.0;\n"
        "  let %r = ref(%0);\n"
        "  %1 = %t.1;\n"
        "  ref_write(%r, %1);\n"
        "  ref_read(%r)\n"
        "};\n"
        "(%x, %2)\n")


def test_global_vars_ops_and_constructors_print_inline() -> None:
    _, cons, nil = list_adt()
    body = Tuple([GlobalVar("f"), Op("nn.relu"), cons, Call(cons, [const(1, "int32"), Call(nil, [])])])
    # A nullary constructor's call prints as its bare name (the parser makes that call of it);
    # like any call, it is hoisted when it is an operand.
    assert print_expr(body) == "%0 = Nil;\n%1 = Cons(1, %0);\n(@f, nn.relu, Cons, %1)\n"


# --- names ---------------------------------------------------------------------------------------

def test_duplicate_and_odd_names_are_made_unique_as_tvm_does() -> None:
    params = [Var("x"), Var("x"), Var("x1"), Var("p0"), Var("p0"), Var("1"), Var(""), Var("_a"),
              Var("a.b"), Var("v1")]
    text = print_expr(Function(params, Tuple(params)))
    assert text.splitlines()[0] == "fn (%x, %x1, %x11, %p0, %p01, %v1, %v, %_a, %a_b, %v11) {"


def test_names_are_unique_across_definitions_and_scopes() -> None:
    x1, x2 = Var("x", F32), Var("x", F32)
    inner = Var("x", F32)
    mod = module(a=Function([x1], x1), b=Function([x2], Let(inner, x2, inner)))
    assert print_module(mod).splitlines()[1:] == [
        "def @a(%x: float32) {", "  %x", "}", "",
        "def @b(%x1: float32) {", "  let %x2: float32 = %x1;", "  %x2", "}"]


def test_a_let_bound_function_can_call_itself() -> None:
    f, n = Var("f"), Var("n", F32)
    rec = Let(f, Function([n], Call(f, [n])), f)
    assert print_expr(rec).splitlines()[:2] == ["let %f = fn (%n: float32) {", "  %f(%n)"]


# --- attributes, functions, types ----------------------------------------------------------------

def test_call_attributes_of_every_value_kind() -> None:
    x = Var("x", F32)
    c = call("nn.test", x, count=2, neg=-3, eps=1e-05, scale=1.5, big=1e20, flag=True, off=False,
             layout="NCHW", pads=(1, 1, 0, 0), nested=((1, 2), (3,)), empty=(), none=None,
             device=MetaRef("VirtualDevice", 0), inf=float("inf"))
    assert print_expr(Function([x], c)).splitlines()[1] == (
        "  nn.test(%x, count=2, neg=-3, eps=1e-05f, scale=1.5f, big=1e+20f, flag=True, off=False, "
        'layout="NCHW", pads=[1, 1, 0, 0], nested=[[1, 2], [3]], empty=[], none=None, '
        "device=meta[VirtualDevice][0], inf=inff)")


def test_function_attributes_type_params_and_binder_attributes() -> None:
    a = TypeVar("A")
    x = Var("x", a, attrs=Attrs({"virtual_device": MetaRef("VirtualDevice", 0)}))
    fn = Function([x], x, a, (a,), Attrs({"Primitive": 1, "Compiler": "cublas"}))
    mod = module(id=fn)
    mod.metadata["VirtualDevice"] = [{"device_type": 1, "virtual_device_id": 0, "target": None}]
    text = print_module(mod)
    assert text.splitlines()[1] == (
        'def @id[A](%x {virtual_device=meta[VirtualDevice][0]}: A, Primitive=1, Compiler="cublas") -> A {')
    meta = json.loads(text.split("#[metadata]\n", 1)[1])
    assert meta == {"VirtualDevice": [{"device_type": 1, "virtual_device_id": 0, "target": None}]}
    assert print_expr(Function([], Tuple([]), attrs=Attrs({"Inline": 1}))) == "fn (Inline=1) {\n  ()\n}\n"
    literal = Function([Var("y", a)], Tuple([]), None, (a,))
    assert print_expr(literal).startswith("fn [A](%y: A) {")


@pytest.mark.parametrize(("ty", "text"), [
    (F32, "float32"),
    (TensorType((1, 3, 224, 224), "float32"), "Tensor[(1, 3, 224, 224), float32]"),
    (TensorType((3,), "int8"), "Tensor[(3), int8]"),
    (TensorType((Any(), 4), "float16"), "Tensor[(?, 4), float16]"),
    (TupleType((F32, TensorType((), "int64"))), "(float32, int64)"),
    (TupleType((F32,)), "(float32,)"),
    (TupleType(()), "()"),
    (FuncType((F32, TypeVar("A")), TypeVar("A"), (TypeVar("A"),)), "fn [A](float32, A) -> A"),
    (TypeCall("List", (TypeCall("Option", (F32,)),)), "List[Option[float32]]"),
    (RefType(F32), "ref(float32)"),
    (IncompleteType(), "_"),
])
def test_types(ty: object, text: str) -> None:
    assert print_type(ty) == text  # type: ignore[arg-type]


# --- constants and metadata ----------------------------------------------------------------------

@pytest.mark.parametrize(("value", "dtype", "text"), [
    (42, "int32", "42"),
    (-7, "int32", "-7"),
    (42, "int64", "42i64"),
    (-2**63, "int64", "-9223372036854775808i64"),
    (3, "int16", "3i16"),
    (3.0, "float32", "3f"),
    (0.1, "float32", "0.1f"),          # not 0.100000001 (float32's exact value) nor TVM's 6 digits
    (1e-05, "float32", "1e-05f"),
    (1e11, "float32", "1e+11f"),
    (123456.79, "float32", "123456.79f"),
    (-0.0, "float32", "-0f"),
    (3.0, "float16", "3f16"),
    (0.1, "float16", "0.1f16"),
    (3.0, "float64", "3f64"),
    (0.1, "float64", "0.1f64"),
    (float("inf"), "float32", "inff"),
    (float("-inf"), "float32", "-inff"),
    (True, "bool", "True"),
    (False, "bool", "False"),
])
def test_scalar_literals(value: object, dtype: str, text: str) -> None:
    assert print_expr(const(value, dtype)) == text + "\n"


def test_float_literals_near_the_top_of_the_range_stay_in_range() -> None:
    # The shortest digits of float32's maximum, 3.4028235e+38, exceed it as a decimal.
    top = np.finfo(np.float32).max
    text = print_expr(Constant(np.array(top, dtype="float32"))).strip()
    assert text.endswith("f") and float(text[:-1]) <= float(top)
    assert np.float32(float(text[:-1])) == top


def test_constants_without_a_literal_go_to_the_metadata_table() -> None:
    x = Var("x", TensorType((2, 3), "float32"))
    weights = Constant(np.arange(6, dtype="float32").reshape(2, 3) / 4)
    big = Constant(np.arange(100, dtype="int64"))
    odd = [const(7, "int8"), const(200, "uint8"), const(float("nan"), "float32"), const(float("inf"), "float16"),
           Constant(np.array([np.nan, -np.inf, 0.5], dtype="float32"))]
    body = Tuple([call("add", x, weights), call("multiply", x, weights), big, *odd])
    text = print_expr(Function([x], body))
    code, meta_text = text.split("#[metadata]\n")
    assert code.splitlines()[1:3] == ["  %0 = add(%x, meta[relay.Constant][0]);",
                                      "  %1 = multiply(%x, meta[relay.Constant][0]);"]
    refs = ", ".join(f"meta[relay.Constant][{i}]" for i in range(1, 7))
    assert code.splitlines()[3] == f"  (%0, %1, {refs})"
    meta = json.loads(meta_text)
    assert list(meta) == ["relay.Constant"]
    entries = meta["relay.Constant"]
    assert entries[0] == {"dtype": "float32", "shape": [2, 3], "data": [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]}
    assert entries[1]["dtype"] == "int64" and entries[1]["shape"] == [100] and "data" not in entries[1]
    import base64
    assert np.frombuffer(base64.b64decode(entries[1]["base64"]), "<i8").tolist() == list(range(100))
    assert entries[2] == {"dtype": "int8", "shape": [], "data": [7]}
    assert entries[3] == {"dtype": "uint8", "shape": [], "data": [200]}
    assert entries[4] == {"dtype": "float32", "shape": [], "data": ["nan"]}
    assert entries[5] == {"dtype": "float16", "shape": [], "data": ["inf"]}
    assert entries[6] == {"dtype": "float32", "shape": [3], "data": ["nan", "-inf", 0.5]}


def test_equal_constants_share_one_metadata_entry() -> None:
    a = Constant(np.ones((2, 2), "float32"))
    b = Constant(np.ones((2, 2), "float32"))
    text = print_expr(Tuple([a, b, Constant(np.ones((2, 2), "float16"))]))
    assert text.splitlines()[0] == "(meta[relay.Constant][0], meta[relay.Constant][0], meta[relay.Constant][1])"


# --- types annotations ---------------------------------------------------------------------------

def test_show_types_annotates_expressions_with_a_checked_type() -> None:
    x = Var("x", T23)
    add = call("add", x, const(1.0, "float32"))
    relu = call("nn.relu", add)
    add.checked_type = relu.checked_type = T23
    add.args[1].checked_type = F32
    fn = Function([x], relu, T23)
    assert print_module(module(main=fn), show_types=True).splitlines()[1:4] == [
        "def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {",
        "  %0 = add(%x, 1f /* ty=float32 */) /* ty=Tensor[(2, 3), float32] */;",
        "  nn.relu(%0) /* ty=Tensor[(2, 3), float32] */"]
    assert "/*" not in print_module(module(main=fn))


def doubling(depth: int) -> TupleType:
    """`(t, t)` over one object per level: written out, 2**depth float32 leaves."""
    t: object = F32
    for _ in range(depth):
        t = TupleType((t, t))  # type: ignore[arg-type]
    return t  # type: ignore[return-value]


def test_shared_types_are_printed_in_full_up_to_the_limit() -> None:
    x = Var("x", F32)
    pair = Tuple([x, x])
    pair.checked_type = doubling(1)
    fn = Function([x], pair, doubling(1))
    assert print_module(module(main=fn), show_types=True).splitlines()[1:3] == [
        "def @main(%x: float32) -> (float32, float32) {",
        "  (%x, %x) /* ty=(float32, float32) */"]
    # "float32" is 7 characters and each level adds "(", ", ", ")": 11 * 2**k - 4 in all.
    assert len(print_type(doubling(16))) == 11 * 2 ** 16 - 4 < MAX_TYPE_TEXT


def test_a_type_too_long_to_write_out_is_refused_at_its_value() -> None:
    x = Var("x", F32, Span("t.relay", 1, 10, 1, 12))
    pair = Tuple([x, x], Span("t.relay", 2, 3, 2, 11))
    pair.checked_type = doubling(17)   # 11 * 2**17 - 4 characters: more than 1 MiB
    fn = Function([x], pair, None, span=Span("t.relay", 1, 1, 3, 2))
    with pytest.raises(DiagnosticError, match=r"type too long to print: more than 1048576 characters") as info:
        print_module(module(main=fn), show_types=True)
    assert info.value.span == pair.span
    assert "/*" not in print_module(module(main=fn))   # without types there is nothing long to write
    annotated = Function([Var("y", doubling(17))], pair)   # no span: the definition's is used
    annotated.span = Span("t.relay", 5, 1, 5, 9)
    with pytest.raises(DiagnosticError) as info:
        print_module(module(main=annotated))
    assert info.value.span == annotated.span


def test_print_type_cuts_display_text_short() -> None:
    text = print_type(doubling(40))
    assert text == "(" * 40 + "float32, float32), " + text[59:] and text.endswith("...")
    assert len(text) == MAX_TYPE_TEXT + 3


# --- scale ---------------------------------------------------------------------------------------

DEPTH = 200_000


def test_deep_let_chain_prints_with_the_default_recursion_limit(default_recursion_limit: None) -> None:
    x = Var("x", F32)
    body: object = x
    lets = []
    for i in range(DEPTH):
        lets.append(Var(f"v{i}", F32))
    body = lets[-1]
    for i in range(DEPTH - 1, -1, -1):
        body = Let(lets[i], call("negative", lets[i - 1] if i else x), body)
    lines = print_module(module(main=Function([x], body))).splitlines()
    assert len(lines) == DEPTH + 4
    assert lines[2] == "  let %v0: float32 = negative(%x);"
    assert lines[-3] == f"  let %v{DEPTH - 1}: float32 = negative(%v{DEPTH - 2});"
    assert lines[-2] == f"  %v{DEPTH - 1}"


def test_deep_graph_chain_prints_in_both_layouts() -> None:
    x = Var("x", F32)
    node: object = x
    for _ in range(DEPTH):
        node = call("exp", node)
    dataflow = print_module(module(main=Function([x], node))).splitlines()
    assert dataflow[2] == "  %0 = exp(%x);"
    assert dataflow[-2] == f"  exp(%{DEPTH - 2})"
    # An `if` at the root takes the general (scoped) path; the chain inside prints the same way.
    c = Var("c", TensorType((), "bool"))
    scoped = print_module(module(main=Function([c, x], If(c, node, x)))).splitlines()
    assert scoped[3] == "    %0 = exp(%x);"
    assert scoped[-5] == f"    exp(%{DEPTH - 2})"
    assert [line.strip() for line in scoped[3:-4]] == [line.strip() for line in dataflow[2:-1]]


def test_deeply_nested_tuples_and_projections() -> None:
    node: object = Var("x", F32)
    for i in range(DEPTH // 4):
        node = TupleGetItem(Tuple([node, const(i, "int32")]), 0)
    lines = print_expr(node).splitlines()
    assert lines[:3] == ["free_var %x: float32;", "%0 = (%x, 0);", "%1 = %0.0;"]
    assert len(lines) == 1 + 2 * (DEPTH // 4)


def test_printing_is_deterministic() -> None:
    x = Var("x", T23)
    shared = call("exp", x)
    fn = Function([x], Tuple([shared, call("add", shared, Constant(np.ones((2, 3), "float32")))]))
    mod = module(main=fn, other=Function([Var("x", T23)], const(1, "int32")))
    assert print_program(mod) == print_program(mod) == print_module(mod)
