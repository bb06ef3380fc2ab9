"""The vector sum over trailing axes (irtool/lower/schedules/reduce_rows.py) and the short-row
elementwise nests against numpy: through the TIR interpreter for every lane count the host
choice can take, and natively as lowered from Relay `mean` / `sum` and a broadcast `multiply`."""

from __future__ import annotations

import numpy as np
import pytest

import irtool
from irtool.eval.tir_interp import run_primfunc
from irtool.ir.tir import Buffer, For, PrimFunc
from irtool.lower.module import lower_module
from irtool.lower.schedules.reduce_rows import trailing_sum
from irtool.lower.te import Builder, Compute, Placeholder
from irtool.syntax.parser import parse_module
from irtool.tir_transform.mutator import walk_stmts


def _interpret(x: np.ndarray, axes: tuple[int, ...], out_shape: tuple[int, ...], lanes: int) -> np.ndarray:
    xb = Buffer("x", x.shape, "float32")
    out = Buffer("out", out_shape, "float32")
    t = trailing_sum(Placeholder(xb), axes, out_shape, lanes, lambda total: total)
    assert t is not None
    y = np.full(out_shape, np.nan, np.float32)   # every element must be written
    run_primfunc(PrimFunc([xb, out], Builder().function_body([(t, out)])), [x, y])
    return y


@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("shape,axes", [
    ((2, 3, 7, 7), (2, 3)),        # a row shorter than a vector
    ((1, 5, 14, 14), (2, 3)),      # a short last vector
    ((1, 2, 3, 112), (2, 3)),      # rows wider than the partial sums: folded in pieces
    ((3, 70), (1,)),               # one axis, a full vector and a tail
    ((2, 3, 5), (0, 1, 2)),        # everything, into a scalar
])
def test_trailing_sum_matches_numpy(shape: tuple[int, ...], axes: tuple[int, ...], lanes: int) -> None:
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    want = x.astype(np.float64).sum(axis=axes, keepdims=True)
    np.testing.assert_allclose(_interpret(x, axes, want.shape, lanes), want, rtol=1e-5, atol=1e-5)
    dropped = tuple(d for k, d in enumerate(shape) if k not in axes)
    np.testing.assert_allclose(_interpret(x, axes, dropped, lanes), want.reshape(dropped), rtol=1e-5, atol=1e-5)


def test_trailing_sum_only_for_float32_parameters_over_the_last_axes() -> None:
    xb = Buffer("x", (2, 3, 4), "float32")
    assert trailing_sum(Placeholder(xb), (1,), (2, 1, 4), 16, lambda t: t) is None
    assert trailing_sum(Placeholder(Buffer("i", (2, 3), "int32")), (1,), (2, 1), 16, lambda t: t) is None
    computed = Compute((2, 3), "float32", lambda ctx, idx: ctx.load(Placeholder(xb), (*idx, idx[0])), "c")
    assert trailing_sum(computed, (1,), (2, 1), 16, lambda t: t) is None


def _module(body: str, shape: tuple[int, ...], extra: str = ""):
    return parse_module(f"""#[version = "0.0.5"]
def @main(%x: Tensor[({', '.join(map(str, shape))}), float32]{extra}) {{ {body} }}""")


@pytest.mark.parametrize("shape", [(1, 3, 7, 7), (2, 5, 13, 29), (1, 4, 56, 56), (1, 2, 3, 130)])
def test_native_mean_and_sum_over_a_plane(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    mean = irtool.build(_module("mean(%x, axis=[2, 3], keepdims=True)", shape))
    np.testing.assert_allclose(mean(x=x), x.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
    total = irtool.build(_module("sum(%x, axis=[-1])", shape))
    np.testing.assert_allclose(total(x=x), x.sum(axis=-1), rtol=1e-5, atol=1e-5)


def _vectorized_extents(mod) -> list[int]:  # type: ignore[no-untyped-def]
    return [s.end.value for f in lower_module(mod).functions.values() if isinstance(f, PrimFunc)
            for s in walk_stmts(f.body) if isinstance(s, For) and s.kind == "vectorized"]


@pytest.mark.parametrize("width", [7, 28])
def test_broadcast_scale_of_short_rows_is_one_vector_per_row(width: int) -> None:
    """A squeeze-excite scale: the row loop is `vectorized` (LLVM had vectorized the loop
    around it with gathers); the result is numpy's."""
    shape = (1, 5, 3, width)
    mod = _module("multiply(%x, %s)", shape, ", %s: Tensor[(1, 5, 1, 1), float32]")
    assert _vectorized_extents(mod) == [width]
    rng = np.random.default_rng(width)
    x, s = rng.standard_normal(shape).astype(np.float32), rng.standard_normal((1, 5, 1, 1)).astype(np.float32)
    np.testing.assert_array_equal(irtool.build(mod)(x=x, s=s), x * s)


def test_long_rows_stay_serial_loops() -> None:
    assert _vectorized_extents(_module("multiply(%x, %x)", (2, 64))) == []
