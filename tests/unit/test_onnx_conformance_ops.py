"""The converters added for issue 14's conformance cases (window functions, Compress, Pad's wrap
mode, training-mode Dropout and BatchNormalization, TensorScatter, 3-d ConvTranspose, Col2Im,
3-d AveragePool counts, MaxPool's Indices, MaxUnpool, Det), against onnxruntime, or against
numpy and onnx.reference where onnxruntime departs from the reference or lacks the form."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.eval.interpreter import run_function  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.frontend.onnx_backend import InterpreterBackend, NativeBackend  # noqa: E402
from irtool.syntax.printer import print_program  # noqa: E402
from support.onnx_graphs import build, check  # noqa: E402
from test_onnx_ops import N, rand  # noqa: E402


def run(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """irtool's interpreter on an imported model (weights as parameters)."""
    result = import_model(model)
    got = run_function(result.module, {**inputs, **result.params})
    return got if isinstance(got, tuple) else (got,)


def reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, inputs)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_windows(op: str, periodic: int, dtype: int) -> None:
    node = N(op, ["n"], ["w"], periodic=periodic, output_datatype=dtype)
    check([node, N("Mul", ["x", "w"], ["y"])], {"x": np.ones(9, helper.tensor_dtype_to_np_dtype(dtype))},
          {"n": np.array(9, np.int64)}, opset=17, native=op == "BlackmanWindow")


def test_window_size_from_a_graph_input_is_bound_by_the_backend() -> None:
    model = build([N("HannWindow", ["n"], ["y"])], {"n": np.array(5, np.int32)}, opset=17)
    with pytest.raises(DiagnosticError, match="size is the graph input 'n', but it must be a constant"):
        import_model(model)
    for backend in (InterpreterBackend, NativeBackend):
        (got,) = backend.prepare(model).run([np.array(6, np.int32)])
        np.testing.assert_allclose(got, np.sin(np.pi * np.arange(6) / 6) ** 2, atol=1e-6)


def test_a_static_value_computed_from_a_graph_input_names_it_and_is_bound() -> None:
    """Range's limit is a float computed from the graph input (as the window functions' ONNX
    function bodies compute it): evaluated once the backend binds the input."""
    nodes = [N("Cast", ["n"], ["f"], to=TensorProto.FLOAT), N("Add", ["f", "one"], ["limit"]),
             N("Range", ["zero", "limit", "one"], ["y"])]
    consts = {"zero": np.array(0, np.float32), "one": np.array(1, np.float32)}
    model = build([N("Constant", [], [k], value=onnx.numpy_helper.from_array(v)) for k, v in consts.items()] + nodes,
                  {"n": np.array(3, np.int64)}, opset=17)
    with pytest.raises(DiagnosticError, match="limit is computed from the graph input 'n', but it must be a constant"):
        import_model(model)
    (got,) = InterpreterBackend.prepare(model).run([np.array(4, np.int64)])
    np.testing.assert_array_equal(got, np.arange(5, dtype=np.float32))


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("condition", [[True, False, True], [False, True], [False, False, False]])
def test_compress(axis: int | None, condition: list[bool]) -> None:
    attrs = {} if axis is None else {"axis": axis}
    x = rand(3, 4, 3)
    check([N("Compress", ["x", "c"], ["y"], **attrs)], {"x": x}, {"c": np.array(condition)}, opset=11)


@pytest.mark.parametrize("axis", [None, 0, -1])
def test_compress_with_a_run_time_condition(axis: int | None) -> None:
    """A condition computed from a graph input imports to `compress`, whose extent is counted at
    run time: no input is bound as a constant. All-false is an empty result."""
    attrs = {} if axis is None else {"axis": axis}
    nodes = [N("Greater", ["c", "zero"], ["b"]), N("Compress", ["x", "b"], ["y"], **attrs)]
    x, c = rand(4, 3), np.array([0.5, -1.0, 2.0], np.float32)
    check(nodes, {"x": x, "c": c}, {"zero": np.array(0, np.float32)}, opset=11, native=True)
    model = build(nodes, {"x": x, "c": c}, {"zero": np.array(0, np.float32)}, opset=11)
    assert "compress(%x" in print_program(import_model(model).module)
    for backend in (InterpreterBackend, NativeBackend):
        rep = backend.prepare(model)
        (empty,) = rep.run([x, -np.abs(c)])
        assert not rep.constant_inputs and 0 in empty.shape
        np.testing.assert_array_equal(empty, np.compress(np.zeros(3, np.bool_), x, axis=axis))


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("ordered", [0, 1])
def test_nonzero_and_unique_against_onnxruntime(axis: int | None, ordered: int) -> None:
    """NonZero of a comparison and Unique's four outputs, in both backends."""
    attrs = {"sorted": ordered} if axis is None else {"sorted": ordered, "axis": axis}
    x = np.random.default_rng(3).integers(0, 3, (5, 4)).astype(np.float32)
    x[1] = x[3]   # repeated rows
    x[:, 2] = x[:, 0]   # and columns
    nodes = [N("Unique", ["x"], ["y", "i", "inv", "n"], **attrs), N("Greater", ["x", "one"], ["b"]),
             N("NonZero", ["b"], ["z"])]
    check(nodes, {"x": x}, {"one": np.array(1, np.float32)}, outputs=("y", "i", "inv", "n", "z"), opset=11,
          native=True)


@pytest.mark.parametrize("pads", [[0, 1, 2, 0], [2, 0, 1, 3], [0, 7, 0, 5]])
def test_wrap_pad(pads: list[int]) -> None:
    """Against numpy's wrap mode, which also wraps padding wider than the axis."""
    x = rand(3, 4)
    model = build([N("Pad", ["x", "p"], ["y"], mode="wrap")], {"x": x}, {"p": np.array(pads, np.int64)}, opset=19)
    (got,) = run(model, {"x": x})
    np.testing.assert_array_equal(got, np.pad(x, [(pads[0], pads[2]), (pads[1], pads[3])], mode="wrap"))


def test_training_dropout_ratio_zero_and_a_random_one() -> None:
    ratio = {"r": np.array(0.0, np.float32), "t": np.array(True)}
    check([N("Dropout", ["x", "r", "t"], ["y", "mask"])], {"x": rand(2, 5)}, ratio, outputs=("y", "mask"),
          opset=13)
    model = build([N("Dropout", ["x", "r", "t"], ["y"])], {"x": rand(2, 5)},
                  {"r": np.array(0.25, np.float32), "t": np.array(True)}, opset=13)
    with pytest.raises(DiagnosticError, match=r"training-mode dropout with ratio 0.25 \(random\)"):
        import_model(model)


@pytest.mark.parametrize("momentum", [0.9, 0.3])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3)])
def test_batch_norm_training_mode(momentum: float, shape: tuple[int, ...]) -> None:
    c = shape[1]
    node = N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1,
             momentum=momentum, epsilon=1e-3)
    check([node], {"x": rand(*shape) * 3 + 1}, {"s": rand(c), "b": rand(c), "m": rand(c), "v": np.abs(rand(c))},
          outputs=("y", "rm", "rv"), opset=15, rtol=1e-4, atol=1e-5, native=len(shape) == 4)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis,starts", [(-2, [0, 3]), (2, [1, 2]), (1, None)])
def test_tensor_scatter(mode: str, axis: int, starts: list[int] | None) -> None:
    cache, update = rand(2, 3, 5, 4), rand(2, 3, 2, 4) if axis != 1 else rand(2, 2, 5, 4)
    inputs = {"cache": cache, "update": update}
    names = ["cache", "update"]
    if starts is not None:
        if mode == "linear":  # linear writes must stay inside the cache
            starts = [min(s, 3) for s in starts]
        inputs["idx"] = np.array(starts, np.int64)
        names.append("idx")
    check([N("TensorScatter", names, ["y"], mode=mode, axis=axis)], inputs, opset=24, native=mode == "circular")


@pytest.mark.parametrize("attrs", [
    dict(), dict(strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1]), dict(dilations=[2, 1, 1], group=2),
    dict(strides=[2, 2, 1], output_padding=[1, 0, 0]),
])
def test_conv_transpose_3d(attrs: dict) -> None:
    groups = attrs.get("group", 1)
    check([N("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)], {"x": rand(1, 4, 3, 4, 3)},
          {"w": rand(4, 6 // groups, 3, 2, 2), "b": rand(6)}, rtol=1e-4, native=groups == 2)


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 5], [2, 2], dict()),
    ([6, 7], [3, 2], dict(strides=[2, 2], pads=[1, 0, 1, 1])),
    ([7, 6], [2, 3], dict(dilations=[2, 1], strides=[1, 2])),
    ([4, 5, 6], [2, 1, 3], dict(strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 0])),
    ([9], [3], dict(strides=[2])),
])
def test_col2im(image: list[int], block: list[int], attrs: dict) -> None:
    """Against onnx.reference (onnxruntime's Col2Im takes 2-d images only)."""
    rank = len(image)
    strides, dilations = attrs.get("strides", [1] * rank), attrs.get("dilations", [1] * rank)
    pads = attrs.get("pads", [0] * 2 * rank)
    grid = [(i + pads[k] + pads[k + rank] - (b - 1) * d - 1) // s + 1
            for k, (i, b, s, d) in enumerate(zip(image, block, strides, dilations))]
    x = rand(2, 3 * int(np.prod(block)), int(np.prod(grid)))
    model = build([N("Col2Im", ["x", "image", "block"], ["y"], **attrs)], {"x": x},
                  {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}, opset=18)
    (got,) = run(model, {"x": x})
    np.testing.assert_allclose(got, reference(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_col2im_refuses_columns_that_do_not_fit() -> None:
    model = build([N("Col2Im", ["x", "image", "block"], ["y"])], {"x": rand(1, 4, 10)},
                  {"image": np.array([4, 4], np.int64), "block": np.array([2, 2], np.int64)}, opset=18)
    with pytest.raises(DiagnosticError, match="does not hold the blocks of"):
        import_model(model)


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 2, 2], pads=[1, 0, 0, 1, 0, 0]),
    dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 2, 2], strides=[2, 1, 1], dilations=[2, 1, 1], ceil_mode=1, count_include_pad=1,
         pads=[1, 0, 0, 1, 0, 0]),
])
def test_average_pool_3d_depth_counts(attrs: dict) -> None:
    check([N("AveragePool", ["x"], ["y"], **attrs)], {"x": rand(1, 2, 7, 4, 5)}, opset=19, rtol=1e-5)


@pytest.mark.parametrize("shape,attrs", [
    ((1, 2, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ((2, 3, 6, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 3, 6, 7), dict(kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1, storage_order=1)),
    ((1, 2, 7, 7), dict(kernel_shape=[2, 2], dilations=[2, 2])),
    ((1, 2, 4, 5, 6), dict(kernel_shape=[2, 2, 3], strides=[2, 1, 2])),
])
def test_max_pool_indices(shape: tuple[int, ...], attrs: dict) -> None:
    x = np.round(rand(*shape) * 4)  # ties: the first largest in window order wins
    check([N("MaxPool", ["x"], ["y", "i"], **attrs)], {"x": x}, outputs=("y", "i"), opset=12,
          native=len(shape) == 4)


def test_max_pool_then_unpool() -> None:
    pool = N("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2])
    check([pool, N("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], {"x": rand(2, 3, 6, 4)},
          opset=11, native=True)


def test_max_unpool_larger_output_shape_follows_the_reference() -> None:
    x, i = rand(1, 1, 2, 2), np.array([[[[0, 3], [9, 15]]]], np.int64)
    model = build([N("MaxUnpool", ["x", "i", "s"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], {"x": x, "i": i},
                  {"s": np.array([1, 1, 5, 5], np.int64)}, opset=11)
    (got,) = run(model, {"x": x, "i": i})
    np.testing.assert_array_equal(got, reference(model, {"x": x, "i": i})[0])


@pytest.mark.parametrize("shape", [(2, 2), (3, 3), (2, 4, 4), (5, 5), (2, 3, 6, 6), (1, 1)])
def test_det(shape: tuple[int, ...]) -> None:
    x = rand(*shape).astype(np.float64)
    model = build([N("Det", ["x"], ["y"])], {"x": x}, opset=11)
    (got,) = run(model, {"x": x})
    np.testing.assert_allclose(got, np.linalg.det(x), rtol=1e-10, atol=1e-12)


def test_det_natively_and_its_limit() -> None:
    check([N("Det", ["x"], ["y"])], {"x": rand(3, 4, 4)}, opset=11, rtol=1e-4, native=True)
    with pytest.raises(DiagnosticError, match="unsupported: Det .* the determinant of 7x7 matrices"):
        import_model(build([N("Det", ["x"], ["y"])], {"x": rand(7, 7)}, opset=11))
