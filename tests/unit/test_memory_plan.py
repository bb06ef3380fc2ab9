"""Planners, the plan in the text, the checker and the memory report.

Expected plans are derived by hand in the comments (the FileCheck tests under
tests/filecheck/passes/plan-memory pin the same programs through `irtool-opt`).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.programs import CHAIN

from irtool.analysis.liveness import CALL, KERNEL, Liveness, PlannedTensor, Step, compute_liveness
from irtool.analysis.memory_plan import (ORDERS, buffers_bound, place_buffers, plan_buffers, INPUT, TOKEN, MemoryPlan, _FreeList, plan_greedy_best, plan_greedy_by_size,
                                         plan_memory, plan_none, plan_tvm_greedy, read_plan)
from irtool.analysis.memory_report import format_report, memory_report
from irtool.analysis.typecheck import infer_types
from irtool.eval.arena import run_with_plan
from irtool.eval.interpreter import run_function
from irtool.ir import Call, Function, IRModule, Op, TensorType, Var
from irtool.passes import run, verify
from irtool.passes.verify_memory_plan import check_plan
from irtool.syntax.diagnostics import DiagnosticError
from irtool.syntax.parser import parse
from irtool.syntax.printer import print_program

TVM_EXAMPLE = """
def @main(%x: Tensor[(10), float32], %y: Tensor[(1), float32]) {
  %0 = exp(%y);
  %1 = add(%x, %0);
  %2 = exp(%1);
  %3 = exp(%2);
  %4 = exp(%3);
  %5 = exp(%4);
  exp(%5)
}
"""

CONCAT = """
def @main(%x: Tensor[(64), float32]) {
  %0 = exp(%x);
  %1 = sqrt(%x);
  %2 = concatenate((%0, %1));
  exp(%2)
}
"""


def fused(text: str, opt_level: int = 0) -> IRModule:
    mod = run(parse(text), f"fuse-ops{{opt-level={opt_level}}}")
    infer_types(mod)
    return mod


def live_of(text: str, opt_level: int = 0) -> Liveness:
    return compute_liveness(fused(text, opt_level))


def test_tvm_worked_example_gives_four_storage_ids() -> None:
    plan = plan_tvm_greedy(live_of(TVM_EXAMPLE))
    # x and y first (never reused), then exp(y) and add; the exp chain alternates between them.
    assert len(plan.storages) == 4
    assert [s.first_bytes for s in plan.storages] == [40, 4, 4, 40]  # as TVM reports them
    assert [s.nbytes for s in plan.storages] == [40, 4, 40, 40]  # storage 2 grew for exp(add)
    assert [s.kind for s in plan.storages] == [INPUT, INPUT, TOKEN, TOKEN]
    steps = [plan.placement[t][0] for t in range(2, 9)]
    assert steps == [2, 3, 2, 3, 2, 3, 2]
    assert plan.workspace_bytes() == 80 and plan.total_bytes() == 124


def test_free_list_follows_tvms_match_range() -> None:
    free = _FreeList()
    for size, sid in [(100, 0), (300, 1), (2000, 2), (5, 3)]:
        free.insert(size, sid)
    anything = lambda sid: True  # noqa: E731
    # Smallest block in [S, 16 S] first.
    assert free.take(250, anything) == (1, 300)
    # Nothing in [120, 1920]: the largest block in [120/16, 120) is taken (it will grow).
    assert free.take(120, anything) == (0, 100)
    # 2000 > 16 * 100 and 5 < 100 / 16: nothing matches.
    assert free.take(100, anything) is None
    # Incompatible blocks (another device) are skipped.
    assert free.take(1000, lambda sid: sid != 2) is None
    assert free.take(1000, anything) == (2, 2000)


def test_tvm_greedy_loses_on_concat_where_greedy_by_size_reaches_the_bound() -> None:
    live = live_of(CONCAT)
    assert sum(live.lower_bound().values()) == 1024
    assert plan_tvm_greedy(live).workspace_bytes() == 1280  # d grows a freed 256-byte token
    gbs = plan_greedy_by_size(live)
    assert gbs.workspace_bytes() == 1024
    assert plan_none(live).workspace_bytes() == 1536


def test_greedy_by_size_takes_the_lowest_free_aligned_offset() -> None:
    live = live_of(CHAIN)
    plan = plan_greedy_by_size(live, alignment=64)
    offsets = [plan.placement[t.index][1] for t in live.planned()]
    # b@0 (largest, first), c@512, a@512, d@0, e@256: see tests/filecheck/passes/plan-memory/chain.relay.
    assert offsets == [512, 0, 512, 0, 256]
    assert plan.workspace_bytes() == 1024
    check_plan(live, plan)


def test_alignment_pads_small_tensors() -> None:
    live = live_of(TVM_EXAMPLE)
    # 40-byte tensors alternate; with 64-byte alignment the second slot starts at 64.
    assert plan_greedy_by_size(live, alignment=64).workspace_bytes() == 104
    assert plan_greedy_by_size(live, alignment=16).workspace_bytes() == 88  # 48 + 40
    assert plan_greedy_by_size(live, alignment=8).workspace_bytes() == 80  # 40 is a multiple of 8
    for alignment in (1, 8, 16, 64):
        plan = plan_greedy_by_size(live, alignment=alignment)
        assert all(off % alignment == 0 for _, off in plan.placement.values())
        check_plan(live, plan)


def test_in_place_reuse_goes_below_the_plain_lower_bound() -> None:
    live = live_of(CHAIN)
    plan = plan_greedy_by_size(live, in_place=True)
    # exp(b) overwrites b and exp(d) overwrites d: buffers 512 + 256 (+ a beside b) = 768 < 1024.
    assert plan.workspace_bytes() == 768 < sum(live.lower_bound().values())
    check_plan(live, plan)
    b, c, d, e = (live.planned()[i].index for i in (1, 2, 3, 4))
    assert plan.placement[b] == plan.placement[c] and plan.placement[d] == plan.placement[e]


def test_in_place_never_overwrites_a_value_read_later() -> None:
    # exp(a) must not overwrite a: add reads a afterwards. Nor may a non-elementwise step
    # (concatenate) overwrite its input.
    live = live_of("""
def @main(%x: Tensor[(16), float32]) {
  %0 = exp(%x);
  %1 = exp(%0);
  %2 = add(%0, %1);
  concatenate((%2, %2))
}""")
    plan = plan_greedy_by_size(live, in_place=True)
    a, b, c, d = (t.index for t in live.planned())
    assert plan.placement[a] != plan.placement[b]
    assert plan.placement[c] in (plan.placement[a], plan.placement[b])  # add overwrites a dying input
    assert plan.placement[d] != plan.placement[c]
    check_plan(live, plan)


CONCAT_TWICE = """
def @main(%x: Tensor[(1, 4, 4, 4), float32]) {
  %0 = exp(%x);
  %1 = sqrt(%x);
  %2 = concatenate((%0, %1), axis=1);
  %3 = negative(%2);
  %4 = concatenate((%3, %0), axis=1);
  (%4, %1)
}
"""


def test_concat_in_place_puts_inputs_in_their_slices() -> None:
    live = live_of(CONCAT_TWICE)
    a, b, c, d, e = (t.index for t in live.planned())
    assert [live.steps[live.tensors[t].step].concat_offsets for t in (c, e)] == [[0, 256], [0, 512]]
    assert sum(live.lower_bound().values()) == 1792
    plan = plan_greedy_by_size(live, concat_in_place=True)
    check_plan(live, plan)
    # a and b inside c; d inside e (a is already in c); see plan-memory/concat-in-place.relay.
    assert [plan.placement[t][1] for t in (a, b, c, d, e)] == [768, 1024, 768, 0, 0]
    assert plan.workspace_bytes() == 1280
    x = np.random.default_rng(1).uniform(0.5, 2, (1, 4, 4, 4)).astype(np.float32)
    mod = run(parse(CONCAT_TWICE), "fuse-ops{opt-level=0},plan-memory{concat-in-place=true}")
    for got, want in zip(run_with_plan(mod, [x]), run_function(parse(CONCAT_TWICE), [x])):
        np.testing.assert_array_equal(got, want)


def test_concat_in_place_needs_contiguous_slices() -> None:
    # Along axis 1 of a (2, 4) result the inputs interleave row by row: no in-place slices.
    live = live_of("""
def @main(%x: Tensor[(2, 4), float32]) {
  %0 = exp(%x);
  %1 = sqrt(%x);
  concatenate((%0, %1), axis=1)
}""")
    assert live.steps[-1].concat_offsets is None
    assert plan_greedy_by_size(live, concat_in_place=True).workspace_bytes() == \
        plan_greedy_by_size(live).workspace_bytes()


def test_checker_allows_only_exact_concat_slices() -> None:
    live = live_of(CONCAT_TWICE)
    a, b, c, d, e = (t.index for t in live.planned())
    plan = plan_greedy_by_size(live, concat_in_place=True)
    sid, off = plan.placement[b]
    plan.placement[b] = (sid, off - 64)  # inside c, but not at its slice: overlaps a
    with pytest.raises(DiagnosticError, match="overlaps"):
        check_plan(live, plan)


def interval_table(intervals: list[tuple[int, int, int]], steps: int) -> Liveness:
    """A liveness table straight from (bytes, first step, last step) rows (int8 tensors)."""
    table = [Step(i, Call(Op("exp"), []), KERNEL, "exp") for i in range(steps)]
    tensors = []
    for k, (nbytes, first, last) in enumerate(intervals):
        tensors.append(PlannedTensor(k, CALL, TensorType((nbytes,), "int8"), nbytes, first, first, last, f"t{k}"))
        table[first].outputs.append(k)
    return Liveness(Function([], Var("x")), table, tensors, [])


def test_greedy_best_tries_other_orders_when_size_order_fragments() -> None:
    # A 5 B [0-1], B 4 B [3], C 3 B [0-3], D 3 B [3]: at most 10 bytes live (step 3).
    live = interval_table([(5, 0, 1), (4, 3, 3), (3, 0, 3), (3, 3, 3)], 4)
    assert sum(live.lower_bound().values()) == 10
    by_size = plan_greedy_by_size(live, alignment=1)
    # Largest first: A@0, B@0 (not live with A), C above both at 5, D above C at 8: 11 bytes.
    assert [by_size.placement[t][1] for t in range(4)] == [0, 0, 5, 8]
    assert by_size.workspace_bytes() == 11
    best = plan_greedy_best(live, alignment=1)
    # Size x lifetime first: C (12) @0, A (10) @3, B @3, D @7: 10 bytes, the lower bound.
    assert [best.placement[t][1] for t in range(4)] == [3, 3, 0, 7]
    assert best.workspace_bytes() == 10 and best.algorithm == "greedy-best"
    check_plan(live, by_size)
    check_plan(live, best)


def test_greedy_best_search_reaches_the_bound_where_every_fixed_order_misses_it() -> None:
    # A 3 B [2], B 6 B [1], C 3 B [1-2], D 5 B [2-3], E 3 B [0-3], F 2 B [1].
    # Live bytes per step: 3, 14 (B C E F), 14 (A C D E), 8: the bound is 14.
    rows = [(3, 2, 2), (6, 1, 1), (3, 1, 2), (5, 2, 3), (3, 0, 3), (2, 1, 1)]
    live = interval_table(rows, 4)
    assert sum(live.lower_bound().values()) == 14
    buffers = plan_buffers(live, 1)
    fixed = [place_buffers(live, buffers, 1, make(buffers, 4)).workspace_bytes() for make in ORDERS.values()]
    assert min(fixed) > 14
    best = plan_greedy_best(live, alignment=1)
    assert best.workspace_bytes() == 14
    check_plan(live, best)
    # By hand: step 1 needs B, F, C, E side by side and step 2 D, A, C, E; C and E span both.
    offsets = [best.placement[t][1] for t in range(len(rows))]
    for step in range(4):
        spans = sorted((offsets[t], offsets[t] + n) for t, (n, a, b) in enumerate(rows) if a <= step <= b)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    assert plan_greedy_best(live, alignment=1, moves=0).workspace_bytes() == min(fixed)


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64), st.integers(0, 7), st.integers(0, 7)), min_size=1, max_size=14),
       st.sampled_from([1, 16]))
def test_greedy_best_is_valid_bounded_and_reproducible(rows: list[tuple[int, int, int]], alignment: int) -> None:
    live = interval_table([(n, min(a, b), max(a, b)) for n, a, b in rows], 8)
    best = plan_greedy_best(live, alignment)
    check_plan(live, best)
    buffers = plan_buffers(live, alignment)
    assert best.workspace_bytes() >= sum(buffers_bound(buffers, 8).values()) == sum(live.lower_bound().values())
    assert best.workspace_bytes() <= plan_greedy_by_size(live, alignment).workspace_bytes()
    assert best.workspace_bytes() <= plan_greedy_best(live, alignment, moves=0).workspace_bytes()
    assert plan_greedy_best(live, alignment).placement == best.placement


def test_plans_are_per_device() -> None:
    text = """
def @main(%x: Tensor[(16), float32]) {
  %0 = exp(%x);
  %1 = on_device(%0, virtual_device=1);
  %2 = device_copy(%1, src_virtual_device=1, dst_virtual_device=2);
  %3 = sqrt(%2);
  %4 = device_copy(%3, src_virtual_device=2, dst_virtual_device=1);
  exp(%4)
}"""
    live = live_of(text)
    for name in ("greedy-by-size", "tvm-greedy", "none"):
        plan = plan_memory(live, name)
        check_plan(live, plan)
        for t in live.planned():
            assert plan.storages[plan.placement[t.index][0]].device == t.device
    gbs = plan_greedy_by_size(live)
    assert [(s.device, s.nbytes) for s in gbs.storages] == [(1, 128), (2, 128)]


def corrupt(old: str, new: str) -> IRModule:
    """The chain's printed plan with one hand edit."""
    planned = print_program(run(parse(CHAIN), "fuse-ops{opt-level=0},plan-memory"))
    assert old in planned
    return parse(planned.replace(old, new, 1))


@pytest.mark.parametrize("old,new,message", [
    # c (step 2) moved onto b, which is still live at step 2.
    ("%6 = %5(%4, storage_id=0, storage_offset=512)", "%6 = %5(%4, storage_id=0, storage_offset=0)", "overlaps"),
    ("storage_offset=256)", "storage_offset=260)", "not aligned"),
    ("storage_bytes=[1024]", "storage_bytes=[1000]", "does not fit"),
    ("storage_bytes=[1024]", "storage_bytes=[1024], storage_devices=[3]", "device"),
    ("(%x, storage_id=0, storage_offset=512)", "(%x)", "no `storage_id`"),
    ("(%x, storage_id=0,", "(%x, storage_id=4,", "names storage 4"),
])
def test_checker_rejects_broken_plans_with_located_errors(old: str, new: str, message: str) -> None:
    mod = corrupt(old, new)
    with pytest.raises(DiagnosticError) as err:
        verify(mod)  # the pass manager's verifier runs the plan checker
    assert message in str(err.value)
    assert err.value.span is not None
    with pytest.raises(DiagnosticError):
        run(mod, "verify-memory-plan", verify_each=False)


def test_checker_accepts_the_planners_output_and_the_text_round_trips() -> None:
    for pipeline in ("plan-memory", "plan-memory{algorithm=tvm-greedy}", "plan-memory{algorithm=none}",
                     "plan-memory{in-place=true alignment=16}"):
        mod = run(parse(CHAIN), f"fuse-ops{{opt-level=0}},{pipeline},verify-memory-plan")
        text = print_program(mod)
        again = parse(text)
        assert print_program(again) == text
        verify(again)


DIAMOND = """
def @main(%x: Tensor[(64), float32]) {
  %0 = exp(%x);
  %1 = exp(%0);
  %2 = sqrt(%0);
  add(%1, %2)
}
"""


def test_a_wrong_overlap_changes_the_arena_run_but_a_plan_does_not() -> None:
    mod = run(parse(DIAMOND), "fuse-ops{opt-level=0},plan-memory")
    x = np.linspace(0.5, 1, 64, dtype=np.float32)
    expected = run_function(parse(DIAMOND), [x])
    np.testing.assert_array_equal(run_with_plan(mod, [x]), expected)
    infer_types(mod)
    live = compute_liveness(mod)
    bad = read_plan(live)
    assert bad is not None
    for t in bad.placement:  # everything at offset 0: exp(a) overwrites a before sqrt reads it
        bad.placement[t] = (0, 0)
    assert not np.array_equal(run_with_plan(mod, [x], plan=bad), expected)


def test_options_are_checked() -> None:
    with pytest.raises(DiagnosticError, match="did you mean `tvm-greedy`"):
        run(parse(CHAIN), "fuse-ops,plan-memory{algorithm=tvm-gredy}")
    with pytest.raises(DiagnosticError, match="power of two"):
        run(parse(CHAIN), "fuse-ops,plan-memory{alignment=48}")
    with pytest.raises(DiagnosticError, match="run fuse-ops first"):
        run(parse(CHAIN), "plan-memory")
    with pytest.raises(DiagnosticError, match="apply to greedy-by-size"):
        run(parse(CHAIN), "fuse-ops,plan-memory{algorithm=tvm-greedy in-place=true}")


def test_replanning_replaces_the_old_plan() -> None:
    once = run(parse(CHAIN), "fuse-ops{opt-level=0},plan-memory{algorithm=none}")
    twice = run(once, "plan-memory")
    text = print_program(twice)
    assert 'memory_plan="greedy-by-size"' in text and "memory_plan=\"none\"" not in text
    assert text.count("storage_id=") == 5


def test_memory_report_numbers() -> None:
    mod = run(parse(CONCAT), "fuse-ops{opt-level=0},plan-memory{algorithm=tvm-greedy}")
    report = memory_report(mod)
    assert report["algorithm"] == "tvm-greedy"
    assert (report["arena_bytes"], report["lower_bound_bytes"], report["no_reuse_bytes"]) == (1280, 1024, 1536)
    assert report["input_bytes"] == 256
    rows = [(t["bytes"], t["first_step"], t["last_step"], t["storage_id"]) for t in report["tensors"]]
    assert rows == [(256, 0, 2, 1), (256, 1, 2, 2), (512, 2, 3, 3), (512, 3, 3, 2)]
    assert json.loads(format_report(report, "json")) == report
    text = format_report(report, "text")
    assert "1280" in text and "1.250x" in text
    # Without a plan on main, the report plans greedy-by-size for itself.
    assert memory_report(fused(CONCAT))["arena_bytes"] == 1024


def test_empty_main_has_an_empty_plan() -> None:
    mod = run(parse("def @main(%x: Tensor[(4), float32]) { %x }"), "plan-memory")
    assert isinstance(read_plan(compute_liveness(mod)), MemoryPlan)
    assert memory_report(mod)["arena_bytes"] == 0


LOWERED = """
def @f(%a: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
  exp(%a)
}
def @g(%a: Tensor[(2, 2), float32], Primitive=1) -> Tensor[(2, 2), float32] {
  negative(%a)
}
def @main(%x: Tensor[(4), float32]) {
  %0 = call_lowered(@f, (%x,));
  %1 = reshape(%0, newshape=[2, 2]);
  call_lowered(@g, (%1,))
}
"""


def test_lowered_main_is_planned_once_call_lowered_can_carry_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    # `call_lowered`'s schema does not declare storage_id/storage_offset yet (requested); give it
    # them here, as the registry will, to run the lowered form end to end.
    from irtool.ops.registry import AttrField, get_op
    opdef = get_op("call_lowered")
    assert opdef is not None and opdef.attrs is not None
    missing = tuple(AttrField(name, "any", None, optional=True) for name in ("storage_id", "storage_offset")
                    if name not in {f.name for f in opdef.attrs})
    monkeypatch.setattr(opdef, "attrs", opdef.attrs + missing)
    mod = run(parse(LOWERED), "plan-memory")
    text = print_program(mod)
    # Two 16-byte results (the reshape is a view of the first), live together at step 2: 64 + 16.
    assert "call_lowered(@f, %0, storage_id=0, storage_offset=0)" in text
    assert "storage_offset=64)" in text and "workspace_bytes=80" in text
    verify(parse(text))
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(run_with_plan(mod, [x]), run_function(parse(LOWERED), [x]))


def test_opt_memory_report_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from irtool.tools.opt import main as opt_main
    source = tmp_path / "concat.relay"
    source.write_text(CONCAT)
    out = tmp_path / "report.json"
    assert opt_main([str(source), "-p", "fuse-ops{opt-level=0},plan-memory{algorithm=tvm-greedy}",
                     "--memory-report=json", "--memory-report-file", str(out), "-o", str(tmp_path / "o.relay")]) == 0
    report = json.loads(out.read_text())
    assert (report["algorithm"], report["arena_bytes"], report["lower_bound_bytes"], report["no_reuse_bytes"]) == \
        ("tvm-greedy", 1280, 1024, 1536)
    assert {"name", "bytes", "offset", "first_step", "last_step"} <= set(report["tensors"][0])
    capsys.readouterr()
    # Text to stderr by default; the IR still goes to stdout.
    assert opt_main([str(source), "-p", "fuse-ops{opt-level=0},plan-memory", "--memory-report"]) == 0
    captured = capsys.readouterr()
    assert "memory_plan=" in captured.out
    assert "arena bytes:" in captured.err and "1024" in captured.err
    # JSON without a file goes to stderr as one object.
    assert opt_main([str(source), "-p", "fuse-ops", "--memory-report=json"]) == 0
    assert json.loads(capsys.readouterr().err)["algorithm"] == "greedy-by-size"
