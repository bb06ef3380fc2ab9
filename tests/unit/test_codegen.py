"""TIR → LLVM: hand-built kernels compiled natively agree with the TIR interpreter (and with
numpy where the expected value is evident), one feature at a time."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from irtool.codegen import TargetOptions, generate_module
from irtool.eval.tir_interp import run_primfunc
from irtool.ir.module import IRModule
from irtool.ir.tir import (Allocate, AssertStmt, BinaryOp, Broadcast, Buffer, BufferLoad, BufferStore, Call, Cast,
                           FloatImm, For, IfExpr, IfThenElse, IntImm, LetStmt, Not, PrimExpr, PrimFunc, Ramp, Select,
                           Var, seq)
from irtool.driver import build_kernels
from irtool.runtime import aligned_empty
from irtool.core.diagnostics import DiagnosticError


def _compile(func: PrimFunc, opt_level: int = 2, fast_math: bool = False) -> Callable[..., int]:
    mod = IRModule()
    mod.functions["f"] = func
    return build_kernels(mod, opt_level, fast_math=fast_math)["f"]


def _aligned(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def _same_as_interpreter(func: PrimFunc, arrays: list[np.ndarray], opt_level: int = 2) -> list[np.ndarray]:
    native = [_aligned(a) for a in arrays]
    interp = [a.copy() for a in arrays]
    assert _compile(func, opt_level)(*native) == 0
    run_primfunc(func, interp)
    for n, i in zip(native, interp):
        np.testing.assert_array_equal(n, i)
    return native


def _elementwise(n: int, dtype: str, body: Callable[[PrimExpr, PrimExpr], PrimExpr]) -> PrimFunc:
    """out[i] = body(a[i], b[i]) over n elements."""
    a, b, out = Buffer("a", (n,), dtype), Buffer("b", (n,), dtype), Buffer("out", (n,), dtype)
    i = Var("i", "int32")
    value = body(BufferLoad(a, [i]), BufferLoad(b, [i]))
    return PrimFunc([a, b, out], For(i, IntImm(0), IntImm(n), "serial", BufferStore(out, [i], value)))


@pytest.mark.parametrize("dtype", ["int32", "int8", "int64"])
@pytest.mark.parametrize("op", ["div", "floordiv", "floormod"])
def test_integer_division_rounds_like_the_interpreter(op: str, dtype: str) -> None:
    values = np.array([-7, 7, -8, 8, 0, 1, -1, 5, -5, 3], dtype)
    divisors = np.array([2, 2, -3, -3, 4, -4, 3, -1, 1, 7], dtype)
    func = _elementwise(10, dtype, lambda x, y: BinaryOp(op, x, y))
    out = _same_as_interpreter(func, [values, divisors, np.zeros(10, dtype)])[2]
    # Independent check: Python's own integer rules.
    ref = {"div": lambda p, q: abs(p) // abs(q) * (1 if (p < 0) == (q < 0) else -1),
           "floordiv": lambda p, q: p // q, "floormod": lambda p, q: p % q}[op]
    assert out.tolist() == [ref(int(p), int(q)) for p, q in zip(values, divisors)]


def test_division_by_minus_one_of_the_minimum_does_not_trap() -> None:
    values = np.array([np.iinfo(np.int32).min, 9], np.int32)
    func = _elementwise(2, "int32", lambda x, y: BinaryOp("div", x, y))
    out = _aligned(np.zeros(2, np.int32))
    assert _compile(func)(_aligned(values), _aligned(np.array([-1, -1], np.int32)), out) == 0
    assert out.tolist() == [np.iinfo(np.int32).min, -9]   # wraps, as int32 negation does


@pytest.mark.parametrize("op", ["min", "max", "add", "sub", "mul", "div"])
def test_float_arithmetic_is_exact_and_propagates_nan(op: str) -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal(37).astype(np.float32)
    b = rng.standard_normal(37).astype(np.float32)
    a[3] = np.nan
    b[5] = np.nan
    func = _elementwise(37, "float32", lambda x, y: BinaryOp(op, x, y))
    _same_as_interpreter(func, [a, b, np.zeros(37, np.float32)], opt_level=3)


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_store_bools_as_bytes(op: str) -> None:
    a = np.array([1.0, 2.0, np.nan, 3.0, -0.0], np.float32)
    b = np.array([1.0, 1.0, 1.0, np.nan, 0.0], np.float32)
    x, y, out = Buffer("x", (5,), "float32"), Buffer("y", (5,), "float32"), Buffer("out", (5,), "bool")
    i = Var("i", "int32")
    func = PrimFunc([x, y, out], For(i, IntImm(0), IntImm(5), "serial",
                                     BufferStore(out, [i], BinaryOp(op, BufferLoad(x, [i]), BufferLoad(y, [i])))))
    result = _same_as_interpreter(func, [a, b, np.zeros(5, bool)])[2]
    with np.errstate(invalid="ignore"):
        expected = {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[op]
    assert result.tolist() == expected.tolist()


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int32", "float32"), ("float32", "float16"),
                                     ("int32", "int8"), ("int8", "int64"), ("uint8", "int32"), ("float32", "bool"),
                                     ("bool", "float32"), ("float64", "float32"), ("int32", "uint8")])
def test_casts(src: str, dst: str) -> None:
    values = {"float32": [1.5, -2.7, 0.0, 100.25], "float64": [1e-3, -2.5, 3.0, 7.125], "int32": [300, -5, 0, 7],
              "int8": [-128, 127, 0, -1], "uint8": [255, 0, 128, 7], "bool": [True, False, True, False]}[src]
    x, out = Buffer("x", (4,), src), Buffer("out", (4,), dst)
    i = Var("i", "int32")
    func = PrimFunc([x, out], For(i, IntImm(0), IntImm(4), "serial",
                                  BufferStore(out, [i], Cast(dst, BufferLoad(x, [i])))))
    _same_as_interpreter(func, [np.array(values, src), np.zeros(4, dst)])


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "tanh", "sigmoid", "erf", "rsqrt", "floor", "ceil", "round",
                                  "trunc", "fabs", "sin", "cos", "exp2", "log2", "log10"])
def test_intrinsics_match_numpy_within_a_few_ulp(name: str) -> None:
    a = np.array([0.5, 1.25, 2.5, 3.5, -2.5, 0.1, 7.0, 1e-3], np.float32)
    if name in ("log", "sqrt", "rsqrt", "log2", "log10"):
        a = np.abs(a)
    x, out = Buffer("x", (8,), "float32"), Buffer("out", (8,), "float32")
    i = Var("i", "int32")
    func = PrimFunc([x, out], For(i, IntImm(0), IntImm(8), "serial",
                                  BufferStore(out, [i], Call(name, [BufferLoad(x, [i])]))))
    native = [_aligned(a), _aligned(np.zeros(8, np.float32))]
    assert _compile(func)(*native) == 0
    interp = [a.copy(), np.zeros(8, np.float32)]
    run_primfunc(func, interp)
    # libm and numpy's SIMD transcendental functions may differ in the last bits.
    np.testing.assert_allclose(native[1], interp[1], rtol=4e-7, atol=1e-7)
    if name == "round":   # half to even, independently
        assert native[1].tolist() == [0.0, 1.0, 2.0, 4.0, -2.0, 0.0, 7.0, 0.0]


def test_vector_ramp_broadcast_and_vectorized_loop() -> None:
    a, b, out = (Buffer(n, (4, 16), "float32", align=64) for n in ("a", "b", "out"))
    j = Var("j", "int32")
    lanes = Ramp(IntImm(0), IntImm(1), 16)
    value = BinaryOp("max", BinaryOp("add", BufferLoad(a, [j, lanes]), BufferLoad(b, [j, lanes])),
                     Broadcast(FloatImm(0.0), 16))
    func = PrimFunc([a, b, out], For(j, IntImm(0), IntImm(4), "vectorized", BufferStore(out, [j, lanes], value)))
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal((4, 16)).astype(np.float32)
    result = _same_as_interpreter(func, [x, y, np.zeros((4, 16), np.float32)])[2]
    np.testing.assert_array_equal(result, np.maximum(x + y, 0))
    text = generate_module(_module(func), "m", TargetOptions(opt_level=0)).ir
    assert "<16 x float>" in text and "llvm.loop.vectorize.enable" in text


def test_literal_arithmetic_and_ramps_fold_to_wrapped_constants() -> None:
    """Arithmetic on integer literals and ramps of literal operands are emitted as constants; the
    folded values wrap in the dtype's width, as the instructions they replace would."""
    out, wide, small = Buffer("out", (4,), "int32"), Buffer("wide", (1,), "int32"), Buffer("small", (2,), "uint8")
    func = PrimFunc([out, wide, small], seq([
        BufferStore(out, [Ramp(IntImm(0), IntImm(1), 4)], Ramp(IntImm(2147483646), IntImm(1), 4)),
        BufferStore(wide, [IntImm(0)], BinaryOp("mul", IntImm(65536), IntImm(65537))),
        BufferStore(small, [IntImm(0)], BinaryOp("sub", IntImm(3, "uint8"), IntImm(5, "uint8"))),
        BufferStore(small, [IntImm(1)], BinaryOp("mul", IntImm(16, "uint8"), IntImm(17, "uint8")))]))
    result = _same_as_interpreter(func, [np.zeros(4, np.int32), np.zeros(1, np.int32), np.zeros(2, np.uint8)])
    # Independently: the exact values modulo 2^32 and 2^8.
    np.testing.assert_array_equal(result[0], (np.arange(4) + 2147483646).astype(np.int64).astype(np.int32))
    assert result[1].tolist() == [65536] and result[2].tolist() == [254, 16]
    text = generate_module(_module(func), "m", TargetOptions(opt_level=0)).ir
    assert "<i32 2147483646, i32 2147483647, i32 -2147483648, i32 -2147483647>" in text
    assert "store i32 65536," in text and "store i8 -2," not in text and "store i8 254," in text
    assert "insertelement" not in text and " mul " not in text and " sub " not in text


def test_strided_gather_and_scatter() -> None:
    """A ramp of stride 2 in the last dimension, and a vector index in a non-last dimension."""
    a, out = Buffer("a", (8, 8), "int32"), Buffer("out", (4, 8), "int32")
    r = Var("r", "int32")
    func = PrimFunc([a, out], For(r, IntImm(0), IntImm(8), "serial", BufferStore(
        out, [Ramp(IntImm(0), IntImm(1), 4), Broadcast(r, 4)],
        BufferLoad(a, [Broadcast(r, 4), Ramp(IntImm(1), IntImm(2), 4)]))))
    x = np.arange(64, dtype=np.int32).reshape(8, 8)
    result = _same_as_interpreter(func, [x, np.zeros((4, 8), np.int32)])[1]
    np.testing.assert_array_equal(result, x[:, 1::2].T)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int8", "uint16", "bool"])
def test_lanes_at_unrelated_addresses_are_one_masked_gather_and_scatter(dtype: str) -> None:
    """A vector index in a non-last dimension reads and writes lanes a row apart: one
    `llvm.masked.gather`/`scatter` of every lane (names mangled for each element type; a bool is
    a byte in memory), not an access per lane."""
    a, out = Buffer("a", (8, 8), dtype), Buffer("out", (8, 8), dtype)
    c = Var("c", "int32")
    func = PrimFunc([a, out], For(c, IntImm(0), IntImm(8), "serial", BufferStore(
        out, [Ramp(IntImm(0), IntImm(1), 8), Broadcast(c, 8)], BufferLoad(a, [Ramp(IntImm(0), IntImm(1), 8),
                                                                              Broadcast(c, 8)]))))
    text = generate_module(_module(func), "m", TargetOptions(opt_level=0)).ir
    assert text.count("call <8 x ") == 1 and "@llvm.masked.gather.v8" in text
    assert text.count("call void @llvm.masked.scatter.v8") == 1 and "extractelement" not in text
    x = (np.arange(64) % 3 == 0) if dtype == "bool" else np.arange(64).astype(dtype)
    result = _same_as_interpreter(func, [x.reshape(8, 8), np.zeros((8, 8), dtype)])[1]
    np.testing.assert_array_equal(result, x.reshape(8, 8))


def _module(func: PrimFunc) -> IRModule:
    mod = IRModule()
    mod.functions["f"] = func
    return mod


def test_let_if_select_if_then_else_and_local_accumulator() -> None:
    """Row sums of positive entries with an if/else, a select and a guarded (padding) load."""
    a, out = Buffer("a", (3, 5), "float32"), Buffer("out", (3,), "float32")
    acc = Buffer("acc", (1,), "float32", scope="local")
    i, k, x = Var("i", "int32"), Var("k", "int32"), Var("x", "float32")
    guarded = IfExpr(BinaryOp("lt", BinaryOp("add", k, IntImm(1)), IntImm(5)),
                     BufferLoad(a, [i, BinaryOp("add", k, IntImm(1))]), FloatImm(0.0))
    body = seq([
        BufferStore(acc, [IntImm(0)], FloatImm(0.0)),
        For(k, IntImm(0), IntImm(5), "unrolled", LetStmt(x, BufferLoad(a, [i, k]), IfThenElse(
            BinaryOp("gt", x, FloatImm(0.0)),
            BufferStore(acc, [IntImm(0)], BinaryOp("add", BufferLoad(acc, [IntImm(0)]), x)),
            BufferStore(acc, [IntImm(0)], BinaryOp("add", BufferLoad(acc, [IntImm(0)]),
                                                   Select(Not(BinaryOp("lt", x, FloatImm(-1.0))), guarded,
                                                          FloatImm(0.0))))))),
        BufferStore(out, [i], BufferLoad(acc, [IntImm(0)])),
    ])
    func = PrimFunc([a, out], For(i, IntImm(0), IntImm(3), "parallel", Allocate(acc, body)))
    x_ = np.array([[1, -0.5, 2, -3, 4], [-2, -0.25, 0.5, 1, -1], [0, 0, 0, 0, 0]], np.float32)
    _same_as_interpreter(func, [x_, np.zeros(3, np.float32)])


def test_large_scratch_buffer_comes_from_the_heap() -> None:
    n = 40_000   # 160 kB: more than the stack limit for scratch buffers
    a, out = Buffer("a", (n,), "float32"), Buffer("out", (n,), "float32")
    tmp = Buffer("tmp", (n,), "float32")
    i, j = Var("i", "int32"), Var("j", "int32")
    func = PrimFunc([a, out], Allocate(tmp, seq([
        For(i, IntImm(0), IntImm(n), "serial", BufferStore(tmp, [i], BinaryOp("mul", BufferLoad(a, [i]),
                                                                                FloatImm(2.0)))),
        For(j, IntImm(0), IntImm(n), "serial", BufferStore(out, [j], BufferLoad(tmp, [j]))),
    ])))
    assert "aligned_alloc" in generate_module(_module(func), "m", TargetOptions(opt_level=0)).ir
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    result = _same_as_interpreter(func, [x, np.zeros(n, np.float32)])[1]
    np.testing.assert_array_equal(result, x * 2)


def test_failed_assert_returns_its_status() -> None:
    a = Buffer("a", (2,), "int32")
    func = PrimFunc([a], AssertStmt(BinaryOp("gt", BufferLoad(a, [IntImm(0)]), IntImm(0)), "a[0] must be positive"))
    kernel = _compile(func)
    assert kernel(_aligned(np.array([1, 0], np.int32))) == 0
    assert kernel(_aligned(np.array([-1, 0], np.int32))) == 16


def test_fast_math_marks_float_instructions() -> None:
    func = _elementwise(8, "float32", lambda x, y: BinaryOp("add", BinaryOp("mul", x, y), x))
    strict = generate_module(_module(func), "m", TargetOptions(opt_level=0)).ir
    fast = generate_module(_module(func), "m", TargetOptions(opt_level=0, fast_math=True)).ir
    assert "fmul float" in strict and "fmul fast float" in fast


def test_buffer_parameters_are_noalias_and_aligned_with_read_write_facts() -> None:
    func = _elementwise(8, "float32", lambda x, y: BinaryOp("add", x, y))
    ir = generate_module(_module(func), "m", TargetOptions(opt_level=0)).ir
    assert ("define i32 @m_f(ptr noalias nocapture readonly align 4 %b0, ptr noalias nocapture readonly align 4 %b1, "
            "ptr noalias nocapture writeonly align 4 %b2)") in ir


def test_kernel_library_checks_arguments() -> None:
    func = _elementwise(4, "float32", lambda x, y: BinaryOp("add", x, y))
    kernel = _compile(func)
    with pytest.raises(DiagnosticError, match="buffer `%b` needs a C-contiguous float32 array of shape"):
        kernel(_aligned(np.zeros(4, np.float32)), np.zeros(5, np.float32), np.zeros(4, np.float32))


def test_scope_errors_are_located() -> None:
    a = Buffer("a", (2,), "int32")
    stray = Var("k", "int32")
    func = PrimFunc([a], BufferStore(a, [stray], IntImm(0)))
    with pytest.raises(DiagnosticError, match="variable %k is used outside its scope"):
        generate_module(_module(func), "m", TargetOptions(opt_level=0))


def test_vectorized_loop_with_straight_line_body_becomes_vector_code() -> None:
    """out[i] = relu(a[i] * b[i] + c) over a `vectorized(0, 16)` inner loop, with a let."""
    a, b, out = (Buffer(n, (3, 16), "float32") for n in ("a", "b", "out"))
    i, j, t = Var("i", "int32"), Var("j", "int32"), Var("t", "float32")
    body = LetStmt(t, BinaryOp("mul", BufferLoad(a, [i, j]), BufferLoad(b, [i, j])),
                   BufferStore(out, [i, j], BinaryOp("max", BinaryOp("add", t, FloatImm(0.5)), FloatImm(0.0))))
    func = PrimFunc([a, b, out], For(i, IntImm(0), IntImm(3), "serial", For(j, IntImm(0), IntImm(16), "vectorized",
                                                                             body)))
    ir = generate_module(_module(func), "m", TargetOptions(opt_level=0)).ir
    assert "load <16 x float>" in ir and "store <16 x float>" in ir and "llvm.loop.vectorize" not in ir
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((3, 16)).astype(np.float32), rng.standard_normal((3, 16)).astype(np.float32)
    result = _same_as_interpreter(func, [x, y, np.zeros((3, 16), np.float32)])[2]
    np.testing.assert_array_equal(result, np.maximum(x * y + np.float32(0.5), 0))


def test_vectorized_reduction_is_left_to_llvm() -> None:
    a, out = Buffer("a", (16,), "float32"), Buffer("out", (1,), "float32")
    j = Var("j", "int32")
    func = PrimFunc([a, out], seq([BufferStore(out, [IntImm(0)], FloatImm(0.0)), For(
        j, IntImm(0), IntImm(16), "vectorized",
        BufferStore(out, [IntImm(0)], BinaryOp("add", BufferLoad(out, [IntImm(0)]), BufferLoad(a, [j]))))]))
    ir = generate_module(_module(func), "m", TargetOptions(opt_level=0)).ir
    assert "llvm.loop.vectorize.enable" in ir
    x = np.arange(16, dtype=np.float32)
    assert _same_as_interpreter(func, [x, np.zeros(1, np.float32)])[1][0] == 120.0


def test_vectorized_loop_storing_to_one_place_keeps_every_iteration() -> None:
    """`out[0] = out[0] + 1` in a vectorized loop does not use the loop variable: it is a
    reduction over iterations, so it must still run 8 times."""
    out = Buffer("out", (1,), "int32")
    j = Var("j", "int32")
    func = PrimFunc([out], For(j, IntImm(0), IntImm(8), "vectorized",
                               BufferStore(out, [IntImm(0)], BinaryOp("add", BufferLoad(out, [IntImm(0)]), IntImm(1)))))
    assert _same_as_interpreter(func, [np.zeros(1, np.int32)])[0][0] == 8


def _doubling_chain(depth: int) -> PrimFunc:
    """out[i] = x_depth, x_0 = a[i] + b[i], x_k = x_(k-1) + x_(k-1): a DAG of `depth` nodes whose
    tree has 2^depth."""
    return _elementwise(4, "float32", lambda x, y: _double(BinaryOp("add", x, y), depth - 1))


def _double(value: PrimExpr, times: int) -> PrimExpr:
    for _ in range(times):
        value = BinaryOp("add", value, value)
    return value


def test_shared_subexpressions_are_emitted_once() -> None:
    ir = generate_module(_module(_doubling_chain(200)), "m", TargetOptions(opt_level=0)).ir
    assert ir.count("fadd float") == 200 and ir.count("load float") == 2
    a, b = _aligned(np.array([2.0 ** -149, 2.0 ** -140, -(2.0 ** -145), 0.0], np.float32)), _aligned(np.zeros(4, np.float32))
    out = _aligned(np.zeros(4, np.float32))
    assert _compile(_doubling_chain(200))(a, b, out) == 0
    np.testing.assert_array_equal(out, [2.0 ** 50, 2.0 ** 59, -(2.0 ** 54), 0.0])   # a * 2^199, exactly


def test_a_value_shared_into_a_conditional_arm_is_recomputed_outside_it() -> None:
    """`a + b` first computed inside the taken arm of an `if_then_else` does not dominate the
    join; codegen computes it again there (LLVM's verifier rejects the IR otherwise)."""
    def body(x: PrimExpr, y: PrimExpr) -> PrimExpr:
        s = BinaryOp("add", x, y)
        guarded = IfExpr(BinaryOp("gt", x, FloatImm(0.0)), s, FloatImm(1.0))
        return BinaryOp("mul", guarded, s)
    func = _elementwise(4, "float32", body)
    ir = generate_module(_module(func), "m", TargetOptions(opt_level=0)).ir
    assert ir.count("fadd float") == 2
    a, b = np.array([1.0, -1.0, 2.0, 0.0], np.float32), np.array([3.0, 5.0, -1.0, 4.0], np.float32)
    out = _same_as_interpreter(func, [a, b, np.zeros(4, np.float32)])[2]
    np.testing.assert_array_equal(out, [16.0, 4.0, 1.0, 4.0])


def test_a_loop_bound_outside_the_loop_variable_type_is_refused() -> None:
    """Hand-built TIR whose int32 loop would run to 3e9 is refused, not silently wrapped."""
    a, i = Buffer("a", (4,), "int8"), Var("i", "int32")
    func = PrimFunc([a], For(i, IntImm(0), IntImm(3_000_000_000), "serial",
                             BufferStore(a, [IntImm(0)], IntImm(1, "int8"))))
    with pytest.raises(DiagnosticError, match="loop bound 3000000000 does not fit the int32 loop variable %i"):
        generate_module(_module(func), "m", TargetOptions(opt_level=0))
