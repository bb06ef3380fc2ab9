"""Memory plans of random dataflow programs are valid and keep the program's meaning.

Programs come from `support.strategies.dataflow_programs()`, fused (TVM's rules, or one op per
group at opt-level 0 so there are many steps). For every planner: the independent checker accepts
the plan; the plan survives printing and re-parsing; running `main` with every intermediate
tensor stored in a shared byte arena at its planned offset gives exactly the plain interpreter's
outputs (a wrong overlap would overwrite a live tensor); and the arena sizes obey the liveness
bounds (no plan below the lower bound without in-place reuse, `none` equal to the no-reuse total).
Half the programs get concatenations of their results so that concatenate-in-place is exercised;
half get a weight computed from constants only (`exp(full(...))`, hoisted unless the plan is made
without hoisting) that a planned step reads.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import dataflow_programs

from irtool.analysis.memory_plan import plan_memory
from irtool.analysis.plan_attrs import plan_liveness, read_plan
from irtool.analysis.typecheck import infer_types
from irtool.eval.arena import run_with_plan
from irtool.eval.interpreter import run_function
from irtool.eval.values import flatten_value
from irtool.ir import (Call, Constant, Expr, Function, IRModule, Op, TensorType, Tuple, TupleGetItem, TupleType,
                       structural_equal)
from irtool.ops.registry import get_op
from irtool.passes import run
from irtool.passes.verify_memory_plan import check_memory_plan
from irtool.syntax.parser import parse
from irtool.syntax.printer import print_program


def _inputs(mod: IRModule, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in mod.functions["main"].params:
        t = p.type_annotation
        out.append(rng.uniform(-3, 3, size=tuple(int(d) for d in t.shape)).astype(t.dtype))  # type: ignore[union-attr]
    return out


def with_concatenations(mod: IRModule) -> IRModule:
    """`main` with its result also concatenated with itself along axis 0 (slices are contiguous
    there), so concatenate-in-place has work: `(r, concatenate((r, r)))` for a tensor `r`, or the
    concatenation of a tuple's first two fields when they have one shape."""
    func = mod.functions["main"]
    infer_types(mod)
    body = func.body
    t = body.checked_type
    if isinstance(t, TensorType) and t.shape:
        new_body: Expr = Tuple([body, Call(Op("concatenate"), [Tuple([body, body])])])
    elif isinstance(t, TupleType) and len(t.fields) >= 2 and t.fields[0] == t.fields[1] and t.fields[0].shape:
        joined = Call(Op("concatenate"), [Tuple([TupleGetItem(body, 0), TupleGetItem(body, 1)])])
        new_body = Tuple([body, joined])
    else:
        return mod
    out = mod.copy()
    out.functions["main"] = Function(func.params, new_body, None, func.type_params, func.attrs, func.span)
    return out


def with_weight(mod: IRModule) -> IRModule:
    """`main` whose (first) tensor result `r` becomes `add(r, exp(full(0.5f, shape=r.shape)))`: the
    `full` and the `exp` read only constants, so they are hoisted; the `add` is planned."""
    func = mod.functions["main"]
    infer_types(mod)
    body = func.body
    fields = list(body.fields) if isinstance(body, Tuple) else None
    target = fields[0] if fields else body
    tt = target.checked_type
    if not isinstance(tt, TensorType) or not tt.dtype.startswith("float"):
        return mod
    full = get_op("full")
    assert full is not None
    attrs = full.normalize_attrs({"shape": tuple(int(d) for d in tt.shape), "dtype": tt.dtype}, None)
    weight = Call(Op("exp"), [Call(Op("full"), [Constant(np.array(0.5, dtype=tt.dtype))], attrs)])
    new = Call(Op("add"), [target, weight])
    new_body: Expr = Tuple([new, *fields[1:]]) if fields else new
    out = mod.copy()
    out.functions["main"] = Function(func.params, new_body, None, func.type_params, func.attrs, func.span)
    return out


@settings(deadline=None)
@given(dataflow_programs(max_ops=16), st.sampled_from(["greedy-by-size", "greedy-best", "tvm-greedy", "none"]),
       st.sampled_from([0, 2]), st.booleans(), st.booleans(), st.sampled_from([1, 16, 64]), st.integers(0, 2**16),
       st.booleans(), st.booleans())
def test_plans_are_valid_and_keep_outputs(mod: IRModule, algorithm: str, opt_level: int, in_place: bool,
                                          concat: bool, alignment: int, seed: int, hoist: bool, weight: bool) -> None:
    mod = with_concatenations(mod) if concat else mod
    original = mod
    mod = with_weight(mod) if weight else mod
    reuse = f" in-place={in_place} concat-in-place={concat}" if algorithm.startswith("greedy") else ""
    planned = run(mod, f"fuse-ops{{opt-level={opt_level}}},"
                       f"plan-memory{{algorithm={algorithm} alignment={alignment}{reuse} hoist-constants={hoist}}}")
    assert check_memory_plan(planned)  # run() verified it too; this states it

    reparsed = parse(print_program(planned))
    assert structural_equal(reparsed, planned)
    infer_types(reparsed)
    assert check_memory_plan(reparsed)

    args = _inputs(mod, seed)
    expected = flatten_value(run_function(mod, args))
    got = flatten_value(run_with_plan(reparsed, args))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)

    live = plan_liveness(planned)
    assert live.hoist_constants == hoist
    if weight and hoist and mod is not original and opt_level == 0:  # (fused, the weight joins the add)
        assert any(step.hoisted for step in live.steps)
    plan = read_plan(live)
    assert plan is not None
    lower = sum(live.lower_bound().values())
    if algorithm == "none":
        assert plan.workspace_bytes() == live.no_reuse_bytes()
    elif reuse == "" or not (in_place or concat):
        assert plan.workspace_bytes() >= lower
    if algorithm.startswith("greedy") and alignment == 1 and not (in_place or concat):
        # Offsets never exceed what no reuse would need.
        assert plan.workspace_bytes() <= live.no_reuse_bytes()
    if algorithm == "greedy-best":
        by_size = plan_memory(live, "greedy-by-size", alignment, in_place, concat)
        assert plan.workspace_bytes() <= by_size.workspace_bytes()
