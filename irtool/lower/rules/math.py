"""Compute rules of the trigonometric functions, sign, NaN/infinity tests and remainders
(irtool/ops/definitions/math.py)."""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import BinaryOp, Call, PrimExpr, is_float
from irtool.lower.rules._rule import elementwise_rules
from irtool.lower.rules.elementwise import _intrinsic
from irtool.lower.te import cmp, imm, select
from irtool.ops.definitions.math import TRIG


def _sign(x: PrimExpr) -> PrimExpr:
    zero = imm(0, x.dtype)
    if x.dtype.startswith("uint"):
        return select(cmp("gt", x, zero), imm(1, x.dtype), zero)
    # Neither above nor below zero: a zero (numpy's is +0) or NaN (kept).
    rest = select(cmp("eq", x, x), zero, x) if is_float(x.dtype) else zero
    return select(cmp("gt", x, zero), imm(1, x.dtype), select(cmp("lt", x, zero), imm(-1, x.dtype), rest))


def _isnan(x: PrimExpr) -> PrimExpr:
    return cmp("ne", x, x) if is_float(x.dtype) else imm(False, "bool")


def _isinf(x: PrimExpr) -> PrimExpr:
    if not is_float(x.dtype):
        return imm(False, "bool")
    return cmp("eq", Call("fabs", (x,)), imm(float("inf"), x.dtype))


def _integer_remainder(a: PrimExpr, b: PrimExpr, rem: Callable[[PrimExpr, PrimExpr], PrimExpr]) -> PrimExpr:
    """An integer remainder by zero is 0 (numpy's); TIR's division by zero is an error."""
    zero = cmp("eq", b, imm(0, b.dtype))
    return select(zero, imm(0, a.dtype), rem(a, select(zero, imm(1, b.dtype), b)))


def _mod(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """C's remainder: fmod for floats, a - trunc(a / b) * b for integers (wrapping, so exact)."""
    if is_float(a.dtype):
        return Call("fmod", (a, b))
    return _integer_remainder(a, b, lambda p, q: BinaryOp("sub", p, BinaryOp("mul", BinaryOp("div", p, q), q)))


def _floor_mod(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """Python's remainder. Floats as numpy's: fmod, plus b when the signs differ; a zero result
    takes the divisor's sign."""
    if not is_float(a.dtype):
        return _integer_remainder(a, b, lambda p, q: BinaryOp("floormod", p, q))
    r = Call("fmod", (a, b))
    zero = imm(0, a.dtype)
    differ = cmp("ne", cmp("lt", r, zero), cmp("lt", b, zero))
    signed_zero = select(cmp("lt", b, zero), imm(-0.0, a.dtype), zero)
    return select(cmp("eq", r, zero), signed_zero, select(differ, BinaryOp("add", r, b), r))


FUNCTIONS: dict[str, Callable[..., PrimExpr]] = {
    **{name: _intrinsic(name) for name in TRIG},
    "sign": _sign, "isnan": _isnan, "isinf": _isinf, "mod": _mod, "floor_mod": _floor_mod,
}


elementwise_rules(FUNCTIONS)
