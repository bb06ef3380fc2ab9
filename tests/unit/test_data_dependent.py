"""Operators with data-dependent extents (`argwhere`, `nonzero`, `unique`, `compress`): the
interpreter and native code against numpy (`np.argwhere`, `np.nonzero`, `np.unique` with
`return_index`/`return_inverse`/`return_counts`, `np.compress`) on random data, empty results,
box operands, 10,000 calls without a leak, `irtool-run --backend=native` on Relay text, and
kernels over the results (and the located error where an operator works across the `?`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import irtool
from irtool.core.diagnostics import DiagnosticError
from irtool.eval.interpreter import flatten_value, run_function
from irtool.runtime.native import NativeModule
from irtool.syntax.parser import parse
from support.heap import heap_in_use

HEADER = '#[version = "0.0.5"]\n'
# Every operator and variant on a (3, 4) tensor and a condition of 3 values.
ALL_OPS = HEADER + """def @main(%x: Tensor[(3, 4), {dtype}], %c: Tensor[(3), bool]) {{
  %0 = unique(%x, axis=1);
  %1 = unique(%x, sorted=False);
  %2 = unique(%x, axis=-2, sorted=False);
  (argwhere(%x), nonzero(%x), %0.0, %0.1, %0.2, %0.3, %1.0, %1.1, %1.2, %1.3, %2.0, %2.1, %2.2, %2.3,
   compress(%x, %c, axis=1), compress(%x, %c), compress(%x, %c, axis=0))
}}
"""
# Values with repeats, zeros, and (uint8) values above 127, which only an unsigned order sorts right.
VALUES = {"int32": [-2, 0, 0, 1, 3], "float32": [-2.5, 0.0, 0.0, 1.5, 3.0], "uint8": [0, 0, 1, 200, 255],
          "float16": [-0.5, 0.0, 0.0, 2.0, 65504.0], "bool": [False, True], "int64": [-(2**40), 0, 0, 7]}


def numpy_unique(x: np.ndarray, axis: int | None, ordered: bool) -> list[np.ndarray]:
    """ONNX's Unique from numpy's: sorted, or (not `ordered`) in order of first occurrence."""
    values, index, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                               axis=axis)
    inverse = inverse.reshape(-1)
    if not ordered:
        order = np.argsort(index)
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values = np.take(values, order, axis=0 if axis is None else axis)
        index, counts, inverse = index[order], counts[order], rank[inverse]
    return [values, *(a.astype(np.int64) for a in (index, inverse, counts))]


def expected(x: np.ndarray, c: np.ndarray) -> list[np.ndarray]:
    return [np.argwhere(x).astype(np.int32), np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1),
            *numpy_unique(x, 1, True), *numpy_unique(x, None, False), *numpy_unique(x, 0, False),
            np.compress(c, x, axis=1), np.compress(c, x), np.compress(c, x, axis=0)]


def assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_array_equal(g, w, err_msg=f"output {k}")


def _data(dtype: str) -> st.SearchStrategy[tuple[np.ndarray, np.ndarray]]:
    return st.tuples(hnp.arrays(np.dtype(dtype), (3, 4), elements=st.sampled_from(VALUES[dtype])),
                     hnp.arrays(np.bool_, (3,)))


@pytest.fixture(scope="module", params=sorted(VALUES))
def native_all_ops(request: pytest.FixtureRequest) -> tuple[str, NativeModule]:
    return request.param, irtool.build(parse(ALL_OPS.format(dtype=request.param), "ops.relay"))


@pytest.mark.parametrize("dtype", sorted(VALUES))
@settings(max_examples=40)
@given(data=st.data())
def test_interpreter_matches_numpy(dtype: str, data: st.DataObject) -> None:
    x, c = data.draw(_data(dtype))
    got = flatten_value(run_function(parse(ALL_OPS.format(dtype=dtype), "ops.relay"), [x, c]))
    assert_same(got, expected(x, c))


@settings(max_examples=40)
@given(data=st.data())
def test_native_matches_numpy(native_all_ops: tuple[str, NativeModule], data: st.DataObject) -> None:
    dtype, native = native_all_ops
    x, c = data.draw(_data(dtype))
    assert_same(list(native(x=x, c=c)), expected(x, c))


def test_empty_results(native_all_ops: tuple[str, NativeModule]) -> None:
    """An all-zero tensor and an all-false condition: extent 0 (argwhere (0, 2), nonzero (2, 0))."""
    dtype, native = native_all_ops
    x, c = np.zeros((3, 4), dtype), np.zeros(3, np.bool_)
    got = list(native(x=x, c=c))
    assert got[0].shape == (0, 2) and got[1].shape == (2, 0) and got[-3].shape == (3, 0)
    assert_same(got, expected(x, c))


BOXED = HEADER + """def @main(%x: Tensor[(?, 4), float32], %c: Tensor[(?), bool]) {
  %0 = unique(%x);
  %1 = argwhere(%x);
  (%1, add(%1, 1), %0.0, %0.1, %0.2, %0.3, compress(%x, %c, axis=0), compress(%x, %c, axis=1))
}
"""


@pytest.mark.parametrize("rows", [0, 1, 5])
def test_box_operands(rows: int) -> None:
    """Operands of dynamic shape (boxes): the extents are read from them at run time; argwhere's
    rows are a batch a kernel runs over."""
    native = irtool.build(parse(BOXED, "boxed.relay"))
    rng = np.random.default_rng(rows)
    x = rng.choice(np.array([0.0, 1.0, 2.0], np.float32), (rows, 4))
    c = np.array([True, False, True, True][:min(rows, 4)], np.bool_)
    where = np.argwhere(x).astype(np.int32)
    want = [where, where + 1, *numpy_unique(x, None, True), np.compress(c, x, axis=0),
            np.compress(c, x, axis=1)]
    assert_same(list(native(x=x, c=c)), want)


def test_a_condition_longer_than_its_axis_is_refused_at_run_time() -> None:
    native = irtool.build(parse(BOXED, "boxed.relay"))
    with pytest.raises(DiagnosticError, match="compress"):
        native(x=np.ones((2, 4), np.float32), c=np.ones(3, np.bool_))


def test_10000_calls_release_every_box() -> None:
    """Results, `unique`'s scratch and the copies `_run` hands out are all freed."""
    native = irtool.build(parse(ALL_OPS.format(dtype="float32"), "ops.relay"))
    x = np.resize(np.array(VALUES["float32"], np.float32), (3, 4))
    c = np.array([True, False, True])
    native(x=x, c=c)
    before = heap_in_use()
    for _ in range(10_000):
        out = native(x=x, c=c)
    del out
    # A box is at least 48 bytes: one leaked per call would be 480 KB.
    assert heap_in_use() - before < 64 * 1024


def test_irtool_run_native_on_relay_text(tmp_path: Path) -> None:
    (tmp_path / "ops.relay").write_text(ALL_OPS.format(dtype="float32"))
    x = np.array([[0, 1.5, 0, 3], [1.5, 0, 0, 3], [-2.5, 1.5, 0, 0]], np.float32)
    c = np.array([False, True, True])
    np.savez(tmp_path / "in.npz", x=x, c=c)
    done = subprocess.run([sys.executable, "-m", "irtool.tools.run", "ops.relay", "--inputs", "in.npz",
                           "--backend=native", "-o", "out.npz"], cwd=tmp_path, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "output0: Tensor[(6, 2), int32]" in done.stdout   # six non-zero elements
    out = np.load(tmp_path / "out.npz")
    assert_same([out[f"output{k}"] for k in range(len(out.files))], expected(x, c))


def test_kernels_take_nonzero_rows_and_refuse_an_operator_across_its_extent() -> None:
    """nonzero's `?` is its second axis: an element-wise kernel runs over it row by row, while a
    softmax along it is the located error naming the operator and the axis."""
    body = "def @main(%x: Tensor[(2, 3), float32]) {\n  %0 = nonzero(%x);\n  add(%0, 1i64)\n}\n"
    native = irtool.build(parse(HEADER + body, "rows.relay"))
    for x in (np.array([[0, 1, 2], [3, 0, 0]], np.float32), np.zeros((2, 3), np.float32)):
        np.testing.assert_array_equal(native(x=x), np.array(np.nonzero(x), np.int64).reshape(2, -1) + 1)
    bad = body.replace("add(%0, 1i64)", 'nn.softmax(cast(%0, dtype="float32"), axis=1)')
    with pytest.raises(DiagnosticError, match=r"no shape function for `nn.softmax` with a `\?` on axis 1 of "
                                              r"Tensor\[\(2, \?\), float32\]") as info:
        irtool.build(parse(HEADER + bad, "bad.relay"))
    assert info.value.span is not None and info.value.span.line == 4


def test_unique_puts_nan_last_once() -> None:
    """NaN compares after every number and equal to NaN, as numpy's `unique` orders it."""
    text = HEADER + "def @main(%x: Tensor[(7), float32]) {\n  %0 = unique(%x);\n  (%0.0, %0.1, %0.2, %0.3)\n}\n"
    x = np.array([2.0, np.nan, -1.0, np.nan, 2.0, np.inf, -0.0], np.float32)
    want = numpy_unique(x, None, True)
    assert np.isnan(want[0][-1]) and np.isnan(want[0]).sum() == 1
    assert_same(flatten_value(run_function(parse(text, "nan.relay"), [x])), want)
    assert_same(list(irtool.build(parse(text, "nan.relay"))(x=x)), want)
