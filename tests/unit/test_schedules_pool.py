"""Windowed pooling vectorized along output rows (irtool/lower/schedules/pool.py) against the
operator's numpy reference: through the TIR interpreter for windows drawn to hit every edge
(padding on each side, ceil mode's last window, strides, dilation, rows narrower than a vector,
all-edge maps), natively for a few shapes and NaN, and the code's shape with a pinned CPU.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irtool
from irtool.eval.tir_interp import run_primfunc
from irtool.ir.tir import Buffer, PrimFunc
from irtool.lower.schedules.pool import Window, pool2d_nchw
from irtool.lower.te import Builder, Placeholder
from irtool.ops.registry import get_op
from irtool.syntax.parser import parse
from test_schedules_mobile import llvm_ir  # noqa: E402


def reference(op: str, x: np.ndarray, attrs: dict[str, object]) -> np.ndarray:
    """The operator's own numpy compute (what the interpreter runs)."""
    opdef = get_op(op)
    assert opdef is not None and opdef.compute is not None
    return np.asarray(opdef.compute([x], opdef.full_attrs(attrs)))


def relay(op: str, shape: tuple[int, ...], attrs: dict[str, object]) -> str:
    text = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in attrs.items())
    return f"""#[version = "0.0.5"]
def @main(%x: Tensor[{shape}, float32]) {{
  {op}(%x, {text})
}}"""


pools = st.fixed_dictionaries({
    "is_max": st.booleans(), "c": st.integers(1, 2), "h": st.integers(1, 9), "w": st.integers(1, 40),
    "kh": st.integers(1, 3), "kw": st.integers(1, 4), "sh": st.integers(1, 3), "sw": st.integers(1, 3),
    "dh": st.integers(1, 2), "dw": st.integers(1, 2), "pads": st.tuples(*[st.integers(0, 2)] * 4),
    "ceil": st.booleans(), "include_pad": st.booleans(), "lanes": st.sampled_from([4, 8, 16]),
    "seed": st.integers(0, 2**16)})


@settings(deadline=None, max_examples=150)
@given(case=pools)
def test_vector_pool_matches_the_reference(case: dict) -> None:
    """Bit for bit: the maximum is exact in any order, and the average adds its taps in the
    reference's order and divides by the same count."""
    kh, kw, (top, left, bottom, right) = case["kh"], case["kw"], case["pads"]
    h = max(case["h"], (kh - 1) * case["dh"] + 1 - top - bottom)
    w = max(case["w"], (kw - 1) * case["dw"] + 1 - left - right)
    op = "nn.max_pool2d" if case["is_max"] else "nn.avg_pool2d"
    attrs: dict[str, object] = {"pool_size": (kh, kw), "strides": (case["sh"], case["sw"]),
                                "dilation": (case["dh"], case["dw"]), "padding": case["pads"],
                                "ceil_mode": case["ceil"]}
    if not case["is_max"]:
        attrs["count_include_pad"] = case["include_pad"]
    x = np.random.default_rng(case["seed"]).standard_normal((2, case["c"], h, w)).astype(np.float32)
    want = reference(op, x, attrs)
    windows = (Window(h, kh, case["sh"], case["dh"], top, bottom), Window(w, kw, case["sw"], case["dw"], left, right))
    xb, out = Buffer("x", x.shape, "float32"), Buffer("out", want.shape, "float32")
    t = pool2d_nchw(Placeholder(xb), case["is_max"], windows, want.shape, case["include_pad"], case["lanes"])
    assert t is not None
    got = np.full(want.shape, np.nan, np.float32)
    run_primfunc(PrimFunc([xb, out], Builder().function_body([(t, out)])), [x, got])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op, shape, attrs", [
    ("nn.max_pool2d", (1, 3, 55, 55), {"pool_size": (3, 3), "strides": (2, 2), "ceil_mode": True}),   # SqueezeNet
    ("nn.max_pool2d", (1, 2, 27, 27), {"pool_size": (3, 3), "strides": (2, 2), "ceil_mode": True}),   # 13-wide rows
    ("nn.max_pool2d", (1, 4, 38, 38), {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}),
    ("nn.avg_pool2d", (1, 3, 28, 28), {"pool_size": (3, 3), "padding": (1, 1, 1, 1)}),                # Inception
    ("nn.avg_pool2d", (1, 3, 28, 28), {"pool_size": (3, 3), "padding": (1, 1, 1, 1), "count_include_pad": True}),
    ("nn.avg_pool2d", (1, 4, 14, 14), {"pool_size": (2, 2), "strides": (2, 2)}),                     # DenseNet
    ("nn.avg_pool2d", (1, 5, 7, 7), {"pool_size": (7, 7)}),                                          # a global one
])
def test_native_pool_matches_the_reference(op: str, shape: tuple[int, ...], attrs: dict[str, object]) -> None:
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    got = irtool.build(parse(relay(op, shape, attrs), "pool.relay"))(x=x)
    np.testing.assert_allclose(got, reference(op, x, attrs), rtol=1e-6, atol=1e-6)


def test_native_max_pool_propagates_nan() -> None:
    """A NaN anywhere in a window is the window's maximum, as numpy's `maximum` says, in the
    vector interior and at the edges."""
    shape, attrs = (1, 1, 9, 40), {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    x[0, 0, 4, [0, 9, 20, 39]] = np.nan
    got = irtool.build(parse(relay("nn.max_pool2d", shape, attrs), "pool.relay"))(x=x)
    want = reference("nn.max_pool2d", x, attrs)
    assert np.isnan(want).sum() == 5   # one output row: columns 0, 4-5, 10 and 19
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 CPU names")
def test_stride_2_max_pool_is_vector_max_of_shuffled_loads(tmp_path: Path) -> None:
    """16-lane vectors of a 55-wide map (3 of 16, then 16 overlapping them), each tap two loads
    and the even lanes; the taps combined by a tree of vector `llvm.maximum` (8 per output
    vector: NaN-propagating, as TIR's `max`), and no load or select per element."""
    src = relay("nn.max_pool2d", (1, 8, 111, 111), {"pool_size": (3, 3), "strides": (2, 2), "ceil_mode": True})
    ir = llvm_ir(tmp_path, src, "skylake-avx512")
    even = ", ".join(f"i32 {2 * k if 2 * k < 16 else 2 * k + 1}" for k in range(16))
    assert len(re.findall(rf"shufflevector <16 x float> %\w+, <16 x float> %\w+, <16 x i32> <{even}>", ir)) >= 9
    assert len(re.findall(r"call <16 x float> @llvm\.maximum\.v16f32", ir)) >= 8
    assert not re.search(r"extractelement <\d+ x ptr>", ir)
    assert not re.search(r"store <(?!16 x)\d+ x float>", ir)
