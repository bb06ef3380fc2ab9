"""`lower` keeps meaning: for random fused programs, running the lowered module (every primitive
function through the TIR interpreter) gives the Relay interpreter's outputs on the fused module,
and the lowered module prints and re-parses to a structurally equal module.

Two program sources: `support.strategies.dataflow_programs()` (elementwise/broadcast graphs with
tuples, lets and constants), and anchored groups built here — a convolution, dense, pooling,
softmax or reduction with a random elementwise epilogue and sometimes an injective prologue —
the shapes fuse-ops turns into conv+bias+relu style kernels.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import dataflow_programs

from irtool.eval.interpreter import flatten_value, run_function
from irtool.ir import Call, Constant, Expr, Function, IRModule, Op, TensorType, Tuple, Var
from irtool.ir.equality import structural_equal
from irtool.ir.tir import PrimFunc
from irtool.ir.visitor import post_order
from irtool.ops import get_op
from irtool.passes import run
from irtool.syntax.parser import parse_module
from irtool.syntax.printer import print_module


def _inputs(mod: IRModule, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in mod["main"].params:
        t = p.type_annotation
        assert isinstance(t, TensorType)
        out.append((rng.standard_normal(tuple(int(d) for d in t.shape)) * 2).astype(t.dtype))
    return out


def _assert_same(fused: IRModule, lowered: IRModule, seed: int) -> None:
    args = _inputs(fused, seed)
    want = flatten_value(run_function(fused, args))
    got = flatten_value(run_function(lowered, args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        tol = 2e-5 if w.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)


def _check_lowered_form(lowered: IRModule) -> None:
    """No primitive function literal is left; main only calls kernels and views; the module
    prints and re-parses to a structurally equal one."""
    for node in post_order(lowered["main"]):
        assert not (isinstance(node, Function) and node.attrs.get("Primitive"))
        if isinstance(node, Call):
            assert isinstance(node.op, Op) and node.op.name in ("call_lowered", "reshape")
    text = print_module(lowered)
    again = parse_module(text)
    assert structural_equal(again, lowered)
    assert print_module(again) == text


@settings()
@given(dataflow_programs(), st.integers(0, 2**16))
def test_lowered_dataflow_programs_compute_the_same(mod: IRModule, seed: int) -> None:
    fused = run(mod, "fuse-ops")
    lowered = run(fused, "lower")
    _check_lowered_form(lowered)
    _assert_same(fused, lowered, seed)


F32 = "float32"
_EPILOGUE = ("nn.relu", "negative", "tanh", "sigmoid", "exp")


def _call(name: str, args: list[Expr], **attrs: object) -> Call:
    op = get_op(name)
    assert op is not None
    return Call(Op(name), args, op.normalize_attrs(attrs))


@st.composite
def anchored_programs(draw: st.DrawFn) -> IRModule:
    """An anchor operator with an elementwise tail (bias-like broadcasts, activations)."""
    params: list[Var] = []

    def param(shape: tuple[int, ...]) -> Var:
        v = Var(f"p{len(params)}", TensorType(shape, F32))
        params.append(v)
        return v

    kind = draw(st.sampled_from(["conv2d", "dense", "max_pool2d", "avg_pool2d", "softmax", "sum", "mean",
                                 "concatenate", "global_avg_pool2d"]))
    c = draw(st.integers(1, 3))
    h, w = draw(st.integers(2, 5)), draw(st.integers(2, 5))
    x: Expr = param((1, c, h, w))
    if draw(st.booleans()):  # an injective/elementwise prologue that fuse-ops may pull in
        x = _call("nn.relu", [x])
    if kind == "conv2d":
        groups = draw(st.sampled_from([g for g in (1, 2, 3) if c % g == 0]))
        oc = groups * draw(st.integers(1, 2))
        kh, kw = draw(st.integers(1, min(3, h))), draw(st.integers(1, min(3, w)))
        pad = draw(st.lists(st.integers(0, 1), min_size=4, max_size=4))
        stride = draw(st.lists(st.integers(1, 2), min_size=2, max_size=2))
        anchor: Expr = _call("nn.conv2d", [x, param((oc, c // groups, kh, kw))], padding=tuple(pad),
                             strides=tuple(stride), groups=groups)
        channel = oc
    elif kind == "dense":
        flat = _call("reshape", [x], newshape=(1, c * h * w))
        units = draw(st.integers(1, 4))
        anchor = _call("nn.dense", [flat, param((units, c * h * w))])
        channel = None
    elif kind in ("max_pool2d", "avg_pool2d"):
        size = (draw(st.integers(1, min(3, h))), draw(st.integers(1, min(3, w))))
        anchor = _call(f"nn.{kind}", [x], pool_size=size, padding=(draw(st.integers(0, 1)),) * 2,
                       strides=(draw(st.integers(1, 2)),) * 2, ceil_mode=draw(st.booleans()))
        channel = c
    elif kind == "softmax":
        anchor = _call("nn.softmax", [x], axis=draw(st.integers(-1, 3)))
        channel = c
    elif kind in ("sum", "mean"):
        axes = tuple(sorted(draw(st.sets(st.integers(0, 3), min_size=1, max_size=3))))
        anchor = _call(kind, [x], axis=axes, keepdims=True)
        channel = None if 1 in axes else c
    elif kind == "concatenate":
        anchor = _call("concatenate", [Tuple([x, param((1, c, h, w))])], axis=draw(st.integers(0, 3)))
        channel = None
    else:
        anchor = _call("nn.global_avg_pool2d", [x])
        channel = c
    out: Expr = anchor
    for _ in range(draw(st.integers(0, 3))):
        step = draw(st.sampled_from(["unary", "bias", "scale"]))
        if step == "unary":
            out = _call(draw(st.sampled_from(_EPILOGUE)), [out])
        elif step == "bias" and channel is not None:
            out = _call("add", [out, param((channel, 1, 1))])
        else:
            out = _call("multiply", [out, Constant(np.array(draw(st.floats(-2, 2, width=32)), dtype=F32))])
    mod = IRModule()
    mod.add_function("main", Function(params, out, None))
    return mod


@settings()
@given(anchored_programs(), st.integers(0, 2**16))
def test_lowered_anchored_groups_compute_the_same(mod: IRModule, seed: int) -> None:
    fused = run(mod, "fuse-ops")
    lowered = run(fused, "lower")
    _check_lowered_form(lowered)
    kernels = [f for f in lowered.functions.values() if isinstance(f, PrimFunc)]
    assert kernels
    _assert_same(fused, lowered, seed)


@settings()
@given(anchored_programs())
def test_lowering_is_deterministic_and_deduplicated(mod: IRModule) -> None:
    """Lowering the same groups twice in one module yields each PrimFunc once."""
    main = mod["main"]
    twice = IRModule()
    twice.add_function("main", Function(main.params, Tuple([main.body, _copy_body(main)]), None))
    lowered = run(run(twice, "fuse-ops"), "lower")
    single = run(run(mod, "fuse-ops"), "lower")
    count = sum(isinstance(f, PrimFunc) for f in lowered.functions.values())
    assert count == sum(isinstance(f, PrimFunc) for f in single.functions.values())


def _copy_body(fn: Function) -> Expr:
    """The body rebuilt node by node (no sharing with the original), over the same parameters."""
    new: dict[int, Expr] = {}
    for node in post_order(fn.body):
        if isinstance(node, Call) and isinstance(node.op, Op):
            new[id(node)] = Call(node.op, [new.get(id(a), a) for a in node.args], node.attrs)
        elif isinstance(node, Tuple):
            new[id(node)] = Tuple([new.get(id(f), f) for f in node.fields])
    return new.get(id(fn.body), fn.body)
