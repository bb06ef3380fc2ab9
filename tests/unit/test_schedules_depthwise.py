"""The depthwise schedule's own padding and phase planes (irtool/lower/schedules/conv_depthwise.py)
against numpy: padding of any size on each side (wider than the input too), strides and
dilations, through the TIR interpreter (every output element must be written) and natively from
Relay with a fused SiLU epilogue, on AVX2 and AVX-512 targets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irtool
from irtool.eval.tir_interp import run_primfunc
from irtool.ir.tir import Allocate, Buffer, BufferLoad, Call, PrimFunc, children
from irtool.driver.prepare import ensure_lowered
from irtool.lower.schedules.conv_depthwise import conv2d_depthwise
from irtool.lower.te import Builder, Placeholder
from irtool.syntax.parser import parse
from irtool.tir_transform.mutator import walk_stmts


def reference(x: np.ndarray, w: np.ndarray, strides: tuple[int, int], dilation: tuple[int, int]) -> np.ndarray:
    """Depthwise correlation over an already padded NCHW input, (C, 1, KH, KW) weight, in float64."""
    (sh, sw), (dh, dw) = strides, dilation
    kh, kw = w.shape[2:]
    oh, ow = (x.shape[2] - (kh - 1) * dh - 1) // sh + 1, (x.shape[3] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((*x.shape[:2], oh, ow))
    for ky in range(kh):
        for kx in range(kw):
            patch = x[:, :, ky * dh:ky * dh + (oh - 1) * sh + 1:sh, kx * dw:kx * dw + (ow - 1) * sw + 1:sw]
            out += patch.astype(np.float64) * w[None, :, 0, ky, kx, None, None]
    return out


def _padded(x: np.ndarray, pads: tuple[int, int, int, int]) -> np.ndarray:
    top, left, bottom, right = pads
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))


@settings(deadline=None, max_examples=60)
@given(c=st.integers(1, 3), h=st.integers(1, 9), w=st.integers(1, 19), kh=st.integers(1, 5), kw=st.integers(1, 5),
       sh=st.integers(1, 3), sw=st.integers(1, 3), dh=st.integers(1, 2), dw=st.integers(1, 2),
       pads=st.tuples(*[st.integers(0, 4)] * 4), lanes=st.sampled_from([4, 8, 16]), seed=st.integers(0, 2**16))
def test_depthwise_pads_as_it_copies(c: int, h: int, w: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int,
                                     pads: tuple[int, int, int, int], lanes: int, seed: int) -> None:
    top, left, bottom, right = pads
    if h + top + bottom < (kh - 1) * dh + 1 or w + left + right < (kw - 1) * dw + 1:
        return   # no output
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, kh, kw)).astype(np.float32)
    want = reference(_padded(x, pads), wt, (sh, sw), (dh, dw))
    xb, wb, out = Buffer("x", x.shape, "float32"), Buffer("w", wt.shape, "float32"), Buffer("o", want.shape, "float32")
    t = conv2d_depthwise(Placeholder(xb), Placeholder(wb), "OIHW", (kh, kw), "float32", want.shape, (sh, sw),
                         (dh, dw), lanes, pads)
    assert t is not None
    y = np.full(want.shape, np.nan, np.float32)
    run_primfunc(PrimFunc([xb, wb, out], Builder().function_body([(t, out)])), [x, wt, y])
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def _src(shape: tuple[int, ...], k: int, stride: int, pad: int) -> str:
    c = shape[1]
    return f"""#[version = "0.0.5"]
def @main(%x: Tensor[{shape}, float32], %w: Tensor[({c}, 1, {k}, {k}), float32], %b: Tensor[({c}), float32]) {{
  %0 = nn.bias_add(nn.conv2d(%x, %w, strides=[{stride}, {stride}], padding=[{pad}, {pad}, {pad}, {pad}],
                             groups={c}), %b);
  multiply(%0, sigmoid(%0))
}}"""


def test_depthwise_reads_the_unpadded_input_without_a_padding_stage() -> None:
    low = ensure_lowered(parse(_src((1, 4, 9, 9), 5, 2, 2), "dw.relay"))
    kernels = [f for f in low.functions.values() if isinstance(f, PrimFunc)]
    assert len(kernels) == 1
    allocated = {s.buffer.name for s in walk_stmts(kernels[0].body) if isinstance(s, Allocate)}
    assert "pad" not in allocated and "dw_plane" in allocated
    # every tap is a contiguous load of the local phase planes: no stride-2 input access in the sweep
    stack: list[object] = [kernels[0].body]
    fmas = 0
    while stack:
        node = stack.pop()
        if isinstance(node, Call) and node.name == "fma":
            fmas += 1
            weight = kernels[0].params[1]
            assert {a.buffer.name for a in node.args if isinstance(a, BufferLoad) and a.buffer is not weight} \
                <= {"dw_plane", "dw_acc"}
        stack.extend(children(node))  # type: ignore[arg-type]
    assert fmas > 0


@pytest.mark.parametrize("cpu", ["haswell", "skylake-avx512"])
@pytest.mark.parametrize("shape,k,stride,pad", [
    ((1, 5, 7, 7), 5, 1, 2),        # EfficientNet's 7x7 maps
    ((1, 3, 14, 14), 5, 2, 2),      # 5x5/2 down to 7x7
    ((2, 4, 29, 31), 3, 2, 1),      # odd sizes, 3x3/2
    ((1, 2, 40, 37), 3, 1, 1),      # rows wider than a vector
])
def test_native_depthwise_with_silu(shape: tuple[int, ...], k: int, stride: int, pad: int, cpu: str) -> None:
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    wt = rng.standard_normal((shape[1], 1, k, k)).astype(np.float32)
    bias = rng.standard_normal(shape[1]).astype(np.float32)
    z = reference(_padded(x, (pad,) * 4), wt, (stride, stride), (1, 1)) + bias[None, :, None, None]
    want = z / (1 + np.exp(-z))
    native = irtool.build(parse(_src(shape, k, stride, pad), "dw.relay"), cpu=cpu)
    np.testing.assert_allclose(native(x=x, w=wt, b=bias), want, rtol=1e-4, atol=1e-4)
