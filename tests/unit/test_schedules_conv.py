"""The conv2d schedules (channel-vector tile, depthwise, vector padding) against independent
references: numpy float64 correlation loops written here, through the TIR interpreter (every
element of the output must be written) and, for a few shapes, the native build.

Shapes are drawn to hit every tile edge: output channels per group below, at and off multiples
of the vector and of the tile, pixel counts off multiples of the tile rows and of the strip,
strides, dilations, asymmetric padding, groups, kernels given as OIHW or pre-blocked OIHW8o.
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
from irtool.ir.tir import Buffer, Call, PrimFunc, children
from irtool.lower.schedules import RegisterTile, conv2d_channels_tiled, conv2d_nchw_tiled
from irtool.lower.schedules.conv_depthwise import conv2d_depthwise
from irtool.lower.schedules.conv_flat import conv2d_1x1_flat
from irtool.lower.schedules.pad import pad_nchw
from irtool.lower.te import Builder, Placeholder
from irtool.syntax.parser import parse
from irtool.tir_transform.unroll import expand_unrolled
from test_schedules_mobile import llvm_ir, lowered  # noqa: E402

TILES = [RegisterTile(8, 6), RegisterTile(4, 3), RegisterTile(16, 8), RegisterTile(4, 1, vectors=1)]


def reference(x: np.ndarray, w: np.ndarray, strides: tuple[int, int], dilation: tuple[int, int],
              groups: int) -> np.ndarray:
    """Direct correlation over an already padded NCHW input, OIHW weight, in float64."""
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (wd - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for oc in range(o):
        g = oc // og
        for ky in range(kh):
            for kx in range(kw):
                y0, x0 = ky * dilation[0], kx * dilation[1]
                patch = x[:, g * cg:(g + 1) * cg, y0:y0 + (oh - 1) * strides[0] + 1:strides[0],
                          x0:x0 + (ow - 1) * strides[1] + 1:strides[1]].astype(np.float64)
                out[:, oc] += np.einsum("nchw,c->nhw", patch, w[oc, :, ky, kx].astype(np.float64))
    return out


def block(w: np.ndarray, lanes: int) -> np.ndarray:
    """OIHW -> OIHW{lanes}o by hand: (O/L, I, H, W, L)."""
    o = w.shape[0]
    return np.ascontiguousarray(w.reshape(o // lanes, lanes, *w.shape[1:]).transpose(0, 2, 3, 4, 1))


def _run(sched_of, x: np.ndarray, w: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
    xb, wb = Buffer("x", x.shape, "float32"), Buffer("w", w.shape, "float32")
    out = Buffer("out", out_shape, "float32")
    t = sched_of(Placeholder(xb), Placeholder(wb))
    assert t is not None
    func = PrimFunc([xb, wb, out], Builder().function_body([(t, out)]))
    y = np.full(out_shape, np.nan, np.float32)
    run_primfunc(func, [x, w, y])
    return y


conv_cases = st.fixed_dictionaries({
    "n": st.integers(1, 2), "groups": st.integers(1, 3), "cg": st.integers(1, 4), "og": st.integers(1, 19),
    "h": st.integers(1, 9), "w": st.integers(1, 11), "kh": st.integers(1, 3), "kw": st.integers(1, 3),
    "sh": st.integers(1, 3), "sw": st.integers(1, 3), "dh": st.integers(1, 2), "dw": st.integers(1, 2),
    "tile": st.sampled_from(TILES), "strip": st.sampled_from([1, 7, 256]), "seed": st.integers(0, 2**16)})


@settings(deadline=None)
@given(case=conv_cases)
def test_channel_tile_matches_reference(case: dict) -> None:
    g, cg, og = case["groups"], case["cg"], case["og"]
    kh, kw, (sh, sw), (dh, dw) = case["kh"], case["kw"], (case["sh"], case["sw"]), (case["dh"], case["dw"])
    h, wd = case["h"] + (kh - 1) * dh, case["w"] + (kw - 1) * dw    # the window always fits
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["n"], g * cg, h, wd)).astype(np.float32)
    w = rng.standard_normal((g * og, cg, kh, kw)).astype(np.float32)
    want = reference(x, w, (sh, sw), (dh, dw), g)
    tile: RegisterTile = case["tile"]
    got = _run(lambda xt, wt: conv2d_channels_tiled(xt, wt, "OIHW", (kh, kw), "float32", want.shape, (sh, sw),
                                                   (dh, dw), g, tile, case["strip"]), x, w, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if og % tile.lanes == 0:   # the pre-blocked weight is read as is, not re-packed
        got = _run(lambda xt, wt: conv2d_channels_tiled(xt, wt, f"OIHW{tile.lanes}o", (kh, kw), "float32",
                                                       want.shape, (sh, sw), (dh, dw), g, tile, case["strip"]),
                   x, block(w, tile.lanes), want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@settings(deadline=None)
@given(n=st.integers(1, 2), groups=st.integers(1, 3), cg=st.integers(1, 5), og=st.integers(1, 13),
       h=st.integers(1, 6), w=st.integers(1, 15), tile=st.sampled_from(TILES), seed=st.integers(0, 2**16))
def test_flat_1x1_conv_matches_reference(n: int, groups: int, cg: int, og: int, h: int, w: int, tile: RegisterTile,
                                         seed: int) -> None:
    """Channel tiles and their remainder per group, pixel tiles over the flattened plane with the
    last one overlapping, rows copied in and out in vectors covering them."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, groups * cg, h, w)).astype(np.float32)
    wt = rng.standard_normal((groups * og, cg, 1, 1)).astype(np.float32)
    want = reference(x, wt, (1, 1), (1, 1), groups)
    got = _run(lambda xt, wtt: conv2d_1x1_flat(xt, wtt, "OIHW", want.shape, tile, groups), x, wt, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@settings(deadline=None)
@given(groups=st.integers(1, 3), cg=st.integers(1, 4), og=st.integers(1, 13), h=st.integers(1, 5),
       w=st.integers(1, 40), k=st.integers(1, 3), sh=st.integers(1, 2), sw=st.integers(1, 2),
       tile=st.sampled_from(TILES), seed=st.integers(0, 2**16))
def test_row_tile_matches_reference(groups: int, cg: int, og: int, h: int, w: int, k: int, sh: int, sw: int,
                                    tile: RegisterTile, seed: int) -> None:
    """Output channels x output columns, group by group (a tile never spans two groups), column
    stride 1 or 2, the last columns as vectors overlapping the last whole tile."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, groups * cg, h + k - 1, w + k - 1)).astype(np.float32)
    wt = rng.standard_normal((groups * og, cg, k, k)).astype(np.float32)
    want = reference(x, wt, (sh, sw), (1, 1), groups)
    got = _run(lambda xt, wtt: conv2d_nchw_tiled(xt, wtt, "float32", want.shape, (sh, sw), (1, 1), tile, "OIHW",
                                                 groups), x, wt, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@settings(deadline=None)
@given(c=st.integers(1, 5), h=st.integers(1, 8), w=st.integers(1, 21), kh=st.integers(1, 3), kw=st.integers(1, 3),
       sh=st.integers(1, 2), sw=st.integers(1, 2), dh=st.integers(1, 2), dw=st.integers(1, 2),
       lanes=st.sampled_from([4, 8, 16]), seed=st.integers(0, 2**16))
def test_depthwise_matches_reference(c: int, h: int, w: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int,
                                     lanes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c, h + (kh - 1) * dh, w + (kw - 1) * dw)).astype(np.float32)
    wt = rng.standard_normal((c, 1, kh, kw)).astype(np.float32)
    want = reference(x, wt, (sh, sw), (dh, dw), c)
    got = _run(lambda xt, wtt: conv2d_depthwise(xt, wtt, "OIHW", (kh, kw), "float32", want.shape, (sh, sw), (dh, dw),
                                                lanes), x, wt, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@settings(deadline=None)
@given(h=st.integers(1, 6), w=st.integers(1, 20), pads=st.tuples(*[st.integers(0, 3)] * 4),
       lanes=st.sampled_from([4, 8]), seed=st.integers(0, 2**16))
def test_vector_padding_matches_numpy(h: int, w: int, pads: tuple[int, int, int, int], lanes: int, seed: int) -> None:
    x = np.random.default_rng(seed).standard_normal((2, 3, h, w)).astype(np.float32)
    top, left, bottom, right = pads
    want = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    xb, out = Buffer("x", x.shape, "float32"), Buffer("out", want.shape, "float32")
    func = PrimFunc([xb, out], Builder().function_body([(pad_nchw(Placeholder(xb), pads, lanes), out)]))
    y = np.full(want.shape, np.nan, np.float32)
    run_primfunc(func, [x, y])
    np.testing.assert_array_equal(y, want)


def test_channel_tile_is_broadcast_times_weight_vector() -> None:
    """The micro-kernel's shape: rows x vectors fmas of full vectors per reduction step."""
    xb, wb, out = Buffer("x", (1, 16, 10, 10), "float32"), Buffer("w", (4, 16, 3, 3, 8), "float32"), \
        Buffer("o", (1, 32, 8, 8), "float32")
    tile = RegisterTile(8, 6)
    t = conv2d_channels_tiled(Placeholder(xb), Placeholder(wb), "OIHW8o", (3, 3), "float32", out.shape, (1, 1),
                              (1, 1), 1, tile)
    assert t is not None
    stack, fmas = [expand_unrolled(PrimFunc([xb, wb, out], Builder().function_body([(t, out)]))).body], []
    while stack:
        node = stack.pop()
        if isinstance(node, Call) and node.name == "fma":
            fmas.append(node)
        stack.extend(children(node))  # type: ignore[arg-type]
    # 64 pixels = 10 tiles of 6 + one of 4: two tile bodies, each rows x 2 vector fmas once expanded
    assert len(fmas) == (6 + 4) * 2
    assert all(f.dtype == "float32x8" for f in fmas)


@pytest.mark.parametrize("shape,weight,strides,pad,groups", [
    ((1, 3, 23, 23), (16, 3, 7, 7), 2, 3, 1),        # a stem: 7x7/2
    ((1, 16, 14, 14), (24, 16, 1, 1), 2, 0, 1),      # 1x1/2 downsampling
    ((1, 12, 7, 7), (24, 4, 1, 1), 1, 0, 3),         # grouped, 8 channels per group
    ((1, 8, 9, 9), (10, 4, 3, 3), 1, 1, 2),          # grouped, 5 channels per group (a short vector)
    ((1, 9, 13, 13), (9, 1, 3, 3), 2, 1, 9),         # depthwise 3x3/2
    ((1, 5, 41, 39), (5, 1, 5, 5), 2, 2, 5),         # depthwise 5x5/2: full and short stride-2 vectors
    ((1, 6, 7, 7), (6, 1, 5, 5), 1, 2, 6),           # depthwise on a 7x7 map: the flat sweep
    ((1, 3, 14, 15), (3, 1, 3, 3), 1, 1, 3),         # depthwise, 14x15: flat on 16 lanes, by rows on 8
    ((1, 16, 5, 37), (24, 16, 1, 1), 1, 0, 1),       # 1x1 over rows of pixel vectors and a tail
    ((1, 3, 9, 75), (20, 3, 3, 3), 2, 0, 1),         # a 3x3/2 stem: 37 = 32 + 5 columns, rows of vectors
    ((1, 3, 8, 83), (8, 3, 7, 7), 2, 3, 1),          # a 7x7/2 stem, padded
    ((1, 24, 13, 13), (20, 24, 1, 1), 1, 0, 1),      # 1x1, 20 channels on a 13-wide plane: flat on 16 lanes
    ((1, 12, 5, 37), (20, 3, 1, 1), 1, 0, 4),        # grouped 1x1 (5 per group) on wide rows: row tiles
    ((1, 12, 7, 7), (20, 3, 1, 1), 1, 0, 4),         # grouped 1x1 on a 7x7 plane: flat
])
def test_native_conv_matches_reference(shape: tuple[int, ...], weight: tuple[int, ...], strides: int, pad: int,
                                       groups: int) -> None:
    src = f"""#[version = "0.0.5"]
def @main(%x: Tensor[{shape}, float32], %w: Tensor[{weight}, float32]) {{
  nn.relu(nn.conv2d(%x, %w, strides=[{strides}, {strides}], padding=[{pad}, {pad}, {pad}, {pad}], groups={groups}))
}}"""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(weight).astype(np.float32)
    want = np.maximum(reference(np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))), w, (strides, strides), (1, 1),
                                groups), 0)
    for pipeline in ("simplify-inference,fuse-ops,lower", "simplify-inference,alter-layout,fuse-ops,lower"):
        native = irtool.build(parse(src, "conv.relay"), pipeline=pipeline)
        np.testing.assert_allclose(native(x=x, w=w), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel,strides,pads,dilation,ceil", [
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),     # ResNet's stem pool
    ((3, 3), (2, 2), (0, 1, 1, 0), (1, 1), True),      # ceil mode: windows past the end
    ((2, 3), (1, 2), (1, 0, 2, 1), (2, 1), False),
])
def test_padded_max_pool_matches_numpy(kernel: tuple[int, int], strides: tuple[int, int],
                                       pads: tuple[int, int, int, int], dilation: tuple[int, int], ceil: bool) -> None:
    """Max pooling reads a -inf padded stage: the padding never wins, the data always does."""
    src = f"""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 11, 10), float32]) {{
  nn.max_pool2d(%x, pool_size={list(kernel)}, strides={list(strides)}, padding={list(pads)},
                dilation={list(dilation)}, ceil_mode={ceil})
}}"""
    x = -np.abs(np.random.default_rng(5).standard_normal((2, 3, 11, 10))).astype(np.float32) - 1  # all below 0
    got = irtool.build(parse(src, "pool.relay"))(x=x)
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    padded = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2] + sh), (pads[1], pads[3] + sw)), constant_values=-np.inf)
    want = np.full(got.shape, -np.inf, np.float32)
    for ky in range(kh):
        for kx in range(kw):
            want = np.maximum(want, padded[:, :, ky * dh::sh, kx * dw::sw][:, :, :got.shape[2], :got.shape[3]])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(2, 3, 9, 37), (1, 4, 1, 5), (1, 2, 3, 16)])
@pytest.mark.parametrize("op", ["nn.global_avg_pool2d", "nn.global_max_pool2d"])
def test_native_global_pool_matches_numpy(shape: tuple[int, ...], op: str) -> None:
    """Vector partial sums / maxima over rows with a short last vector, combined lane by lane."""
    x = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
    src = f"""#[version = "0.0.5"]
def @main(%x: Tensor[{shape}, float32]) {{
  {op}(%x)
}}"""
    got = irtool.build(parse(src, "pool.relay"))(x=x)
    if op == "nn.global_max_pool2d":
        np.testing.assert_array_equal(got, x.max(axis=(2, 3), keepdims=True))
    else:
        np.testing.assert_allclose(got, x.astype(np.float64).mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 CPU names")
def test_a_stem_conv_vectorizes_its_output_rows(tmp_path: Path) -> None:
    """3 input channels, 3x3/2 (SqueezeNet's first conv): output columns are the vectors, each
    reduction step two loads and the even lanes, each tile stored whole (the channel tile stores
    one element per lane, extracting its pointer); 111 = 3 x 32 + 15 columns end with a whole
    vector overlapping the last tile, not a 15-lane one."""
    src = f"""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 223, 223), float32], %w: Tensor[(16, 3, 3, 3), float32]) {{
  nn.conv2d(%x, %w, strides=[2, 2])
}}"""
    ir = llvm_ir(tmp_path, src, "skylake-avx512")
    even = ", ".join(f"i32 {2 * k if 2 * k < 16 else 2 * k + 1}" for k in range(16))
    assert re.search(rf"shufflevector <16 x float> %\w+, <16 x float> %\w+, <16 x i32> <{even}>", ir)
    assert "@llvm.fma.v16f32" in ir
    assert not re.search(r"extractelement <\d+ x ptr>", ir)
    assert not re.search(r"store <(?!16 x)\d+ x float>", ir)


def test_a_1x1_conv_with_channels_off_the_vector_on_a_narrow_plane_reads_its_weights_as_given() -> None:
    """1000 classes are not a multiple of 16 lanes: the channel tile would pack 2 MB of weights at
    every call; the flat plane broadcasts them from OIHW instead (16 lanes, pinned)."""
    src = f"""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 64, 13, 13), float32], %w: Tensor[(1000, 64, 1, 1), float32]) {{
  nn.relu(nn.conv2d(%x, %w))
}}"""
    text = lowered(src, "skylake-avx512")
    assert "flat_in" in text and "flat_out" in text
    assert "w_packed" not in text
