"""Index arithmetic with light constant folding, shared by lowering and loop unrolling.

Lowering builds every index through these (`irtool.lower.te` re-exports them), so the printed
TIR reads `%i + 1`, not `%i + 0 + 1`; expanding an `unrolled` loop (`irtool.tir_transform.unroll`)
folds the substituted copies with the same rules, so a loop a schedule writes compactly expands
to exactly the statements it would have written out one by one.
"""

from __future__ import annotations

from irtool.ir.tir import BinaryOp, IntImm, PrimExpr

INDEX = "int32"


def const(value: int, dtype: str = INDEX) -> IntImm:
    return IntImm(value, dtype)


def int_value(e: PrimExpr) -> int | None:
    """The value of an integer literal, else None."""
    return e.value if type(e) is IntImm else None  # type: ignore[attr-defined]


def add(a: PrimExpr, b: PrimExpr | int) -> PrimExpr:
    b = const(b) if isinstance(b, int) else b
    x, y = int_value(a), int_value(b)
    if x is not None and y is not None:
        return const(x + y, a.dtype)
    if y == 0:
        return a
    if x == 0:
        return b
    return BinaryOp("add", a, b)


def sub(a: PrimExpr, b: PrimExpr | int) -> PrimExpr:
    b = const(b) if isinstance(b, int) else b
    x, y = int_value(a), int_value(b)
    if x is not None and y is not None:
        return const(x - y, a.dtype)
    if y == 0:
        return a
    return BinaryOp("sub", a, b)


def mul(a: PrimExpr, b: PrimExpr | int) -> PrimExpr:
    b = const(b) if isinstance(b, int) else b
    x, y = int_value(a), int_value(b)
    if x is not None and y is not None:
        return const(x * y, a.dtype)
    if y == 1:
        return a
    if x == 1:
        return b
    if x == 0 or y == 0:
        return const(0, a.dtype)
    return BinaryOp("mul", a, b)


def floordiv(a: PrimExpr, n: int) -> PrimExpr:
    x = int_value(a)
    if x is not None:
        return const(x // n, a.dtype)
    return a if n == 1 else BinaryOp("floordiv", a, const(n, a.dtype))


def floormod(a: PrimExpr, n: int) -> PrimExpr:
    x = int_value(a)
    if x is not None:
        return const(x % n, a.dtype)
    return const(0, a.dtype) if n == 1 else BinaryOp("floormod", a, const(n, a.dtype))


def refold(node: BinaryOp) -> PrimExpr:
    """`node` built again by the helper above for its operator (a node whose operands became
    literals folds as if they had been literals from the start); other nodes as they are."""
    op, a, b = node.op, node.a, node.b
    if op in ("add", "sub", "mul"):
        return {"add": add, "sub": sub, "mul": mul}[op](a, b)
    n = int_value(b)
    if op in ("floordiv", "floormod") and n:
        return floordiv(a, n) if op == "floordiv" else floormod(a, n)
    return node
