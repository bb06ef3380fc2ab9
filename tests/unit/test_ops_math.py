"""The math, remainder and bit operators (definitions/math.py, bitwise.py): numpy computes
against Python's `math` and integer rules, type errors, and native code against the interpreter."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import irtool
from irtool.eval.interpreter import flatten_value, run_function
from irtool.ir.types import TensorType
from irtool.ops import TypeRelError
from irtool.ops.apply import apply_op
from irtool.syntax.parser import parse_module

# name -> (Python reference, the interval the argument is drawn from)
TRIG = {
    "sin": (math.sin, (-10, 10)), "cos": (math.cos, (-10, 10)), "tan": (math.tan, (-1.5, 1.5)),
    "asin": (math.asin, (-1, 1)), "acos": (math.acos, (-1, 1)), "atan": (math.atan, (-50, 50)),
    "sinh": (math.sinh, (-20, 20)), "cosh": (math.cosh, (-20, 20)), "asinh": (math.asinh, (-50, 50)),
    "acosh": (math.acosh, (1, 50)), "atanh": (math.atanh, (-0.875, 0.875)),
}


@settings(max_examples=200)
@given(name=st.sampled_from(sorted(TRIG)), data=st.data())
def test_trig_matches_math(name: str, data: st.DataObject) -> None:
    fn, (lo, hi) = TRIG[name]
    x = data.draw(hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=2, max_side=4),
                             elements=st.floats(lo, hi, width=32)))
    t, out = apply_op(name, [x])
    assert t == TensorType(x.shape, "float32") and out.dtype == np.float32
    want = np.vectorize(lambda v: fn(float(v)), otypes=[np.float64])(x) if x.size else x
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)


def test_trig_of_integers_is_computed_in_float64_and_truncated() -> None:
    _, out = apply_op("sinh", [np.array([1, 2, -3], np.int32)])
    assert out.dtype == np.int32 and out.tolist() == [1, 3, -10]   # sinh: 1.18, 3.63, -10.02


def test_sign_isnan_isinf() -> None:
    x = np.array([-2.5, -0.0, 0.0, 3.0, np.nan, np.inf, -np.inf], np.float32)
    _, sign = apply_op("sign", [x])
    assert sign[:4].tolist() == [-1, 0, 0, 1] and not np.signbit(sign[1]) and np.isnan(sign[4])
    assert sign[5:].tolist() == [1, -1]
    t, nan = apply_op("isnan", [x])
    assert t == TensorType((7,), "bool") and nan.tolist() == [False] * 4 + [True, False, False]
    _, inf = apply_op("isinf", [x])
    assert inf.tolist() == [False] * 5 + [True, True]
    _, isign = apply_op("sign", [np.array([-128, 0, 7], np.int8)])
    assert isign.dtype == np.int8 and isign.tolist() == [-1, 0, 1]
    _, never = apply_op("isinf", [np.array([2**31 - 1], np.int32)])
    assert never.tolist() == [False]


INT8 = st.integers(-128, 127)


@settings(max_examples=200)
@given(a=st.lists(INT8, min_size=1, max_size=8), b=st.lists(INT8, min_size=1, max_size=1))
def test_integer_remainders_follow_c_and_python(a: list[int], b: list[int]) -> None:
    x, y = np.array(a, np.int8), np.array(b, np.int8)
    _, c_mod = apply_op("mod", [x, y])
    _, py_mod = apply_op("floor_mod", [x, y])
    d = b[0]
    # C: the dividend's sign (math.fmod on exact integers); Python: the divisor's; by zero: 0.
    assert c_mod.tolist() == [int(math.fmod(v, d)) if d else 0 for v in a]
    assert py_mod.tolist() == [v % d if d else 0 for v in a]


def test_float_remainders() -> None:
    a = np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0, -4.0], np.float32)
    b = np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0, 2.0], np.float32)
    _, c_mod = apply_op("mod", [a, b])
    _, py_mod = apply_op("floor_mod", [a, b])
    pairs = [(float(p), float(q)) for p, q in zip(a, b)]
    np.testing.assert_allclose(c_mod, [math.fmod(p, q) for p, q in pairs], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(py_mod, [p % q for p, q in pairs], rtol=1e-6, atol=1e-6)
    assert np.signbit(c_mod[-1]) and not np.signbit(py_mod[-1])   # fmod(-4, 2) = -0; -4 % 2 = +0


def bits(dtype: str) -> int:
    return np.iinfo(dtype).bits


@settings(max_examples=200)
@given(dtype=st.sampled_from(["int8", "uint8", "int32", "uint64"]), data=st.data())
def test_bit_operators_follow_python_integers(dtype: str, data: st.DataObject) -> None:
    info = np.iinfo(dtype)
    a = data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=6))
    count = data.draw(st.integers(0 if info.min == 0 else -2, bits(dtype) + 2))
    x, n = np.array(a, dtype), np.array(count, dtype)

    def wrap(v: int) -> int:
        return (v - int(info.min)) % (1 << bits(dtype)) + int(info.min)
    in_range = 0 <= count < bits(dtype)
    expected = {
        "bitwise_and": [v & count for v in a], "bitwise_or": [wrap(v | count) for v in a],
        "bitwise_xor": [wrap(v ^ count) for v in a],
        "left_shift": [wrap(v << count) if in_range else 0 for v in a],
        "right_shift": [v >> count if in_range else (-1 if v < 0 else 0) for v in a],
    }
    for name, want in expected.items():
        t, out = apply_op(name, [x, n])
        assert t == TensorType((len(a),), dtype) and out.tolist() == want, name
    _, inverted = apply_op("bitwise_not", [x])
    assert inverted.tolist() == [wrap(~v) for v in a]


def test_logical_xor() -> None:
    t, out = apply_op("logical_xor", [np.array([[True], [False]]), np.array([True, False])])
    assert t == TensorType((2, 2), "bool") and out.tolist() == [[False, True], [True, False]]
    _, ints = apply_op("logical_xor", [np.array([0, 3, 0, -1], np.int32), np.array([0, 0, 5, 2], np.int32)])
    assert ints.dtype == np.int32 and ints.tolist() == [0, 1, 1, 0]


@pytest.mark.parametrize("name,args,message", [
    ("bitwise_and", [np.zeros(2, np.float32)] * 2, "bitwise_and: expects an integer tensor, got Tensor[(2), float32]"),
    ("left_shift", [np.zeros(2, bool)] * 2, "left_shift: expects an integer tensor"),
    ("bitwise_not", [np.zeros(2, np.float64)], "bitwise_not: expects an integer tensor"),
    ("mod", [np.zeros(2, np.int32), np.zeros(2, np.int64)], "mod: dtype mismatch"),
    ("floor_mod", [np.zeros(2, np.int32), np.zeros(3, np.int32)], "floor_mod: cannot broadcast"),
    ("isnan", [np.zeros(2, bool)], "isnan: expects a numeric tensor, got Tensor[(2), bool]"),
    ("sin", [np.zeros(2, bool)], "sin: expects a numeric tensor"),
])
def test_type_errors(name: str, args: list, message: str) -> None:
    with pytest.raises(TypeRelError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        apply_op(name, args)


def _native_equals_interpreter(text: str, args: list[np.ndarray], rtol: float) -> None:
    mod = parse_module('#[version = "0.0.5"]\n' + text)
    want = flatten_value(run_function(mod, args))
    got = flatten_value(irtool.build(mod).run(*args))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-7)
        else:
            np.testing.assert_array_equal(g, w)


def test_float_functions_natively() -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 16)) * 3).astype(np.float32)
    x[0, :6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-30]
    y = np.where(np.abs(x) < 0.5, 1.5, x).astype(np.float32)
    y[1, :3] = [0.0, -0.0, np.inf]
    calls = [f"{n}(%x)" for n in ("sin", "cos", "tan", "atan", "sinh", "cosh", "asinh", "sign", "isnan", "isinf")]
    calls += ["asin(tanh(%x) * 0.9f)", "acos(tanh(%x) * 0.9f)", "atanh(tanh(%x) * 0.9f)", "acosh(abs(%x) + 1f)",
              "mod(%x, %y)", "floor_mod(%x, %y)"]
    text = ("def @main(%x: Tensor[(3, 16), float32], %y: Tensor[(3, 16), float32]) {\n  ("
            + ", ".join(calls) + ")\n}")
    _native_equals_interpreter(text, [x, y], rtol=1e-6)


def test_integer_operators_natively() -> None:
    lo, hi = -2**31, 2**31 - 1
    a = np.array([lo, hi, -7, 7, 5, -5, 0, 1, lo, 13, -13, 100], np.int32)
    b = np.array([-1, 2, 2, -2, 0, 3, 4, 31, 32, -33, 33, 1], np.int32)
    u = np.array([255, 1, 128, 7, 0, 200], np.uint8)
    s = np.array([0, 7, 8, 9, 255, 3], np.uint8)
    calls = ["mod(%a, %b)", "floor_mod(%a, %b)", "sign(%a)", "bitwise_and(%a, %b)", "bitwise_or(%a, %b)",
             "bitwise_xor(%a, %b)", "bitwise_not(%a)", "left_shift(%a, %b)", "right_shift(%a, %b)",
             "logical_xor(%a, %b)", "left_shift(%u, %s)", "right_shift(%u, %s)", "mod(%u, %s)", "sign(%u)"]
    text = ("def @main(%a: Tensor[(12), int32], %b: Tensor[(12), int32], %u: Tensor[(6), uint8], "
            "%s: Tensor[(6), uint8]) {\n  (" + ", ".join(calls) + ")\n}")
    _native_equals_interpreter(text, [a, b, u, s], rtol=0)
    mod = parse_module('#[version = "0.0.5"]\n' + text)
    out = run_function(mod, [a, b, u, s])
    assert out[0].tolist()[:6] == [0, 1, -1, 1, 0, -2]            # C remainder; INT_MIN % -1 = 0; by 0: 0
    assert out[1].tolist()[:6] == [0, 1, 1, -1, 0, 1]             # Python remainder
    assert out[10].tolist() == [255, 128, 0, 0, 0, 64]            # counts >= 8 shift everything out
