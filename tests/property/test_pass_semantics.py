"""Passes keep meaning: the interpreter gives the same outputs before and after, and the result
prints and re-parses to a structurally equal module.

Programs come from `support.strategies.dataflow_programs()` (random well-typed dataflow `main`s),
reshaped here so every pass has something to do: globals to inline (called twice, so inlined
bodies must not share binders), let-bound closures to beta-reduce, parameters turned into
constants to fold, batch norm and dropout to simplify, duplicated subgraphs to merge, unused
lets and unreachable globals to delete. Outputs must match bit for bit, except where a pass
changes the arithmetic (simplify-inference rewrites batch norm's formula), where a tight
tolerance applies.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import dataflow_programs

from irtool.eval.interpreter import run_function
from irtool.ir import (Attrs, Call, Constant, Expr, Function, GlobalVar, IRModule, Let, Op, TensorType, Tuple,
                       TupleGetItem, TupleType, Var, structural_equal)
from irtool.ops import get_op
from irtool.passes import run
from irtool.passes.substitution import copy_function, substitute
from irtool.syntax.parser import parse
from irtool.syntax.printer import print_program

Value = np.ndarray | tuple


# --- program shapes ---------------------------------------------------------------------------


def _main(mod: IRModule) -> Function:
    return mod.functions["main"]


def _fresh_params(func: Function) -> list[Var]:
    return [Var(p.name_hint, p.type_annotation) for p in func.params]


@st.composite
def modules_with_globals(draw: st.DrawFn) -> IRModule:
    """`@main` calls `@g` twice (once on computed arguments) and `@h`, which calls `@g` as well.

    `@g` is marked `Inline` or not at random, so both the TVM rule and `all=true` have work.
    """
    g = copy_function(_main(draw(dataflow_programs(max_ops=8))))
    base = _main(draw(dataflow_programs(max_ops=6)))
    if draw(st.booleans()):
        g = Function(g.params, g.body, g.ret_type, g.type_params, Attrs({"Inline": 1}))
    h_params = _fresh_params(g)
    h = Function(h_params, Tuple([Call(GlobalVar("g"), h_params), h_params[0]]),
                 TupleType((g.ret_type, h_params[0].type_annotation)), attrs=g.attrs)  # type: ignore[arg-type]
    q = _fresh_params(g)
    computed = [Call(Op("negative"), [p]) for p in q]
    body = Tuple([base.body, Call(GlobalVar("g"), computed), Call(GlobalVar("g"), q), Call(GlobalVar("h"), q)])
    ret = TupleType((base.ret_type, g.ret_type, g.ret_type, h.ret_type))  # type: ignore[arg-type]
    mod = IRModule()
    mod.add_function("g", g)
    mod.add_function("h", h)
    mod.add_function("main", Function([*base.params, *q], body, ret))
    return mod


@st.composite
def modules_with_closures(draw: st.DrawFn) -> IRModule:
    """`@main` let-binds a function literal and calls it twice; one literal is called in place."""
    inner = copy_function(_main(draw(dataflow_programs(max_ops=8))))
    base = _main(draw(dataflow_programs(max_ops=4)))
    f = Var("f")
    q = _fresh_params(inner)
    body = Let(f, inner, Tuple([base.body, Call(f, q), Call(f, [Call(Op("exp"), [p]) for p in q]),
                                Call(copy_function(inner), q)]))
    mod = IRModule()
    mod.add_function("main", Function([*base.params, *q], body))
    return mod


@st.composite
def modules_with_constants(draw: st.DrawFn) -> IRModule:
    """Some parameters of a dataflow program replaced by constants, so subgraphs fold."""
    func = _main(draw(dataflow_programs()))
    keep, consts = [], {}
    for p in func.params:
        if draw(st.booleans()):
            t = p.type_annotation
            assert isinstance(t, TensorType)
            data = draw(st.lists(st.floats(-4, 4, width=32), min_size=int(np.prod(t.shape)),
                                 max_size=int(np.prod(t.shape))))
            consts[p] = Constant(np.array(data, dtype=t.dtype).reshape(t.shape))
        else:
            keep.append(p)
    mod = IRModule()
    mod.add_function("main", Function(keep, substitute(func.body, consts), func.ret_type))
    return mod


def _normed(draw: st.DrawFn, x: Expr, t: TensorType) -> Expr:
    """`x` through batch norm (constant or parameter statistics) and dropout, projected with .0."""
    axis = draw(st.integers(-t.ndim, t.ndim - 1))
    channels = t.shape[axis]
    stats = []
    for positive in (False, False, False, True):
        data = draw(st.lists(st.floats(0.25 if positive else -2, 2, width=32), min_size=channels,
                             max_size=channels))
        stats.append(Constant(np.array(data, dtype=t.dtype)))
    attrs = get_op("nn.batch_norm").normalize_attrs(  # type: ignore[union-attr]
        {"axis": axis, "epsilon": draw(st.sampled_from([1e-5, 1e-3, 0.5])),
         "center": draw(st.booleans()), "scale": draw(st.booleans())})
    bn = Call(Op("nn.batch_norm"), [x, *stats], attrs)
    out: Expr = TupleGetItem(bn, 0)
    if draw(st.booleans()):
        out = TupleGetItem(Call(Op("nn.dropout"), [out]), 0)
    return out


@st.composite
def modules_with_batch_norm(draw: st.DrawFn) -> IRModule:
    func = _main(draw(dataflow_programs()))
    ret = func.ret_type
    if isinstance(ret, TensorType) and ret.ndim >= 1:
        body = _normed(draw, func.body, ret)
    elif isinstance(ret, TupleType) and isinstance(func.body, Tuple):
        fields = list(func.body.fields)
        for i, t in enumerate(ret.fields):
            if isinstance(t, TensorType) and t.ndim >= 1 and draw(st.booleans()):
                fields[i] = _normed(draw, fields[i], t)
        body = Tuple(fields)
    elif isinstance(ret, TensorType):
        body = TupleGetItem(Call(Op("nn.dropout"), [func.body]), 0)
    else:
        body = func.body
    mod = IRModule()
    mod.add_function("main", Function(func.params, body, ret))
    return mod


@st.composite
def modules_with_duplicates(draw: st.DrawFn) -> IRModule:
    """The same program body built twice from the same parameters (CSE merges the copies),
    with an unused let and an unreachable global (dead-code removes them)."""
    func = _main(draw(dataflow_programs()))
    twin = substitute(func, {})  # fresh binders, same parameters after the rename below
    assert isinstance(twin, Function)
    twin_body = substitute(twin.body, dict(zip(twin.params, func.params)))
    unused = Var("unused", func.ret_type)
    body = Let(unused, twin_body, Tuple([func.body, twin_body]))
    mod = IRModule()
    mod.add_function("main", Function(func.params, body))
    mod.add_function("orphan", copy_function(func))
    return mod


any_module = st.one_of(dataflow_programs(), modules_with_globals(), modules_with_closures(),
                       modules_with_constants(), modules_with_batch_norm(), modules_with_duplicates())


# --- checking ---------------------------------------------------------------------------------


def _inputs(mod: IRModule, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in _main(mod).params:
        t = p.type_annotation
        assert isinstance(t, TensorType)
        out.append(rng.uniform(-4, 4, size=t.shape).astype(t.dtype))
    return out


def _leaves(value: Value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _assert_same(before: Value, after: Value, exact: bool) -> None:
    a, b = _leaves(before), _leaves(after)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        if exact:
            assert np.array_equal(x, y, equal_nan=True), (x, y)
        else:
            tol = 1e-5 if x.dtype == np.float64 else 2e-3
            np.testing.assert_allclose(y, x, rtol=tol, atol=tol, equal_nan=True)


def check_pipeline(mod: IRModule, pipeline: str, seed: int, exact: bool = True) -> IRModule:
    with np.errstate(all="ignore"):
        before = run_function(mod, _inputs(mod, seed))
        out = run(mod, pipeline)  # verifies (well-formedness, types) after every pass
        after = run_function(out, _inputs(mod, seed))
    _assert_same(before, after, exact)
    text = print_program(out)
    reparsed = parse(text, "reparsed.relay")
    assert structural_equal(out, reparsed), text
    return out


# --- properties ----------------------------------------------------------------------------------

EXACT_PIPELINES = [
    "inline",
    "inline{all=true}",
    "inline{beta-reduce=true}",
    "inline{all=true,beta-reduce=true}",
    "dead-code",
    "dead-code{keep-entries=true}",
    "fold-constant",
    "fold-constant{max-elements=0}",
    "eliminate-common-subexpr",
    "to-a-normal-form",
    "to-graph-normal-form",
    "to-a-normal-form,to-graph-normal-form",
    "infer-type",
    "infer-type{annotate=true}",
]


@pytest.mark.parametrize("pipeline", EXACT_PIPELINES)
@settings(deadline=None)
@given(mod=any_module, seed=st.integers(0, 2**32 - 1))
def test_pass_preserves_outputs_exactly(pipeline: str, mod: IRModule, seed: int) -> None:
    check_pipeline(mod, pipeline, seed)


@settings(deadline=None)
@given(mod=any_module, seed=st.integers(0, 2**32 - 1))
def test_simplify_inference_preserves_outputs(mod: IRModule, seed: int) -> None:
    check_pipeline(mod, "simplify-inference", seed, exact=False)


@settings(deadline=None)
@given(mod=modules_with_globals(), seed=st.integers(0, 2**32 - 1))
def test_inline_all_leaves_only_main(mod: IRModule, seed: int) -> None:
    out = check_pipeline(mod, "inline{all=true}", seed)
    assert set(out.functions) == {"main"}


@settings(deadline=None)
@given(mod=modules_with_closures(), seed=st.integers(0, 2**32 - 1))
def test_beta_reduce_removes_closures(mod: IRModule, seed: int) -> None:
    out = check_pipeline(mod, "inline{beta-reduce=true}", seed)
    from irtool.ir.visitor import post_order
    assert not any(isinstance(n, Function) for n in post_order(out.functions["main"].body))


@settings(deadline=None)
@given(mod=modules_with_constants(), seed=st.integers(0, 2**32 - 1))
def test_fold_constant_leaves_no_constant_operator_calls(mod: IRModule, seed: int) -> None:
    out = check_pipeline(mod, "fold-constant{max-elements=-1}", seed)
    from irtool.ir.visitor import post_order
    for node in post_order(out.functions["main"]):
        if isinstance(node, Call) and isinstance(node.op, Op):
            assert not all(isinstance(a, Constant) for a in node.args), node


@settings(deadline=None)
@given(mod=any_module, seed=st.integers(0, 2**32 - 1))
def test_standard_pipeline_preserves_outputs(mod: IRModule, seed: int) -> None:
    check_pipeline(mod, "inline,simplify-inference,fold-constant,fuse-ops", seed, exact=False)


@settings(deadline=None)
@given(mod=any_module, seed=st.integers(0, 2**32 - 1))
def test_fuse_ops_preserves_outputs_exactly(mod: IRModule, seed: int) -> None:
    check_pipeline(mod, "fuse-ops", seed)
