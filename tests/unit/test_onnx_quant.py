"""int8 quantization: the `qnn.quantize` / `qnn.dequantize` operators (irtool/ops/definitions/
quantize.py) and the ONNX converters of irtool/frontend/onnx_ops/quantize.py, against hand-worked
values, the ONNX node cases' expected outputs, onnx's reference evaluator and onnxruntime
(including models that onnxruntime's own quantizer wrote)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

import irtool  # noqa: E402
from irtool.analysis.typecheck import infer_types  # noqa: E402
from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.eval.interpreter import run_function  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.syntax.parser import parse_module  # noqa: E402
from support.onnx_cases import (assert_outputs, check_node_case, node_case_failures, node_cases, reference_outputs,  # noqa: E402
                                onnxruntime_outputs, run_irtool)

RNG = np.random.default_rng(41)
OPS = ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger",
       "DynamicQuantizeLinear")


def _relay(text: str, params: str):
    return parse_module(f'#[version = "0.0.5"]\ndef @main({params}) {{ {text} }}')


def _both(mod, *args: np.ndarray) -> list[np.ndarray]:
    return [run_function(mod, list(args)), irtool.build(mod)(*args)]


# ------------------------------------------------------------------------------ the operators

TIES = np.array([-1e9, -129.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 126.5, 127.5, np.nan, 1e9], np.float32)


@pytest.mark.parametrize("dtype,zero,want", [
    # half to even at every tie, saturation at both ends, NaN like 0
    ("int8", 0, [-128, -128, -2, -2, 0, 0, 2, 2, 126, 127, 0, 127]),
    ("uint8", 128, [0, 0, 126, 126, 128, 128, 130, 130, 254, 255, 128, 255]),
    ("int16", -3, [-32768, -133, -5, -5, -3, -3, -1, -1, 123, 125, -3, 32767]),
])
def test_quantize_rounds_half_to_even_and_saturates(dtype: str, zero: int, want: list[int]) -> None:
    mod = _relay(f'qnn.quantize(%x, 0.5f, %z, out_dtype="{dtype}")', f"%x: Tensor[({TIES.size}), float32], %z: {dtype}")
    for got in _both(mod, TIES * 0.5, np.array(zero, dtype)):
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, np.array(want, dtype))


def test_dequantize_per_channel_in_float32() -> None:
    q = RNG.integers(-128, 128, (2, 3, 4)).astype(np.int8)
    scale, zero = np.array([0.5, 0.25, 3.0], np.float32), np.array([-1, 0, 7], np.int8)
    want = (q.astype(np.float64) - zero[:, None]) * scale[:, None]       # exact in float32 for these values
    mod = _relay("qnn.dequantize(%q, %s, %z, axis=1)",
                 "%q: Tensor[(2, 3, 4), int8], %s: Tensor[(3), float32], %z: Tensor[(3), int8]")
    for got in _both(mod, q, scale, zero):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want.astype(np.float32))


def test_quantize_blocked_scales_broadcast_with_the_data() -> None:
    x = RNG.standard_normal((2, 4)).astype(np.float32) * 10
    scale = np.array([[0.5], [2.0]], np.float32)          # one scale per row, same rank as x
    mod = _relay('qnn.quantize(%x, %s, %z, out_dtype="uint8")',
                 "%x: Tensor[(2, 4), float32], %s: Tensor[(2, 1), float32], %z: uint8")
    want = np.clip(np.rint(x / scale) + 3, 0, 255).astype(np.uint8)
    for got in _both(mod, x, scale, np.array(3, np.uint8)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("text,params,message", [
    ("qnn.quantize(%x, 1f, 0f)", "%x: Tensor[(4), float32]", "zero_point expects an integer tensor"),
    ("qnn.quantize(%x, %s, 0i8, axis=1)", "%x: Tensor[(2, 3), float32], %s: Tensor[(2), float32]",
     "a scale of 2 values for axis 1"),
    ("qnn.quantize(%x, %s, 0i8)", "%x: Tensor[(2, 3), float32], %s: Tensor[(1, 1, 3), float32]",
     "neither is one value per channel nor broadcasts"),
    ('qnn.quantize(%x, 1f, 0i8, out_dtype="int32")', "%x: Tensor[(4), float32]", "must be one of"),
    ("qnn.dequantize(%q, 1f, %z)", "%q: Tensor[(4), int8], %z: uint8", "another dtype than the data"),
    ("qnn.dequantize(%q, 1f, 0f)", "%q: Tensor[(4), float32]", "expects an integer tensor"),
])
def test_type_relation_refuses_inconsistent_parameters(text: str, params: str, message: str) -> None:
    with pytest.raises(DiagnosticError, match=message) as info:
        infer_types(_relay(text, params))
    assert info.value.span is not None


# ------------------------------------------------------------------------------- node cases

def _cases() -> dict:
    return node_cases("quantizelinear", "dequantizelinear", "qlinearconv", "qlinearmatmul", "matmulinteger",
                      "convinteger", "dynamicquantizelinear")


def _names() -> list[str]:
    return sorted(n for n, c in _cases().items() if any(node.op_type in OPS for node in c.model.graph.node))


def _refused(name: str) -> bool:
    """Cases of codes irtool does not have (float8, int4, int2, float4)."""
    return any(kind in name for kind in ("e4m3", "e5m2", "int4", "int2", "float4"))


def test_every_integer_code_node_case_through_the_interpreter() -> None:
    names = [n for n in _names() if not _refused(n)]
    assert len(names) == 29
    failures = node_case_failures(_cases(), names)
    assert not failures, "\n".join(failures)


def test_other_codes_are_refused_at_import() -> None:
    names = [n for n in _names() if _refused(n)]
    assert len(names) == 16
    for name in names:
        with pytest.raises(DiagnosticError, match=r"unsupported|codes \(irtool"):
            import_model(_cases()[name].model)


@pytest.mark.parametrize("name", ["test_quantizelinear_axis", "test_dequantizelinear_blocked",
                                  "test_qlinearmatmul_3D_int8_float16", "test_qlinearconv",
                                  "test_convinteger_with_padding", "test_dynamicquantizelinear_min_adjusted"])
def test_node_case_natively(name: str) -> None:
    check_node_case(_cases()[name], native=True)


# ----------------------------------------------------------------- converters vs onnxruntime

def _model(nodes: list, inputs: dict[str, np.ndarray], inits: dict[str, object] | None = None, opset: int = 13,
           outputs: tuple[str, ...] = ("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _check(model: onnx.ModelProto, inputs: dict[str, np.ndarray], want: list[np.ndarray] | None = None,
           native: bool = True) -> None:
    args = list(inputs.values())
    want = onnxruntime_outputs(model, args) if want is None else want
    for backend in (False, True) if native else (False,):
        assert_outputs(run_irtool(model, args, backend), want, 1e-6, 1e-6)


def test_quantize_and_dequantize_per_axis_like_onnxruntime() -> None:
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32) * 4
    inits = {"s": np.array([0.02, 0.5, 0.1], np.float32), "z": np.array([-5, 0, 100], np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
    _check(_model(nodes, {"x": x}, inits, outputs=("q", "y")), {"x": x})


def test_dequantize_int32_bias_like_onnxruntime() -> None:
    q = RNG.integers(-100000, 100000, (6,)).astype(np.int32)
    _check(_model([helper.make_node("DequantizeLinear", ["q", "s"], ["y"])], {"q": q}, {"s": np.float32(0.003)}),
           {"q": q})


def test_qlinear_matmul_with_int8_weights_and_per_column_scales() -> None:
    a = RNG.integers(0, 256, (9, 40)).astype(np.uint8)
    inits = {"as": np.float32(0.05), "az": np.uint8(100), "b": RNG.integers(-128, 128, (40, 20)).astype(np.int8),
             "bs": (RNG.random(20) * 0.01).astype(np.float32), "bz": np.zeros(20, np.int8),
             "ys": np.float32(0.3), "yz": np.uint8(7)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    model = _model([node], {"a": a}, inits, opset=10)
    _check(model, {"a": a}, reference_outputs(model, {"a": a}))


def test_matmul_integer_zero_points_per_row_and_per_column() -> None:
    """Per-row zero points of A are beyond onnxruntime (scalars only): onnx's reference
    evaluator is the oracle."""
    from onnx.reference import ReferenceEvaluator
    a, b = RNG.integers(0, 256, (5, 7)).astype(np.uint8), RNG.integers(-128, 128, (2, 7, 4)).astype(np.int8)
    inits = {"az": RNG.integers(0, 256, (5, 1)).astype(np.uint8), "bz": RNG.integers(-5, 5, (4,)).astype(np.int8)}
    model = _model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], {"a": a, "b": b}, inits,
                   opset=10)
    want = ReferenceEvaluator(model).run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(want[0], np.matmul(a.astype(np.int64) - inits["az"],
                                                     b.astype(np.int64) - inits["bz"]))
    _check(model, {"a": a, "b": b}, want)


@pytest.mark.parametrize("attrs", [dict(pads=[1, 1, 1, 1]), dict(strides=[2, 2], group=2, pads=[0, 1, 2, 1])])
def test_qlinear_conv_per_channel_with_bias_exactly(attrs: dict) -> None:
    groups = attrs.get("group", 1)
    x = RNG.integers(0, 256, (1, 4, 9, 9)).astype(np.uint8)
    inits = {"xs": np.float32(0.02), "xz": np.uint8(120), "w": RNG.integers(-127, 128, (32, 4 // groups, 3, 3)).astype(np.int8),
             "ws": (RNG.random(32) * 0.02).astype(np.float32), "wz": np.zeros(32, np.int8), "ys": np.float32(0.4),
             "yz": np.uint8(90), "b": RNG.integers(-500, 500, (32,)).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], **attrs)
    model = _model([node], {"x": x}, inits)
    _check(model, {"x": x}, reference_outputs(model, {"x": x}))


def test_conv_integer_with_weight_zero_points() -> None:
    x = RNG.integers(0, 256, (1, 2, 6, 6)).astype(np.uint8)
    inits = {"w": RNG.integers(0, 256, (3, 2, 2, 2)).astype(np.uint8), "xz": np.uint8(9),
             "wz": np.array([1, 200, 7], np.uint8)}
    model = _model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 0, 1, 0])], {"x": x}, inits,
                   opset=10)
    from onnx.reference import ReferenceEvaluator
    _check(model, {"x": x}, ReferenceEvaluator(model).run(None, {"x": x}))


@pytest.mark.parametrize("attrs,inits,opset,message", [
    ({"axis": 1}, {"s": np.ones(2, np.float32), "z": np.zeros(2, np.uint8)}, 13, r"a scale of shape \(2,\) for axis 1"),
    ({"precision": 6}, {"s": np.ones(3, np.float32), "z": np.zeros(3, np.uint8)}, 23, "precision int32"),
    ({"output_dtype": 99}, {"s": np.ones(3, np.float32)}, 21, "output_dtype: element type 99"),
])
def test_unsupported_forms_are_located_errors(attrs: dict, inits: dict, opset: int, message: str) -> None:
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    model = _model([helper.make_node("QuantizeLinear", ["x", *inits], ["y"], **attrs)], {"x": x}, inits, opset=opset)
    with pytest.raises(DiagnosticError, match=rf"node #0: unsupported: QuantizeLinear \(opset {opset}\): " + message):
        import_model(model)


# --------------------------------------------------- models written by onnxruntime's quantizer

def _float_model(gemm: bool) -> onnx.ModelProto:
    """Conv → Relu → MaxPool → Flatten → Gemm (or MatMul + Add, whose QOperator form is in the
    standard domain: onnxruntime's QGemm is a com.microsoft operator)."""
    inits = {"w1": (RNG.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
             "b1": (RNG.standard_normal(8) * 0.1).astype(np.float32),
             "w2": (RNG.standard_normal((8 * 6 * 6, 10)) * 0.05).astype(np.float32),
             "b2": (RNG.standard_normal(10) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"])]
    if gemm:
        nodes.append(helper.make_node("Gemm", ["f", "w2", "b2"], ["y"]))
    else:
        nodes += [helper.make_node("MatMul", ["f", "w2"], ["m"]), helper.make_node("Add", ["m", "b2"], ["y"])]
    return _model(nodes, {"x": np.zeros((1, 3, 12, 12), np.float32)}, inits)


def _quantized(tmp_path, gemm: bool, **options: object) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, quantize_dynamic, quantize_static

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.batches = iter([{"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)} for _ in range(8)])

        def get_next(self) -> dict | None:
            return next(self.batches, None)
    source, target = tmp_path / "float.onnx", tmp_path / "int8.onnx"
    onnx.save(_float_model(gemm), source)
    if options.pop("dynamic", False):
        quantize_dynamic(source, target, **options)
    else:
        quantize_static(source, target, Calibration(), **options)
    return onnx.load(target)


@pytest.mark.parametrize("form", ["qdq", "qdq-per-channel-int8", "qoperator", "dynamic"])
def test_onnxruntime_quantized_model_matches_the_reference(tmp_path, form: str) -> None:
    """onnxruntime's quantizer's models, within one quantization step of the ONNX reference
    evaluator (`reference_outputs`: onnxruntime's own int8 result saturates on hosts without VNNI)."""
    from onnxruntime.quantization import QuantFormat, QuantType
    options: dict[str, object] = {
        "qdq": dict(quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8),
        "qdq-per-channel-int8": dict(quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8, per_channel=True),
        "qoperator": dict(quant_format=QuantFormat.QOperator, activation_type=QuantType.QUInt8, per_channel=True,
                          op_types_to_quantize=["Conv", "MatMul", "Relu", "MaxPool"]),
        "dynamic": dict(dynamic=True),
    }[form]
    model = _quantized(tmp_path, form != "qoperator", **options)
    ops = {n.op_type for n in model.graph.node}
    assert {"qdq": {"QuantizeLinear", "DequantizeLinear"}, "qdq-per-channel-int8": {"QuantizeLinear"},
            "qoperator": {"QLinearConv", "QLinearMatMul"},
            "dynamic": {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"}}[form] <= ops
    step = max(float(numpy_helper.to_array(t).max()) for t in model.graph.initializer
               if t.data_type == onnx.TensorProto.FLOAT and t.name.endswith("scale") and not t.dims) \
        if form != "dynamic" else 1e-3
    x = np.random.default_rng(1).standard_normal((1, 3, 12, 12)).astype(np.float32)
    want = reference_outputs(model, {"x": x})[0]
    for native in (False, True):
        got = run_irtool(model, [x], native)[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.max(np.abs(got - want)) <= step


def test_onnxruntime_qgemm_is_refused_by_name(tmp_path) -> None:
    from onnxruntime.quantization import QuantFormat
    model = _quantized(tmp_path, True, quant_format=QuantFormat.QOperator)
    with pytest.raises(DiagnosticError, match=r"com\.microsoft\.QGemm"):
        import_model(model)
