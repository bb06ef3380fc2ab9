"""The reductions against onnxruntime: ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum,
ReduceLogSumExp in their axes forms (attribute, input, none, noop), and what every Reduce* gives
over an axis with no elements."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402
from test_onnx_math import agree  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.eval.interpreter import run_function  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from test_onnx_ops import build  # noqa: E402

N = helper.make_node
RNG = np.random.default_rng(3)
NEW = ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")


def positive(*shape: int) -> np.ndarray:
    return (RNG.random(shape) + 0.1).astype(np.float32)   # LogSum needs a positive sum


@pytest.mark.parametrize("op", NEW)
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), ([-1], 1), (None, 0)])
def test_axes_as_attribute(op: str, axes: list[int] | None, keepdims: int) -> None:
    attrs = {"keepdims": keepdims} if axes is None else {"axes": axes, "keepdims": keepdims}
    agree([N(op, ["x"], ["y"], **attrs)], {"x": positive(2, 3, 4)}, 13, native=axes == [0, 2], rtol=2e-6)


@pytest.mark.parametrize("op", NEW)
def test_axes_as_input_and_noop(op: str) -> None:
    """From opset 18 the axes are an input; none with noop_with_empty_axes applies only the
    elementwise part (onnxruntime and the reference agree: ReduceSumSquare gives x²)."""
    x = positive(3, 4, 2)
    agree([N(op, ["x", "axes"], ["y"], keepdims=0)], {"x": x}, 18, inits={"axes": np.array([2, 0], np.int64)},
          native=False)
    agree([N(op, ["x"], ["y"], noop_with_empty_axes=1)], {"x": x}, 18, native=op == "ReduceSumSquare")
    agree([N(op, ["x", "axes"], ["y"], noop_with_empty_axes=1)], {"x": x}, 18,
          inits={"axes": np.zeros(0, np.int64)}, native=False)


def test_log_sum_exp_is_shifted_by_the_maximum() -> None:
    """exp(1000) overflows: the unshifted formula gives inf. A row of -inf gives -inf, one holding
    +inf gives +inf (no inf - inf)."""
    x = np.array([[1000.0, 999.0, 998.0], [-1000.0, -1001.0, -1002.0], [-np.inf, -np.inf, -np.inf],
                  [np.inf, 0.0, 1.0]], np.float32)
    out = agree([N("ReduceLogSumExp", ["x"], ["y"], axes=[1], keepdims=0)], {"x": x}, 13)
    np.testing.assert_allclose(out[0][:2], [1000.4076, -999.5924], rtol=1e-6)
    assert out[0][2] == -np.inf and out[0][3] == np.inf


@pytest.mark.parametrize("op,expected", [("ReduceL1", 0.0), ("ReduceL2", 0.0), ("ReduceSumSquare", 0.0),
                                         ("ReduceLogSum", -np.inf), ("ReduceLogSumExp", -np.inf),
                                         ("ReduceSum", 0.0), ("ReduceProd", 1.0), ("ReduceMax", -np.inf),
                                         ("ReduceMin", np.inf)])
def test_reduction_over_no_elements(op: str, expected: float) -> None:
    x = np.zeros((2, 0, 4), np.float32)
    out = agree([N(op, ["x", "axes"], ["y"], keepdims=1)], {"x": x}, 18, inits={"axes": np.array([1], np.int64)},
                native=op in ("ReduceL2", "ReduceLogSumExp", "ReduceMax"))
    assert out[0].shape == (2, 1, 4) and (out[0] == expected).all()


@pytest.mark.parametrize("op,dtype", [("ReduceMax", "int32"), ("ReduceMin", "uint8"), ("ReduceMax", "bool")])
def test_integer_max_and_min_of_nothing_are_the_dtype_extremes(op: str, dtype: str) -> None:
    """The ONNX reference's rule (onnxruntime has no bool ReduceMax): int32 min, uint8 max, False."""
    x = np.zeros((0, 3), dtype)
    result = import_model(build([N(op, ["x"], ["y"], axes=[0], keepdims=0)], {"x": x}, opset=13))
    got = run_function(result.module, [x])
    want = {"int32": np.iinfo(np.int32).min, "uint8": 255, "bool": False}[dtype]
    assert got.dtype == np.dtype(dtype) and got.tolist() == [want] * 3


def test_empty_axes_input_with_noop_is_the_identity() -> None:
    x = positive(2, 3)
    out = agree([N("ReduceSum", ["x", "axes"], ["y"], noop_with_empty_axes=1)], {"x": x}, 13,
                inits={"axes": np.zeros(0, np.int64)}, native=False)
    np.testing.assert_array_equal(out[0], x)


def test_log_sum_exp_of_integers_is_refused() -> None:
    x = np.zeros((2, 2), np.int32)
    with pytest.raises(DiagnosticError, match=r"node #0: unsupported: ReduceLogSumExp \(opset 13\): ReduceLogSumExp "
                                              r"of int32 \(it is defined for floating-point tensors\)"):
        import_model(build([N("ReduceLogSumExp", ["x"], ["y"])], {"x": x}, opset=13))
