"""The inline float32 `exp`/`tanh`/`erf` (irtool/codegen/vector_math.py) against float64 numpy
(Python's `math.erf` for erf) rounded to float32: within 2 ulp everywhere, with the right inf/NaN/zero/subnormal results, the same bits in
vector lanes and scalar remainders, and no libm call on a generic x86-64 target."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import irtool
from irtool.codegen import TargetOptions, compile_module
from irtool.codegen.compile import emit_asm, emit_llvm
from irtool.driver import prepare
from irtool.syntax.parser import parse
from support.ulps import ulps

SMALLEST_NORMAL = np.finfo(np.float32).tiny


def module(op: str, shape: str, dtype: str = "float32"):  # noqa: ANN201
    return parse(f'#[version = "0.0.5"]\ndef @main(%x: Tensor[({shape}), {dtype}]) {{ {op}(%x) }}', "math.relay")


def reference(op: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        if op == "erf":
            return np.array([math.erf(v) for v in x.astype(np.float64).tolist()]).astype(np.float32)
        return getattr(np, op)(x.astype(np.float64)).astype(np.float32)


def sweep(low: float, high: float) -> np.ndarray:
    """2^20 evenly spread values, 2^16 random bit patterns (every exponent, NaNs, infs) and the
    neighbours of a few hundred points, so each routine's branch boundaries are crossed."""
    rng = np.random.default_rng(14)
    bits = rng.integers(0, 2**32, 2**16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([np.linspace(low, high, 2**20, dtype=np.float32), bits])


def run(op: str, x: np.ndarray, cpu: str = "native", fast_math: bool = False) -> np.ndarray:
    return irtool.build(module(op, str(x.size)), cpu=cpu, fast_math=fast_math)(x)


def check_against_float64(op: str, x: np.ndarray, got: np.ndarray) -> None:
    want = reference(op, x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    got, want, x = got[finite], want[finite], x[finite]
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])   # inf exactly where due
    error = ulps(got, want)
    assert error.max() <= 2, (x[error.argmax()], got[error.argmax()], want[error.argmax()])
    # Same class: subnormal where the exact result rounds to a subnormal (not flushed), zero where to zero.
    def classes(v: np.ndarray) -> np.ndarray:
        return np.select([v == 0, np.abs(v) < SMALLEST_NORMAL], [0, 1], 2)
    np.testing.assert_array_equal(classes(got), classes(want))


@pytest.mark.parametrize("op,low,high", [("exp", -104.0, 89.0), ("tanh", -10.0, 10.0), ("erf", -6.0, 6.0)])
def test_dense_sweep_is_within_two_ulp(op: str, low: float, high: float) -> None:
    x = sweep(low, high)
    check_against_float64(op, x, run(op, x))


def test_exp_edge_cases() -> None:
    x = np.array([np.inf, -np.inf, np.nan, 88.72, 88.73, 89.0, 1e30, -87.33, -87.34, -103.9, -103.98, -104.0,
                  -1e30, 0.0, -0.0, 1e-30, -1e-30, 1e-45, 1.0, -1.0, 0.5], np.float32)
    got = run("exp", x)
    check_against_float64("exp", x, got)
    assert got[0] == np.inf and got[1] == 0 and np.isnan(got[2])
    assert np.isfinite(got[3]) and got[3] > 3.3e38 and got[4] == got[5] == got[6] == np.inf   # e^88.72 = 3.36e38
    assert got[7] >= SMALLEST_NORMAL > got[8] > 0    # e^-87.3365 = 2^-126, the least normal
    assert 0 < got[9] < SMALLEST_NORMAL              # subnormal: e^-103.97 = 2^-150
    assert got[10] == got[11] == got[12] == 0
    assert got[13] == got[14] == got[15] == got[16] == got[17] == 1.0
    assert got[18] == np.float32(np.e) and got[19] == np.float32(1 / np.e)


def test_tanh_edge_cases() -> None:
    x = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-45, np.inf, -np.inf, np.nan, 0.62499994, 0.625, -0.625, 9.1, -20.0],
                 np.float32)
    got = run("tanh", x)
    check_against_float64("tanh", x, got)
    assert got[:5].tolist() == x[:5].tolist() and np.signbit(got[1])   # tanh(x) = x for tiny x, -0 kept
    assert got[5] == 1 and got[6] == -1 and np.isnan(got[7])
    assert got[11] == 1 and got[12] == -1


def test_erf_edge_cases() -> None:
    x = np.array([0.0, -0.0, 1e-30, -1e-45, np.inf, -np.inf, np.nan, 0.99999994, 1.0, -1.0, 4.5, -10.0], np.float32)
    got = run("erf", x)
    check_against_float64("erf", x, got)
    assert got[0] == 0 and not np.signbit(got[0]) and got[1] == 0 and np.signbit(got[1])
    assert got[2] > 0 > got[3] and np.isnan(got[6])
    assert got[4] == 1 and got[5] == -1 and got[10] == 1 and got[11] == -1


def test_vector_lanes_and_scalar_remainder_agree_bitwise() -> None:
    # 35 elements: a row longer than one vector statement (te's SHORT_ROW), a loop LLVM
    # vectorizes with a scalar remainder
    x = np.linspace(-90, 80, 35, dtype=np.float32) + np.float32(0.37)
    mod = prepare(module("exp", "35"), TargetOptions())
    optimised = emit_llvm(compile_module(mod, "m", TargetOptions()))
    assert re.search(r"llvm\.fma\.v\d+f32", optimised) and "llvm.fma.f32" in optimised   # both kinds ran
    for op in ("exp", "tanh", "sigmoid", "erf"):
        whole = run(op, x)
        single = irtool.build(module(op, "1"))
        for k in range(x.size):
            assert single(x[k:k + 1]).view(np.uint32)[0] == whole.view(np.uint32)[k], (op, k)


@pytest.mark.parametrize("op", ["sigmoid", "erf"])
def test_generic_x86_64_calls_no_libm_exp_and_is_correct(op: str) -> None:
    mod = prepare(module(op, "37"), TargetOptions(cpu="x86-64"))
    asm = emit_asm(compile_module(mod, "m", TargetOptions(cpu="x86-64", triple="x86_64-unknown-linux-gnu")))
    assert not re.search(r"\b(expf|tanhf|erff)\b", asm) and "vfmadd" not in asm   # fma is `fmaf` without FMA
    x = sweep(-104, 89)
    check_against_float64("exp", x, run("exp", x, cpu="x86-64"))


def test_fast_math_keeps_the_rounding_trick() -> None:
    x = np.linspace(-104, 89, 4099, dtype=np.float32)
    check_against_float64("exp", x, run("exp", x, fast_math=True))


def test_sigmoid_and_half_exp_go_through_the_routine() -> None:
    x = np.linspace(-30, 30, 1001, dtype=np.float32)
    want = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    assert ulps(run("sigmoid", x), want).max() <= 3     # exp's 2 plus the division's rounding
    h = np.linspace(-17, 11, 999, dtype=np.float16)
    got = irtool.build(module("exp", "999", "float16"))(h)
    want16 = np.exp(h.astype(np.float64)).astype(np.float16)
    assert np.abs(got.view(np.int16).astype(int) - want16.view(np.int16).astype(int)).max() <= 1


def test_sigmoid_is_one_over_one_plus_exp_bitwise_and_zero_in_the_subnormal_tail() -> None:
    """sigmoid's exp applies 2^n at once: the same bits as `exp` wherever the result is normal."""
    x = np.linspace(-88.3, 87.3, 4001, dtype=np.float32)
    one = np.float32(1)
    want = one / (one + run("exp", -x))
    assert (run("sigmoid", x).view(np.uint32) == want.view(np.uint32)).all()
    tail = run("sigmoid", np.array([-88.4, -100.0, -np.inf, 88.0, np.inf, np.nan], np.float32))
    assert tail[:3].tolist() == [0, 0, 0] and tail[3] == tail[4] == 1 and np.isnan(tail[5])


def test_float64_sigmoid_compiles_as_one_over_one_plus_exp() -> None:
    """float64 has no inline routine: the division form (a property test found sigmoid refused
    for it once float32's moved to the routine)."""
    x = np.linspace(-40.0, 40.0, 37)
    got = irtool.build(module("sigmoid", "37", "float64"))(x=x)
    np.testing.assert_allclose(got, 1.0 / (1.0 + np.exp(-x)), rtol=1e-15, atol=0)
