"""Memory plans of random dataflow programs are valid and keep the program's meaning.

Programs come from `support.strategies.dataflow_programs()`, fused (TVM's rules, or one op per
group at opt-level 0 so there are many steps). For every planner: the independent checker accepts
the plan; the plan survives printing and re-parsing; running `main` with every intermediate
tensor stored in a shared byte arena at its planned offset gives exactly the plain interpreter's
outputs (a wrong overlap would overwrite a live tensor); and the arena sizes obey the liveness
bounds (no plan below the lower bound without in-place reuse, `none` equal to the no-reuse total).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import dataflow_programs

from irtool.analysis.liveness import compute_liveness
from irtool.analysis.memory_plan import read_plan
from irtool.analysis.typecheck import infer_types
from irtool.eval.arena import run_with_plan
from irtool.eval.interpreter import run_function
from irtool.ir import IRModule, structural_equal
from irtool.passes import run
from irtool.passes.verify_memory_plan import check_memory_plan
from irtool.syntax.parser import parse
from irtool.syntax.printer import print_program

Value = np.ndarray | tuple


def _leaves(v: Value) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    stack = [v]
    while stack:
        cur = stack.pop()
        if isinstance(cur, tuple):
            stack.extend(reversed(cur))
        else:
            out.append(np.asarray(cur))
    return out


def _inputs(mod: IRModule, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in mod.functions["main"].params:
        t = p.type_annotation
        out.append(rng.uniform(-3, 3, size=tuple(int(d) for d in t.shape)).astype(t.dtype))  # type: ignore[union-attr]
    return out


@settings(deadline=None)
@given(dataflow_programs(max_ops=16), st.sampled_from(["greedy-by-size", "tvm-greedy", "none"]),
       st.sampled_from([0, 2]), st.booleans(), st.sampled_from([1, 16, 64]), st.integers(0, 2**16))
def test_plans_are_valid_and_keep_outputs(mod: IRModule, algorithm: str, opt_level: int, in_place: bool,
                                          alignment: int, seed: int) -> None:
    planned = run(mod, f"fuse-ops{{opt-level={opt_level}}},"
                       f"plan-memory{{algorithm={algorithm} alignment={alignment} in-place={in_place}}}")
    assert check_memory_plan(planned)  # run() verified it too; this states it

    reparsed = parse(print_program(planned))
    assert structural_equal(reparsed, planned)
    infer_types(reparsed)
    assert check_memory_plan(reparsed)

    args = _inputs(mod, seed)
    expected = _leaves(run_function(mod, args))
    got = _leaves(run_with_plan(reparsed, args))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)

    live = compute_liveness(planned)
    plan = read_plan(live)
    assert plan is not None
    lower = sum(live.lower_bound().values())
    if algorithm == "none":
        assert plan.workspace_bytes() == live.no_reuse_bytes()
    elif not in_place or algorithm == "tvm-greedy":
        assert plan.workspace_bytes() >= lower
    if algorithm == "greedy-by-size" and alignment == 1 and not in_place:
        # Offsets never exceed what no reuse would need.
        assert plan.workspace_bytes() <= live.no_reuse_bytes()
