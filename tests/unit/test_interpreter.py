"""The reference interpreter against hand-written numpy, on text programs and hand-built IR.

Expected values are computed here with numpy (or by arithmetic), never taken from the
interpreter itself. Deep programs run with Python's default recursion limit.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from irtool.analysis.typecheck import infer_types
from irtool.eval.interpreter import Interpreter, evaluate, run_function
from irtool.eval.values import ADTValue, Closure, RefValue, flatten_value
from irtool.ir import (Call, Constant, Function, GlobalVar, IRModule, Let, Op, TensorType, Tuple, TupleGetItem, Var)
from irtool.ops.registry import get_op
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
HEADER = '#[version = "0.0.5"]\n'
LIST = "type List[A] { Cons(A, List[A]), Nil }\n"


def load(text: str) -> IRModule:
    mod = parse(HEADER + text, "test.relay")
    infer_types(mod)
    return mod


def run(text: str, *args: object, entry: str = "main") -> object:
    return run_function(load(text), list(args), entry)


def f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


def i32(v: int) -> np.ndarray:
    return np.array(v, dtype=np.int32)


def to_list(value: object) -> list:
    """A Relay List value as a Python list (iterative: lists here are long)."""
    out = []
    while isinstance(value, ADTValue) and value.constructor.name == "Cons":
        out.append(value.fields[0])
        value = value.fields[1]
    assert isinstance(value, ADTValue) and value.constructor.name == "Nil"
    return out


# ------------------------------------------------------------------------------------------
# Dataflow and the samples


def test_infix_arithmetic_on_scalars() -> None:
    out = run("def @main(%a: float32, %b: float32) -> float32 { %a * 2f + %b / 4f - 1f }",
              np.float32(3), np.float32(2))
    assert out.dtype == np.float32 and out.shape == ()
    assert float(out) == 3 * 2 + 2 / 4 - 1


def test_broadcasting_add_matches_numpy() -> None:
    x, y = f32(2, 3), f32(3, seed=1)
    out = run("def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(3), float32]) { add(%x, %y) }", x, y)
    np.testing.assert_array_equal(out, x + y)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_mlp_sample_matches_numpy() -> None:
    mod = load((SAMPLES / "mlp.relay").read_text().replace(HEADER, ""))
    x, w1, b1, w2, b2 = f32(1, 784), f32(128, 784, seed=1), f32(128, seed=2), f32(10, 128, seed=3), f32(10, seed=4)
    out = run_function(mod, {"x": x, "w1": w1, "b1": b1, "w2": w2, "b2": b2})
    hidden = np.maximum(x @ w1.T + b1, 0)
    expected = _softmax(hidden @ w2.T + b2)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def _conv3x3_same(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True)


def _batch_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray,
                var: np.ndarray) -> np.ndarray:
    def c(v: np.ndarray) -> np.ndarray:
        return v[None, :, None, None]
    return (x - c(mean)) / np.sqrt(c(var) + 1e-5) * c(gamma) + c(beta)


def test_resnet_block_sample_matches_numpy() -> None:
    mod = load((SAMPLES / "resnet_block.relay").read_text().replace(HEADER, ""))
    rng = np.random.default_rng(7)
    shapes = {p.name_hint: tuple(p.type_annotation.shape) for p in mod["main"].params}
    inputs = {n: rng.uniform(-1, 1, s).astype(np.float32) for n, s in shapes.items()}
    for name in ("bn1_var", "bn2_var"):
        inputs[name] = rng.uniform(0.5, 1.5, shapes[name]).astype(np.float32)
    out = run_function(mod, inputs)
    d = inputs
    h = np.maximum(_batch_norm(_conv3x3_same(d["data"], d["conv1_weight"]), d["bn1_gamma"], d["bn1_beta"],
                               d["bn1_mean"], d["bn1_var"]), 0)
    h = _batch_norm(_conv3x3_same(h, d["conv2_weight"]), d["bn2_gamma"], d["bn2_beta"], d["bn2_mean"], d["bn2_var"])
    expected = np.maximum(h + d["data"], 0)
    assert out.shape == (1, 64, 56, 56) and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_inline_sample_matches_numpy() -> None:
    mod = load((SAMPLES / "inline.relay").read_text().replace(HEADER, ""))
    x, b = f32(2, 8), f32(8, seed=1)
    out = run_function(mod, {"x": x, "b": b})

    def affine(v: np.ndarray) -> np.ndarray:
        return v * np.float32(2) + b

    h = affine(x)
    h = h * (1 / (1 + np.exp(-(h * np.float32(1.702)))))
    np.testing.assert_allclose(out, affine(h), rtol=1e-6, atol=1e-6)


def test_adt_sample_counts_positive_elements() -> None:
    mod = load((SAMPLES / "adt_list.relay").read_text().replace(HEADER, ""))
    a, b, c = np.float32(0.5), np.float32(1.5), np.float32(3.0)
    length, positive = run_function(mod, [np.asarray(a), np.asarray(b), np.asarray(c)])
    assert int(length) == 3
    assert int(positive) == sum(v - 1 > 0 for v in (a, b, c))


def test_tuple_result_and_projection() -> None:
    out = run("""def @main(%x: float32) {
      %0 = (%x, (%x * 2f, %x * 3f));
      %1 = %0.1;
      (%1.0, %0)
    }""", np.float32(1.5))
    arrays = flatten_value(out)
    assert [float(a) for a in arrays] == [3.0, 1.5, 3.0, 4.5]


def test_multi_output_operator_batch_norm() -> None:
    x = f32(2, 3, 4, 4)
    gamma, beta, mean = f32(3, seed=1), f32(3, seed=2), f32(3, seed=3)
    var = np.abs(f32(3, seed=4)) + 0.5
    out = run("""def @main(%x: Tensor[(2, 3, 4, 4), float32], %g: Tensor[(3), float32], %b: Tensor[(3), float32],
                          %m: Tensor[(3), float32], %v: Tensor[(3), float32]) {
      nn.batch_norm(%x, %g, %b, %m, %v)
    }""", x, gamma, beta, mean, var)
    assert isinstance(out, tuple) and len(out) == 3
    np.testing.assert_allclose(out[0], _batch_norm(x, gamma, beta, mean, var), rtol=1e-5, atol=1e-5)


def test_shared_node_is_evaluated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # A 40-level diamond: each level uses the previous one twice. Evaluated as a tree this would
    # be 2**40 additions; memoised, it is one `exp` and 40 additions.
    lines = ["%0 = exp(%x);"] + [f"%{i} = add(%{i - 1}, %{i - 1});" for i in range(1, 41)]
    text = "def @main(%x: float32) {\n" + "\n".join(lines) + "\n%40\n}"
    mod = load(text)
    calls = {"exp": 0, "add": 0}
    for name in calls:
        opdef = get_op(name)
        original = opdef.compute

        def counting(args, attrs, _name=name, _original=original):  # noqa: ANN001, ANN202
            calls[_name] += 1
            return _original(args, attrs)
        monkeypatch.setattr(opdef, "compute", counting)
    out = run_function(mod, [np.asarray(np.float32(0.0))])
    assert float(out) == 2.0 ** 40
    assert calls == {"exp": 1, "add": 40}


# ------------------------------------------------------------------------------------------
# Functions, closures, recursion


def test_closure_captures_its_environment() -> None:
    out = run("""def @main(%x: float32) -> float32 {
      let %k = %x * 10f;
      let %f = fn (%y: float32) -> float32 { %y + %k };
      %f(1f) + %f(2f)
    }""", np.float32(2))
    assert float(out) == (1 + 20) + (2 + 20)


def test_curried_closures_keep_separate_environments() -> None:
    out = run("""def @adder(%a: int32) -> fn (int32) -> int32 { fn (%b: int32) -> int32 { %a + %b } }
    def @main() -> (int32, int32) {
      let %add1 = @adder(1);
      let %add5 = @adder(5);
      (%add1(10), %add5(10))
    }""")
    assert [int(v) for v in out] == [11, 15]


def test_global_function_passed_as_value() -> None:
    out = run("""def @twice(%f: fn (float32) -> float32, %x: float32) -> float32 { %f(%f(%x)) }
    def @square(%x: float32) -> float32 { %x * %x }
    def @main(%x: float32) -> float32 { @twice(@square, %x) }""", np.float32(3))
    assert float(out) == 81.0


def test_recursive_let_bound_closure() -> None:
    out = run("""def @main(%n: int32) -> int32 {
      let %fact = fn (%k: int32) -> int32 {
        if (%k <= 1) { 1 } else { %k * %fact(%k - 1) }
      };
      %fact(%n)
    }""", i32(10))
    assert int(out) == 3628800


def test_closure_returns_closure_value() -> None:
    value = run("def @main(%a: float32) { fn (%b: float32) -> float32 { %a - %b } }", np.float32(5))
    assert isinstance(value, Closure)
    assert float(Interpreter().apply(value, [np.asarray(np.float32(2))])) == 3.0


def test_closures_built_from_closures_over_a_list() -> None:
    # TVM's test_recursive_datatype: @sum wraps %f in a new closure per element.
    mod = load(LIST + """
    def @sum(%f: fn (int32) -> int32, %k: List[int32]) -> int32 {
      match (%k) {
        Cons(%x, %rest) => %0 = fn (%n) { %x + %f(%n) }; @sum(%0, %rest),
        Nil => %f(0),
      }
    }
    def @id[A](%x: A) -> A { %x }
    def @main(%l: List[int32]) -> int32 { @sum(@id, %l) }""")
    cons, nil = mod.constructors["Cons"], mod.constructors["Nil"]
    value = ADTValue(nil, ())
    for v in (4, 3, 2, 1):
        value = ADTValue(cons, (i32(v), value))
    assert int(run_function(mod, [value])) == 1 + 2 + 3 + 4


def test_evaluate_module_and_expression_against_globals() -> None:
    mod = load("def @five() -> int32 { 5 }\ndef @main() -> int32 { @five() * 2 }")
    assert int(evaluate(mod)) == 10
    call = Call(Op("add"), [Call(GlobalVar("five"), []), Constant(i32(1))])
    assert int(evaluate(call, mod)) == 6
    with pytest.raises(DiagnosticError, match="undefined global function @five"):
        evaluate(call)


def test_call_lowered_calls_its_function_argument() -> None:
    out = run("""def @kernel(%a: Tensor[(2), float32], %b: Tensor[(2), float32]) -> Tensor[(2), float32] {
      subtract(%a, %b)
    }
    def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
      %0 = (%x, %x * 3f);
      call_lowered(@kernel, %0)
    }""", np.array([1, 2], np.float32))
    np.testing.assert_array_equal(out, np.array([-2, -4], np.float32))


def test_countdown_recursion_100000_deep(default_recursion_limit: None) -> None:
    mod = load("""def @count(%n: int32, %acc: int32) -> int32 {
      if (%n == 0) { %acc } else { @count(%n - 1, %acc + 2) }
    }""")
    assert int(run_function(mod, [i32(100_000), i32(0)], "count")) == 200_000


def test_non_tail_recursion_10000_deep() -> None:
    out = run("def @sum_to(%n: int64) -> int64 { if (%n == 0i64) { 0i64 } else { %n + @sum_to(%n - 1i64) } }",
              np.array(10_000, np.int64), entry="sum_to")
    assert int(out) == 10_000 * 10_001 // 2


# ------------------------------------------------------------------------------------------
# ADTs and match

LIST_PROGRAM = LIST + """
def @range(%i: int32, %n: int32) -> List[int32] {
  if (%i >= %n) { Nil } else { Cons(%i, @range(%i + 1, %n)) }
}
def @map[A, B](%f: fn (A) -> B, %xs: List[A]) -> List[B] {
  match (%xs) { Cons(%h, %t) => Cons(%f(%h), @map(%f, %t)), Nil => Nil }
}
def @foldl[A, B](%f: fn (B, A) -> B, %acc: B, %xs: List[A]) -> B {
  match (%xs) { Cons(%h, %t) => @foldl(%f, %f(%acc, %h), %t), Nil => %acc }
}
def @foldr[A, B](%f: fn (A, B) -> B, %init: B, %xs: List[A]) -> B {
  match (%xs) { Cons(%h, %t) => %f(%h, @foldr(%f, %init, %t)), Nil => %init }
}
def @length[A](%xs: List[A]) -> int32 {
  match (%xs) { Cons(_, %t) => 1 + @length(%t), Nil => 0 }
}
"""


def test_list_map_fold_length_on_10000_elements() -> None:
    mod = load(LIST_PROGRAM + """
    def @main(%n: int32) -> (int32, int32, int32, List[int32]) {
      %0 = @range(0, %n);
      %1 = @map(fn (%x: int32) -> int32 { %x * 2 }, %0);
      (@length(%1),
       @foldl(fn (%a: int32, %x: int32) -> int32 { %a + %x }, 0, %1),
       @foldr(fn (%x: int32, %a: int32) -> int32 { %a - %x }, 0, %1),
       %1)
    }""")
    start = time.perf_counter()
    length, total, negated, doubled = run_function(mod, [i32(10_000)])
    assert time.perf_counter() - start < 60
    assert int(length) == 10_000
    assert int(total) == 2 * sum(range(10_000))
    assert int(negated) == -2 * sum(range(10_000))
    values = to_list(doubled)
    assert len(values) == 10_000 and [int(v) for v in values[:3]] == [0, 2, 4] and int(values[-1]) == 19_998


def test_list_built_in_python_is_accepted_as_input() -> None:
    mod = load(LIST_PROGRAM + "def @main(%xs: List[float32]) -> int32 { @length(%xs) }")
    cons, nil = mod.constructors["Cons"], mod.constructors["Nil"]
    value = ADTValue(nil, ())
    for i in range(10_000):
        value = ADTValue(cons, (np.asarray(np.float32(i)), value))
    assert int(run_function(mod, {"xs": value})) == 10_000


def test_nested_and_tuple_patterns() -> None:
    mod = load(LIST + """
    def @classify(%xs: List[(int32, int32)]) -> int32 {
      match (%xs) {
        Cons((%a, _), Cons((_, %d), Nil)) => %a * 100 + %d,
        Cons((%a, %b), Nil) => %a - %b,
        Cons(_, Cons(_, Cons((%e, _), _))) => 0 - %e,
        Nil => 7,
      }
    }""")
    cons, nil = mod.constructors["Cons"], mod.constructors["Nil"]

    def lst(*pairs: tuple[int, int]) -> ADTValue:
        value = ADTValue(nil, ())
        for a, b in reversed(pairs):
            value = ADTValue(cons, ((i32(a), i32(b)), value))
        return value

    def classify(value: ADTValue) -> int:
        return int(run_function(mod, [value], "classify"))

    assert classify(lst((4, 0), (1, 1))) == 401
    assert classify(lst((3, 5))) == -2
    assert classify(lst((3, 5), (1, 9), (6, 2))) == -6
    assert classify(lst()) == 7


def test_partial_match_failure_is_located() -> None:
    mod = load(LIST + "def @head(%xs: List[int32]) -> int32 { match? (%xs) { Cons(%h, _) => %h } }")
    nil = mod.constructors["Nil"]
    with pytest.raises(DiagnosticError) as info:
        run_function(mod, [ADTValue(nil, ())], "head")
    assert "no clause" in str(info.value) and "Nil" in str(info.value)
    assert info.value.span is not None and info.value.span.line == 3


def test_if_runs_only_the_taken_branch() -> None:
    mod = load("""def @main(%c: bool) -> (int32, int32) {
      let %r = ref(0);
      let %v = if (%c) { ref_write(%r, 1); 10 } else { ref_write(%r, 2); 20 };
      (%v, ref_read(%r))
    }""")
    assert [int(v) for v in run_function(mod, [np.asarray(True)])] == [10, 1]
    assert [int(v) for v in run_function(mod, [np.asarray(False)])] == [20, 2]


# ------------------------------------------------------------------------------------------
# References


def test_ref_counter_with_sequencing() -> None:
    out = run("""def @main(%x: float32) -> (float32, float32) {
      let %r = ref(%x);
      let %before = ref_read(%r);
      ref_write(%r, ref_read(%r) + 1f);
      ref_write(%r, ref_read(%r) * 3f);
      (%before, ref_read(%r))
    }""", np.float32(2))
    assert [float(v) for v in out] == [2.0, 9.0]


def test_ref_shared_between_closures() -> None:
    out = run("""def @main() -> int32 {
      let %cell = ref(0);
      let %bump = fn (%k: int32) -> () { ref_write(%cell, ref_read(%cell) + %k) };
      %bump(5);
      %bump(7);
      ref_read(%cell)
    }""")
    assert int(out) == 12


def test_ref_write_returns_unit_and_ref_value_is_reported() -> None:
    out = run("def @main() { let %r = ref(1f); (ref_write(%r, 2f), %r) }")
    unit, ref = out
    assert unit == () and isinstance(ref, RefValue) and float(ref.value) == 2.0


# ------------------------------------------------------------------------------------------
# Deep programs built by hand (the parser's own depth limits are tested elsewhere)


def test_let_chain_200000_deep(default_recursion_limit: None) -> None:
    one = Constant(np.array(1, np.int32))
    names = [Var(f"v{i}", TensorType((), "int32")) for i in range(200_001)]
    body = names[-1]
    for i in range(200_000, 0, -1):
        body = Let(names[i], Call(Op("add"), [names[i - 1], one]), body)
    out = evaluate(body, bindings={names[0]: np.array(5, np.int32)})
    assert int(out) == 200_005


def test_dataflow_chain_100000_nodes_is_fast() -> None:
    x = Var("x", TensorType((2, 2), "float32"))
    step = Constant(np.full((2, 2), 0.5, np.float32))
    expr = x
    for _ in range(100_000):
        expr = Call(Op("add"), [expr, step])
    mod = IRModule()
    mod.add_function("main", Function([x], expr))
    start = time.perf_counter()
    out = run_function(mod, [np.zeros((2, 2), np.float32)])
    elapsed = time.perf_counter() - start
    np.testing.assert_array_equal(out, np.full((2, 2), 50_000, np.float32))
    assert elapsed < 20, f"100k-node chain took {elapsed:.1f}s"


def test_deep_tuple_nesting_flattens_depth_first() -> None:
    x = Var("x", TensorType((), "int32"))
    expr = x
    for i in range(50_000):
        expr = Tuple([Constant(np.array(i, np.int32)), expr])
    out = evaluate(TupleGetItem(Tuple([expr]), 0), bindings={x: np.array(-1, np.int32)})
    flat = flatten_value(out)
    assert len(flat) == 50_001
    assert int(flat[0]) == 49_999 and int(flat[-2]) == 0 and int(flat[-1]) == -1


# ------------------------------------------------------------------------------------------
# Errors


def test_operator_without_implementation_is_located(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load("def @main(%x: float32) -> float32 {\n  %0 = exp(%x);\n  negative(%0)\n}")
    monkeypatch.setattr(get_op("negative"), "compute", None)
    with pytest.raises(DiagnosticError) as info:
        run_function(mod, [np.asarray(np.float32(1))])
    assert "negative has no reference implementation" in str(info.value)
    assert (info.value.span.line, info.value.span.col) == (4, 3)


def test_kernel_failure_on_ill_typed_program_is_located() -> None:
    x = Var("x")
    call = Call(Op("add"), [x, x])
    bad = Call(Op("add"), [call, Constant(np.zeros((3,), np.float32))])
    with pytest.raises(DiagnosticError) as info:
        evaluate(bad, bindings={x: np.zeros((2,), np.float32)})
    assert str(info.value).startswith("add failed:")


def test_calling_a_tensor_is_an_error() -> None:
    x = Var("x")
    with pytest.raises(DiagnosticError, match="cannot call a tensor"):
        evaluate(Call(x, []), bindings={x: np.zeros(2)})


def test_unbound_variable_is_an_error() -> None:
    x = Var("lonely")
    with pytest.raises(DiagnosticError, match="%lonely has no value"):
        evaluate(Call(Op("add"), [x, x]))


def test_unbounded_recursion_is_reported_not_run_out_of_memory() -> None:
    mod = load("def @spin(%x: int32) -> int32 {\n  @spin(%x + 1)\n}")
    interp = Interpreter(mod, max_call_depth=5_000)
    with pytest.raises(DiagnosticError, match="more than 5000 nested calls") as info:
        interp.apply(interp.global_function("spin"), [i32(0)])
    assert (info.value.span.line, info.value.span.col) == (3, 3)


def test_input_mismatches_list_the_signature() -> None:
    mod = load("def @main(%x: Tensor[(1, 3), float32], %n: int32) { %x }")
    sig = "main expects %x: Tensor[(1, 3), float32], %n: int32"
    good = np.zeros((1, 3), np.float32)
    cases = [
        ({"x": good}, "missing input `n`"),
        ({"x": good, "n": i32(1), "z": good}, "unexpected input `z`"),
        ({"x": np.zeros((3,), np.float32), "n": i32(1)}, "input `x` has shape (3,)"),
        ({"x": good.astype(np.float64), "n": i32(1)}, "input `x` has dtype float64"),
        ({"x": good, "n": (i32(1),)}, "input `n` is a tuple of 1 fields, not a tensor"),
    ]
    for inputs, problem in cases:
        with pytest.raises(DiagnosticError) as info:
            run_function(mod, inputs)
        assert str(info.value) == f"{sig}; {problem}"
    with pytest.raises(DiagnosticError, match="no function @nope"):
        run_function(mod, [], "nope")
    np.testing.assert_array_equal(run_function(mod, {"%x": good, "n": i32(1)}), good)
