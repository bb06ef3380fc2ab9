"""Liveness over the steps of `main`: live ranges, aliases, bytes, the lower bound, devices.

Expected ranges and byte counts are worked out by hand in the comments from the programs' text.
"""

from __future__ import annotations

import pytest
from support.programs import CHAIN

from irtool.analysis.liveness import compute_liveness
from irtool.analysis.steps import ALIAS, CALL, CONSTANT, COPY, HOISTED, KERNEL, PARAM, Liveness, tensor_bytes
from irtool.analysis.typecheck import infer_types
from irtool.ir import TensorType
from irtool.passes import run
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse


def live_of(text: str, pipeline: str = "fuse-ops{opt-level=0}") -> Liveness:
    mod = run(parse(text), pipeline) if pipeline else parse(text)
    infer_types(mod)
    return compute_liveness(mod)


def ranges(live: Liveness) -> list[tuple[int, int, int]]:
    """(bytes, first, last) of every planned tensor, in step order."""
    return [(t.nbytes, t.first, t.last) for t in live.planned()]


def test_chain_ranges_lower_bound_and_no_reuse() -> None:
    live = live_of(CHAIN)
    assert [s.label for s in live.steps] == ["exp", "concatenate", "exp", "strided_slice", "exp"]
    # a: 256 B, read by concat (step 1); b: 512 read by step 2; ...; e is the output.
    assert ranges(live) == [(256, 0, 1), (512, 1, 2), (512, 2, 3), (256, 3, 4), (256, 4, 4)]
    # Live bytes per step 256, 768, 1024, 768, 512.
    assert live.lower_bound() == {("NoneType", None): 1024}
    assert live.no_reuse_bytes() == 1792
    assert [t.kind for t in live.tensors] == [PARAM, CALL, CALL, CALL, CALL, CALL]


def test_outputs_live_to_the_end_and_unused_results_die_at_once() -> None:
    live = live_of("""
def @main(%x: Tensor[(4), float32]) {
  %0 = exp(%x);
  %1 = sqrt(%x);
  %2 = negative(%1);
  (%0, %2)
}""")
    # exp is an output (live to the last step, 2); sqrt dies when negative reads it.
    assert ranges(live) == [(16, 0, 2), (16, 1, 2), (16, 2, 2)]
    assert live.outputs == [1, 3]
    # The second half of the split is never read: it dies at the step that writes it.
    unused = live_of("""
def @main(%x: Tensor[(2, 4), float32]) {
  %0 = split(%x, indices_or_sections=2, axis=1);
  exp(%0.0)
}""", "")
    assert ranges(unused) == [(16, 0, 1), (16, 0, 0), (16, 1, 1)]


def test_reshape_only_steps_alias_their_input() -> None:
    live = live_of("""
def @main(%x: Tensor[(8), float32]) {
  %0 = exp(%x);
  %1 = reshape(%0, newshape=[2, 4]);
  %2 = sqrt(%x);
  %3 = nn.relu(%1);
  (%2, %3)
}""")
    # Execution order is post-order from the result tuple: sqrt first, then exp, reshape, relu.
    assert [(s.label, s.kind) for s in live.steps] == [
        ("sqrt", KERNEL), ("exp", KERNEL), ("reshape", ALIAS), ("nn.relu", KERNEL)]
    reshape = live.steps[2]
    assert reshape.outputs == reshape.inputs  # the same tensor, no new storage
    # sqrt is an output; exp's result lives until relu (step 3) reads it through the reshape.
    assert ranges(live) == [(32, 0, 3), (32, 1, 3), (32, 3, 3)]


def test_tuples_projections_lets_and_constants_route_tensors() -> None:
    live = live_of("""
def @main(%x: Tensor[(2, 4), float32]) {
  %0 = split(%x, indices_or_sections=2, axis=1);
  let %a = exp(%0.1);
  %1 = (%a, %0.0);
  %2 = add(%1.0, 1f);
  (%2, %1.1)
}""", "")
    split, exp, add = live.steps
    assert len(split.outputs) == 2
    assert exp.inputs == [split.outputs[1]]
    assert add.inputs[0] == exp.outputs[0]
    assert live.tensors[add.inputs[1]].kind == CONSTANT
    # split's first half is returned (live to the end); its second half dies at exp.
    first, second = (live.tensors[t] for t in split.outputs)
    assert (first.nbytes, first.first, first.last) == (16, 0, 2)
    assert (second.first, second.last) == (0, 1)
    assert live.outputs == [add.outputs[0], split.outputs[0]]


def test_call_lowered_steps_read_their_argument_tuple() -> None:
    live = live_of("""
def @f(%a: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
  exp(%a)
}
def @main(%x: Tensor[(4), float32]) {
  %0 = call_lowered(@f, (%x,));
  call_lowered(@f, (%0,))
}""", "")
    assert [(s.label, s.inputs, s.outputs) for s in live.steps] == [("exp", [0], [1]), ("exp", [1], [2])]
    assert ranges(live) == [(16, 0, 1), (16, 1, 1)]


@pytest.mark.parametrize("dtype,shape,expected", [
    ("float32", (10,), 40), ("float16", (5,), 10), ("bool", (3,), 3), ("int8x4", (3,), 12),
    ("int64", (2, 3), 48), ("float32", (), 4),
])
def test_bytes_are_elements_times_ceil_bits_lanes_over_8(dtype: str, shape: tuple[int, ...], expected: int) -> None:
    assert tensor_bytes(TensorType(shape, dtype), None) == expected


@pytest.mark.parametrize("body,line", [
    ("  if (%c) { exp(%x) } else { %x }", 3),
    # A closure reads %a without it being an argument of the call: liveness cannot see that read.
    ("  %0 = exp(%x);\n  let %f = fn (%y: Tensor[(4), float32]) { add(%y, %0) };\n  %f(%x)", 4),
])
def test_non_dataflow_main_is_a_located_error(body: str, line: int) -> None:
    text = "\ndef @main(%c: bool, %x: Tensor[(4), float32]) {\n" + body + "\n}"
    with pytest.raises(DiagnosticError) as err:
        live_of(text, "")
    assert "dataflow" in str(err.value)
    assert err.value.span is not None and err.value.span.line == line


SEEDS = """
def @main(%x: Tensor[(16), float32], %y: Tensor[(16), float32]) {
  %0 = add(%x, %y);
  %1 = on_device(%0, virtual_device=1);
  %2 = device_copy(%1, src_virtual_device=1, dst_virtual_device=2);
  %3 = sqrt(%2);
  %4 = on_device(%3, virtual_device=2);
  %5 = device_copy(%4, src_virtual_device=2, dst_virtual_device=3);
  %6 = log(%5);
  %7 = on_device(%6, virtual_device=3);
  %8 = device_copy(%7, src_virtual_device=3, dst_virtual_device=1);
  %9 = subtract(%8, %1);
  exp(%9)
}
"""


@pytest.mark.parametrize("pipeline", ["", "fuse-ops"])
def test_devices_spread_from_copies_as_the_seeds_describe(pipeline: str) -> None:
    live = live_of(SEEDS, pipeline)
    # Parameters and add: upward from copy 1 (source device 1).
    assert [live.tensors[t].device for p in live.params for t in p] == [1, 1]
    by_label = {}
    for step in live.steps:
        if step.outputs and step.kind != ALIAS:
            by_label.setdefault(step.label, []).append(live.tensors[step.outputs[0]].device)
    assert by_label["add"] == [1]
    assert by_label["device_copy"] == [2, 3, 1]
    assert by_label["sqrt"] == [2] and by_label["log"] == [3]
    # Downward from the last copy: subtract and exp on its destination, device 1.
    tail = [d for label, ds in by_label.items() if label in ("subtract", "exp", "subtract+exp") for d in ds]
    assert tail and set(tail) == {1}
    assert [s.kind for s in live.steps if s.label == "device_copy"] == [COPY] * 3
    # Per device: device 1 holds add (steps 0-9), copy 3 and the result at once.
    lower = live.lower_bound()
    assert lower[("int", 1)] == 192 and lower[("int", 2)] == 128 and lower[("int", 3)] == 128


def test_unannotated_programs_stay_on_the_default_device() -> None:
    live = live_of(CHAIN)
    assert {t.device for t in live.tensors} == {None}


def test_conflicting_devices_are_reported_at_the_disagreeing_annotation() -> None:
    text = """
def @main(%x: Tensor[(16), float32]) {
  %0 = exp(%x);
  %1 = on_device(%0, virtual_device=1);
  %2 = sqrt(%1);
  on_device(%2, virtual_device=2)
}"""
    with pytest.raises(DiagnosticError) as err:
        live_of(text, "")
    assert "conflicting devices" in str(err.value)
    assert err.value.span.line == 6
    note = err.value.diagnostics[0].notes[0]
    assert note.span.line == 4 and "device 1" in note.message


def test_long_chains_do_not_recurse() -> None:
    n = 20000
    lines = ["def @main(%x: Tensor[(4), float32]) {", "  %0 = exp(%x);"]
    lines += [f"  %{i} = exp(%{i - 1});" for i in range(1, n)]
    lines += [f"  negative(%{n - 1})", "}"]
    mod = parse("\n".join(lines))
    infer_types(mod)
    live = compute_liveness(mod)
    assert len(live.steps) == n + 1
    # Two 16-byte tensors live at each step of a chain.
    assert live.lower_bound() == {("NoneType", None): 32}


WEIGHTS = """
def @main(%x: Tensor[(1, 8), float32]) {
  %0 = full(2f, shape=[8, 4], dtype="float32");
  %1 = transpose(%0, axes=[1, 0]);
  %2 = reshape(%1, newshape=[4, 8]);
  %3 = nn.dense(%x, %2);
  %4 = add(%3, 1f);
  %5 = zeros(shape=[4], dtype="float32");
  (%4, %5)
}"""


def test_constant_only_steps_are_hoisted_out_of_the_plan() -> None:
    live = live_of(WEIGHTS, "")
    assert [(s.label, s.kind, s.hoisted) for s in live.steps] == [
        ("full", KERNEL, True),        # reads only the constant 2f
        ("transpose", KERNEL, True),   # reads only a hoisted tensor
        ("reshape", ALIAS, False),     # a view: its result is transpose's (hoisted) tensor
        ("nn.dense", KERNEL, False),   # reads the parameter
        ("add", KERNEL, False),
        ("zeros", KERNEL, True)]       # no inputs at all; a result of main, still hoisted
    full, transpose, _, dense, add, zeros = live.steps
    assert [t.kind for t in live.hoisted()] == [HOISTED] * 3
    assert [t.index for t in live.hoisted()] == [*full.outputs, *transpose.outputs, *zeros.outputs]
    assert dense.inputs[1] == transpose.outputs[0]
    # Planned: dense 16 B (steps 3-4) and add 16 B (steps 4-5, a result): 32 live at step 4.
    assert ranges(live) == [(16, 3, 4), (16, 4, 5)]
    assert live.lower_bound() == {("NoneType", None): 32}
    assert live.no_reuse_bytes() == 32 and live.hoisted_bytes() == 128 + 128 + 16
    assert live.outputs == [add.outputs[0], zeros.outputs[0]]


def test_hoisting_can_be_turned_off() -> None:
    mod = parse(WEIGHTS)
    infer_types(mod)
    live = compute_liveness(mod, hoist_constants=False)
    assert not any(s.hoisted for s in live.steps) and live.hoisted() == []
    # full 128 B (0-1) and transpose 128 B (1-3, read through the reshape): 256 live at step 1.
    assert ranges(live) == [(128, 0, 1), (128, 1, 3), (16, 3, 4), (16, 4, 5), (16, 5, 5)]
    assert live.lower_bound() == {("NoneType", None): 256}


def test_copies_and_steps_reading_parameters_are_not_hoisted() -> None:
    live = live_of("""
def @main(%x: Tensor[(4), float32]) {
  %0 = full(1f, shape=[4], dtype="float32");
  %1 = device_copy(%0, src_virtual_device=1, dst_virtual_device=2);
  %2 = exp(%1);
  %3 = on_device(%x, virtual_device=2);
  add(%2, %3)
}""", "")
    assert [(s.label, s.kind, s.hoisted) for s in live.steps] == [
        ("full", KERNEL, True), ("device_copy", COPY, False), ("exp", KERNEL, False), ("on_device", ALIAS, False),
        ("add", KERNEL, False)]
    # exp reads the copy (planned), not a hoisted tensor, so it stays in the plan too.
    assert [live.tensors[t].kind for s in live.steps[1:3] for t in s.outputs] == [CALL, CALL]
