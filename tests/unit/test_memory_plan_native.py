"""Reuse plans of lowered programs, end to end: the plan text, the checker, the arena interpreter
and the native code all agree.

Two shapes of network where concatenate-in-place matters: a DenseNet-like chain (each
concatenation's result is an input of the next, so the slices nest; one weight is a hoisted
`full`) and an Inception-like module (four branches written straight into their slices of one
concatenation). N = 1 and the concatenation axis is 1, so every slice is contiguous; each branch
is 4 x 6 x 6 floats = 576 bytes, a multiple of the 64-byte alignment, so every slice is aligned.
"""

from __future__ import annotations

import numpy as np
import pytest

from irtool.analysis.steps import Liveness
from irtool.analysis.memory_plan import MemoryPlan, align_up, concat_parents, concats_in_place
from irtool.analysis.plan_attrs import plan_liveness, read_plan
from irtool.analysis.typecheck import infer_types
from irtool.eval.arena import run_with_plan
from irtool.eval.interpreter import run_function
from irtool.eval.values import flatten_value
from irtool.ir import IRModule
from irtool.passes import run, verify
from irtool.passes.verify_memory_plan import check_memory_plan
from irtool.driver import build
from irtool.syntax.parser import parse
from irtool.syntax.printer import print_program

DENSE_CHAIN = """
def @main(%x: Tensor[(1, 8, 6, 6), float32], %w1: Tensor[(4, 8, 3, 3), float32],
          %w3: Tensor[(4, 16, 1, 1), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.conv2d(%0, %w1, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %2 = concatenate((%0, %1), axis=1);
  %3 = sigmoid(%2);
  %4 = full(0.05f, shape=[4, 12, 3, 3], dtype="float32");
  %5 = nn.conv2d(%3, %4, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %6 = concatenate((%2, %5), axis=1);
  %7 = nn.relu(%6);
  %8 = nn.conv2d(%7, %w3, channels=4, kernel_size=[1, 1]);
  %9 = concatenate((%6, %8), axis=1);
  (nn.global_avg_pool2d(%9), nn.global_max_pool2d(%9))
}
"""

INCEPTION = """
def @main(%x: Tensor[(1, 8, 6, 6), float32], %w1: Tensor[(4, 8, 1, 1), float32],
          %w2a: Tensor[(4, 8, 1, 1), float32], %w2b: Tensor[(4, 4, 3, 3), float32],
          %w3: Tensor[(4, 8, 5, 5), float32], %w4: Tensor[(4, 8, 1, 1), float32],
          %w5: Tensor[(4, 16, 1, 1), float32]) {
  %0 = nn.relu(nn.conv2d(%x, %w1, channels=4, kernel_size=[1, 1]));
  %1 = nn.relu(nn.conv2d(%x, %w2a, channels=4, kernel_size=[1, 1]));
  %2 = nn.relu(nn.conv2d(%1, %w2b, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]));
  %3 = nn.relu(nn.conv2d(%x, %w3, padding=[2, 2, 2, 2], channels=4, kernel_size=[5, 5]));
  %4 = nn.max_pool2d(%x, pool_size=[3, 3], padding=[1, 1, 1, 1]);
  %5 = nn.relu(nn.conv2d(%4, %w4, channels=4, kernel_size=[1, 1]));
  %6 = concatenate((%0, %2, %3, %5), axis=1);
  %7 = nn.max_pool2d(%6, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]);
  %8 = nn.conv2d(%6, %w5, channels=4, kernel_size=[1, 1]);
  (%7, %8)
}
"""


def _inputs(mod: IRModule) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.uniform(-1, 1, tuple(int(d) for d in p.type_annotation.shape)).astype(np.float32)  # type: ignore
            for p in mod.functions["main"].params]


def _planned(text: str, options: str) -> tuple[IRModule, Liveness, MemoryPlan]:
    mod = run(parse(text), f"fuse-ops,lower,plan-memory{{{options}}},verify-memory-plan")
    live = plan_liveness(mod)
    plan = read_plan(live)
    assert plan is not None
    return mod, live, plan


@pytest.mark.parametrize("text,concats,branches", [(DENSE_CHAIN, 3, 2), (INCEPTION, 1, 4)])
def test_concat_in_place_plans_run_natively_and_in_the_arena(text: str, concats: int, branches: int) -> None:
    plain_mod, plain_live, plain = _planned(text, "")
    mod, live, plan = _planned(text, "concat-in-place=true in-place=true")
    assert plan.concat_in_place and "concat_in_place=True" in print_program(mod)
    # Every concatenation of the lowered main moves nothing: each input sits at its slice.
    cat_steps = [s for s in live.steps if s.concat_offsets is not None]
    assert len(cat_steps) == concats and len(cat_steps[-1].inputs) == branches
    assert concats_in_place(live, plan) == {s.index for s in cat_steps}
    parents = concat_parents(live, plan)
    for step in cat_steps:
        out_sid, out_offset = plan.placement[step.outputs[0]]
        for t, delta in zip(step.inputs, step.concat_offsets):  # type: ignore[arg-type]
            assert plan.placement[t] == (out_sid, out_offset + delta) and parents[t] == step.outputs[0]
            assert (out_offset + delta) % 64 == 0
    # Below the plain lower bound (DenseNet-like 5184 < 5760 bytes, Inception-like 3456 < 4608): the
    # peak is at a concatenation, whose inputs no longer need bytes of their own.
    assert plan.workspace_bytes() < sum(plain_live.lower_bound().values()) == plain.workspace_bytes()

    # The checker re-derives the allowed overlaps: the printed plan re-parses and verifies.
    again = parse(print_program(mod))
    verify(again)
    assert check_memory_plan(again)

    args = _inputs(mod)
    reference = flatten_value(run_function(parse(text), args))
    arena = flatten_value(run_with_plan(mod, args))
    arena_plain = flatten_value(run_with_plan(plain_mod, args))
    native = flatten_value(build(mod).run(*args))
    native_plain = flatten_value(build(plain_mod).run(*args))
    for got_arena, got_plain_arena, got_native, got_plain, want in zip(arena, arena_plain, native, native_plain,
                                                                       reference):
        # Same kernels, same order: a plan changes where bytes live, never their values.
        np.testing.assert_array_equal(got_arena, got_plain_arena)
        np.testing.assert_array_equal(got_native, got_plain)
        np.testing.assert_allclose(got_native, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got_arena, want, rtol=1e-5, atol=1e-6)


def test_native_workspace_is_the_planned_arena() -> None:
    mod, _, plan = _planned(INCEPTION, "concat-in-place=true")
    native = build(mod)
    assert native.layout is not None and native.layout.workspace_bytes == align_up(plan.workspace_bytes(), 64)
    # The C ABI's size adds the slack `_run` may skip to align a caller's workspace pointer.
    assert native.abi.workspace_bytes == native.layout.workspace_bytes + 63


def test_a_slice_moved_off_its_place_is_an_overlap_error() -> None:
    mod, live, plan = _planned(INCEPTION, "concat-in-place=true")
    text = print_program(mod)
    step = next(s for s in live.steps if s.concat_offsets is not None)
    sid, offset = plan.placement[step.inputs[1]]
    old = f"storage_id={sid}, storage_offset={offset})"
    assert text.count(old) == 1
    # The second branch moved one aligned slot down: it overlaps the first branch's slice.
    bad = parse(text.replace(old, f"storage_id={sid}, storage_offset={offset - 64})"))
    infer_types(bad)
    with pytest.raises(Exception, match="overlaps"):
        check_memory_plan(bad)
    # Without `concat_in_place=True` on main, even the exact slices are overlaps.
    undeclared = parse(text.replace(", concat_in_place=True", ""))
    infer_types(undeclared)
    with pytest.raises(Exception, match="overlaps"):
        check_memory_plan(undeclared)
