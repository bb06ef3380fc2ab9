"""Constant evaluation with the TIR interpreter's exact semantics (docs/tir.md, "Semantics").

Integers are computed with Python integers and wrapped to their width (as numpy wraps at run
time); floats with numpy scalars of the exact dtype, so float32 rounds after each operation just
as `run_primfunc` does. A fold that would not be exact, or whose result has no literal (NaN),
or that would raise at run time (integer division by zero) returns None: the expression is then
left for run time, which keeps its error.
"""

from __future__ import annotations

import math

import numpy as np

from irtool.eval.tir_interp import INTRINSIC_IMPLS
from irtool.core.span import Span
from irtool.ir.tir import (BIT_OPS, Broadcast, FloatImm, IntImm, PrimExpr, element_of, is_bool, is_float, is_int, lanes_of)

Number = int | float

_NUMPY_FLOATS = ("float16", "float32", "float64")


def scalar_const(expr: PrimExpr) -> Number | None:
    """The value of a literal, or of a broadcast literal (every lane equal), else None."""
    if type(expr) is Broadcast:
        expr = expr.value
    if type(expr) in (IntImm, FloatImm):
        return expr.value
    return None


def make_const(value: Number, dtype: str, span: Span | None = None) -> PrimExpr:
    """A literal of `dtype`; for a vector dtype, a broadcast of the lane value."""
    elem = element_of(dtype)
    scalar: PrimExpr = FloatImm(value, elem, span) if is_float(elem) else IntImm(int(value), elem, span)
    lanes = lanes_of(dtype)
    return scalar if lanes == 1 else Broadcast(scalar, lanes, span)


def int_range(dtype: str) -> tuple[int, int]:
    """The values an integer (or bool) dtype holds."""
    elem = element_of(dtype)
    if is_bool(elem):
        return 0, 1
    info = np.iinfo(elem)
    return int(info.min), int(info.max)


def wrap(value: int, dtype: str) -> int:
    """`value` reduced to the width of `dtype`, two's complement for signed types."""
    lo, hi = int_range(dtype)
    span = hi - lo + 1
    return (value - lo) % span + lo


def foldable(dtype: str) -> bool:
    """Whether constants of this (lane) dtype can be computed here (not bfloat16)."""
    elem = element_of(dtype)
    return is_int(elem) or is_bool(elem) or elem in _NUMPY_FLOATS


def _float_result(value: np.generic) -> float | None:
    out = float(value)
    return None if math.isnan(out) else out


def fold_binary(op: str, a: Number, b: Number, dtype: str) -> Number | None:
    """`a op b` for operands of lane dtype `dtype`; comparisons give 0/1."""
    elem = element_of(dtype)
    if not foldable(elem):
        return None
    if is_float(elem):
        return _fold_float(op, a, b, elem)
    a, b = int(a), int(b)
    lo, _ = int_range(elem)
    if op == "add":
        return wrap(a + b, elem)
    if op == "sub":
        return wrap(a - b, elem)
    if op == "mul":
        return wrap(a * b, elem)
    if op in ("div", "floordiv", "floormod"):
        if b == 0 or (a == lo and lo < 0):   # run-time error, or the overflowing corner of INT_MIN
            return None
        if op == "floordiv":
            return wrap(a // b, elem)
        if op == "floormod":
            return a % b
        quotient = abs(a) // abs(b)
        return wrap(-quotient if (a < 0) != (b < 0) else quotient, elem)
    if op == "min":
        return min(a, b)
    if op == "max":
        return max(a, b)
    if op == "and":
        return int(bool(a) and bool(b))
    if op == "or":
        return int(bool(a) or bool(b))
    if op in BIT_OPS:
        return _fold_bits(op, a, b, elem)
    return int(_compare(op, a, b))


def _fold_bits(op: str, a: int, b: int, elem: str) -> int:
    """Bit operations on two's-complement values (Python's `&`, `|`, `^` and `>>` already are)."""
    if op == "bitwise_and":
        return a & b
    if op == "bitwise_or":
        return a | b
    if op == "bitwise_xor":
        return a ^ b
    in_range = 0 <= b < np.iinfo(elem).bits
    if op == "shift_left":
        return wrap(a << b, elem) if in_range else 0
    return a >> b if in_range else (-1 if a < 0 else 0)


def _compare(op: str, a: object, b: object) -> bool:
    if op == "eq":
        return bool(a == b)
    if op == "ne":
        return bool(a != b)
    if op == "lt":
        return bool(a < b)
    if op == "le":
        return bool(a <= b)
    if op == "gt":
        return bool(a > b)
    if op == "ge":
        return bool(a >= b)
    raise ValueError(f"not an operator with a constant fold: {op}")


def _fold_float(op: str, a: Number, b: Number, elem: str) -> Number | None:
    t = np.dtype(elem).type
    x, y = t(a), t(b)
    with np.errstate(all="ignore"):
        if op == "add":
            return _float_result(x + y)
        if op == "sub":
            return _float_result(x - y)
        if op == "mul":
            return _float_result(x * y)
        if op == "div":
            return _float_result(x / y)
        if op == "min":
            return _float_result(np.minimum(x, y))
        if op == "max":
            return _float_result(np.maximum(x, y))
    return int(_compare(op, x, y))


def fold_cast(value: Number, source: str, target: str) -> Number | None:
    """`target(value)` for a value of dtype `source`, by the same numpy conversion as run time."""
    source, target = element_of(source), element_of(target)
    if not (foldable(source) and foldable(target)):
        return None
    with np.errstate(all="ignore"):
        out = np.array(value, dtype=np.dtype(source)).astype(np.dtype(target))[()]
    if is_float(target):
        return _float_result(out)
    return int(out)


def fold_intrinsic(name: str, values: list[Number], dtype: str) -> Number | None:
    elem = element_of(dtype)
    if elem not in _NUMPY_FLOATS:
        return None
    t = np.dtype(elem).type
    with np.errstate(all="ignore"):
        return _float_result(INTRINSIC_IMPLS[name](*(t(v) for v in values)))
