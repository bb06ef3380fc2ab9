"""Each ONNX operator converter against onnxruntime on small random graphs."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from irtool.eval.interpreter import run_function  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from support.onnx_graphs import build, check  # noqa: E402

RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


N = helper.make_node


@pytest.mark.parametrize("attrs", [
    dict(),
    dict(pads=[1, 2, 0, 1], strides=[2, 1]),
    dict(dilations=[2, 2], pads=[2, 2, 2, 2]),
    dict(group=2),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(auto_pad="VALID"),
])
def test_conv2d(attrs: dict) -> None:
    groups = attrs.get("group", 1)
    check([N("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], **attrs)], {"x": rand(1, 4, 9, 8)},
          {"w": rand(6, 4 // groups, 3, 3), "b": rand(6)})


def test_conv1d_and_depthwise_without_bias() -> None:
    check([N("Conv", ["x", "w"], ["y"], pads=[1, 2], strides=[2], dilations=[1])], {"x": rand(2, 3, 11)},
          {"w": rand(5, 3, 4)}, opset=11)
    check([N("Conv", ["x", "w"], ["y"], group=4, pads=[1, 1, 1, 1])], {"x": rand(1, 4, 6, 6)},
          {"w": rand(8, 1, 3, 3)})


@pytest.mark.parametrize("op,attrs,opset", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 9),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1), 12),
    ("MaxPool", dict(kernel_shape=[2, 2], dilations=[2, 2]), 12),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), 11),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 11),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"), 7),
])
def test_pooling(op: str, attrs: dict, opset: int) -> None:
    check([N(op, ["x"], ["y"], **attrs)], {"x": rand(1, 3, 9, 10)}, opset=opset)


def test_pooling_1d_and_global() -> None:
    check([N("MaxPool", ["x"], ["y"], kernel_shape=[3], strides=[2], pads=[1, 1])], {"x": rand(2, 3, 10)})
    check([N("GlobalAveragePool", ["x"], ["a"]), N("GlobalMaxPool", ["x"], ["b"])],
          {"x": rand(2, 3, 5, 4)}, outputs=("a", "b"))
    check([N("GlobalAveragePool", ["x"], ["y"])], {"x": rand(2, 3, 7)})


@pytest.mark.parametrize("attrs", [dict(), dict(transA=1), dict(transB=1, alpha=0.5, beta=2.0),
                                   dict(transA=1, transB=1, beta=0.0)])
def test_gemm(attrs: dict) -> None:
    a = rand(5, 3) if attrs.get("transA") else rand(3, 5)
    w = rand(4, 5) if attrs.get("transB") else rand(5, 4)
    check([N("Gemm", ["a", "w", "c"], ["y"], **attrs)], {"a": a}, {"w": w, "c": rand(4)})


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)),
                                   ((4,), (4, 5)), ((3, 4), (4,)), ((2, 2, 3, 4), (2, 2, 4, 1))])
def test_matmul(sa: tuple, sb: tuple) -> None:
    check([N("MatMul", ["a", "b"], ["y"])], {"a": rand(*sa), "b": rand(*sb)})


def test_legacy_broadcast_add_opset6() -> None:
    # onnxruntime has no opset-6 Add; before opset 7, B aligns with A from `axis` on.
    x, b = rand(2, 3, 4, 5), rand(3)
    result = import_model(build([N("Add", ["x", "b"], ["y"], broadcast=1, axis=1)], {"x": x}, {"b": b}, opset=6))
    got = run_function(result.module, {"x": x, **result.params})
    np.testing.assert_allclose(got, x + b[:, None, None], rtol=1e-6)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow"])
def test_binary_broadcast(op: str) -> None:
    x = np.abs(rand(2, 3, 4)) + 0.5
    check([N(op, ["x", "z"], ["y"])], {"x": x, "z": np.abs(rand(3, 1)) + 0.5})


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Elu", "Selu", "Softplus",
                                "Softsign", "Identity"])
def test_unary(op: str) -> None:
    check([N(op, ["x"], ["y"])], {"x": rand(3, 4)})


def test_log_sqrt_sum_leaky_prelu() -> None:
    x = np.abs(rand(2, 3, 4, 4)) + 0.1
    check([N("Log", ["x"], ["a"]), N("Sqrt", ["x"], ["b"]), N("Sum", ["x", "a", "b"], ["y"])], {"x": x})
    check([N("LeakyRelu", ["x"], ["y"], alpha=0.2)], {"x": rand(2, 3)})
    check([N("PRelu", ["x", "s"], ["y"])], {"x": rand(2, 3, 4, 4)}, {"s": rand(3, 1, 1)})
    check([N("PRelu", ["x", "s"], ["y"])], {"x": rand(2, 3, 4)}, {"s": rand(4)})


@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 2), (11, -1), (13, 1), (13, -1)])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_axis_semantics_per_opset(op: str, opset: int, axis: int) -> None:
    check([N(op, ["x"], ["y"], axis=axis)], {"x": rand(2, 3, 4)}, opset=opset)


def test_clip_attribute_and_input_forms() -> None:
    check([N("Clip", ["x"], ["y"], min=-0.5, max=0.5)], {"x": rand(4, 4)}, opset=6)
    check([N("Clip", ["x", "lo", "hi"], ["y"])], {"x": rand(4, 4)},
          {"lo": np.array(-0.3, np.float32), "hi": np.array(0.7, np.float32)}, opset=11)
    check([N("Clip", ["x", "", "hi"], ["y"])], {"x": rand(4, 4)}, {"hi": np.array(0.1, np.float32)}, opset=13)


def test_batchnorm_lrn_dropout() -> None:
    c = 4
    check([N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)], {"x": rand(2, c, 3, 3)},
          {"s": rand(c), "b": rand(c), "m": rand(c), "v": np.abs(rand(c)) + 0.5}, opset=9)
    check([N("LRN", ["x"], ["y"], size=3, alpha=1e-2, beta=0.6, bias=1.5)], {"x": rand(1, 6, 3, 3)})
    check([N("Dropout", ["x"], ["y", "mask"], ratio=0.3)], {"x": rand(3, 3)}, opset=9)


def test_shape_computation_folds_to_static_reshape() -> None:
    nodes = [N("Shape", ["x"], ["s"]), N("Gather", ["s", "i0"], ["n"], axis=0),
             N("Unsqueeze", ["n", "ax"], ["n1"]), N("Concat", ["n1", "minus1"], ["shape"], axis=0),
             N("Reshape", ["x", "shape"], ["y"])]
    inits = {"i0": np.array(0, np.int64), "ax": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    check(nodes, {"x": rand(2, 3, 4)}, inits)
    result = import_model(build(nodes, {"x": rand(2, 3, 4)}, inits))
    (param,) = result.module["main"].params  # no integer initializer became a parameter
    assert result.module["main"].body.attrs["newshape"] == (2, 12)


def test_reshape_flatten_transpose_concat_split() -> None:
    check([N("Reshape", ["x", "s"], ["y"])], {"x": rand(2, 3, 4)}, {"s": np.array([0, -1, 2], np.int64)})
    check([N("Flatten", ["x"], ["y"], axis=2)], {"x": rand(2, 3, 4, 5)})
    check([N("Transpose", ["x"], ["y"], perm=[2, 0, 1])], {"x": rand(2, 3, 4)})
    check([N("Transpose", ["x"], ["y"])], {"x": rand(2, 3, 4)})
    check([N("Concat", ["x", "z"], ["y"], axis=-1)], {"x": rand(2, 3), "z": rand(2, 5)})
    check([N("Split", ["x"], ["a", "b"], axis=1, split=[1, 3])], {"x": rand(2, 4)}, outputs=("a", "b"), opset=11)
    check([N("Split", ["x", "sp"], ["a", "b", "c"], axis=0)], {"x": rand(6, 2)},
          {"sp": np.array([1, 2, 3], np.int64)}, outputs=("a", "b", "c"))


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [0], [1]), ([0, -3], [100, -1], [0, 2], [1, 1]), ([-1], [-100], [1], [-1]),
    ([0, 1], [4, 5], [1, 2], [2, 2]), ([3], [0], [2], [-2])])
def test_slice(starts: list, ends: list, axes: list, steps: list) -> None:
    inits = {k: np.array(v, np.int64) for k, v in dict(st=starts, en=ends, ax=axes, sp=steps).items()}
    check([N("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], {"x": rand(4, 5, 6)}, inits)


def test_slice_opset9_attributes() -> None:
    check([N("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, -1], axes=[0, 1])], {"x": rand(4, 5)}, opset=9)


def test_squeeze_unsqueeze_forms() -> None:
    check([N("Squeeze", ["x"], ["y"], axes=[1])], {"x": rand(2, 1, 3)}, opset=11)
    check([N("Squeeze", ["x"], ["y"])], {"x": rand(2, 1, 3, 1)}, opset=11)
    check([N("Unsqueeze", ["x", "ax"], ["y"])], {"x": rand(2, 3)}, {"ax": np.array([0, 3], np.int64)})
    check([N("Unsqueeze", ["x"], ["y"], axes=[-1])], {"x": rand(2, 3)}, opset=11)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode: str) -> None:
    check([N("Pad", ["x", "p", "v"], ["y"], mode=mode)], {"x": rand(1, 2, 4, 4)},
          {"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "v": np.array(1.5, np.float32)})
    check([N("Pad", ["x"], ["y"], pads=[0, 1, 1, 0], value=2.0, mode=mode)], {"x": rand(3, 4)}, opset=9)


def test_gather_constant_of_shape_cast_reductions() -> None:
    check([N("Gather", ["x", "i"], ["y"], axis=1)], {"x": rand(3, 5)}, {"i": np.array([[0, -1], [2, 4]], np.int64)})
    check([N("Gather", ["x", "i"], ["y"], axis=0)], {"x": rand(5, 2), "i": np.array([4, -2, 0], np.int64)})
    check([N("ConstantOfShape", ["s"], ["c"], value=numpy_helper.from_array(np.array([0.5], np.float32))),
           N("Add", ["x", "c"], ["y"])], {"x": rand(2, 3)}, {"s": np.array([2, 3], np.int64)})
    check([N("Cast", ["x"], ["y"], to=TensorProto.INT32)], {"x": rand(3, 3) * 10})
    for op in ("ReduceMean", "ReduceMax", "ReduceMin"):
        check([N(op, ["x"], ["y"], axes=[1, -1], keepdims=0)], {"x": rand(2, 3, 4)})
    check([N("ReduceSum", ["x", "ax"], ["y"])], {"x": rand(2, 3, 4)}, {"ax": np.array([1], np.int64)})
    check([N("ReduceSum", ["x"], ["y"], axes=[0], keepdims=1)], {"x": rand(2, 3)}, opset=11)
    check([N("Constant", [], ["c"], value_float=2.5), N("Mul", ["x", "c"], ["y"])], {"x": rand(2)})


@pytest.mark.parametrize("attrs", [
    dict(), dict(strides=[2, 2]), dict(strides=[2, 3], pads=[1, 0, 2, 1], output_padding=[1, 2]),
    dict(dilations=[2, 1], pads=[3, 0, 0, 0]), dict(group=2, strides=[2, 2]),
    dict(strides=[2, 2], output_shape=[10, 7]), dict(strides=[2, 2], auto_pad="SAME_LOWER"),
    dict(strides=[2, 2], auto_pad="SAME_UPPER", output_shape=[10, 7]),
])
def test_conv_transpose(attrs: dict) -> None:
    groups = attrs.get("group", 1)
    check([N("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)], {"x": rand(1, 4, 5, 4)},
          {"w": rand(4, 6 // groups, 3, 2), "b": rand(6)})


def test_conv_transpose_1d() -> None:
    check([N("ConvTranspose", ["x", "w"], ["y"], strides=[3], pads=[1, 1])], {"x": rand(2, 3, 5)},
          {"w": rand(3, 2, 4)})


def test_instance_normalization() -> None:
    check([N("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)], {"x": rand(2, 3, 4, 5)},
          {"s": rand(3), "b": rand(3)}, rtol=1e-4)


@pytest.mark.parametrize("attrs", [dict(), dict(pads=[1, 0, 1, 2, 1, 0], strides=[2, 1, 2]),
                                   dict(dilations=[2, 1, 1], group=2)])
def test_conv3d(attrs: dict) -> None:
    groups = attrs.get("group", 1)
    check([N("Conv", ["x", "w", "b"], ["y"], **attrs)], {"x": rand(2, 4, 6, 5, 5)},
          {"w": rand(6, 4 // groups, 3, 2, 2), "b": rand(6)}, rtol=1e-4)


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 2, 2], strides=[2, 1, 2], pads=[1, 1, 0, 1, 0, 1])),
    ("MaxPool", dict(kernel_shape=[2, 2, 2], dilations=[2, 1, 1])),
    ("AveragePool", dict(kernel_shape=[2, 3, 2], strides=[1, 2, 1], pads=[0, 1, 1, 0, 1, 0])),
    ("AveragePool", dict(kernel_shape=[3, 3, 3], pads=[1, 1, 1, 1, 1, 1], count_include_pad=1)),
])
def test_pool3d(op: str, attrs: dict) -> None:
    check([N(op, ["x"], ["y"], **attrs)], {"x": rand(1, 3, 6, 5, 7)}, opset=12)


def test_variadic_comparison_and_selection_ops() -> None:
    x, z = rand(2, 3), rand(3)
    for op in ("Max", "Min", "Mean", "Sum"):
        check([N(op, ["x", "z", "x"], ["y"])], {"x": x, "z": z})
    check([N("Greater", ["x", "z"], ["g"]), N("Less", ["x", "z"], ["l"]), N("Or", ["g", "l"], ["o"]),
           N("Not", ["o"], ["n"]), N("Equal", ["x", "x"], ["e"]), N("And", ["n", "e"], ["y"])],
          {"x": x, "z": z})
    check([N("Greater", ["x", "z"], ["c"]), N("Where", ["c", "x", "z"], ["y"])], {"x": x, "z": z})
    for op in ("Floor", "Ceil", "Round", "Erf"):
        check([N(op, ["x"], ["y"])], {"x": x * 3})
    check([N("ArgMax", ["x"], ["a"], axis=1), N("ArgMin", ["x"], ["b"], axis=0, keepdims=0)], {"x": x},
          outputs=("a", "b"))
    check([N("ReduceProd", ["x"], ["y"], axes=[1])], {"x": x})


def test_expand_tile_size_constant_ints() -> None:
    check([N("Expand", ["x", "s"], ["y"])], {"x": rand(3, 1)}, {"s": np.array([2, 3, 4], np.int64)})
    check([N("Tile", ["x", "r"], ["y"])], {"x": rand(2, 3)}, {"r": np.array([2, 3], np.int64)})
    check([N("Size", ["x"], ["n"]), N("Constant", [], ["k"], value_ints=[1, 2]),
           N("Cast", ["k"], ["kf"], to=onnx.TensorProto.INT64), N("Mul", ["n", "kf"], ["y"])], {"x": rand(2, 5)})
