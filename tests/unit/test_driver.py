"""The build driver prepares what code generation takes (calls inlined, lowered, planned, parallel
loops chosen), and code generation refuses anything else with a located error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import irtool
from irtool.analysis.liveness import compute_liveness
from irtool.analysis.memory_plan import plan_memory
from irtool.analysis.plan_attrs import annotate, read_plan
from irtool.analysis.typecheck import infer_types
from irtool.codegen import generate_module
from irtool.core.diagnostics import DiagnosticError
from irtool.driver import DEFAULT_PIPELINE, ensure_lowered, parallelize_kernels, plan_if_missing, prepare
from irtool.eval.interpreter import entry_function, run_function
from irtool.eval.values import flatten_value
from irtool.ir.tir import For, PrimFunc
from irtool.syntax.parser import parse_module
from irtool.syntax.printer import print_program
from irtool.target import TargetOptions
from irtool.tir_transform.mutator import walk_stmts
from irtool.tools.run import load_module, random_inputs

# Two kernels of 2^20 elements (enough work for a thread each); `exp` may write over its input.
BIG = """#[version = "0.0.5"]
def @main(%x: Tensor[(1024, 1024), float32], %y: Tensor[(1024, 1024), float32]) {
  %0 = add(%x, %y);
  %1 = annotation.stop_fusion(%0);
  %2 = exp(%1);
  %3 = annotation.stop_fusion(%2);
  negative(%3)
}
"""


def _parallel_loops(func: PrimFunc) -> int:
    return sum(1 for s in walk_stmts(func.body) if isinstance(s, For) and s.kind == "parallel")


def test_codegen_refuses_a_module_that_is_not_lowered() -> None:
    mod = parse_module(BIG, "big.relay")
    with pytest.raises(DiagnosticError, match="takes a lowered module") as info:
        generate_module(mod, "m", TargetOptions(opt_level=0))
    assert info.value.diagnostics[0].span is not None and info.value.diagnostics[0].span.line == 2


def test_codegen_refuses_a_lowered_module_without_a_plan_and_the_driver_plans_it() -> None:
    lowered = ensure_lowered(parse_module(BIG, "big.relay"))
    with pytest.raises(DiagnosticError, match="no memory plan") as info:
        generate_module(lowered, "m", TargetOptions(opt_level=0))
    assert info.value.diagnostics[0].span is not None and info.value.diagnostics[0].span.line == 2
    planned = prepare(lowered, TargetOptions(opt_level=0))
    attrs = planned.functions["main"].attrs
    # add and exp need their 4 MiB each in the workspace; negative writes into the caller's output.
    assert attrs["memory_plan"] == "greedy-by-size" and attrs["workspace_bytes"] == 2 * 4 * 1024 * 1024
    abi = generate_module(planned, "m", TargetOptions(opt_level=0)).abi
    assert abi is not None and 2 * 4 * 1024 * 1024 <= abi.workspace_bytes < 2 * 4 * 1024 * 1024 + 64


def test_an_existing_plan_is_kept() -> None:
    lowered = ensure_lowered(parse_module(BIG, "big.relay"))
    infer_types(lowered)
    live = compute_liveness(lowered, "main")
    mine = annotate(lowered, live, plan_memory(live, "tvm-greedy", 64))
    assert plan_if_missing(mine) is mine
    infer_types(mine)
    plan = read_plan(compute_liveness(mine, "main"))
    assert plan is not None and plan.algorithm == "tvm-greedy"


def test_threads_mark_parallel_loops_except_in_kernels_called_in_place() -> None:
    lowered = ensure_lowered(parse_module(BIG, "big.relay"))
    infer_types(lowered)
    live = compute_liveness(lowered, "main")
    plan = plan_memory(live, "greedy-by-size", 64)
    exp_step = live.steps[1]
    plan.placement[exp_step.outputs[0]] = plan.placement[exp_step.inputs[0]]   # exp over its input
    plan.in_place = True  # declared, so the plan's readers accept the overlap
    in_place = annotate(lowered, live, plan)
    serial = parallelize_kernels(in_place, 1)
    assert serial is in_place
    threaded = parallelize_kernels(in_place, 2)
    loops = {name: _parallel_loops(f) for name, f in threaded.functions.items() if isinstance(f, PrimFunc)}
    assert loops["fused_exp"] == 0
    assert loops["fused_add"] >= 1 and loops["fused_negative"] >= 1
    assert all(_parallel_loops(f) == 0 for f in in_place.functions.values() if isinstance(f, PrimFunc))


# A weight computed from constants only (hoisted: `_init` fills it once), then a step of `_run`.
HOISTED = """#[version = "0.0.5"]
def @main(%x: Tensor[(1024, 1024), float32]) {
  %0 = full(2f, shape=[1024, 1024], dtype="float32");
  %1 = exp(%0);
  %2 = annotation.stop_fusion(%1);
  add(%x, %2)
}
"""


def test_threads_leave_the_kernels_only_init_runs_serial() -> None:
    threaded = prepare(parse_module(HOISTED, "hoisted.relay"), TargetOptions(threads=2))
    loops = {name: _parallel_loops(f) for name, f in threaded.functions.items() if isinstance(f, PrimFunc)}
    assert loops["fused_full_exp"] == 0 and loops["fused_add"] >= 1
    x = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    got = irtool.build(parse_module(HOISTED, "hoisted.relay"), opt_level=1, threads=2)(x=x)
    np.testing.assert_allclose(got, x + np.exp(np.float32(2)), rtol=1e-6)


SAMPLES = sorted((Path(__file__).resolve().parents[2] / "samples").glob("*.relay"))


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_every_sample_compiles_natively_and_matches_the_interpreter(sample: Path) -> None:
    """Issue #18, case 12: functions `main` calls are inlined before lowering (`inline.relay`);
    issue #15: recursive ones (`adt_list.relay`) take the functions path."""
    mod = load_module(str(sample), sample.read_text(), "main")
    inputs = random_inputs("main", entry_function(mod, "main"), 11)
    expected = flatten_value(run_function(mod, inputs))
    got = flatten_value(irtool.build(mod)(**inputs))
    assert len(got) == len(expected) >= 1
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        # sums of hundreds of products, in another order: errors scale with the largest value
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(e).max())))


def test_inlining_before_lowering_leaves_a_module_without_calls_as_it_was() -> None:
    """The AOT path of a plain dataflow `main` stays byte for byte what it was."""
    from irtool.passes import run
    mod = parse_module((Path(__file__).resolve().parents[2] / "samples" / "mlp.relay").read_text(), "mlp.relay")
    assert print_program(ensure_lowered(mod)) == print_program(run(mod, DEFAULT_PIPELINE, verify_each=False))


def test_inlined_functions_are_gone_before_lowering() -> None:
    mod = parse_module((Path(__file__).resolve().parents[2] / "samples" / "inline.relay").read_text(), "inline.relay")
    lowered = ensure_lowered(mod)
    relay = [name for name, _ in lowered.relay_functions()]
    assert relay == ["main"]  # @gelu_like (not marked Inline) too: every non-recursive callee
