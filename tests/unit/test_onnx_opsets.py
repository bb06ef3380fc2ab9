"""Converters across operator versions: each version change the importer handles, checked against
onnxruntime where it runs the opset, else against the operator's definition in numpy."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.eval.interpreter import run_function  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from support.onnx_graphs import build, check  # noqa: E402

N = helper.make_node
RNG = np.random.default_rng(11)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def run(nodes: list, inputs: dict[str, np.ndarray], opset: int, inits: dict[str, np.ndarray] | None = None,
        outputs: tuple[str, ...] = ("y",)) -> object:
    result = import_model(build(nodes, inputs, inits, outputs, opset))
    return run_function(result.module, {**inputs, **result.params})


def test_cast_opset1_names_the_type() -> None:
    x = np.array([1.7, -2.2, 3.5], np.float32)
    np.testing.assert_array_equal(run([N("Cast", ["x"], ["y"], to="INT32")], {"x": x}, opset=1), [1, -2, 3])


@pytest.mark.parametrize("to,name", [(TensorProto.FLOAT8E4M3FN, "float8e4m3fn"), (TensorProto.INT4, "int4"),
                                     (TensorProto.UINT2, "uint2"), (TensorProto.FLOAT4E2M1, "float4e2m1"),
                                     (TensorProto.BFLOAT16, "bfloat16"), (TensorProto.STRING, "string")])
def test_casts_to_narrow_types_are_refused_at_import(to: int, name: str) -> None:
    with pytest.raises(DiagnosticError) as info:
        import_model(build([N("Cast", ["x"], ["y"], to=to, name="c")], {"x": rand(2)}, opset=25))
    assert f"node #0 'c': unsupported: Cast to {name} (opset 25)" in str(info.value)


def test_tensors_of_narrow_types_are_refused_at_import() -> None:
    graph = helper.make_graph([N("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [2])],
                              [helper.make_empty_tensor_value_info("y")])
    with pytest.raises(DiagnosticError, match="graph input 'x' has the unsupported element type float8e4m3fn"):
        import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))
    value = helper.make_tensor("v", TensorProto.INT4, [2], [1, -2])
    with pytest.raises(DiagnosticError, match=r"unsupported: Constant \(opset 21\): attribute 'value' of element type int4"):
        import_model(build([N("Constant", [], ["y"], value=value)], {}, opset=21))


def test_selu_defaults_per_opset() -> None:
    x = np.array([-1.0, 0.5], np.float32)
    for opset, (alpha, gamma) in ((1, (1.6732, 1.0507)), (6, (1.67326319217681884765625, 1.05070102214813232421875))):
        want = gamma * np.where(x < 0, alpha * (np.exp(x) - 1), x)
        np.testing.assert_allclose(run([N("Selu", ["x"], ["y"])], {"x": x}, opset=opset), want, rtol=1e-6)
    assert not np.allclose(1.6732 * 1.0507, 1.67326319217681884765625 * 1.05070102214813232421875, rtol=1e-6)


def test_split_sizes_per_opset() -> None:
    x = np.arange(10, dtype=np.float32)
    a, b = run([N("Split", ["x", "s"], ["a", "b"])], {"x": x}, opset=1,
               inits={"s": np.array([3, 7], np.int64)}, outputs=("a", "b"))  # opset 1: an input
    assert a.tolist() == [0, 1, 2] and len(b) == 7
    check([N("Split", ["x"], ["a", "b"], split=[4, 6])], {"x": x}, outputs=("a", "b"), opset=11)
    # From opset 18, num_outputs cuts ceil(10 / 4) = 3 per part and a smaller last part.
    check([N("Split", ["x"], ["a", "b", "c", "d"], num_outputs=4)], {"x": x}, outputs=tuple("abcd"), opset=18)


def test_pad_attribute_forms_and_axes() -> None:
    x = rand(2, 3)
    want = np.pad(x, ((1, 0), (0, 2)), constant_values=1.5)
    for opset, key in ((1, "paddings"), (2, "pads")):
        np.testing.assert_array_equal(run([N("Pad", ["x"], ["y"], value=1.5, **{key: [1, 0, 0, 2]})], {"x": x},
                                          opset=opset), want)
    check([N("Pad", ["x", "p", "v", "ax"], ["y"])], {"x": rand(2, 3, 4)},
          {"p": np.array([1, 2, 0, 1], np.int64), "v": np.array(0.5, np.float32), "ax": np.array([-1, 0], np.int64)},
          opset=18)
    # Negative amounts crop.
    check([N("Pad", ["x", "p"], ["y"])], {"x": rand(4, 5)}, {"p": np.array([-1, 2, 1, -2], np.int64)})


def test_pad_value_computed_at_run_time() -> None:
    """The constant value is an operand of nn.pad, so one computed from a graph input (as the
    expanded Attention cases compute -inf) pads in both backends."""
    check([N("Neg", ["v"], ["nv"]), N("Pad", ["x", "p", "nv"], ["y"])],
          {"x": rand(2, 3), "v": np.array(7.5, np.float32)}, {"p": np.array([1, 0, 0, 2], np.int64)},
          opset=18, native=True)


def test_tile_opset1_repeats_one_axis() -> None:
    x = rand(2, 3)
    got = run([N("Tile", ["x", "t", "a"], ["y"])], {"x": x}, opset=1,
              inits={"t": np.array(3, np.int64), "a": np.array(1, np.int64)})
    np.testing.assert_array_equal(got, np.tile(x, (1, 3)))


def test_clip_defaults_tensor_bounds_and_crossed_bounds() -> None:
    x = rand(3, 4) * 3
    np.testing.assert_array_equal(run([N("Clip", ["x"], ["y"], max=0.5)], {"x": x}, opset=6), np.minimum(x, 0.5))
    # Bounds computed at run time (graph inputs) and min > max (everything becomes max).
    check([N("Clip", ["x", "lo", "hi"], ["y"])], {"x": x, "lo": np.array(-1, np.float32), "hi": np.array(1, np.float32)})
    check([N("Clip", ["x", "lo", "hi"], ["y"])], {"x": x}, {"lo": np.array(1, np.float32), "hi": np.array(-1, np.float32)})
    check([N("Clip", ["x", "lo"], ["y"])], {"x": np.array([-128, 5, 127], np.int8)}, {"lo": np.array(-100, np.int8)})


def test_pow_integer_base_float_exponent() -> None:
    check([N("Pow", ["x", "e"], ["y"])], {"x": np.array([4, 9, 2], np.int32), "e": np.array([0.5, 0.5, 3.0], np.float32)})


def test_dropout_mask_from_opset_12() -> None:
    check([N("Dropout", ["x"], ["y", "m"])], {"x": rand(2, 3)}, outputs=("y", "m"), opset=12)
    with pytest.raises(DiagnosticError, match=r"Dropout \(opset 10\): the mask output before opset 12"):
        import_model(build([N("Dropout", ["x"], ["y", "m"])], {"x": rand(2)}, outputs=("y", "m"), opset=10))
    check([N("Dropout", ["x"], ["y", "m"])], {"x": rand(2, 3)}, outputs=("y",), opset=10)  # an unused mask is fine


def test_training_mode_defaults_before_opset7_are_refused() -> None:
    for node in (N("Dropout", ["x"], ["y"]),
                 N("BatchNormalization", ["x", "s", "s", "s", "s"], ["y"])):   # opset 6 has no consumed_inputs
        with pytest.raises(DiagnosticError, match="is_test=0"):
            import_model(build([node], {"x": rand(1, 2, 2, 2)}, {"s": np.ones(2, np.float32)}, opset=6))


def test_batch_norm_statistics_of_another_type() -> None:
    """float16 data with float32 statistics (opset 15). The output is a difference of terms near
    1 whose float16 spacing is about 1e-3, so where each backend rounds to float16 shows as an
    absolute error of that order on outputs near 0 (0.01758 against onnxruntime's 0.01776 once)."""
    c = 3
    check([N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], {"x": rand(2, c, 2, 2).astype(np.float16)},
          {"s": rand(c), "b": rand(c), "m": rand(c), "v": np.abs(rand(c)) + 1}, opset=15, rtol=2e-3, atol=2e-3)


def test_reduce_with_empty_axes_input() -> None:
    empty = {"ax": np.array([], np.int64)}
    check([N("ReduceSum", ["x", "ax"], ["y"], noop_with_empty_axes=1)], {"x": rand(2, 3)}, empty)
    check([N("ReduceMax", ["x", "ax"], ["y"], noop_with_empty_axes=0)], {"x": rand(2, 3)}, empty, opset=18)
    check([N("ReduceMean", ["x"], ["y"], noop_with_empty_axes=1)], {"x": rand(2, 3)}, opset=18)


def test_softplus_of_large_inputs() -> None:
    check([N("Softplus", ["x"], ["y"])], {"x": np.array([-100, -1, 0, 1, 50, 100, 1000], np.float32)})


def test_matmul_broadcast_batch() -> None:
    check([N("MatMul", ["a", "b"], ["y"])], {"a": rand(3, 1, 2, 4), "b": rand(1, 2, 4, 5)})
    check([N("MatMul", ["a", "b"], ["y"])], {"a": rand(2, 4), "b": rand(3, 4, 2)})


def test_round_halves_to_even_in_both_backends() -> None:
    check([N("Round", ["x"], ["y"])], {"x": np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.5, -1.2], np.float32)},
          native=True)


@pytest.mark.parametrize("op,attrs,shape", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1), (1, 1, 4, 4)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1), (1, 2, 3, 3)),
    ("AveragePool", dict(kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 1, 1], ceil_mode=1, count_include_pad=1),
     (1, 1, 6, 7)),  # the axes disagree: one keeps the ceil window, the other drops it
    ("MaxPool", dict(kernel_shape=[2], strides=[3], pads=[0, 1], ceil_mode=1), (1, 2, 6)),
    ("MaxPool", dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2], ceil_mode=1), (1, 1, 5, 4, 5)),
])
def test_ceil_mode_pooling_drops_windows_starting_in_the_padding(op: str, attrs: dict, shape: tuple) -> None:
    check([N(op, ["x"], ["y"], **attrs)], {"x": rand(*shape)}, opset=19, native=True)


def test_symbolic_axes_through_shape_agnostic_converters() -> None:
    """An exported model's `batch` axis stays `?` through Conv, pooling, Flatten, Gemm and Reshape."""
    nodes = [N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), N("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             N("Flatten", ["p"], ["f"]), N("Gemm", ["f", "g"], ["h"], transB=1),
             N("Reshape", ["h", "s"], ["r"]), N("Unsqueeze", ["r", "ax"], ["y"])]
    inits = {"w": rand(2, 3, 3, 3), "g": rand(5, 2 * 2 * 2), "s": np.array([0, 5, 1], np.int64),
             "ax": np.array([1, 3], np.int64)}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4, 4])],
                              [helper.make_empty_tensor_value_info("y")],
                              [onnx.numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    result = import_model(model, embed_params=True)
    assert str(result.module["main"].params[0].type_annotation) == "Tensor[(?, 3, 4, 4), float32]"
    from irtool.frontend.onnx_zoo import onnxruntime_session
    x = rand(3, 3, 4, 4)
    np.testing.assert_allclose(run_function(result.module, {"x": x}),
                               onnxruntime_session(model).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
