"""irtool's ONNX backend classes: the `onnx.backend.base` contract for both backends, refusals
before running, inputs bound as constants at run time, and `supports_model` without converting."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.backend.base import Backend  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.frontend import onnx_backend  # noqa: E402
from irtool.frontend.onnx_backend import InterpreterBackend, NativeBackend  # noqa: E402
from irtool.frontend.onnx_zoo import onnxruntime_session  # noqa: E402
from support.onnx_graphs import build  # noqa: E402

N = helper.make_node
RNG = np.random.default_rng(5)
BACKENDS = [InterpreterBackend, NativeBackend]


def conv_relu() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    inputs = {"data:0": RNG.standard_normal((1, 2, 5, 5)).astype(np.float32),
              "gate": RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)}
    nodes = [N("Conv", ["data:0", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["r"]),
             N("Mul", ["r", "gate"], ["out"]), N("Sigmoid", ["gate"], ["side"])]
    weights = {"w": RNG.standard_normal((3, 2, 3, 3)).astype(np.float32), "b": np.ones(3, np.float32)}
    return build(nodes, inputs, weights, outputs=("out", "side")), inputs


@pytest.mark.parametrize("backend", BACKENDS)
def test_prepare_and_run_match_onnxruntime(backend: type[Backend]) -> None:
    model, inputs = conv_relu()
    expected = onnxruntime_session(model).run(None, inputs)
    assert issubclass(backend, Backend)
    rep = backend.prepare(model, "CPU")
    for given in (list(inputs.values()), inputs, {"data_0": inputs["data:0"], "gate": inputs["gate"]}):
        outputs = rep.run(given)
        assert len(outputs) == 2
        np.testing.assert_allclose(outputs[0], expected[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(outputs["side"], expected[1], rtol=1e-6)  # by ONNX output name
    (again,) = backend.run_model(build([N("Relu", ["x"], ["y"])], {"x": np.zeros(2, np.float32)}),
                                 np.array([-1, 2], np.float32))
    assert again.tolist() == [0, 2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_node(backend: type[Backend]) -> None:
    x = np.array([[1.5, -2.5], [0.5, 3.0]], np.float32)
    (y,) = backend.run_node(N("Round", ["x"], ["y"]), [x])
    assert y.tolist() == [[2.0, -2.0], [0.0, 3.0]]
    (s,) = backend.run_node(N("ReduceSum", ["x"], ["s"], axes=[1], keepdims=0), [x], opset_version=11)
    assert s.tolist() == [-1.0, 3.5]


def test_devices() -> None:
    assert InterpreterBackend.supports_device("CPU") and NativeBackend.supports_device("CPU:0")
    assert not NativeBackend.supports_device("CUDA") and not NativeBackend.supports_device("TPU")
    model, _ = conv_relu()
    with pytest.raises(DiagnosticError, match="irtool runs on the CPU, not on CUDA:1"):
        NativeBackend.prepare(model, "CUDA:1")


def test_supports_model_answers_from_the_operator_table(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_conversion(*args: object, **kwargs: object) -> None:
        raise AssertionError("supports_model converted the model")
    monkeypatch.setattr(onnx_backend, "import_model", no_conversion)
    model, _ = conv_relu()
    assert InterpreterBackend.supports_model(model) and NativeBackend.is_compatible(model)
    x = {"x": np.zeros(2, np.float32)}
    assert not InterpreterBackend.supports_model(build([N("Hardmax", ["x"], ["y"]), N("SequenceConstruct", ["y"], ["z"])], x))
    assert not InterpreterBackend.supports_model(build([N("Gelu", ["x"], ["y"])], x, opset=19))
    assert not InterpreterBackend.supports_model(build([N("Relu", ["x"], ["y"])], x, opset=99))
    ml = build([N("Normalizer", ["x"], ["y"], domain="ai.onnx.ml")], x)
    assert not InterpreterBackend.supports_model(ml)
    assert onnx_backend.model_problems(ml) == [
        "node #0: unsupported: ai.onnx.ml.Normalizer (domain ai.onnx.ml is not imported): classical "
        "machine-learning operators (ai.onnx.ml) are out of scope"]


def test_refusals_come_from_prepare() -> None:
    x = {"x": np.zeros((2, 2), np.float32)}
    with pytest.raises(DiagnosticError, match=r"node #0 'lp': unsupported: SequenceConstruct \(opset 13\): sequences"):
        InterpreterBackend.prepare(build([N("SequenceConstruct", ["x"], ["y"], name="lp")], x))
    broken = build([N("Relu", ["q"], ["y"], name="r")], x)
    with pytest.raises(DiagnosticError, match="model.onnx: cannot import the model:\n  node #0 'r' \\(Relu\\) reads 'q'"):
        NativeBackend.prepare(broken)
    rep = InterpreterBackend.prepare(build([N("Relu", ["x"], ["y"])], x))
    with pytest.raises(DiagnosticError, match=r"takes 1 input\(s\) \(x\), 2 given"):
        rep.run([x["x"], x["x"]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_needed_as_constants_are_bound_at_run_time(backend: type[Backend]) -> None:
    """A Reshape's target and a Slice's bounds that arrive as graph inputs: imported for the
    values of each run (and again when they change)."""
    nodes = [N("Reshape", ["x", "shape"], ["r"]), N("Slice", ["r", "starts", "ends"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                                           helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
                                           helper.make_tensor_value_info("starts", TensorProto.INT64, [1]),
                                           helper.make_tensor_value_info("ends", TensorProto.INT64, [1])],
                              [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    rep = backend.prepare(model)
    for shape, start, end in (([3, 4], 1, 3), ([4, 3], 0, 1), ([3, 4], 1, 3)):
        feed = [x, np.array(shape, np.int64), np.array([start], np.int64), np.array([end], np.int64)]
        (y,) = rep.run(feed)
        np.testing.assert_array_equal(y, x.reshape(shape)[start:end])
    assert len(rep._prepared) == 2  # one import per distinct set of bound values
    with pytest.raises(DiagnosticError, match="cannot reshape"):
        rep.run([x, np.array([5, 5], np.int64), np.array([0], np.int64), np.array([1], np.int64)])


def test_native_backend_needs_every_size() -> None:
    graph = helper.make_graph([N("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(DiagnosticError, match=r"symbolic axis 0 'n' \(give its size with --input-shape x=1,4\)"):
        NativeBackend.prepare(model)
    x = np.array([[-1, 2, -3, 4]] * 3, np.float32)
    (y,) = NativeBackend.prepare(model, input_shapes={"x": (3, 4)}).run([x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    (y,) = InterpreterBackend.prepare(model).run([x])  # the interpreter runs the ? axis as given
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_tensor_protos_as_inputs() -> None:
    x = np.array([1.0, -1.0], np.float32)
    rep = InterpreterBackend.prepare(build([N("Neg", ["x"], ["y"])], {"x": x}))
    (y,) = rep.run(numpy_helper.from_array(x))
    assert y.tolist() == [-1.0, 1.0]
