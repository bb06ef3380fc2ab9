"""The `lower` pass: the shape of lowered modules (docs/lowering.md) and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from irtool.eval.interpreter import flatten_value, run_function
from irtool.ir import Call, Function, GlobalVar, If, IRModule, Op, RefRead, Tuple, TupleGetItem
from irtool.ir.adt import Constructor
from irtool.eval.tir_interp import run_primfunc
from irtool.analysis.tir_verify import verify_primfunc
from irtool.ir.tir import Call as TirCall
from irtool.ir.tir import (Allocate, BinaryOp, Buffer, BufferLoad, BufferStore, FloatImm, For, IfExpr, IntImm, LetStmt,
                           PrimExpr, PrimFunc, Var, children)
from irtool.ir.visitor import post_order
from irtool.lower.share import bind_shared
from irtool.ir.signature import primfunc_type
from irtool.passes import run
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse_module
from irtool.syntax.printer import print_program
from irtool.tir_transform.index_width import needs_int64

HEADER = '#[version = "0.0.5"]\n'


def lowered(text: str, pipeline: str = "fuse-ops,lower") -> IRModule:
    return run(parse_module(HEADER + text), pipeline)


def kernels(mod: IRModule) -> dict[str, PrimFunc]:
    return {n: f for n, f in mod.functions.items() if isinstance(f, PrimFunc)}  # type: ignore[misc]


def tir_nodes(func: PrimFunc) -> list[object]:
    out: list[object] = []
    stack: list[object] = [func.body]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(children(node))  # type: ignore[arg-type]
    return out


def main_calls(mod: IRModule) -> list[Call]:
    return [n for n in post_order(mod["main"].body) if isinstance(n, Call)]


def same_outputs(text: str, pipeline_before: str = "fuse-ops") -> None:
    before = run(parse_module(HEADER + text), pipeline_before)
    after = run(before, "lower")
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(tuple(p.type_annotation.shape)).astype(p.type_annotation.dtype)  # type: ignore[union-attr]
            for p in before["main"].params]
    for g, w in zip(flatten_value(run_function(after, args)), flatten_value(run_function(before, args))):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


CONV_BIAS_RELU = """
def @main(%x: Tensor[(1, 2, 5, 5), float32], %w: Tensor[(3, 2, 3, 3), float32], %b: Tensor[(3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = nn.bias_add(%0, %b);
  nn.relu(%1)
}
"""


def test_conv_bias_relu_is_one_kernel_with_a_pad_stage_and_a_local_accumulator() -> None:
    mod = lowered(CONV_BIAS_RELU)
    (name, func), = kernels(mod).items()
    assert name == "fused_nn_conv2d_nn_bias_add_nn_relu"
    allocs = [n for n in tir_nodes(func) if isinstance(n, Allocate)]
    # the padded input is a stage; bias and relu run on the register tile before its store, so
    # no buffer holds the convolution's result (only local accumulators and scratch for weights)
    shapes = [(a.buffer.scope, a.buffer.shape) for a in allocs]
    assert ("global", (1, 2, 7, 7)) in shapes and ("global", (1, 3, 5, 5)) not in shapes
    assert any(scope == "local" for scope, _ in shapes)
    # Parameters: inputs then the output; the signature Relay sees.
    assert [p.shape for p in func.params] == [(1, 2, 5, 5), (3, 2, 3, 3), (3,), (1, 3, 5, 5)]
    sig = primfunc_type(func)
    assert sig.ret_type == mod["main"].body.checked_type
    assert list(sig.arg_types) == [p.type_annotation for p in mod["main"].params]
    (call,) = main_calls(mod)
    assert isinstance(call.op, Op) and call.op.name == "call_lowered"
    assert isinstance(call.args[0], GlobalVar) and call.args[0].name_hint == name
    assert isinstance(call.args[1], Tuple) and list(call.args[1].fields) == list(mod["main"].params)
    same_outputs(CONV_BIAS_RELU)


def test_elementwise_chain_is_one_loop_nest_without_intermediate_buffers() -> None:
    text = """
def @main(%a: Tensor[(4, 8), float32], %b: Tensor[(8), float32], %c: Tensor[(4, 1), float32]) {
  %0 = multiply(%a, %b);
  %1 = add(%0, %c);
  %2 = exp(%1);
  %3 = nn.relu(%2);
  negative(%3)
}
"""
    mod = lowered(text)
    (func,) = kernels(mod).values()
    nodes = tir_nodes(func)
    assert not any(isinstance(n, Allocate) for n in nodes)
    assert sum(isinstance(n, For) for n in nodes) == 2
    assert sum(isinstance(n, BufferStore) for n in nodes) == 1
    same_outputs(text)


def test_shared_scalar_constant_arguments_become_immediates() -> None:
    """A scalar (or 1-element) constant that fuse-ops leaves outside two groups is bound into each
    kernel: no 0-d input buffer, the exponent an immediate, and the same results."""
    text = """
def @main(%x: Tensor[(2, 8), float32], %y: Tensor[(2, 8), float32]) {
  %0 = 3f;
  %1 = meta[relay.Constant][0];
  (add(power(%x, %0), %1), add(power(%y, %0), %1))
}
#[metadata]
{"relay.Constant": [{"dtype": "float32", "shape": [1], "data": [0.25]}]}
"""
    mod = lowered(text)
    (func,) = kernels(mod).values()
    assert [p.shape for p in func.params] == [(2, 8), (2, 8)]    # %x or %y in, the output out
    assert {n.value for n in tir_nodes(func) if isinstance(n, FloatImm)} == {3.0, 0.25}
    calls = [c for c in main_calls(mod) if c.op.name == "call_lowered"]  # type: ignore[union-attr]
    assert [len(c.args[1].fields) for c in calls] == [1, 1]  # type: ignore[attr-defined]
    same_outputs(text)


def test_softmax_computes_each_exponential_once() -> None:
    """Stages: the row max, the exponentials, 1 / their row sum; one `exp` in the whole kernel."""
    text = "def @main(%x: Tensor[(3, 6), float32]) { nn.softmax(%x) }"
    (func,) = kernels(lowered(text)).values()
    nodes = tir_nodes(func)
    allocs = [n.buffer for n in nodes if isinstance(n, Allocate)]
    assert sorted((b.name, b.shape) for b in allocs if b.scope == "global") == [
        ("exp", (3, 6)), ("inv_sum", (3,)), ("max", (3,))]
    assert sum(isinstance(n, TirCall) and n.name == "exp" for n in nodes) == 1
    same_outputs(text)


@pytest.mark.parametrize("shape, axis", [((2, 197, 197), -1), ((3, 1000), 1), ((4, 37, 5), 1)])
@pytest.mark.parametrize("op", ["nn.softmax", "nn.log_softmax"])
def test_softmax_in_lanes_matches_numpy(shape: tuple[int, ...], axis: int, op: str) -> None:
    """The max and sum folded in lanes (reassociated) stay within 1e-6 of numpy's float64 result
    (relative to the largest output), and softmax within float32's exp error element by element."""
    import irtool
    from irtool.syntax.parser import parse
    dims = ", ".join(map(str, shape))
    mod = parse(HEADER + f"def @main(%x: Tensor[({dims}), float32]) {{ {op}(%x, axis={axis}) }}", "softmax.relay")
    x = (np.random.default_rng(5).standard_normal(shape) * 4).astype(np.float32)
    got = irtool.build(mod)(x).astype(np.float64)
    shifted = x.astype(np.float64) - x.max(axis, keepdims=True)
    total = np.exp(shifted).sum(axis, keepdims=True)
    want = np.exp(shifted) / total if op == "nn.softmax" else shifted - np.log(total)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()
    if op == "nn.softmax":   # log_softmax near 0 is a difference of float32 values: absolute error only
        np.testing.assert_allclose(got, want, rtol=4e-6, atol=0)


def test_identical_groups_share_one_primfunc() -> None:
    text = """
def @main(%x: Tensor[(1, 2, 4, 4), float32], %y: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(2, 2, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%y, %w, padding=[1, 1]);
  %3 = nn.relu(%2);
  %4 = nn.conv2d(%y, %w);
  (%1, %3, %4)
}
"""
    mod = lowered(text)
    assert sorted(kernels(mod)) == ["fused_nn_conv2d", "fused_nn_conv2d_nn_relu"]
    targets = [c.args[0].name_hint for c in main_calls(mod) if c.op.name == "call_lowered"]  # type: ignore[union-attr]
    assert sorted(targets) == ["fused_nn_conv2d", "fused_nn_conv2d_nn_relu", "fused_nn_conv2d_nn_relu"]
    same_outputs(text)


def test_reshape_only_groups_become_views() -> None:
    text = """
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %0 = exp(%x);
  %1 = reshape(%0, newshape=[6, 4]);
  %2 = expand_dims(%1, axis=0);
  %3 = nn.batch_flatten(%2);
  nn.softmax(%3)
}
"""
    mod = run(parse_module(HEADER + text), "fuse-ops{opt-level=0}")
    low = run(mod, "lower")
    names = [getattr(c.op, "name", None) for c in main_calls(low)]
    views = [c for c in main_calls(low) if getattr(c.op, "name", None) == "reshape"]
    assert names.count("call_lowered") == 2 and len(views) >= 1
    assert all(v.attrs["newshape"] == tuple(v.checked_type.shape) for v in views)  # type: ignore[union-attr]
    same_outputs(text, "fuse-ops{opt-level=0}")


def test_several_outputs_and_tuple_arguments() -> None:
    text = """
def @main(%x: Tensor[(4, 6), float32]) {
  %0 = exp(%x);
  %1 = split(%0, indices_or_sections=3, axis=1);
  %2 = %1.0;
  %3 = %1.2;
  %4 = nn.softmax(%2);
  (%4, %3)
}
"""
    mod = lowered(text)
    splits = [f for n, f in kernels(mod).items() if "split" in n]
    assert splits and splits[0].attrs["num_outputs"] == 3
    assert any(isinstance(n, TupleGetItem) for n in post_order(mod["main"].body))
    same_outputs(text)


def test_unfused_operators_lower_one_by_one() -> None:
    text = "def @main(%x: Tensor[(3), float32]) { %0 = exp(%x); negative(%0) }"
    mod = lowered(text, "lower")
    assert sorted(kernels(mod)) == ["fused_exp", "fused_negative"]
    same_outputs(text, "infer-type")


def test_tensor_constants_inside_a_group_become_arguments() -> None:
    text = """
def @main(%x: Tensor[(2, 2), float32]) {
  %0 = add(%x, meta[relay.Constant][0]);
  exp(%0)
}
#[metadata]
{"relay.Constant": [{"dtype": "float32", "shape": [2, 2], "data": [1.0, 2.0, 3.0, 4.0]}]}
"""
    mod = lowered(text)
    (call,) = main_calls(mod)
    assert len(call.args[1].fields) == 2  # type: ignore[union-attr]
    same_outputs(text)


@pytest.mark.parametrize("body,kept", [
    ("if (%c) { %x } else { negative(%x) }", If),
    ("let %f = fn (%y: Tensor[(2), float32]) { exp(%y) }; %f(%x)", Function),
    ("ref_read(ref(exp(%x)))", RefRead),
    ("add(@g(%x), 1f)", GlobalVar),
])
def test_control_flow_is_kept_and_the_operators_inside_it_become_kernels(body: str, kept: type) -> None:
    """docs/native-relay.md: `lower` lowers fused groups wherever they are and keeps the rest."""
    text = ("def @g(%a: Tensor[(2), float32]) { multiply(%a, %a) }\n"
            f"def @main(%x: Tensor[(2), float32], %c: bool) {{ {body} }}")
    mod = lowered(text)
    nodes = [n for name in ("main", "g") for n in post_order(mod[name].body)]
    assert any(isinstance(n, kept) for n in nodes)
    ops = {n.op.name for n in nodes if isinstance(n, Call) and isinstance(n.op, Op)}
    assert ops == {"call_lowered"}
    x = np.array([0.5, -2.0], np.float32)
    for c in (True, False):
        args = {"x": x, "c": np.array(c)}
        np.testing.assert_allclose(run_function(mod, args), run_function(parse_module(HEADER + text), args),
                                   rtol=1e-6)


def test_tuple_plumbing_that_fuse_ops_wraps_is_substituted() -> None:
    """fuse-ops wraps `(%p0,).0` in a non-primitive literal called in place: still dataflow, so
    lowering substitutes it and `main` is left with no call (found by test_lower_props)."""
    mod = lowered("def @main(%p0: float32) -> float32 { %0 = (%p0,); %0.0 }")
    assert main_calls(mod) == []
    assert run_function(mod, [np.float32(2.5)]) == np.float32(2.5)


def test_adt_values_lower_with_their_fields_computed_by_kernels() -> None:
    text = ("type List[A] { Cons(A, List[A]), Nil }\n"
            "def @main(%x: Tensor[(2), float32]) { Cons(exp(%x), Nil) }")
    mod = lowered(text)
    (ctor,) = [n for n in main_calls(mod) if isinstance(n.op, Constructor) and n.args]
    assert isinstance(ctor.args[0], Call) and ctor.args[0].op == Op("call_lowered")


@pytest.mark.parametrize("pipeline", ["fuse-ops,lower", "inline{all=true},fuse-ops,lower"])
def test_a_call_of_a_primitive_global_lowers_to_one_kernel(pipeline: str) -> None:
    """A partitioned global (`Primitive=1`, its `Composite` literal called in place) is one fused
    group, also once the build has inlined it into `main` as a literal (12 TVM corpus programs)."""
    text = """
def @part(%a: Tensor[(2), float32], Primitive=1, Compiler="ext") -> Tensor[(2), float32] {
  %0 = fn (%b: Tensor[(2), float32], Composite="relu") -> Tensor[(2), float32] { nn.relu(%b) };
  %1 = %0(%a);
  exp(%1)
}
def @main(%x: Tensor[(2), float32]) { @part(%x) }
"""
    mod = lowered(text, pipeline)
    (call,) = main_calls(mod)
    assert call.op == Op("call_lowered") and call.args[0].name_hint == "fused_nn_relu_exp"  # type: ignore[union-attr]
    x = np.array([0.5, -2.0], np.float32)
    np.testing.assert_allclose(run_function(mod, [x]), np.exp(np.maximum(x, 0)), rtol=1e-6)


def test_a_dynamic_batch_lowers_at_one_row_and_at_a_tile_of_rows() -> None:
    mod = lowered("def @main(%x: Tensor[(?, 2), float32], %b: Tensor[(2), float32]) { exp(add(%x, %b)) }")
    funcs = kernels(mod)
    assert sorted((f.params[0].shape, f.attrs.get("batch_buffers")) for f in funcs.values()) == \
        [((1, 2), (1, 0, 1)), ((32, 2), (1, 0, 1))]
    one = next(f for f in funcs.values() if f.params[0].shape == (1, 2))
    assert funcs[one.attrs["batch_tile"]].params[0].shape == (32, 2) and one.attrs["batch_tile_rows"] == 32
    assert str(primfunc_type(one)) == "fn (Tensor[(?, 2), float32], Tensor[(2), float32]) -> Tensor[(?, 2), float32]"
    assert print_program(parse_module(print_program(mod))) == print_program(mod)


def test_a_static_axis_before_a_dynamic_one_is_part_of_the_row_prefix() -> None:
    mod = lowered("def @main(%x: Tensor[(2, ?, 3), float32]) { exp(%x) }")
    one = next(f for f in kernels(mod).values() if "batch_tile" in f.attrs)
    # The prefix (2, ?) is one axis of 2·n rows in the kernels (every tensor shares it)...
    assert one.params[0].shape == (1, 3) and one.attrs["batch_buffers"] == (1, 1)
    # ...whose extent the call computes from the static 2 and axis 1 of the input box.
    assert one.attrs["batch_dims"] == (((2,), (1, 0, 1)), ((2,), (1, 0, 1)))
    assert kernels(mod)[one.attrs["batch_tile"]].params[0].shape == (32, 3)
    assert str(primfunc_type(one)) == "fn (Tensor[(2, ?, 3), float32]) -> Tensor[(2, ?, 3), float32]"


def test_a_dynamic_axis_its_operator_does_not_treat_row_by_row_is_refused() -> None:
    with pytest.raises(DiagnosticError, match=r"`nn.softmax` with a `\?` on axis 1 of Tensor\[\(2, \?\), float32\]"):
        lowered("def @main(%x: Tensor[(2, ?), float32]) { nn.softmax(%x, axis=1) }")


def test_resnet_block_lowers_and_runs() -> None:
    """The sample's block at a small size: simplify-inference, fuse-ops, lower, same numbers."""
    text = """
def @main(%data: Tensor[(1, 4, 5, 5), float32], %w1: Tensor[(4, 4, 3, 3), float32],
          %g: Tensor[(4), float32], %b: Tensor[(4), float32], %m: Tensor[(4), float32], %v: Tensor[(4), float32],
          %w2: Tensor[(4, 4, 3, 3), float32]) {
  %0 = nn.conv2d(%data, %w1, padding=[1, 1, 1, 1]);
  %1 = nn.batch_norm(%0, %g, %b, %m, abs(%v));
  %2 = nn.relu(%1.0);
  %3 = nn.conv2d(%2, %w2, padding=[1, 1, 1, 1]);
  %4 = add(%3, %data);
  nn.relu(%4)
}
"""
    same_outputs(text, "simplify-inference,fuse-ops")
    mod = lowered(text, "simplify-inference,fuse-ops,lower")
    assert all(c.op.name == "call_lowered" for c in main_calls(mod))  # type: ignore[union-attr]


def test_long_fused_chains_lower_without_recursion() -> None:
    """1,500 operators in one group, alternating elementwise and index-changing ones."""
    from irtool.ir import Function, TensorType, Var
    x = Var("x", TensorType((2, 3), "float32"))
    body = x
    for i in range(1500):
        body = Call(Op("transpose" if i % 2 else ("negative" if i % 3 else "tanh")), [body])
    mod = IRModule()
    mod.add_function("main", Function([x], body, None))
    fused = run(mod, "fuse-ops{max-depth=5000}")
    low = run(fused, "lower")
    assert len(kernels(low)) == 1
    arg = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
    np.testing.assert_allclose(run_function(low, [arg]), run_function(fused, [arg]), rtol=1e-6)


def test_irtool_run_runs_a_lowered_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """irtool-opt writes the lowered module; irtool-run executes it (kernels through the TIR
    interpreter) and gets the outputs of the unlowered program on the same random inputs."""
    from irtool.tools.opt import main as opt_main
    from irtool.tools.run import main as run_main
    source = tmp_path / "conv.relay"
    source.write_text(HEADER + CONV_BIAS_RELU)
    low = tmp_path / "low.relay"
    assert opt_main([str(source), "-p", "fuse-ops,lower", "-o", str(low)]) == 0
    assert "call_lowered(@fused_nn_conv2d_nn_bias_add_nn_relu" in low.read_text()
    assert run_main([str(low), "--seed", "5", "-o", str(tmp_path / "low.npz")]) == 0
    assert run_main([str(source), "--seed", "5", "-o", str(tmp_path / "ref.npz")]) == 0
    got, want = np.load(tmp_path / "low.npz"), np.load(tmp_path / "ref.npz")
    np.testing.assert_allclose(got["output0"], want["output0"], rtol=1e-5, atol=1e-6)


def test_lowered_samples_print_and_reparse_equal() -> None:
    from pathlib import Path

    from irtool.ir.equality import structural_equal
    from irtool.syntax.printer import print_module
    sample = Path(__file__).resolve().parents[2] / "samples" / "resnet_block.relay"
    mod = run(parse_module(sample.read_text()), "simplify-inference,fuse-ops,lower")
    text = print_module(mod)
    again = parse_module(text)
    assert structural_equal(again, mod) and print_module(again) == text
    assert len(kernels(mod)) == 3  # the two batch-norm scale groups share one primfn


def test_device_copies_stay_relay_calls_between_kernels() -> None:
    text = """
def @main(%x: Tensor[(4), float32]) {
  %0 = exp(%x);
  %1 = device_copy(%0, src_virtual_device=1, dst_virtual_device=2);
  negative(%1)
}
"""
    mod = lowered(text)
    names = [c.op.name for c in main_calls(mod)]  # type: ignore[union-attr]
    assert names == ["call_lowered", "device_copy", "call_lowered"]
    assert sorted(kernels(mod)) == ["fused_exp", "fused_negative"]
    same_outputs(text)


def test_interpreter_runs_primfns_written_by_hand() -> None:
    """`call_lowered(@f, (args))` and `@f(args)` allocate the outputs and run the TIR kernel."""
    text = """
primfn @twice_and_sum(%a: Buffer[(3), float32], %o: Buffer[(3), float32], %s: Buffer[(), float32], num_outputs=2) {
  %s[] = 0f;
  for %i in range(0, 3) {
    %o[%i] = %a[%i] * 2f;
    %s[] = %s[] + %a[%i];
  }
}
def @main(%x: Tensor[(3), float32]) {
  %0 = call_lowered(@twice_and_sum, (%x,));
  (%0.0, %0.1, @twice_and_sum(%0.0))
}
"""
    mod = parse_module(HEADER + text)
    x = np.array([1, 2, 4], "float32")
    o, s, (o2, s2) = run_function(mod, [x])
    np.testing.assert_array_equal(o, [2, 4, 8])
    assert s.shape == () and s == 7
    np.testing.assert_array_equal(o2, [4, 8, 16])
    assert s2 == 14


def _doubling_chain(depth: int, dtype: str = "float32") -> str:
    lines = [f"def @main(%x: Tensor[(4), {dtype}]) {{", "  %0 = add(%x, %x);"]
    lines += [f"  %{k} = add(%{k - 1}, %{k - 1});" for k in range(1, depth)]
    return "\n".join([*lines, f"  %{depth - 1}", "}", ""])


def test_a_shared_value_is_bound_once_not_expanded_into_a_tree() -> None:
    """A fused doubling chain of depth 200 (a DAG whose tree has 2^200 nodes) lowers to one `let`
    per shared level, and the kernel's tree is linear in the depth."""
    mod = lowered(_doubling_chain(200))
    (func,) = kernels(mod).values()
    nodes = tir_nodes(func)
    assert sum(type(n) is LetStmt for n in nodes) == 199
    assert len(nodes) < 200 * 8
    x = np.array([2.0 ** -149, 2.0 ** -140, -(2.0 ** -145), 0.0], np.float32)
    out = np.zeros(4, np.float32)
    run_primfunc(func, [x, out])
    np.testing.assert_array_equal(out, x * np.float32(2.0 ** 100) * np.float32(2.0 ** 100))


def test_small_sharing_stays_inline() -> None:
    """Ordinary reuse (`x * x`, one load used twice) is not worth a `let`: kernels of ordinary
    models are unchanged."""
    mod = lowered("def @main(%x: Tensor[(4), float32]) {\n  %0 = multiply(%x, %x);\n  add(%0, %0)\n}\n")
    (func,) = kernels(mod).values()
    assert not any(type(n) is LetStmt for n in tir_nodes(func))


def _loop_dtypes(func: PrimFunc) -> set[str]:
    return {n.var.dtype for n in tir_nodes(func) if type(n) is For}


@pytest.mark.parametrize("n,want", [(4, "int32"), (2 ** 31 - 1, "int32"), (2 ** 31, "int64"), (99999999999, "int64")])
def test_index_type_is_int64_only_where_int32_may_overflow(n: int, want: str) -> None:
    (func,) = kernels(lowered(f"def @main(%x: Tensor[({n}), int8]) {{\n  negative(%x)\n}}\n")).values()
    assert _loop_dtypes(func) == {want}
    assert needs_int64(func) == (want == "int64")
    (loop,) = [s for s in tir_nodes(func) if type(s) is For]
    assert loop.end.value == n and loop.end.dtype == want


def test_an_inlined_tensor_over_int32_widens_its_reduction_loop() -> None:
    """No buffer is large, but the reduction runs over an inlined 2^31 + 5 element fill."""
    (func,) = kernels(lowered('def @main(%v: Tensor[(), int64]) {\n'
                              '  sum(full(%v, shape=[2147483653], dtype="int64"))\n}\n')).values()
    assert _loop_dtypes(func) == {"int64"}
    verify_primfunc(func)


def test_a_flattened_index_over_int32_is_computed_in_int64() -> None:
    """reshape of a (2^16, 2^16) tensor: each dimension fits int32, the flat index does not."""
    (func,) = kernels(lowered("def @main(%x: Tensor[(65536, 65536), int8]) {\n"
                              "  negative(reshape(%x, newshape=[4294967296]))\n}\n")).values()
    assert _loop_dtypes(func) == {"int64"}
    verify_primfunc(func)
    int32_index_math = [n for n in tir_nodes(func) if type(n) is BinaryOp and n.dtype == "int32"]
    assert not int32_index_math


def test_take_along_an_axis_over_int32_keeps_its_position_in_int64() -> None:
    (func,) = kernels(lowered("def @main(%x: Tensor[(3000000000), int8], %i: Tensor[(2), int64]) {\n"
                              "  take(%x, %i, axis=0)\n}\n")).values()
    (load,) = [n for n in tir_nodes(func) if type(n).__name__ == "BufferLoad" and n.buffer.name == "p0"]
    (index,) = load.indices
    assert index.dtype == "int64" and index.op == "min" and index.b.value == 2999999999


def test_values_only_inside_a_conditional_arm_are_not_hoisted() -> None:
    """`if_then_else` guards its arms (a padding load out of bounds): shared values under an arm
    stay there; shared values evaluated unconditionally are bound."""
    a, b, out = Buffer("a", (4,), "float32"), Buffer("b", (4,), "float32"), Buffer("out", (4,), "float32")
    i = Var("i", "int32")

    def doubled(x: PrimExpr) -> PrimExpr:
        for _ in range(12):
            x = BinaryOp("add", x, x)
        return x
    guarded = IfExpr(BinaryOp("lt", i, IntImm(2)), doubled(BufferLoad(a, [i])), FloatImm(0.0))
    store = BufferStore(out, [i], BinaryOp("add", guarded, doubled(BufferLoad(b, [i]))))
    body = bind_shared(For(i, IntImm(0), IntImm(4), "serial", store))
    lets = [n for n in tir_nodes(PrimFunc([a, b, out], body)) if type(n) is LetStmt]
    assert len(lets) == 11   # b[i]'s first 11 doublings (the last is used once, the load is too small)
    loaded = {n.buffer.name for let in lets for n in post_order(let.value, children)  # type: ignore[arg-type]
              if type(n) is BufferLoad}
    assert loaded == {"b"}
