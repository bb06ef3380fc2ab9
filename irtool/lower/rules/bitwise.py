"""Compute rules of the bit operations and `logical_xor` (irtool/ops/definitions/bitwise.py)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from irtool.ir.tir import BinaryOp, PrimExpr, is_bool
from irtool.lower.rules._rule import elementwise_rules
from irtool.lower.te import cast, cmp, imm

# Relay name -> TIR operator (TIR's shifts have the registry's out-of-range rule).
_TIR_OPS = {"bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
            "left_shift": "shift_left", "right_shift": "shift_right"}


def _logical_xor(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if is_bool(a.dtype):
        return cmp("ne", a, b)
    return cast(a.dtype, cmp("ne", cmp("ne", a, imm(0, a.dtype)), cmp("ne", b, imm(0, b.dtype))))


FUNCTIONS: dict[str, Callable[..., PrimExpr]] = {
    **{name: partial(BinaryOp, op) for name, op in _TIR_OPS.items()},
    "bitwise_not": lambda x: BinaryOp("bitwise_xor", x, imm(-1, x.dtype)),   # all ones
    "logical_xor": _logical_xor,
}


elementwise_rules(FUNCTIONS)
