"""The ONNX math converters (trigonometric functions, Sign, IsNaN, IsInf, Reciprocal, Mod, Xor,
the bit operators, CastLike, Hardmax) against onnxruntime, through the interpreter and natively."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402
from test_onnx_ops import build  # noqa: E402

import irtool  # noqa: E402
from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.eval.interpreter import flatten_value, run_function  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.frontend.onnx_zoo import onnxruntime_session  # noqa: E402

N = helper.make_node
RNG = np.random.default_rng(11)



def agree(nodes: list, inputs: dict[str, np.ndarray], opset: int, outputs: tuple[str, ...] = ("y",),
          native: bool = True, inits: dict[str, np.ndarray] | None = None, rtol: float = 1e-5,
          atol: float = 1e-6) -> list[np.ndarray]:
    """The model's outputs from onnxruntime equal irtool's, interpreted and (if `native`)
    compiled: same shapes and dtypes, integers and booleans exactly. Returns onnxruntime's."""
    model = build(nodes, inputs, inits, outputs, opset)
    expected = onnxruntime_session(model).run(None, inputs)
    result = import_model(model)
    feeds = {**inputs, **result.params}
    runs = [flatten_value(run_function(result.module, feeds))]
    if native:
        runs.append(flatten_value(irtool.build(result.module).run(**feeds)))
    for got in runs:
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == e.shape and g.dtype == e.dtype
            if e.dtype.kind in "fc":
                np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
            else:
                np.testing.assert_array_equal(g, e)
    return expected


TRIG = ("Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh")


def test_trigonometric_functions_sign_isnan_reciprocal() -> None:
    x = (RNG.standard_normal((3, 7)) * 2).astype(np.float32)
    x[0, :3] = [np.nan, -0.0, 0.0]
    unit = np.tanh(x) * np.float32(0.95)          # inside (-1, 1): Asin, Acos, Atanh
    big = np.abs(x) + np.float32(1)               # >= 1: Acosh
    nodes = [N(op, ["x"], [op]) for op in (*TRIG, "Sign", "IsNaN", "Reciprocal")]
    nodes += [N(op, ["u"], [op]) for op in ("Asin", "Acos", "Atanh")] + [N("Acosh", ["g"], ["Acosh"])]
    outputs = tuple(n.output[0] for n in nodes)
    agree(nodes, {"x": x, "u": unit, "g": big}, 13, outputs, rtol=2e-6)


def test_reciprocal_of_zero_and_double() -> None:
    agree([N("Reciprocal", ["x"], ["y"])], {"x": np.array([0.0, -0.0, 4.0, -0.5], np.float64)}, 13)


@pytest.mark.parametrize("negative,positive", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_isinf_detects_the_chosen_signs(negative: int, positive: int) -> None:
    x = np.array([[np.inf, -np.inf, np.nan, 1e38], [0.0, -3.0, np.inf, -np.inf]], np.float32)
    out = agree([N("IsInf", ["x"], ["y"], detect_negative=negative, detect_positive=positive)], {"x": x}, 10)
    assert out[0][0, :2].tolist() == [bool(positive), bool(negative)]


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_sign_rules(dtype: str, fmod: int) -> None:
    signed = dtype.startswith("int")
    a = np.array([[-7, 7, -8, 8, 5, -5, 0, 13]], dtype) if signed else np.array([[7, 8, 5, 200, 0, 13, 255, 1]], dtype)
    b = np.array([[2], [-3], [4]], dtype) if signed else np.array([[2], [3], [7]], dtype)
    out = agree([N("Mod", ["a", "b"], ["y"], fmod=fmod)], {"a": a, "b": b}, 13, native=dtype in ("int8", "uint32"))
    if signed:   # fmod=0: the divisor's sign (Python); fmod=1: the dividend's (C)
        assert out[0][1, :2].tolist() == ([-1, -2] if fmod == 0 else [-1, 1])   # -7, 7 by -3
        assert out[0][0, :2].tolist() == ([1, 1] if fmod == 0 else [-1, 1])     # -7, 7 by 2


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_float_fmod(dtype: str) -> None:
    a = np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0], dtype)
    b = np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0], dtype)
    agree([N("Mod", ["a", "b"], ["y"], fmod=1)], {"a": a, "b": b}, 13, rtol=1e-3 if dtype == "float16" else 1e-5)


def test_xor_broadcasts() -> None:
    a, b = RNG.random((2, 3, 4)) < 0.5, RNG.random((3, 1)) < 0.5
    agree([N("Xor", ["a", "b"], ["y"])], {"a": a, "b": b}, 7)


def test_xor_legacy_broadcast_axis_opset6() -> None:
    # onnxruntime has no opset-6 Xor: before opset 7, B aligns with A from `axis` on.
    a, b = RNG.random((2, 3, 4)) < 0.5, RNG.random(3) < 0.5
    result = import_model(build([N("Xor", ["a", "b"], ["y"], broadcast=1, axis=1)], {"a": a, "b": b}, opset=6))
    got = run_function(result.module, {"a": a, "b": b})
    np.testing.assert_array_equal(got, a ^ b[:, None])


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shift(dtype: str, direction: str) -> None:
    info = np.iinfo(dtype)
    x = np.array([16, 4, 1, info.max, 3, 200], dtype)
    y = np.array([1, 2, 3, 1, info.bits - 1, 4], dtype)     # counts within the width (ONNX leaves more undefined)
    agree([N("BitShift", ["x", "y"], ["z"], direction=direction)], {"x": x, "y": y}, 11, ("z",),
          native=dtype in ("uint8", "uint64"))


def test_bitwise_operators() -> None:
    a = RNG.integers(-2**31, 2**31, (3, 4)).astype(np.int32)
    b = RNG.integers(-2**31, 2**31, (4,)).astype(np.int32)
    u = RNG.integers(0, 256, (5,)).astype(np.uint8)
    nodes = [N(op, ["a", "b"], [op]) for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")]
    nodes += [N("BitwiseNot", ["a"], ["not_a"]), N("BitwiseNot", ["u"], ["not_u"])]
    agree(nodes, {"a": a, "b": b, "u": u}, 18, ("BitwiseAnd", "BitwiseOr", "BitwiseXor", "not_a", "not_u"))


def test_bit_shift_with_a_bad_direction_is_refused() -> None:
    x = np.zeros(2, np.uint8)
    with pytest.raises(DiagnosticError, match=r"node #0 's': unsupported: BitShift \(opset 11\): direction 'UP' \(LEFT or RIGHT\)"):
        import_model(build([N("BitShift", ["x", "x"], ["y"], direction="UP", name="s")], {"x": x}, opset=11))


CAST_TARGETS = ["float16", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"]


@pytest.mark.parametrize("target", CAST_TARGETS)
def test_cast_like_from_float(target: str) -> None:
    # In range for every target (ONNX leaves out-of-range float -> int conversions undefined).
    x = np.array([[0.0, -0.0, 1.5, -1.5, 2.7, 100.25], [-99.9, 0.4, 3.0, -2.0, 127.0, 7.5]], np.float32)
    if target.startswith("uint"):
        x = np.abs(x)
    like = np.zeros((0,), target)
    agree([N("CastLike", ["x", "like"], ["y"])], {"x": x, "like": like}, 15,
          native=target in ("float16", "int8", "uint64", "bool"))


@pytest.mark.parametrize("source", ["int8", "uint16", "int64", "bool", "float64", "float16"])
def test_cast_like_to_float(source: str) -> None:
    x = (RNG.integers(0, 2, (2, 5)) if source == "bool" else RNG.integers(-100, 100, (2, 5)) * 0.5).astype(source)
    agree([N("CastLike", ["x", "like"], ["y"])], {"x": x, "like": np.zeros((1,), np.float32)}, 19,
          native=source in ("int8", "bool"))


def test_cast_like_of_float_nan_and_infinity_to_bool_and_half() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, 70000.0, 1e-8], np.float32)
    for like in (np.zeros(1, bool), np.zeros(1, np.float16)):
        agree([N("CastLike", ["x", "like"], ["y"])], {"x": x, "like": like}, 15)


def test_cast_like_refuses_what_cast_refuses() -> None:
    """A CastLike whose model tensor has an element type irtool does not compute with is refused
    at that tensor, as a Cast to the same type is refused at its node."""
    like = helper.make_tensor("like", onnx.TensorProto.FLOAT8E4M3FN, [1], [1.0])
    graph = helper.make_graph([N("CastLike", ["x", "like"], ["y"], name="cl"), N("Cast", ["x"], ["z"], name="c",
                                                                                 to=onnx.TensorProto.FLOAT8E4M3FN)],
                              "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                              [helper.make_empty_tensor_value_info("y"), helper.make_empty_tensor_value_info("z")],
                              initializer=[like])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(DiagnosticError) as info:
        import_model(model)
    lines = [line.strip() for line in str(info.value).splitlines()[1:]]
    assert lines == ["node #0 'cl': unsupported: CastLike (opset 19): initializer 'like' of element type float8e4m3fn",
                     "node #1 'c': unsupported: Cast to float8e4m3fn (opset 19)"]


@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 0), (11, -1), (13, 1), (13, -1), (13, 0)])
def test_hardmax_axis_semantics_per_opset(opset: int, axis: int) -> None:
    x = RNG.integers(0, 3, (2, 3, 4)).astype(np.float32)    # ties: the first maximum wins
    agree([N("Hardmax", ["x"], ["y"], axis=axis)], {"x": x}, opset, native=axis == 1)
