"""Fused epilogues in registers: a register-tiled `nn.dense` or `nn.conv2d` followed, in its fused
group, by elementwise/broadcast operators read at the same index (bias, batch-norm affine, relu,
residual add, clip) lowers to the tile's own nest with the epilogue applied before the one store.

For random such groups, with shapes that hit every edge of the tiles (partial row blocks,
short vectors, scalar columns), the lowered kernel run by the TIR interpreter gives the Relay
interpreter's result, and no buffer holds the anchor's result (the epilogue was fused).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from irtool.passes import run

from irtool.eval.interpreter import flatten_value, run_function
from irtool.ir import Call, Constant, Expr, Function, IRModule, Op, TensorType, Var
from irtool.ir.tir import Allocate, PrimFunc, children
from irtool.ops import get_op

F32 = "float32"


def _call(name: str, args: list[Expr], **attrs: object) -> Call:
    op = get_op(name)
    assert op is not None
    return Call(Op(name), args, op.normalize_attrs(attrs))


@st.composite
def epilogue_programs(draw: st.DrawFn) -> tuple[IRModule, tuple[int, ...]]:
    """(module, shape of the anchor's result): dense or conv2d (strided and grouped ones too:
    every conv schedule), then 1-4 epilogue operators."""
    params: list[Var] = []

    def param(shape: tuple[int, ...]) -> Var:
        v = Var(f"p{len(params)}", TensorType(shape, F32))
        params.append(v)
        return v

    if draw(st.booleans()):
        m, k, n = draw(st.integers(1, 14)), draw(st.integers(1, 12)), draw(st.integers(1, 40))
        out: Expr = _call("nn.dense", [param((m, k)), param((n, k))])
        shape: tuple[int, ...] = (m, n)
        channel_axis = 1
    else:
        groups = draw(st.sampled_from([1, 1, 2]))
        c, o = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 9))
        h, w = draw(st.integers(1, 4)), draw(st.integers(1, 20))
        kh, kw = draw(st.integers(1, min(3, h + 2))), draw(st.integers(1, min(3, w + 2)))
        sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
        pad = draw(st.integers(0, 1))
        if h + 2 * pad < kh or w + 2 * pad < kw:
            pad = 1
        oh, ow = (h + 2 * pad - kh) // sh + 1, (w + 2 * pad - kw) // sw + 1
        out = _call("nn.conv2d", [param((1, c, h, w)), param((o, c // groups, kh, kw))], padding=(pad,) * 4,
                    strides=(sh, sw), groups=groups)
        shape = (1, o, oh, ow)
        channel_axis = 1
    channels = shape[channel_axis]
    for _ in range(draw(st.integers(1, 4))):
        step = draw(st.sampled_from(["bias", "scale", "relu", "residual", "clip"]))
        if step == "bias":
            out = _call("nn.bias_add", [out, param((channels,))], axis=channel_axis)
        elif step == "scale":   # simplify-inference's batch-norm affine: a constant per channel
            per_channel = (channels,) + (1,) * (len(shape) - channel_axis - 1)
            scale = np.asarray(draw(st.lists(st.floats(-2, 2, width=32), min_size=channels, max_size=channels)),
                               dtype=F32).reshape(per_channel)
            out = _call("multiply", [out, Constant(scale)])
        elif step == "relu":
            out = _call("nn.relu", [out])
        elif step == "residual":
            out = _call("add", [out, param(shape)])
        else:
            low = draw(st.floats(-3, 0, width=32))
            out = _call("clip", [out], a_min=float(low), a_max=float(low + draw(st.floats(0.5, 3, width=32))))
    mod = IRModule()
    mod.add_function("main", Function(params, out, None))
    return mod, shape


ANCHOR_STAGES = ("dense", "conv2d")  # the names lowering gives a tiled result kept in a buffer


def _allocations(func: PrimFunc) -> list[tuple[str, tuple[int, ...]]]:
    """(scope, shape) of the buffers holding the anchor's result. Selected by name, not by shape
    alone: a padded input (1x1 kernel, padding 1) or a weight panel (K x 16) can have exactly the
    result's shape without being it."""
    out, stack = [], [func.body]
    while stack:
        node = stack.pop()
        if isinstance(node, Allocate) and node.buffer.name.startswith(ANCHOR_STAGES):
            out.append((node.buffer.scope, node.buffer.shape))
        stack.extend(children(node))  # type: ignore[arg-type]
    return out


@settings()
@given(epilogue_programs(), st.integers(0, 2**16))
def test_fused_epilogue_matches_the_relay_interpreter(program: tuple[IRModule, tuple[int, ...]], seed: int) -> None:
    mod, anchor_shape = program
    fused = run(mod, "fuse-ops")
    lowered = run(fused, "lower")
    (kernel,) = [f for f in lowered.functions.values() if isinstance(f, PrimFunc)]
    assert ("global", anchor_shape) not in _allocations(kernel)
    rng = np.random.default_rng(seed)
    args = [(rng.standard_normal(tuple(int(d) for d in p.type_annotation.shape)) * 2).astype(F32)
            for p in mod["main"].params]
    (want,) = flatten_value(run_function(fused, args))
    (got,) = flatten_value(run_function(lowered, args))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_one_by_one_kernel_with_padding_fuses_its_bias() -> None:
    """Found by the property above: the padded input of a 1x1 conv with padding 1 has the
    result's shape; the bias still goes into the store and no result buffer is allocated."""
    from irtool.syntax.parser import parse_module
    mod = parse_module('#[version = "0.0.5"]\ndef @main(%x: Tensor[(1, 1, 1, 1), float32], '
                       '%w: Tensor[(1, 1, 1, 1), float32], %b: Tensor[(1), float32]) {\n'
                       '  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);\n  nn.bias_add(%0, %b)\n}\n')
    lowered = run(mod, "fuse-ops,lower")
    (kernel,) = [f for f in lowered.functions.values() if isinstance(f, PrimFunc)]
    assert [shape for scope, shape in _allocations(kernel) if scope == "global"] == []
    x, w, b = np.full((1, 1, 1, 1), 2, F32), np.full((1, 1, 1, 1), 3, F32), np.full((1,), 0.5, F32)
    want = np.full((1, 1, 3, 3), 0.5, F32)
    want[0, 0, 1, 1] = 6.5  # only the centre sees the input: 2 * 3 + 0.5
    np.testing.assert_array_equal(np.asarray(run_function(lowered, [x, w, b])), want)
