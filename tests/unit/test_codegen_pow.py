"""`power` by the constant 2 or 3 is multiplies, not a libm `pow` call per lane.

GPT-2's exported GELU computes `Pow(x, 3)`; LLVM rewrites `pow(x, 3.0)` only under fast-math,
so each lane called `powf`. The multiplies must keep `powf`'s answers (x*x exactly, x*x*x to 1
ulp of the exact power), with its
infinities, NaNs and signed zeros; another exponent still calls `pow`.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import irtool
from irtool.codegen import TargetOptions, compile_module
from irtool.codegen.compile import emit_llvm
from irtool.driver import prepare
from irtool.syntax.parser import parse
from support.ulps import ulps


def module(exponent: str, size: int):  # noqa: ANN201
    return parse(f'#[version = "0.0.5"]\ndef @main(%x: Tensor[({size}), float32]) {{ power(%x, {exponent}) }}',
                 "pow.relay")


def llvm_ir(exponent: str) -> str:
    """The optimised LLVM IR (a length-37 tensor: vector body and scalar remainder)."""
    options = TargetOptions()
    return emit_llvm(compile_module(prepare(module(exponent, 37), options), "m", options))


@pytest.mark.parametrize("exponent", ["2f", "3f"])
def test_small_integer_powers_are_multiplies(exponent: str) -> None:
    ir = llvm_ir(exponent)
    assert not re.search(r"@(llvm\.pow|powf?)\b", ir) and "fmul" in ir


def test_other_exponents_still_call_pow() -> None:
    assert all(re.search(r"@(llvm\.pow|powf?)\b", llvm_ir(e)) for e in ("2.5f", "4f"))


@pytest.mark.parametrize("n, bound", [(2, 0), (3, 1)])
def test_small_integer_powers_match_the_exact_power(n: int, bound: int) -> None:
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(4096).astype(np.float32) * 4,
                        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 3e12, -3e12], np.float32)])
    got = irtool.build(module(f"{n}f", x.size))(x)
    with np.errstate(over="ignore", under="ignore"):
        want = (x.astype(np.float64) ** n).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[finite]), np.signbit(want[finite]))   # -0 ** 3 is -0
    assert ulps(got[finite], want[finite]).max() <= bound, n   # x*x is correctly rounded; x*x*x rounds twice
