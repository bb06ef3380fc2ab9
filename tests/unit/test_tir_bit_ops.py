"""TIR's integer bit operations and the math intrinsics the ONNX math operators need (`tan` ...
`atanh`, `fmod`): text, typing, constant folding, the interpreter against Python's own integer
and `math` rules, and native code against the interpreter."""

from __future__ import annotations

import math

import numpy as np
import pytest

from irtool.core.diagnostics import DiagnosticError
from irtool.driver import build_kernels
from irtool.eval.tir_interp import run_primfunc
from irtool.ir.module import IRModule
from irtool.ir.tir import BIT_OPS, BinaryOp, IntImm, PrimFunc
from irtool.runtime import aligned_empty
from irtool.syntax.parser import parse_primfunc
from irtool.syntax.tir_printer import print_primfunc
from irtool.tir_transform.fold import fold_binary

INT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def python_bit_op(op: str, a: int, b: int, dtype: str) -> int:
    """The documented semantics on Python integers, wrapped to `dtype`."""
    info = np.iinfo(dtype)
    if op == "bitwise_and":
        r = a & b
    elif op == "bitwise_or":
        r = a | b
    elif op == "bitwise_xor":
        r = a ^ b
    elif not 0 <= b < info.bits:      # every bit shifted out
        r = -1 if op == "shift_right" and a < 0 else 0
    else:
        r = a << b if op == "shift_left" else a >> b
    span = 1 << info.bits
    return (r - int(info.min)) % span + int(info.min)


def operands(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Extremes, signs and shift counts around the width (negative ones for signed types)."""
    info = np.iinfo(dtype)
    bits = info.bits
    a = np.array([info.min, info.max, 1, 5, info.max // 3, info.min + 1, 0, 3, 77 % (info.max + 1), 2], dtype)
    counts = [0, 1, bits - 1, bits, bits + 1, 2 * bits, 3, info.max, 7, bits - 2]
    if info.min < 0:
        counts[6] = -1
    return a, np.array(counts, dtype)


def kernel(dtype: str, op: str, lanes: int) -> PrimFunc:
    """out[i] = op(a[i], b[i]) over 16 elements, scalar or in vectors of `lanes`."""
    index = "%i" if lanes == 1 else f"ramp(%i * {lanes}, 1, {lanes})"
    return parse_primfunc(f"""primfn @k(%a: Buffer[(16), {dtype}], %b: Buffer[(16), {dtype}], %out: Buffer[(16), {dtype}]) {{
  for %i in range(0, {16 // lanes}) {{
    %out[{index}] = {op}(%a[{index}], %b[{index}]);
  }}
}}""", "bits.tir")


def compiled(func: PrimFunc):
    mod = IRModule()
    mod.functions["k"] = func
    return build_kernels(mod, 2)["k"]


def aligned(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bit_ops_interpreter_and_folding_follow_python_integers(dtype: str) -> None:
    a, b = operands(dtype)
    a16, b16 = np.resize(a, 16), np.resize(b, 16)
    for op in BIT_OPS:
        out = np.zeros(16, dtype)
        run_primfunc(kernel(dtype, op, 1), [a16, b16, out])
        want = [python_bit_op(op, int(x), int(y), dtype) for x, y in zip(a16, b16)]
        assert out.tolist() == want, op
        assert [fold_binary(op, int(x), int(y), dtype) for x, y in zip(a, b)] == want[:len(a)], op


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "uint64", "int64"])
@pytest.mark.parametrize("lanes", [1, 4])
def test_bit_ops_native_equal_the_interpreter(dtype: str, lanes: int) -> None:
    a, b = operands(dtype)
    a16, b16 = np.resize(a, 16), np.resize(b, 16)
    for op in BIT_OPS:
        func = kernel(dtype, op, lanes)
        want = np.zeros(16, dtype)
        run_primfunc(func, [a16, b16, want])
        got = [aligned(a16), aligned(b16), aligned(np.zeros(16, dtype))]
        assert compiled(func)(*got) == 0
        np.testing.assert_array_equal(got[2], want, err_msg=op)


def test_bit_ops_print_as_calls_and_parse_back() -> None:
    text = """primfn @k(%a: Buffer[(4), uint8], %o: Buffer[(4), uint8]) {
  for %i in range(0, 4) {
    %o[%i] = shift_right(bitwise_or(bitwise_and(%a[%i], uint8(12)), shift_left(%a[%i], uint8(1))),
      bitwise_xor(%a[%i], uint8(3)));
  }
}
"""
    assert print_primfunc("k", parse_primfunc(text, "p.tir")) == text


@pytest.mark.parametrize("op", BIT_OPS)
def test_bit_ops_refuse_float_and_bool_operands(op: str) -> None:
    for dtype, a in (("float32", "%f[0]"), ("bool", "%f[0] > 0f")):
        text = f"""primfn @k(%f: Buffer[(2), float32], %o: Buffer[(2), {dtype}]) {{
  %o[0] = {op}({a}, {a});
}}"""
        with pytest.raises(DiagnosticError, match=f"`{op}` needs integer operands, found {dtype}") as info:
            run_primfunc(parse_primfunc(text, "v.tir"), [np.zeros(2, np.float32), np.zeros(2, dtype)])
        assert (info.value.span.line, info.value.span.col) == (2, 11)


def test_shift_simplifies_only_to_its_defined_value() -> None:
    from irtool.tir_transform.simplify import simplify_expr
    assert simplify_expr(BinaryOp("shift_left", IntImm(3, "int8"), IntImm(6, "int8"))).value == -64   # 192 wrapped
    assert simplify_expr(BinaryOp("shift_right", IntImm(-3, "int8"), IntImm(9, "int8"))).value == -1
    assert simplify_expr(BinaryOp("shift_left", IntImm(1, "uint32"), IntImm(32, "uint32"))).value == 0


# name -> (reference on Python floats, arguments inside the domain)
NEW_INTRINSICS = {
    "tan": (math.tan, [-1.5, -0.3, 0.0, 0.7, 1.2, 3.0]),
    "asin": (math.asin, [-1.0, -0.6, 0.0, 0.25, 0.9, 1.0]),
    "acos": (math.acos, [-1.0, -0.6, 0.0, 0.25, 0.9, 1.0]),
    "atan": (math.atan, [-40.0, -0.6, 0.0, 0.25, 0.9, 1e6]),
    "sinh": (math.sinh, [-5.0, -0.6, 0.0, 1e-4, 0.9, 10.0]),
    "cosh": (math.cosh, [-5.0, -0.6, 0.0, 1e-4, 0.9, 10.0]),
    "asinh": (math.asinh, [-50.0, -0.6, 0.0, 1e-4, 0.9, 1e4]),
    "acosh": (math.acosh, [1.0, 1.0001, 1.5, 2.0, 30.0, 1e4]),
    "atanh": (math.atanh, [-0.99, -0.6, 0.0, 1e-4, 0.5, 0.9]),
}


@pytest.mark.parametrize("name", sorted(NEW_INTRINSICS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_new_intrinsics_native_and_interpreted_match_math(name: str, dtype: str) -> None:
    fn, args = NEW_INTRINSICS[name]
    values = np.array(args + args[:2], dtype)
    func = parse_primfunc(f"""primfn @k(%a: Buffer[(8), {dtype}], %out: Buffer[(8), {dtype}]) {{
  for %i in range(0, 2) {{
    %out[ramp(%i * 4, 1, 4)] = {name}(%a[ramp(%i * 4, 1, 4)]);
  }}
}}""", "m.tir")
    interp = np.zeros(8, dtype)
    run_primfunc(func, [values, interp])
    native = [aligned(values), aligned(np.zeros(8, dtype))]
    assert compiled(func)(*native) == 0
    expected = [fn(float(v)) for v in values]
    rtol = 1e-6 if dtype == "float32" else 1e-14   # numpy's SIMD versions may be 4 ulp off
    np.testing.assert_allclose(interp, expected, rtol=rtol, atol=1e-300)
    np.testing.assert_allclose(native[1], expected, rtol=rtol, atol=1e-300)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_fmod_is_c_fmod_in_both_backends(dtype: str) -> None:
    a = np.array([-4.5, 7.25, 5.0, 4.5, -7.25, 8.0, 3.0, -0.0], dtype)
    b = np.array([2.0, -3.5, 8.0, -2.0, 3.5, 5.0, 0.0, 1.0], dtype)
    func = parse_primfunc(f"""primfn @k(%a: Buffer[(8), {dtype}], %b: Buffer[(8), {dtype}], %out: Buffer[(8), {dtype}]) {{
  for %i in range(0, 8) {{
    %out[%i] = fmod(%a[%i], %b[%i]);
  }}
}}""", "m.tir")
    interp = np.zeros(8, dtype)
    run_primfunc(func, [a, b, interp])
    native = [aligned(a), aligned(b), aligned(np.zeros(8, dtype))]
    assert compiled(func)(*native) == 0
    # C fmod: the dividend's sign, exact; x fmod 0 is NaN; -0 stays -0.
    expected = [-0.5, 0.25, 5.0, 0.5, -0.25, 3.0, math.nan, -0.0]
    for got in (interp, native[2]):
        np.testing.assert_array_equal(got, np.array(expected, dtype))
        signs = np.signbit(got).tolist()
        assert signs[:6] + signs[7:] == [True, False, False, False, True, False, True]   # NaN's sign is the CPU's
