"""Fused epilogues of register-tiled kernels, compiled natively: the generated code computes what
numpy does, and the epilogue's operands reach LLVM as vector loads (contiguous along the tile's
vector axis) or scalar loads broadcast once (per-channel operands), with no buffer between the
tile and the epilogue. The interpreter-level properties are in tests/property/test_epilogue_props.py.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import irtool
from irtool.codegen.compile import compile_module
from irtool.driver import prepare
from irtool.target import TargetOptions
from irtool.lower.schedules import register_tile
from irtool.syntax.parser import parse_module

# Without alter-layout, so the weights stay parameters in their plain layouts.
PIPELINE = "simplify-inference,fuse-ops,lower"


def _conv_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Direct NCHW convolution, pad 1, stride 1, in float64 (independent of irtool)."""
    _, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    p = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, o, h + 2 - kh + 1, wd + 2 - kw + 1))
    for ky in range(kh):
        for kx in range(kw):
            patch = p[:, :, ky:ky + out.shape[2], kx:kx + out.shape[3]]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, ky, kx].astype(np.float64))
    return out


@pytest.mark.parametrize("c,o,h,wd", [(3, 16, 6, 20), (5, 13, 3, 9), (8, 32, 7, 7)])
def test_native_conv_with_batch_norm_residual_relu_epilogue(c: int, o: int, h: int, wd: int) -> None:
    src = f"""#[version = "0.0.5"]
def @main(%x: Tensor[(1, {c}, {h}, {wd}), float32], %w: Tensor[({o}, {c}, 3, 3), float32],
          %s: Tensor[({o}, 1, 1), float32], %t: Tensor[({o}, 1, 1), float32],
          %r: Tensor[(1, {o}, {h}, {wd}), float32]) {{
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  nn.relu(add(add(multiply(%0, %s), %t), %r))
}}"""
    rng = np.random.default_rng(o)
    x = rng.standard_normal((1, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    s, t = rng.standard_normal((o, 1, 1)).astype(np.float32), rng.standard_normal((o, 1, 1)).astype(np.float32)
    r = rng.standard_normal((1, o, h, wd)).astype(np.float32)
    native = irtool.build(parse_module(src), pipeline=PIPELINE)
    want = np.maximum(_conv_reference(x, w) * s + t + r, 0)
    np.testing.assert_allclose(native(x=x, w=w, s=s, t=t, r=r), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,k,n", [(1, 37, 24), (3, 16, 40), (13, 24, 50)])
def test_native_dense_with_bias_residual_clip_epilogue(m: int, k: int, n: int) -> None:
    src = f"""#[version = "0.0.5"]
def @main(%x: Tensor[({m}, {k}), float32], %w: Tensor[({n}, {k}), float32], %b: Tensor[({n}), float32],
          %r: Tensor[({m}, {n}), float32]) {{
  clip(add(nn.bias_add(nn.dense(%x, %w), %b), %r), a_min=-1.5f, a_max=2f)
}}"""
    rng = np.random.default_rng(m * n)
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    b, r = rng.standard_normal(n).astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)
    native = irtool.build(parse_module(src), pipeline=PIPELINE)
    want = np.clip(x.astype(np.float64) @ w.T.astype(np.float64) + b + r, -1.5, 2)
    np.testing.assert_allclose(native(x=x, w=w, b=b, r=r), want, rtol=1e-4, atol=1e-4)


def test_dense_epilogue_operands_are_vector_loads_in_the_generated_llvm() -> None:
    """Bias and residual along the tile's columns: `load <L x float>` from their parameters
    (contiguous), never one scalar load per lane; the kernel has no scratch for the result."""
    lanes = register_tile().lanes
    m, k, n = 12, 32, 4 * lanes
    src = f"""#[version = "0.0.5"]
def @main(%x: Tensor[({m}, {k}), float32], %w: Tensor[({n}, {k}), float32], %b: Tensor[({n}), float32],
          %r: Tensor[({m}, {n}), float32]) {{
  nn.relu(add(nn.bias_add(nn.dense(%x, %w), %b), %r))
}}"""
    mod = prepare(parse_module(src), TargetOptions(), PIPELINE)
    ir = compile_module(mod, "t", TargetOptions()).generated.ir   # as irtool emits it, before LLVM's passes
    kernel = ir[ir.index("define internal i32 @t_fused_nn_dense"):]
    kernel = kernel[:kernel.index("\n}\n")]
    # parameters: %b0 x, %b1 w, %b2 bias, %b3 residual, %b4 out
    for param in ("%b2", "%b3"):
        addresses = re.findall(rf"(%\w+) = getelementptr inbounds float, ptr {param}, ", kernel)
        assert addresses, f"no access to {param}"
        loads = [re.search(rf"= load (<\d+ x float>|float), ptr {a},", kernel) for a in addresses]
        kinds = {ld.group(1) for ld in loads if ld}
        assert kinds == {f"<{lanes} x float>"}, f"{param} is read as {kinds}"
        assert "@llvm.masked." not in kernel   # no gathered (per-lane) access anywhere
    assert "@aligned_alloc" not in kernel
