"""The register-tiled matrix products of irtool/lower/schedules/matmul.py, and the integer
convolutions of the channel-vector conv tile, against numpy.

`nn.batch_matmul` (float32, every transpose form, a batch of one broadcasting) and the integer
products (int8 / uint8 operands, int32 accumulation) are built with explicit tiles and run in
the TIR interpreter on shapes that hit every tile edge; numpy's matmul (or a direct convolution)
in int64 / float64 is the reference. The lowered kernels are then compiled natively, and the
generated loop's vector width is read from the assembly for a pinned target.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irtool
from irtool.eval.tir_interp import run_primfunc
from irtool.ir.tir import Allocate, Buffer, Call, PrimFunc, children
from irtool.lower.module import lower_module
from irtool.lower.schedules import RegisterTile, register_tile
from irtool.lower.schedules.conv_channels import conv2d_channels_tiled
from irtool.lower.schedules.matmul import matmul_tiled
from irtool.lower.te import Builder, Placeholder
from irtool.syntax.parser import parse_module

TILES = [RegisterTile(16, 8), RegisterTile(8, 6), RegisterTile(4, 3, vectors=1)]
RNG = np.random.default_rng(11)


def _operand(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "float32":
        return RNG.standard_normal(shape).astype(np.float32)
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _reference(a: np.ndarray, b: np.ndarray, ta: bool, tb: bool) -> np.ndarray:
    wide = np.float64 if a.dtype == np.float32 else np.int64
    a, b = a.astype(wide), b.astype(wide)
    return np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b)


def _interpret(a: np.ndarray, b: np.ndarray, dtype: str, out_shape: tuple[int, ...], ta: bool, tb: bool,
               tile: RegisterTile) -> np.ndarray:
    ab, bb = Buffer("a", a.shape, str(a.dtype)), Buffer("b", b.shape, str(b.dtype))
    out = Buffer("out", out_shape, dtype)
    t = matmul_tiled(Placeholder(ab), Placeholder(bb), dtype, out_shape, ta, tb, tile)
    assert t is not None
    func = PrimFunc([ab, bb, out], Builder().function_body([(t, out)]))
    y = np.full(out_shape, np.nan if dtype == "float32" else -7, dtype)   # every element must be written
    run_primfunc(func, [a, b, y])
    return y


def _check(y: np.ndarray, want: np.ndarray) -> None:
    if y.dtype == np.float32:
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    else:   # int32 accumulation: exact (these products do not overflow)
        np.testing.assert_array_equal(y, want)


@settings(deadline=None, max_examples=40)
@given(ga=st.sampled_from([1, 2]), gb=st.sampled_from([1, 2]), m=st.integers(1, 18), k=st.integers(1, 7),
       n=st.integers(1, 35), ta=st.booleans(), tb=st.booleans(), tile=st.sampled_from(TILES),
       dtypes=st.sampled_from([("float32", "float32"), ("int8", "int8"), ("uint8", "int8")]))
def test_tiled_batch_matmul_any_shape(ga: int, gb: int, m: int, k: int, n: int, ta: bool, tb: bool,
                                      tile: RegisterTile, dtypes: tuple[str, str]) -> None:
    a = _operand((ga, k, m) if ta else (ga, m, k), dtypes[0])
    b = _operand((gb, n, k) if tb else (gb, k, n), dtypes[1])
    dtype = "float32" if dtypes[0] == "float32" else "int32"
    _check(_interpret(a, b, dtype, (max(ga, gb), m, n), ta, tb, tile), _reference(a, b, ta, tb))


@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"{t.rows}x{t.lanes}x{t.vectors}")
@pytest.mark.parametrize("m,k,n", [(1, 16, 17), (9, 3, 33), (17, 4, 47)])
def test_tiled_integer_dense(tile: RegisterTile, m: int, k: int, n: int) -> None:
    a, w = _operand((m, k), "uint8"), _operand((n, k), "int8")
    _check(_interpret(a, w, "int32", (m, n), False, True, tile), _reference(a, w, False, True))


@pytest.mark.parametrize("m,packed", [(8, False), (16, True)])
def test_integer_tile_multiplies_and_adds_int32_vectors(m: int, packed: bool) -> None:
    """One row tile reads B's int8 rows and widens them on load; more rows pack a widened
    panel per column tile first (each panel is then read by every row tile)."""
    ab, bb, out = Buffer("a", (m, 8), "int8"), Buffer("b", (8, 64), "int8"), Buffer("o", (m, 64), "int32")
    t = matmul_tiled(Placeholder(ab), Placeholder(bb), "int32", (m, 64), False, False, RegisterTile(16, 8))
    assert t is not None
    func = PrimFunc([ab, bb, out], Builder().function_body([(t, out)]))
    nodes, stack = [], [func.body]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(children(node))  # type: ignore[arg-type]
    assert not any(isinstance(n, Call) and n.name == "fma" for n in nodes)
    dtypes = {getattr(n, "dtype", None) for n in nodes}
    assert "int32x16" in dtypes and ("int8x16" in dtypes) != packed
    assert any(b.name == "b_panel" and b.dtype == "int32" for b in _allocated(func)) == packed


def test_outside_the_tile_dtypes_and_shapes_there_is_no_schedule() -> None:
    f64 = Placeholder(Buffer("a", (2, 3, 4), "float64"))
    assert matmul_tiled(f64, f64, "float64", (2, 3, 3), False, True) is None
    i8 = Placeholder(Buffer("a", (3, 4), "int8"))
    assert matmul_tiled(i8, i8, "int8", (3, 3), False, True) is None        # no int32 accumulator
    empty = Placeholder(Buffer("e", (3, 0), "float32"))
    assert matmul_tiled(empty, empty, "float32", (3, 3), False, True) is None


def _module(text: str, params: dict[str, tuple[tuple[int, ...], str]]):
    sig = ", ".join(f"%{name}: Tensor[({', '.join(map(str, s))}), {d}]" for name, (s, d) in params.items())
    return parse_module(f'#[version = "0.0.5"]\ndef @main({sig}) {{ {text} }}')


@pytest.mark.parametrize("text,params", [
    # attention's Q·Kᵀ: a batch of heads, B transposed (packed per product)
    ("nn.batch_matmul(%a, %b, transpose_b=True)", {"a": ((6, 7, 16), "float32"), "b": ((6, 9, 16), "float32")}),
    # P·V with a shared right operand and a fused epilogue
    ("nn.relu(nn.batch_matmul(%a, %b))", {"a": ((3, 1, 40), "float32"), "b": ((1, 40, 37), "float32")}),
    ('nn.batch_matmul(%a, %b, out_dtype="int32", transpose_a=True)', {"a": ((2, 21, 5), "uint8"),
                                                                       "b": ((2, 21, 18), "int8")}),
    ('nn.dense(%a, %b, out_dtype="int32")', {"a": ((20, 33), "int8"), "b": ((50, 33), "int8")}),
])
def test_native_tiled_products_match_numpy(text: str, params: dict) -> None:
    mod = _module(text, params)
    kernels = [f for f in lower_module(mod).functions.values() if isinstance(f, PrimFunc)]
    assert any(b.scope == "local" and b.name == "acc" for f in kernels for b in _allocated(f))
    args = [_operand(s, d) for s, d in params.values()]
    ta, tb = "transpose_a=True" in text, "transpose_b=True" in text or "nn.dense" in text
    want = _reference(*args, ta, tb)
    got = irtool.build(mod)(*args)
    _check(got, np.maximum(want, 0) if "relu" in text else want)


def _allocated(func: PrimFunc) -> list[Buffer]:
    out, stack = [], [func.body]
    while stack:
        node = stack.pop()
        if isinstance(node, Allocate):
            out.append(node.buffer)
        stack.extend(children(node))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("cpu,widest", [("znver3", 256), ("sapphirerapids", 512)])
def test_integer_dense_multiplies_at_the_target_vector_width(tmp_path, cpu: str, widest: int) -> None:
    """The int32 multiplies of the int8 kernel use the target's widest vectors: ymm for AVX2,
    zmm for AVX-512, whatever the host (llc tiles for its `--mcpu`)."""
    from irtool.tools.llc import main
    source = tmp_path / "q.relay"
    source.write_text('#[version = "0.0.5"]\ndef @main(%a: Tensor[(64, 128), int8], %b: Tensor[(96, 128), int8]) '
                      '{ nn.dense(%a, %b, out_dtype="int32") }\n')
    asm = tmp_path / "q.s"
    assert main([str(source), "--emit=asm", "--mtriple=x86_64-unknown-linux-gnu", f"--mcpu={cpu}",
                 "-o", str(asm)]) == 0
    registers = set(re.findall(r"vpmulld\s+[^\n]*%([xyz])mm\d+\s*$", asm.read_text(), re.M))
    assert registers == {{256: "y", 512: "z"}[widest]}


def _conv_reference(x: np.ndarray, w: np.ndarray, stride: int, groups: int) -> np.ndarray:
    """Direct grouped NCHW convolution in int64 (no padding)."""
    o, cg, kh, kw = w.shape
    oh, ow = (x.shape[2] - kh) // stride + 1, (x.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], o, oh, ow), np.int64)
    og = o // groups
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg].astype(np.int64)
        for ry in range(kh):
            for rx in range(kw):
                patch = xs[:, :, ry:ry + stride * (oh - 1) + 1:stride, rx:rx + stride * (ow - 1) + 1:stride]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, ry, rx])
    return out


@settings(deadline=None, max_examples=25)
@given(c=st.integers(1, 4), h=st.integers(3, 7), o=st.sampled_from([1, 5, 16, 19]), k=st.sampled_from([1, 3]),
       stride=st.integers(1, 2), groups=st.sampled_from([1, 2]), tile=st.sampled_from(TILES[:2]),
       dtypes=st.sampled_from([("uint8", "int8"), ("int32", "int32"), ("int8", "uint8")]))
def test_tiled_integer_conv2d_any_shape(c: int, h: int, o: int, k: int, stride: int, groups: int, tile: RegisterTile,
                                        dtypes: tuple[str, str]) -> None:
    if o % groups:
        o *= groups
    x = _operand((1, c * groups, h, h + 2), dtypes[0]) if dtypes[0] != "int32" else \
        RNG.integers(-300, 300, (1, c * groups, h, h + 2)).astype(np.int32)
    w = _operand((o, c, k, k), dtypes[1]) if dtypes[1] != "int32" else RNG.integers(-300, 300, (o, c, k, k)).astype(np.int32)
    want = _conv_reference(x, w, stride, groups)
    xb, wb, out = Buffer("x", x.shape, dtypes[0]), Buffer("w", w.shape, dtypes[1]), Buffer("o", want.shape, "int32")
    t = conv2d_channels_tiled(Placeholder(xb), Placeholder(wb), "OIHW", (k, k), "int32", want.shape, (stride, stride),
                              (1, 1), groups, tile)
    assert t is not None
    y = np.full(want.shape, -7, np.int32)
    run_primfunc(PrimFunc([xb, wb, out], Builder().function_body([(t, out)])), [x, w, y])
    np.testing.assert_array_equal(y, want)


def test_native_integer_conv2d_uses_the_tile() -> None:
    """int8 x int8 widens into the channel tile (uint8 x int8 takes int8.py's byte products)."""
    mod = _module('nn.conv2d(%x, %w, padding=[1, 1, 1, 1], out_dtype="int32")',
                  {"x": ((1, 8, 9, 9), "int8"), "w": ((32, 8, 3, 3), "int8")})
    kernels = [f for f in lower_module(mod).functions.values() if isinstance(f, PrimFunc)]
    assert any(b.name == "w_packed" for f in kernels for b in _allocated(f))
    x, w = _operand((1, 8, 9, 9), "int8"), _operand((32, 8, 3, 3), "int8")
    want = _conv_reference(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), w, 1, 1)
    np.testing.assert_array_equal(irtool.build(mod)(x, w), want)
