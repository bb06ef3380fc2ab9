"""The register-tiled `nn.dense` schedule (irtool/lower/schedules/) against independent references.

Every tile shape the host selection can pick (and a small odd one) is run through the TIR
interpreter on shapes that hit each edge: M, N, K below, at and off multiples of the tile, a
short last vector, single-lane columns. References are numpy (`x @ w.T` in float64) and the Relay
interpreter; the native build is checked on the same kind of shapes and with a fused epilogue.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irtool
from irtool.eval.interpreter import flatten_value, run_function
from irtool.eval.tir_interp import run_primfunc
from irtool.ir.tir import (
    Allocate,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    IntImm,
    PrimFunc,
    Ramp,
    children,
)
from irtool.lower.module import lower_module
from irtool.lower.schedules import (
    RegisterTile,
    conv2d_nchw_tiled,
    dense_tiled,
    register_tile,
)
from irtool.lower.schedules.dense import panel_layout, row_blocks, weight_layout_for
from irtool.lower.te import Builder, Placeholder
from irtool.syntax.parser import parse_module
from irtool.tir_transform.unroll import expand_unrolled

TILES = [RegisterTile(16, 8), RegisterTile(8, 6), RegisterTile(4, 3, vectors=1)]


def _interpret_tiled(x: np.ndarray, w: np.ndarray, tile: RegisterTile) -> np.ndarray:
    xb, wb = Buffer("x", x.shape, "float32"), Buffer("w", w.shape, "float32")
    out = Buffer("out", (x.shape[0], w.shape[0]), "float32")
    t = dense_tiled(Placeholder(xb), Placeholder(wb), "float32", tile)
    assert t is not None
    func = PrimFunc([xb, wb, out], Builder().function_body([(t, out)]))
    y = np.full(out.shape, np.nan, np.float32)   # every element must be written
    run_primfunc(func, [x, w, y])
    return y


def _reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) @ w.astype(np.float64).T


def _nodes(root: object) -> list[object]:
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(children(node))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"{t.rows}x{t.lanes}x{t.vectors}")
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (8, 5, 32), (9, 3, 33), (17, 4, 47), (7, 2, 1), (3, 6, 65)])
def test_tiled_dense_matches_numpy(tile: RegisterTile, m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(m * 100 + n)
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    np.testing.assert_allclose(_interpret_tiled(x, w, tile), _reference(x, w), rtol=1e-5, atol=1e-5)


@settings(deadline=None)
@given(m=st.integers(1, 20), k=st.integers(1, 9), n=st.integers(1, 40), tile=st.sampled_from(TILES))
def test_tiled_dense_any_shape(m: int, k: int, n: int, tile: RegisterTile) -> None:
    rng = np.random.default_rng(m * 1000 + k * 100 + n)
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    np.testing.assert_allclose(_interpret_tiled(x, w, tile), _reference(x, w), rtol=1e-5, atol=1e-5)


@given(extent=st.integers(1, 500), rows=st.integers(1, 16))
def test_row_tiles_cover_the_rows_evenly(extent: int, rows: int) -> None:
    """As few tiles as `rows` allows, one after the other, sizes differing by at most one row."""
    blocks = row_blocks(extent, rows)
    sizes = [size for _, count, size in blocks for _ in range(count)]
    assert sum(sizes) == extent and len(sizes) == -(-extent // rows)
    assert max(sizes) <= rows and max(sizes) - min(sizes) <= 1 and min(count for _, count, _ in blocks) > 0
    assert [start for start, _, _ in blocks] == [0, blocks[0][1] * blocks[0][2]][:len(blocks)]


def test_dense_remainder_rows_are_spread_over_the_tiles() -> None:
    """49 rows on 8-row tiles: seven tiles of 7 rows, not six of 8 and one of 1."""
    xb, wb, out = Buffer("x", (49, 8), "float32"), Buffer("w", (32, 8), "float32"), Buffer("o", (49, 32), "float32")
    t = dense_tiled(Placeholder(xb), Placeholder(wb), "float32", RegisterTile(16, 8))
    assert t is not None
    nodes = _nodes(expand_unrolled(PrimFunc([xb, wb, out], Builder().function_body([(t, out)]))).body)
    fmas = [n for n in nodes if isinstance(n, Call) and n.name == "fma"]
    assert len(fmas) == 7 * 2     # one tile's code: 7 rows x 2 vectors, in a loop over 7 tiles


def test_tile_is_vector_fma_on_constant_accumulator_slots() -> None:
    xb, wb, out = Buffer("x", (16, 8), "float32"), Buffer("w", (64, 8), "float32"), Buffer("o", (16, 64), "float32")
    tile = RegisterTile(16, 8)
    t = dense_tiled(Placeholder(xb), Placeholder(wb), "float32", tile)
    assert t is not None
    compact = PrimFunc([xb, wb, out], Builder().function_body([(t, out)]))
    # The source has one fma per tile, in unrolled loops over the rows and vectors ...
    assert len([n for n in _nodes(compact.body) if isinstance(n, Call) and n.name == "fma"]) == 1
    nodes = _nodes(expand_unrolled(compact).body)
    fmas = [n for n in nodes if isinstance(n, Call) and n.name == "fma"]
    assert fmas and all(f.dtype == "float32x16" for f in fmas)
    # ... codegen's expansion one per accumulator: rows x vectors, for the 2 x 2 tiles sharing the code
    assert len(fmas) == tile.rows * tile.vectors
    acc_stores = [n for n in nodes if isinstance(n, BufferStore) and n.buffer.scope == "local"]
    assert acc_stores and all(isinstance(s.indices[1], Ramp) and isinstance(s.indices[0], IntImm)
                              for s in acc_stores)


def test_dense_falls_back_outside_float32_matrices() -> None:
    f64 = Buffer("x", (3, 4), "float64")
    assert dense_tiled(Placeholder(f64), Placeholder(Buffer("w", (5, 4), "float64")), "float64") is None
    x3 = Buffer("x", (2, 3, 4), "float32")
    assert dense_tiled(Placeholder(x3), Placeholder(Buffer("w", (5, 4), "float32")), "float32") is None


def _panels(w: np.ndarray, nr: int) -> np.ndarray:
    """W (N, K) as NK{nr}n panels (N/nr, K, nr), written independently of the schedule."""
    n, k = w.shape
    return np.ascontiguousarray(w.reshape(n // nr, nr, k).transpose(0, 2, 1))


@settings(deadline=None)
@given(m=st.integers(1, 14), k=st.integers(1, 9), panels=st.integers(1, 3), tile=st.sampled_from(TILES))
def test_tiled_dense_reads_prepacked_panels(m: int, k: int, panels: int, tile: RegisterTile) -> None:
    nr = tile.lanes * tile.vectors
    rng = np.random.default_rng(m * 100 + k * 10 + panels)
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((panels * nr, k)).astype(np.float32)
    packed = _panels(w, nr)
    xb, wb = Buffer("x", x.shape, "float32"), Buffer("w", packed.shape, "float32")
    out = Buffer("out", (m, panels * nr), "float32")
    t = dense_tiled(Placeholder(xb), Placeholder(wb), "float32", tile, weight_layout=panel_layout(tile))
    assert t is not None and t.shape == (m, panels * nr)
    func = PrimFunc([xb, wb, out], Builder().function_body([(t, out)]))
    assert not any(isinstance(n, Allocate) and n.buffer.scope == "global" for n in _nodes(func.body))  # no packing
    y = np.full(out.shape, np.nan, np.float32)
    run_primfunc(func, [x, packed, y])
    np.testing.assert_allclose(y, _reference(x, w), rtol=1e-5, atol=1e-5)


def test_weight_layout_for_prefers_panels_for_matrix_products_and_rows_for_few_outputs() -> None:
    tile = RegisterTile(8, 6)
    assert weight_layout_for(1, tile) == weight_layout_for(5, tile) == "NK"
    assert weight_layout_for(6, tile) == weight_layout_for(512, tile) == "NK16n"
    # and the schedule takes what it recommends
    x = Placeholder(Buffer("x", (1, 5), "float32"))
    assert dense_tiled(x, Placeholder(Buffer("w", (32, 5), "float32")), "float32", tile, weight_layout_for(1, tile))


def test_prepacked_weight_must_match_the_tile_panels() -> None:
    tile = RegisterTile(8, 6)
    x = Placeholder(Buffer("x", (3, 5), "float32"))
    assert panel_layout(tile) == "NK16n"
    assert dense_tiled(x, Placeholder(Buffer("w", (2, 5, 8), "float32")), "float32", tile, "NK8n") is None
    assert dense_tiled(x, Placeholder(Buffer("w", (2, 5, 16), "float32")), "float32", tile, "NK16n") is not None
    assert dense_tiled(x, Placeholder(Buffer("w", (2, 4, 16), "float32")), "float32", tile, "NK16n") is None


def test_matrix_vector_product_on_panels_splits_the_reduction_over_independent_accumulators() -> None:
    """Batch 1 on packed panels: one output row, so the tile's rows become interleaved partial
    sums over k (k = 11 leaves a tail of 11 % 6 steps), added up before the one store."""
    tile = RegisterTile(8, 6)
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((1, 11)).astype(np.float32), rng.standard_normal((32, 11)).astype(np.float32)
    xb, wb, out = Buffer("x", (1, 11), "float32"), Buffer("w", (2, 11, 16), "float32"), Buffer("o", (1, 32), "float32")
    t = dense_tiled(Placeholder(xb), Placeholder(wb), "float32", tile, "NK16n")
    assert t is not None
    func = PrimFunc([xb, wb, out], Builder().function_body([(t, out)]))
    accs = [n.buffer.shape for n in _nodes(func.body) if isinstance(n, Allocate)]
    assert accs == [(6, 16)]   # 6 partial sums of the 16 columns, no packing scratch
    fmas = [n for n in _nodes(expand_unrolled(func).body) if isinstance(n, Call) and n.name == "fma"]
    assert len(fmas) == 6 * 2 + (11 % 6) * 2   # 6 interleaved steps, then the tail's 5 (as codegen expands them)
    y = np.full(out.shape, np.nan, np.float32)
    run_primfunc(func, [x, _panels(w, 16), y])
    np.testing.assert_allclose(y, _reference(x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m", [1, 2, 5])
def test_unpacked_matrix_vector_product_streams_weight_rows_without_packing(m: int) -> None:
    """Few rows and W as given: no scratch copy of W; every weight load is a contiguous vector
    along k (k = 21: two full 8-lane vectors per step, then a 5-lane tail)."""
    tile = RegisterTile(8, 6)
    rng = np.random.default_rng(m)
    x, w = rng.standard_normal((m, 21)).astype(np.float32), rng.standard_normal((13, 21)).astype(np.float32)
    xb, wb, out = Buffer("x", x.shape, "float32"), Buffer("w", w.shape, "float32"), Buffer("o", (m, 13), "float32")
    t = dense_tiled(Placeholder(xb), Placeholder(wb), "float32", tile)
    assert t is not None
    func = PrimFunc([xb, wb, out], Builder().function_body([(t, out)]))
    assert not any(isinstance(n, Allocate) and n.buffer.scope == "global" for n in _nodes(func.body))
    w_loads = [n for n in _nodes(func.body) if isinstance(n, BufferLoad) and n.buffer is wb]
    assert w_loads and all(isinstance(ld.indices[1], Ramp) and ld.indices[1].stride.value == 1 for ld in w_loads)
    assert {ld.indices[1].lanes for ld in w_loads} == {8, 5}
    y = np.full(out.shape, np.nan, np.float32)
    run_primfunc(func, [x, w, y])
    np.testing.assert_allclose(y, _reference(x, w), rtol=1e-5, atol=1e-5)


def _module(m: int, k: int, n: int, body: str = "nn.dense(%x, %w)", extra: str = ""):
    return parse_module(f"""#[version = "0.0.5"]
def @main(%x: Tensor[({m}, {k}), float32], %w: Tensor[({n}, {k}), float32]{extra}) {{ {body} }}""")


@pytest.mark.parametrize("m,k,n", [(2, 3, 5), (13, 7, 50)])
def test_lowered_dense_matches_relay_interpreter(m: int, k: int, n: int) -> None:
    mod = _module(m, k, n, "nn.relu(nn.bias_add(nn.dense(%x, %w), %b))", f", %b: Tensor[({n}), float32]")
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((m, k), (n, k), (n,))]
    want = flatten_value(run_function(mod, args))[0]
    low = lower_module(mod)
    kernels = [f for f in low.functions.values() if isinstance(f, PrimFunc)]
    assert any(isinstance(n, Call) and n.name == "fma" for f in kernels for n in _nodes(f.body))
    got = flatten_value(run_function(low, args))[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (6, 16, 16), (13, 7, 50), (33, 65, 97), (64, 128, 64), (49, 40, 48)])
def test_native_tiled_dense(m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(m + k + n)
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    native = irtool.build(_module(m, k, n))
    np.testing.assert_allclose(native(x=x, w=w), _reference(x, w), rtol=1e-4, atol=1e-4)


def test_native_tiled_dense_with_epilogue() -> None:
    m, k, n = 19, 24, 40
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    native = irtool.build(_module(m, k, n, "nn.relu(nn.bias_add(nn.dense(%x, %w), %b))",
                                  f", %b: Tensor[({n}), float32]"))
    np.testing.assert_allclose(native(x=x, w=w, b=b), np.maximum(_reference(x, w) + b, 0), rtol=1e-4, atol=1e-4)


def test_host_tile_fits_the_register_file() -> None:
    tile = register_tile()
    accumulators = tile.rows * tile.vectors
    # operands need vectors + 1 registers besides the accumulators: 16 (AVX2) or 32 (AVX-512)
    assert accumulators + tile.vectors + 1 <= (32 if tile.lanes == 16 else 16)


def _conv_reference(x: np.ndarray, w: np.ndarray, stride_h: int, pad: int, stride_w: int = 1) -> np.ndarray:
    """Direct NCHW convolution in float64 (independent of both interpreters)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, _, kh, kw = w.shape
    oh, ow = (xp.shape[2] - kh) // stride_h + 1, (xp.shape[3] - kw) // stride_w + 1
    out = np.zeros((x.shape[0], o, oh, ow))
    for ry in range(kh):
        for rx in range(kw):
            patch = xp[:, :, ry:ry + stride_h * (oh - 1) + 1:stride_h, rx:rx + stride_w * (ow - 1) + 1:stride_w]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, ry, rx].astype(np.float64))
    return out


def _interpret_conv(x: np.ndarray, w: np.ndarray, stride_h: int, tile: RegisterTile, stride_w: int = 1) -> np.ndarray:
    xb, wb = Buffer("x", x.shape, "float32"), Buffer("w", w.shape, "float32")
    oh, ow = (x.shape[2] - w.shape[2]) // stride_h + 1, (x.shape[3] - w.shape[3]) // stride_w + 1
    out = Buffer("out", (x.shape[0], w.shape[0], oh, ow), "float32")
    t = conv2d_nchw_tiled(Placeholder(xb), Placeholder(wb), "float32", out.shape, (stride_h, stride_w), (1, 1), tile)
    assert t is not None
    y = np.full(out.shape, np.nan, np.float32)
    run_primfunc(PrimFunc([xb, wb, out], Builder().function_body([(t, out)])), [x, w, y])
    return y


@settings(deadline=None)
@given(n=st.integers(1, 2), c=st.integers(1, 3), h=st.integers(3, 6), wd=st.integers(3, 40), o=st.integers(1, 10),
       k=st.sampled_from([1, 3]), stride_h=st.integers(1, 2), stride_w=st.integers(1, 2), tile=st.sampled_from(TILES))
def test_tiled_conv2d_any_shape(n: int, c: int, h: int, wd: int, o: int, k: int, stride_h: int, stride_w: int,
                                tile: RegisterTile) -> None:
    """Column stride 2 (a stem's) reads two vectors and keeps the even lanes; widths past a
    whole tile end with vectors overlapping it."""
    rng = np.random.default_rng(n * 7 + c * 11 + wd * 13 + o)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((o, c, k, k)).astype(np.float32)
    np.testing.assert_allclose(_interpret_conv(x, w, stride_h, tile, stride_w),
                               _conv_reference(x, w, stride_h, 0, stride_w), rtol=1e-5, atol=1e-5)


def test_conv2d_falls_back_for_column_strides_past_2() -> None:
    xb, wb = Buffer("x", (1, 2, 7, 7), "float32"), Buffer("w", (3, 2, 3, 3), "float32")
    assert conv2d_nchw_tiled(Placeholder(xb), Placeholder(wb), "float32", (1, 3, 2, 2), (3, 3), (1, 1)) is None


@pytest.mark.parametrize("shape,stride_h,pad", [((1, 3, 7, 9), 1, 1), ((2, 4, 9, 37), 2, 0), ((1, 16, 8, 19), 1, 1)])
def test_native_tiled_conv2d(shape: tuple[int, int, int, int], stride_h: int, pad: int) -> None:
    rng = np.random.default_rng(sum(shape))
    o = 13
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((o, shape[1], 3, 3)).astype(np.float32)
    mod = parse_module(f"""#[version = "0.0.5"]
def @main(%x: Tensor[({', '.join(map(str, shape))}), float32], %w: Tensor[({o}, {shape[1]}, 3, 3), float32]) {{
  nn.conv2d(%x, %w, strides=[{stride_h}, 1], padding=[{pad}, {pad}, {pad}, {pad}])
}}""")
    kernels = [f for f in lower_module(mod).functions.values() if isinstance(f, PrimFunc)]
    assert any(isinstance(n, Call) and n.name == "fma" for f in kernels for n in _nodes(f.body))
    native = irtool.build(mod)
    np.testing.assert_allclose(native(x=x, w=w), _conv_reference(x, w, stride_h, pad), rtol=1e-4, atol=1e-4)
