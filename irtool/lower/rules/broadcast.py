"""Compute rules of the broadcasting binary operators and `where` (definitions/broadcast.py)."""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import BinaryOp, Call, PrimExpr, is_bool, is_float
from irtool.ir.types import Type
from irtool.lower.rules._rule import Attrs, elementwise, rule
from irtool.lower.te import Tensor, cast, cmp, imm, select


def _divide(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if is_float(a.dtype):
        return BinaryOp("div", a, b)
    # Truncating integer division; numpy's (and so Relay's) x / 0 is 0.
    zero = cmp("eq", b, imm(0, b.dtype))
    return select(zero, imm(0, a.dtype), BinaryOp("div", a, select(zero, imm(1, b.dtype), b)))


def _power(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if is_float(a.dtype):
        return Call("pow", (a, b))
    # Integer power as the reference computes it: a ** max(b, 0), and 0 for negative b.
    # Computed in float64 and converted back (exact for the results that fit).
    p = cast(a.dtype, Call("pow", (cast("float64", a), cast("float64", BinaryOp("max", b, imm(0, b.dtype))))))
    return select(cmp("lt", b, imm(0, b.dtype)), imm(0, a.dtype), p)


def _logical(op: str) -> Callable[[PrimExpr, PrimExpr], PrimExpr]:
    def f(a: PrimExpr, b: PrimExpr) -> PrimExpr:
        if is_bool(a.dtype):
            return BinaryOp(op, a, b)
        truth = BinaryOp(op, cmp("ne", a, imm(0, a.dtype)), cmp("ne", b, imm(0, b.dtype)))
        return cast(a.dtype, truth)
    return f


BINARY: dict[str, Callable[[PrimExpr, PrimExpr], PrimExpr]] = {
    "add": lambda a, b: BinaryOp("add", a, b),
    "subtract": lambda a, b: BinaryOp("sub", a, b),
    "multiply": lambda a, b: BinaryOp("mul", a, b),
    "divide": _divide,
    "power": _power,
    "maximum": lambda a, b: BinaryOp("max", a, b),
    "minimum": lambda a, b: BinaryOp("min", a, b),
    "logical_and": _logical("and"),
    "logical_or": _logical("or"),
    "equal": lambda a, b: BinaryOp("eq", a, b),
    "not_equal": lambda a, b: BinaryOp("ne", a, b),
    "less": lambda a, b: BinaryOp("lt", a, b),
    "less_equal": lambda a, b: BinaryOp("le", a, b),
    "greater": lambda a, b: BinaryOp("gt", a, b),
    "greater_equal": lambda a, b: BinaryOp("ge", a, b),
}


def _binary_rule(name: str, fn: Callable[[PrimExpr, PrimExpr], PrimExpr]) -> None:
    @rule(name)
    def lower(args: list, attrs: Attrs, out: Type) -> Tensor:
        return elementwise(out, args, fn, name)


for _name, _fn in BINARY.items():
    _binary_rule(_name, _fn)


@rule("where")
def _where(args: list, attrs: Attrs, out: Type) -> Tensor:
    def f(c: PrimExpr, x: PrimExpr, y: PrimExpr) -> PrimExpr:
        return select(c if is_bool(c.dtype) else cmp("ne", c, imm(0, c.dtype)), x, y)
    return elementwise(out, args, f, "where")
