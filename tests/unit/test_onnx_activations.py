"""The activation converters (HardSigmoid, HardSwish, Gelu, Swish, Mish, Celu, ThresholdedRelu,
Shrink, Softplus) against onnxruntime, their numerics at the edges, and their fusion into the
producing convolution."""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402
from test_onnx_math import agree  # noqa: E402
from test_onnx_ops import build  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.eval.interpreter import run_function  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.ir.tir import PrimFunc  # noqa: E402
from irtool.passes import run  # noqa: E402
from irtool.syntax.printer import print_program  # noqa: E402

N = helper.make_node
RNG = np.random.default_rng(5)


def spread(*shape: int) -> np.ndarray:
    """Values around the activations' knees (±3 for the hard ones, 0 for the smooth ones)."""
    return (RNG.standard_normal(shape) * 3).astype(np.float32)


@pytest.mark.parametrize("op,attrs,opset", [
    ("HardSigmoid", {}, 6),
    ("HardSigmoid", {"alpha": 0.5, "beta": 0.25}, 6),
    ("HardSwish", {}, 14),
    ("Gelu", {}, 20),
    ("Gelu", {"approximate": "tanh"}, 20),
    ("Swish", {}, 24),
    ("Swish", {"alpha": 1.702}, 24),
    ("Mish", {}, 18),
    ("Celu", {}, 12),
    ("Celu", {"alpha": 0.5}, 12),
    ("ThresholdedRelu", {}, 10),
    ("ThresholdedRelu", {"alpha": -0.5}, 10),
    ("Shrink", {}, 9),
    ("Shrink", {"lambd": 1.5, "bias": 0.5}, 9),
    ("Softplus", {}, 13),
])
def test_activation_matches_onnxruntime(op: str, attrs: dict, opset: int) -> None:
    agree([N(op, ["x"], ["y"], **attrs)], {"x": spread(3, 17)}, opset, native=not attrs, rtol=2e-6)


@pytest.mark.parametrize("op,opset", [("Gelu", 20), ("Mish", 18), ("HardSwish", 14)])
def test_float16_activation_is_computed_in_float32(op: str, opset: int) -> None:
    x = spread(4, 9).astype(np.float16)
    out = agree([N(op, ["x"], ["y"])], {"x": x}, opset, rtol=1e-3, atol=1e-3)
    assert out[0].dtype == np.float16


def test_hard_sigmoid_saturates_exactly() -> None:
    out = agree([N("HardSigmoid", ["x"], ["y"])], {"x": np.array([-10.0, -2.5, 0.0, 2.5, 10.0], np.float32)}, 6)
    assert out[0].tolist() == [0.0, 0.0, 0.5, 1.0, 1.0]


@pytest.mark.parametrize("dtype", ["int8", "int32"])
def test_shrink_of_integers(dtype: str) -> None:
    x = np.array([-5, -2, -1, 0, 1, 2, 5], dtype)
    out = agree([N("Shrink", ["x"], ["y"], lambd=1.5, bias=1.0)], {"x": x}, 9)
    assert out[0].tolist() == [-4, -1, 0, 0, 0, 1, 4]


def test_softplus_and_mish_keep_their_digits_far_from_zero() -> None:
    """exp(100) overflows float32 and 1 + exp(-20) rounds to 1: the direct formulas give inf and 0."""
    x = np.array([100.0, 88.0, 20.0, -20.0, -80.0], np.float32)
    result = import_model(build([N("Softplus", ["x"], ["s"]), N("Mish", ["x"], ["m"])], {"x": x}, None,
                                ("s", "m"), 18))
    softplus, mish = run_function(result.module, [x])
    exact = [math.log1p(math.exp(float(v))) for v in x]
    np.testing.assert_allclose(softplus, exact, rtol=1e-6)
    np.testing.assert_allclose(mish, [float(v) * math.tanh(s) for v, s in zip(x, exact)], rtol=1e-6)


def test_gelu_and_mish_keep_their_digits_in_both_tails() -> None:
    """Against the definitions in float64 (math.erfc, math.tanh): a few float32 ulp even at
    x = -8, where x·(1 + erf(x/√2))/2 in float32 has no correct digit left."""
    x = np.linspace(-8, 8, 161).astype(np.float32)
    result = import_model(build([N("Gelu", ["x"], ["g"]), N("Gelu", ["x"], ["t"], approximate="tanh"),
                                 N("Mish", ["x"], ["m"])], {"x": x}, None, ("g", "t", "m"), 20))
    gelu, gelu_tanh, mish = run_function(result.module, [x])
    v = [float(e) for e in x]
    c = math.sqrt(2 / math.pi)
    # Far in the tails exp's argument (about -32, -45) is itself rounded to float32: rtol 5e-6.
    np.testing.assert_allclose(gelu, [e / 2 * math.erfc(-e / math.sqrt(2)) for e in v], rtol=5e-6, atol=1e-30)
    # (1 + tanh z)/2 = 1/(1 + exp(-2z)): the float64 oracle must not cancel either.
    np.testing.assert_allclose(gelu_tanh, [e / (1 + math.exp(-2 * c * (e + 0.044715 * e ** 3))) for e in v],
                               rtol=5e-6, atol=1e-30)
    np.testing.assert_allclose(mish, [e * math.tanh(math.log1p(math.exp(e))) for e in v], rtol=2e-6, atol=1e-30)


def test_bfloat16_graph_input_is_refused_by_name() -> None:
    """bfloat16 has no numpy arithmetic: the importer refuses it at the graph input, never computes
    it in another precision without saying so (docs/onnx.md, element types)."""
    graph = helper.make_graph([N("Celu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.BFLOAT16, [5])],
                              [helper.make_empty_tensor_value_info("y")])
    with pytest.raises(DiagnosticError, match="graph input 'x' has the unsupported element type bfloat16"):
        import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]))


@pytest.mark.parametrize("op,attrs,opset", [("HardSwish", {}, 14), ("Gelu", {"approximate": "tanh"}, 20),
                                            ("Mish", {}, 18)])
def test_activation_fuses_into_the_convolution(op: str, attrs: dict, opset: int) -> None:
    """Conv + activation is one kernel whose epilogue is the activation's arithmetic."""
    w, bias = RNG.standard_normal((32, 16, 3, 3)).astype(np.float32), RNG.standard_normal(32).astype(np.float32)
    model = build([N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N(op, ["c"], ["y"], **attrs)],
                  {"x": spread(1, 16, 14, 14)}, {"w": w, "b": bias}, opset=opset)
    lowered = run(import_model(model, embed_params=True).module, "simplify-inference,alter-layout,fuse-ops,lower")
    kernels = [f for f in lowered.functions.values() if isinstance(f, PrimFunc)]
    assert len(kernels) == 1
    text = print_program(lowered)
    name = next(k for k, f in lowered.functions.items() if isinstance(f, PrimFunc))
    assert name.startswith("fused_nn_conv2d")
    if op == "HardSwish":   # the clip as min/max of whole vectors, in the convolution's stores
        assert "min(max(" in text and "broadcast(0.16666667f" in text
