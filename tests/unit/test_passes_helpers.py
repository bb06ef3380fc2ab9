"""dead-code, fold-constant, simplify-inference, eliminate-common-subexpr, the normal forms and
infer-type: behaviour the lit tests do not pin, and sizes that would overflow a recursive walk."""

from __future__ import annotations

import numpy as np
import pytest

from irtool.eval.interpreter import run_function
from irtool.ir import Call, Constant, Function, IRModule, Let, Op, Tuple, Var, post_order
from irtool.ir.types import TensorType
from irtool.passes import run
from irtool.passes.purity import is_pure
from irtool.passes.substitution import substitute
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse

DEEP = 30000  # well past Python's default recursion limit of 1000


def module(text: str) -> IRModule:
    mod = parse('#[version = "0.0.5"]\n' + text, "helpers_test.relay")
    assert isinstance(mod, IRModule)
    return mod


def add_chain(n: int) -> IRModule:
    """`main(%x)` = x + 1 + 1 + ... (n adds) as a dataflow chain built directly (no parser recursion)."""
    x = Var("x", TensorType((), "float32"))
    node = x
    for _ in range(n):
        node = Call(Op("add"), [node, Constant(np.array(1, "float32"))])
    mod = IRModule()
    mod.add_function("main", Function([x], node, TensorType((), "float32")))
    return mod


def let_chain(n: int, dead_every: int = 0) -> IRModule:
    """`let %v1 = %v0 + 1; let %v2 = ...` with, optionally, an unused binding every few lets."""
    x = Var("x", TensorType((), "float32"))
    bindings: list[tuple[Var, object]] = []
    prev: Var = x
    for i in range(n):
        v = Var(f"v{i}")
        bindings.append((v, Call(Op("add"), [prev, Constant(np.array(1, "float32"))])))
        if dead_every and i % dead_every == 0:
            bindings.append((Var(f"dead{i}"), Call(Op("exp"), [prev])))
        prev = v
    body = prev
    for var, value in reversed(bindings):
        body = Let(var, value, body)  # type: ignore[arg-type]
    mod = IRModule()
    mod.add_function("main", Function([x], body, TensorType((), "float32")))
    return mod


# --- purity and substitution ------------------------------------------------------------------


def test_purity() -> None:
    mod = module("""
def @main(%x: int32) -> int32 {
  let %r = ref(%x);
  let %f = fn () -> int32 { ref_read(%r) };
  let %a = (add(%x, 1), %f);
  let %b = ref_read(%r);
  let %c = %f();
  %x
}""")
    values = {}
    node = mod.functions["main"].body
    while isinstance(node, Let):
        values[node.var.name_hint] = node.value
        node = node.body
    assert is_pure(values["r"]) and is_pure(values["f"]) and is_pure(values["a"])
    assert not is_pure(values["b"]) and not is_pure(values["c"])


def test_substitute_replaces_free_and_renames_bound() -> None:
    mod = module("def @main(%x: float32) -> float32 { let %t = negative(%x); add(%t, %x) }")
    func = mod.functions["main"]
    y = Var("y")
    out = substitute(func.body, {func.params[0]: y})
    assert isinstance(out, Let) and out.var is not func.body.var  # type: ignore[attr-defined]
    assert out.var.name_hint == "t" and out.value.args[0] is y  # type: ignore[attr-defined]
    assert out.body.args == (out.var, y)  # type: ignore[attr-defined]


# --- dead-code --------------------------------------------------------------------------------


def test_dead_code_on_a_long_let_chain() -> None:
    mod = let_chain(DEEP, dead_every=3)
    out = run(mod, "dead-code", verify_each=False)
    lets = [n for n in post_order(out.functions["main"]) if isinstance(n, Let)]
    assert len(lets) == DEEP and not any(n.var.name_hint.startswith("dead") for n in lets)
    assert float(run_function(out, [np.float32(0)])) == float(DEEP)


def test_dead_code_keeps_values_needed_by_live_code_only() -> None:
    mod = module("""
def @main(%x: float32) -> float32 {
  let %a = exp(%x);
  let %b = negative(%a);
  let %c = log(%a);
  %b
}""")
    body = run(mod, "dead-code").functions["main"].body
    names = []
    while isinstance(body, Let):
        names.append(body.var.name_hint)
        body = body.body
    assert names == ["a", "b"]


def test_dead_code_unknown_entry() -> None:
    with pytest.raises(DiagnosticError, match="entry @mian is not defined; did you mean @main"):
        run(module("def @main() -> int32 { 1 }"), "dead-code{entries=mian}")


def test_dead_code_without_main_keeps_unreferenced_globals() -> None:
    # Without @main, the roots are the globals no other global refers to (a self-recursive one
    # included); @e and @f only refer to each other, so nothing can reach them.
    mod = module("""
def @a() -> int32 { @b() }
def @b() -> int32 { 1 }
def @c() -> int32 { @c() }
def @e() -> int32 { @f() }
def @f() -> int32 { @e() }
""")
    assert set(run(mod, "dead-code").functions) == {"a", "b", "c"}


# --- fold-constant ----------------------------------------------------------------------------


def test_fold_constant_collapses_a_long_constant_chain() -> None:
    mod = add_chain(DEEP)
    x = mod.functions["main"].params[0]
    # Make the chain constant by substituting the parameter away.
    main = Function([], substitute(mod.functions["main"].body, {x: Constant(np.array(0, "float32"))}),
                    TensorType((), "float32"))
    mod.functions["main"] = main
    out = run(mod, "fold-constant", verify_each=False)
    body = out.functions["main"].body
    assert isinstance(body, Constant) and float(body.data) == float(DEEP)


def test_fold_constant_leaves_failing_calls_for_run_time() -> None:
    # Integer division by zero fails in the interpreter: folding must not turn it into a compile error.
    mod = module("def @main() -> int32 { divide(1, 0) }")
    try:
        expected_failure = run_function(mod)
    except DiagnosticError:
        expected_failure = None
    out = run(mod, "fold-constant")
    if expected_failure is None:
        assert isinstance(out.functions["main"].body, Call)
    else:
        assert isinstance(out.functions["main"].body, Constant)


def test_fold_constant_tuple_results() -> None:
    mod = module("""
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  %0 = split(concatenate((full(1f, shape=[2], dtype="float32"), full(2f, shape=[2], dtype="float32"))),
             indices_or_sections=2);
  add(%x, %0.1)
}""")
    body = run(mod, "fold-constant").functions["main"].body
    assert isinstance(body, Call) and isinstance(body.args[1], Constant)
    assert body.args[1].data.tolist() == [2.0, 2.0]


# --- simplify-inference -----------------------------------------------------------------------


def test_simplify_inference_matches_batch_norm() -> None:
    mod = module("""
def @main(%x: Tensor[(2, 3, 4), float32], %g: Tensor[(3), float32], %b: Tensor[(3), float32],
          %m: Tensor[(3), float32], %v: Tensor[(3), float32]) -> Tensor[(2, 3, 4), float32] {
  %0 = nn.batch_norm(%x, %g, %b, %m, %v, epsilon=0.01f);
  %0.0
}""")
    rng = np.random.default_rng(0)
    args = [rng.normal(size=(2, 3, 4)).astype("float32")] + [rng.normal(size=3).astype("float32") for _ in range(3)]
    args.append(rng.uniform(0.5, 2, size=3).astype("float32"))
    out = run(mod, "simplify-inference")
    assert not any(isinstance(n, Op) and n.name == "nn.batch_norm" for n in post_order(out.functions["main"]))
    x, g, b, m, v = args
    expected = (x - m[:, None]) / np.sqrt(v[:, None] + 0.01) * g[:, None] + b[:, None]
    np.testing.assert_allclose(run_function(out, args), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run_function(mod, args), expected, rtol=1e-5, atol=1e-6)


# --- eliminate-common-subexpr -----------------------------------------------------------------


def test_cse_on_two_long_identical_chains() -> None:
    x = Var("x", TensorType((), "float32"))
    chains = []
    for _ in range(2):
        node = x
        for _ in range(DEEP // 2):
            node = Call(Op("negative"), [node])
        chains.append(node)
    mod = IRModule()
    mod.add_function("main", Function([x], Tuple(chains)))
    out = run(mod, "eliminate-common-subexpr", verify_each=False)
    first, second = out.functions["main"].body.fields  # type: ignore[attr-defined]
    assert first is second
    assert sum(isinstance(n, Call) for n in post_order(out.functions["main"])) == DEEP // 2


# --- normal forms ----------------------------------------------------------------------------


def test_a_normal_form_of_a_long_chain_and_back() -> None:
    mod = add_chain(DEEP)
    anf = run(mod, "to-a-normal-form", verify_each=False)
    lets = [n for n in post_order(anf.functions["main"]) if isinstance(n, Let)]
    assert len(lets) == DEEP
    assert all(isinstance(a, (Var, Constant)) for n in lets for a in n.value.args)  # type: ignore[attr-defined]
    graph = run(anf, "to-graph-normal-form", verify_each=False)
    assert not any(isinstance(n, Let) for n in post_order(graph.functions["main"]))
    assert float(run_function(graph, [np.float32(1)])) == float(DEEP + 1)


# --- infer-type ------------------------------------------------------------------------------


def test_infer_type_fills_checked_types_without_changing_text() -> None:
    mod = module("def @main(%x: Tensor[(2, 3), float32]) { sum(%x, axis=[1]) }")
    out = run(mod, "infer-type", verify_each=False)
    body = out.functions["main"].body
    assert body.checked_type == TensorType((2,), "float32")
    assert out.functions["main"].ret_type is None
    annotated = run(mod, "infer-type{annotate=true}", verify_each=False)
    assert annotated.functions["main"].ret_type == TensorType((2,), "float32")
