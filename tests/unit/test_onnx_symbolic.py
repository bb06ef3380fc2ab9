"""ONNX models whose inputs have several symbolic axes: imported with `?` on them, run by the
interpreter and natively like onnxruntime at several extents; what cannot take a `?` is a
located error naming the node (or, natively, the operator) and the axis."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import irtool  # noqa: E402
from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.eval.interpreter import run_function  # noqa: E402
from irtool.frontend.onnx import ImportResult, import_model  # noqa: E402
from irtool.syntax.printer import print_program  # noqa: E402

D = 64
EXTENTS = [(1, 1), (2, 33), (3, 7), (0, 5), (4, 0)]


def _weights(seed: int, **shapes: tuple[int, ...]) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(seed)
    return [numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32), name)
            for name, s in shapes.items()]


def _ints(**values: object) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in values.items()]


def _floats(**values: float) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(np.array(v, np.float32), name) for name, v in values.items()]


def _model(nodes: list, inputs: list, outputs: list, inits: list, opset: int = 17) -> onnx.ModelProto:
    """The model, checked by onnx when its outputs have shapes (the checker wants them)."""
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    if all(o.type.tensor_type.HasField("shape") for o in outputs):
        onnx.checker.check_model(model)
    return model


def _x(name: str, dims: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def block(gelu: str, norm: str, reshape: str) -> onnx.ModelProto:
    """A transformer-style block as PyTorch exports it: [N, T, 64] → MatMul + bias → GELU (the
    `Gelu` op or its Erf form) → layer norm (the op or its ReduceMean decomposition) → residual
    → Softmax(-1) → a Reshape merging N and T (Shape/Gather/Mul/Unsqueeze/Concat, or [-1, 64])."""
    N = helper.make_node
    nodes = [N("MatMul", ["x", "W"], ["mm"]), N("Add", ["mm", "B"], ["h"])]
    if gelu == "op":
        nodes.append(N("Gelu", ["h"], ["g"]))
    else:
        nodes += [N("Div", ["h", "sqrt2"], ["hd"]), N("Erf", ["hd"], ["he"]), N("Add", ["he", "one"], ["he1"]),
                  N("Mul", ["h", "he1"], ["hm"]), N("Mul", ["hm", "half"], ["g"])]
    if norm == "op":
        nodes.append(N("LayerNormalization", ["g", "G", "Be"], ["ln"], axis=-1, epsilon=1e-5))
    else:
        nodes += [N("ReduceMean", ["g"], ["mu"], axes=[-1]), N("Sub", ["g", "mu"], ["c"]),
                  N("Pow", ["c", "two"], ["c2"]), N("ReduceMean", ["c2"], ["var"], axes=[-1]),
                  N("Add", ["var", "eps"], ["ve"]), N("Sqrt", ["ve"], ["sd"]), N("Div", ["c", "sd"], ["nc"]),
                  N("Mul", ["nc", "G"], ["ng"]), N("Add", ["ng", "Be"], ["ln"])]
    nodes += [N("Add", ["ln", "x"], ["r"]), N("Softmax", ["r"], ["s"], axis=-1)]
    if reshape == "shape":
        nodes += [N("Shape", ["s"], ["sh"]), N("Gather", ["sh", "i0"], ["n"], axis=0),
                  N("Gather", ["sh", "i1"], ["t"], axis=0), N("Mul", ["n", "t"], ["nt"]),
                  N("Unsqueeze", ["nt", "axes0"], ["ntu"]), N("Concat", ["ntu", "d"], ["target"], axis=0)]
    else:
        nodes.append(N("Constant", [], ["target"], value=numpy_helper.from_array(np.array([-1, D], np.int64))))
    nodes.append(N("Reshape", ["s", "target"], ["y"]))
    inits = (_weights(1, W=(D, D), B=(D,), G=(D,), Be=(D,))
             + _floats(sqrt2=np.sqrt(2.0), one=1.0, half=0.5, two=2.0, eps=1e-5)
             + _ints(i0=0, i1=1, axes0=[0], d=[D]))
    return _model(nodes, [_x("x", ["N", "T", D])], [_x("y", [None, D])], inits, 20 if gelu == "op" else 17)


def mlp() -> onnx.ModelProto:
    """An MLP over [batch, items, 16]: both leading axes symbolic (one left unnamed)."""
    N = helper.make_node
    nodes = [N("MatMul", ["x", "W1"], ["a"]), N("Add", ["a", "B1"], ["b"]), N("Relu", ["b"], ["c"]),
             N("MatMul", ["c", "W2"], ["d"]), N("Add", ["d", "B2"], ["e"]), N("Tanh", ["e"], ["y"])]
    dims = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", None, 16])]
    return _model(nodes, dims, [_x("y", ["batch", None, 8])],
                  _weights(2, W1=(16, 40), B1=(40,), W2=(40, 8), B2=(8,)))


def _check(model: onnx.ModelProto, imported: ImportResult, native: object, x: np.ndarray) -> None:
    """The interpreter and native code against onnxruntime on one input."""
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    got = run_function(imported.module, {"x": x, **imported.params})
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(native(x, *imported.params.values()), want, rtol=2e-5, atol=2e-6)  # type: ignore[operator]


@pytest.fixture(scope="module", params=[("erf", "decomposed", "shape"), ("op", "op", "constant")],
                ids=["erf-reducemean-shape", "gelu-layernorm-constant"])
def transformer(request: pytest.FixtureRequest) -> tuple[onnx.ModelProto, ImportResult, object]:
    model = block(*request.param)
    imported = import_model(model)
    return model, imported, irtool.build(imported.module)


def test_a_transformer_block_keeps_both_symbolic_axes(transformer: tuple) -> None:
    _, imported, _ = transformer
    main = imported.module["main"]
    assert str(main.params[0].type_annotation) == "Tensor[(?, ?, 64), float32]"
    assert str(main.checked_type.ret_type) == "Tensor[(?, 64), float32]"


@pytest.mark.parametrize("n, t", EXTENTS)
def test_a_transformer_block_runs_like_onnxruntime(transformer: tuple, n: int, t: int) -> None:
    model, imported, native = transformer
    x = np.random.default_rng(n * 100 + t).standard_normal((n, t, D)).astype(np.float32)
    _check(model, imported, native, x)


@pytest.mark.parametrize("n, t", [(1, 1), (5, 32), (2, 45), (0, 3), (3, 0)])
def test_an_mlp_over_a_symbolic_batch_and_middle_axis_runs_like_onnxruntime(n: int, t: int) -> None:
    model = mlp()
    imported = import_model(model)
    assert str(imported.module["main"].params[0].type_annotation) == "Tensor[(?, ?, 16), float32]"
    x = np.random.default_rng(t).standard_normal((n, t, 16)).astype(np.float32)
    _check(model, imported, irtool.build(imported.module), x)


def _single(nodes: list, inits: list, opset: int = 17, dims: list | None = None) -> onnx.ModelProto:
    return _model(nodes, [_x("x", dims or ["N", "T", 4, 16])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                  inits, opset)


N_ = helper.make_node
AROUND = {
    "logsoftmax-opset11-last": ([N_("LogSoftmax", ["x"], ["y"], axis=-1)], [], 11),
    "slice-static-axis": ([N_("Slice", ["x", "s", "e", "a"], ["y"])], _ints(s=[1], e=[12], a=[-1]), 17),
    "gather-static-axis": ([N_("Gather", ["x", "i"], ["y"], axis=3)], _ints(i=[0, -1, 5]), 17),
    "expand-changing-nothing": ([N_("Expand", ["x", "s"], ["y"])], _ints(s=[1, 4, 1]), 17),
    "reducemax-last": ([N_("ReduceMax", ["x"], ["y"], axes=[-1], keepdims=0)], [], 17),
    "flatten-static-tail": ([N_("Flatten", ["x"], ["f"], axis=2), N_("MatMul", ["f", "W"], ["y"])],
                            _weights(4, W=(64, 8)), 17),
    "layernorm-two-axes": ([N_("LayerNormalization", ["x", "G"], ["y"], axis=2)], _weights(5, G=(4, 16)), 17),
    "reshape-size": ([N_("Size", ["x"], ["n"]), N_("Div", ["n", "d"], ["rows"]),
                      N_("Unsqueeze", ["rows", "a0"], ["r"]), N_("Concat", ["r", "d1"], ["t"], axis=0),
                      N_("Reshape", ["x", "t"], ["y"])], _ints(d=16, a0=[0], d1=[16]), 17),
}


@pytest.mark.parametrize("case", AROUND.values(), ids=AROUND.keys())
def test_operators_exporters_write_around_take_the_symbolic_axes(case: tuple) -> None:
    model = _single(*case)
    imported = import_model(model)
    assert str(imported.module["main"].params[0].type_annotation).startswith("Tensor[(?, ?, 4, 16)")
    native = irtool.build(imported.module)
    for n, t in [(2, 3), (1, 40), (0, 2)]:
        x = np.random.default_rng(t).standard_normal((n, t, 4, 16)).astype(np.float32)
        _check(model, imported, native, x)


def test_a_reshape_keeping_both_symbolic_axes_places_them_as_zeros() -> None:
    """Shape → Slice(0:2) → Concat(…, [64]) → Reshape: each entry is x's own `?` at its position,
    so both are Relay's 0 (keep) and nothing is left to infer. (Native code reshapes to one `?`
    only, so this runs in the interpreter.)"""
    model = _single([N_("Shape", ["x"], ["s"]), N_("Slice", ["s", "z", "two"], ["nt"]),
                     N_("Concat", ["nt", "d"], ["t"], axis=0), N_("Reshape", ["x", "t"], ["y"])],
                    _ints(z=[0], two=[2], d=[64]))
    imported = import_model(model)
    assert "reshape(%x, newshape=[0, 0, 64])" in print_program(imported.module)
    for n, t in [(2, 3), (0, 4)]:
        x = np.random.default_rng(t).standard_normal((n, t, 4, 16)).astype(np.float32)
        want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
        np.testing.assert_array_equal(run_function(imported.module, {"x": x}), want)


def test_softmax_before_opset_13_over_a_static_tail_keeps_the_leading_symbolic_axes() -> None:
    """Opset 11's Softmax(axis=2) is over axes 2 and 3 together: the tail merged with the leading
    `?`s kept as 0s. (Native code reshapes to one `?` only, so this runs in the interpreter.)"""
    model = _single([N_("Softmax", ["x"], ["y"], axis=2)], [], 11)
    imported = import_model(model)
    assert "newshape=[0, 0, 64]" in print_program(imported.module)
    x = np.random.default_rng(0).standard_normal((3, 5, 4, 16)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(run_function(imported.module, {"x": x}), want, rtol=1e-5, atol=1e-7)


REFUSED_AT_IMPORT = {
    "matmul-contracting": (
        [N_("MatMul", ["x", "W"], ["y"], name="mm")], ["N", "K"], _weights(6, W=(8, 4)), 17,
        "node #0 'mm': unsupported: MatMul (opset 17): it contracts the symbolic axis 1 of Tensor[(?, ?), float32]"),
    "layernorm-over-T": (
        [N_("LayerNormalization", ["x", "G"], ["y"], axis=1, name="ln")], ["N", "T", 4], _weights(7, G=(1, 4)), 17,
        "node #0 'ln': unsupported: LayerNormalization (opset 17): it normalises over the symbolic axis 1 of "
        "Tensor[(?, ?, 4), float32]"),
    "softmax-opset11-merging-T": (
        [N_("Softmax", ["x"], ["y"], axis=1, name="sm")], ["N", "T", 4], [], 11,
        "node #0 'sm': unsupported: Softmax (opset 11): it coerces Tensor[(?, ?, 4), float32] to 2-d at axis 1, "
        "merging the symbolic axis 1"),
    "reshape-swapping-N-and-T": (
        [N_("Shape", ["x"], ["s"]), N_("Gather", ["s", "i0"], ["n"]), N_("Gather", ["s", "i1"], ["t"]),
         N_("Concat", ["t", "n", "d"], ["target"], axis=0), N_("Reshape", ["x", "target"], ["y"], name="rs")],
        ["N", "T", 4], _ints(i0=[0], i1=[1], d=[4]), 17,
        "node #4 'rs': unsupported: Reshape (opset 17): it reshapes Tensor[(?, ?, 4), float32] to a shape whose "
        "entries [0, 1] are products of symbolic sizes it cannot place (only one may be inferred)"),
    "expand-over-T": (
        [N_("Expand", ["x", "s"], ["y"], name="ex")], ["N", "T", 1], _ints(s=[1, 3, 1]), 17,
        "node #0 'ex': unsupported: Expand (opset 17): it expands axis 1 of Tensor[(?, ?, 1), float32] to 3"),
    "shape-into-constantofshape": (
        [N_("Shape", ["x"], ["s"]), N_("ConstantOfShape", ["s"], ["y"], name="cs")], ["N", "T"], [], 17,
        "node #1 'cs': unsupported: ConstantOfShape (opset 17): it computes with a shape read from a tensor with "
        "symbolic axes (ConstantOfShape of such a shape is not followed at import time)"),
}


@pytest.mark.parametrize("case", REFUSED_AT_IMPORT.values(), ids=REFUSED_AT_IMPORT.keys())
def test_what_cannot_take_a_symbolic_axis_is_refused_naming_node_and_axis(case: tuple) -> None:
    nodes, dims, inits, opset, message = case
    model = _model(nodes, [_x("x", dims)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits, opset)
    with pytest.raises(DiagnosticError) as info:
        import_model(model)
    assert message in str(info.value)
    assert "graph input 'x' has symbolic axes 0 'N', 1" in str(info.value)


REFUSED_NATIVELY = {
    # Softmax over the `?` axis T: the interpreter runs it; native rows cannot hold it.
    "softmax-over-T": ([N_("Softmax", ["x"], ["y"], axis=1)], [_x("x", ["N", "T", 8])],
                       "no shape function for `nn.softmax` with a `?` on axis 1 of Tensor[(?, ?, 8), float32]"),
    # Attention's Q·Kᵀ: a T×T result has `?` on a column axis.
    "attention-scores": ([N_("MatMul", ["x", "k"], ["y"])], [_x("x", ["N", "T", 8]), _x("k", ["N", 8, "T"])],
                         "no shape function for `nn.batch_matmul` with a `?` on axis"),
}


@pytest.mark.parametrize("case", REFUSED_NATIVELY.values(), ids=REFUSED_NATIVELY.keys())
def test_what_native_rows_cannot_hold_runs_in_the_interpreter_and_is_a_located_native_error(case: tuple) -> None:
    nodes, inputs, message = case
    model = _model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [])
    imported = import_model(model)
    rng = np.random.default_rng(8)
    feeds = {"x": rng.standard_normal((2, 5, 8)).astype(np.float32)}
    if len(inputs) > 1:
        feeds["k"] = rng.standard_normal((2, 8, 5)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(run_function(imported.module, feeds), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(DiagnosticError) as info:
        irtool.build(imported.module)
    assert message in str(info.value)


def test_a_shape_of_symbolic_sizes_returned_by_a_branch_is_refused() -> None:
    """It would be an unbound placeholder at run time: the If is the located error."""
    def branch(name: str) -> onnx.GraphProto:
        return helper.make_graph([N_("Identity", ["s"], [name])], name, [],
                                 [helper.make_tensor_value_info(name, TensorProto.INT64, None)])
    model = _model([N_("Shape", ["x"], ["s"]), N_("If", ["c"], ["y"], then_branch=branch("then"),
                                                 else_branch=branch("else"), name="if")],
                   [_x("x", ["N", 4]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, None)], [])
    with pytest.raises(DiagnosticError) as info:
        import_model(model)
    assert ("node #1 'if': unsupported: If (opset 17): its then returns a shape read from a tensor with symbolic "
            "axes") in str(info.value)


def test_matmul_by_a_run_time_matrix_keeps_the_symbolic_axes() -> None:
    """A right operand that is no weight: a dense product by it, in both backends."""
    model = _model([N_("MatMul", ["x", "m"], ["y"]), N_("MatMul", ["q", "m"], ["z"])],
                   [_x("x", ["N", "T", 8]), _x("m", [8, 3]), _x("q", ["N", 8])],
                   [_x("y", ["N", "T", 3]), _x("z", ["N", 3])], [])
    imported = import_model(model)
    native = irtool.build(imported.module)
    rng = np.random.default_rng(9)
    for n, t in [(2, 5), (1, 33)]:
        feeds = {"x": rng.standard_normal((n, t, 8)).astype(np.float32),
                 "m": rng.standard_normal((8, 3)).astype(np.float32), "q": rng.standard_normal((n, 8)).astype(np.float32)}
        want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
        for got in (run_function(imported.module, feeds), native(*feeds.values())):
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_attention_with_heads_is_refused_naming_the_symbolic_batch_axes() -> None:
    model = _model([N_("MatMul", ["x", "k"], ["y"], name="qk")], [_x("x", ["N", 2, "T", 8]), _x("k", ["N", 2, 8, "T"])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [])
    with pytest.raises(DiagnosticError) as info:
        import_model(model)
    assert ("node #0 'qk': unsupported: MatMul (opset 17): it multiplies batches of rank 2 with symbolic sizes "
            "(axis 0 of Tensor[(?, 2, ?, 8), float32], axis 2 of Tensor[(?, 2, ?, 8), float32], axis 0 of "
            "Tensor[(?, 2, 8, ?), float32], axis 3 of Tensor[(?, 2, 8, ?), float32])") in str(info.value)


def test_one_symbolic_axis_among_several_leading_ones_gives_a_2d_dense() -> None:
    """[N, 6, 16] · W: rows of a 2-d dense, as the static path has them (native code tiles it)."""
    model = _model([N_("MatMul", ["x", "W"], ["y"])], [_x("x", ["N", 6, 16])], [_x("y", ["N", 6, 8])],
                   _weights(10, W=(16, 8)))
    imported = import_model(model)
    text = print_program(imported.module)
    assert "reshape(%x, newshape=[-1, 16])" in text and "newshape=[-1, 6, 8]" in text
    native = irtool.build(imported.module)
    for n in (0, 1, 7):
        x = np.random.default_rng(n).standard_normal((n, 6, 16)).astype(np.float32)
        _check(model, imported, native, x)
