"""The TIR arithmetic simplifier and statement cleanup behind `tir-simplify`.

Every rewrite is exact under the interpreter's semantics: integer identities hold in wrapping
arithmetic (so `(x + 3) + 4 -> x + 7` is fine, reordering float operations is not done at all),
float identities are only those that hold bit for bit (`x * 1`, `x / 1`, `x - 0`, `x + -0`),
and a rewrite may drop the evaluation of an operand (`x * 0 -> 0` for integers), which can only
remove a run-time error, never add one. Rules that need value ranges use the integer bounds of
loop variables with literal bounds (and of `let`s of bounded values); a bound is only used when
no intermediate value can wrap.

Statements: a loop with a literal extent of 0 disappears and one of 1 becomes its body with the
loop variable replaced by the start; `if`/`assert` with a literal condition and `select` /
`if_then_else` with one resolve; `let`s of literals or variables are substituted; unused `let`s,
empty loops, blocks and allocations and no-op `evaluate`s are removed.
"""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import (COMPARE_OPS, Allocate, AssertStmt, BinaryOp, Broadcast, Call, Cast, Evaluate, For, IfExpr,
                           IfThenElse, IntImm, LetStmt, Not, PrimExpr, PrimFunc, Ramp, Select, Stmt, Var, is_float,
                           is_int, lanes_of)
from irtool.tir_transform.fold import (Number, fold_binary, fold_cast, fold_intrinsic, int_range, make_const,
                                       scalar_const)
from irtool.tir_transform.mutator import TirRewriter, is_const, is_empty, stmt_parts, walk_exprs

Bounds = tuple[int, int]


class ExprSimplifier(TirRewriter):
    """Bottom-up expression simplification with integer bounds of the variables in `ranges`."""

    def __init__(self) -> None:
        super().__init__()
        self.ranges: dict[int, Bounds] = {}
        self._bounds: dict[int, tuple[PrimExpr, Bounds | None]] = {}

    # -- bounds
    def bounds(self, e: PrimExpr) -> Bounds | None:
        """Inclusive integer bounds of a scalar integer expression built by this simplifier."""
        if type(e) is IntImm:
            return e.value, e.value
        if type(e) is Var:
            return self.ranges.get(id(e))
        hit = self._bounds.get(id(e))
        return hit[1] if hit is not None and hit[0] is e else None

    def _compute_bounds(self, e: PrimExpr) -> Bounds | None:
        if not is_int(e.dtype) or lanes_of(e.dtype) != 1:
            return None
        if isinstance(e, BinaryOp):
            a, b = self.bounds(e.a), self.bounds(e.b)
            if a is None or b is None:
                return None
            out = _binary_bounds(e.op, a, b)
        elif isinstance(e, Cast) and is_int(e.value.dtype):
            out = self.bounds(e.value)
        elif isinstance(e, (Select, IfExpr)):
            t, f = self.bounds(e.true_value), self.bounds(e.false_value)
            out = None if t is None or f is None else (min(t[0], f[0]), max(t[1], f[1]))
        else:
            return None
        if out is None:
            return None
        lo, hi = int_range(e.dtype)
        return out if lo <= out[0] and out[1] <= hi else None

    def visit_expr(self, node: PrimExpr) -> PrimExpr:
        out = self.simplify_node(node)
        if type(out) not in (IntImm, Var) and id(out) not in self._bounds:
            self._bounds[id(out)] = (out, self._compute_bounds(out))
        return out

    # -- rules
    def simplify_node(self, e: PrimExpr) -> PrimExpr:
        if isinstance(e, BinaryOp):
            return self.binary(e)
        if isinstance(e, Not):
            if type(e.a) is Not:
                return e.a.a
            value = scalar_const(e.a)
            return e if value is None else make_const(int(not value), e.dtype, e.span)
        if isinstance(e, (Select, IfExpr)):
            cond = scalar_const(e.cond)
            if cond is not None:
                return e.true_value if cond else e.false_value
            return e.true_value if e.true_value is e.false_value and type(e) is Select else e
        if isinstance(e, Cast):
            if e.dtype == e.value.dtype:
                return e.value
            value = scalar_const(e.value)
            if value is None:
                return e
            folded = fold_cast(value, e.value.dtype, e.dtype)
            return e if folded is None else make_const(folded, e.dtype, e.span)
        if isinstance(e, Ramp) and type(e.stride) is IntImm and e.stride.value == 0:
            return Broadcast(e.base, e.lanes, e.span)
        if isinstance(e, Call):
            values = [scalar_const(a) for a in e.args]
            if all(v is not None for v in values):
                folded = fold_intrinsic(e.name, values, e.dtype)  # type: ignore[arg-type]
                return e if folded is None else make_const(folded, e.dtype, e.span)
        return e

    def binary(self, e: BinaryOp) -> PrimExpr:
        op, a, b = e.op, e.a, e.b
        dtype = a.dtype
        ca, cb = scalar_const(a), scalar_const(b)
        if ca is not None and cb is not None:
            folded = fold_binary(op, ca, cb, dtype)
            if folded is not None:
                return make_const(folded, e.dtype, e.span)
        lanes = lanes_of(dtype)
        if lanes > 1:
            vector = _vector_rule(e, self.visit_expr)
            if vector is not None:
                return self.visit_expr(vector)
        if op in ("and", "or"):
            return _logic(e, ca, cb)
        if is_int(dtype):
            out = self.int_rules(e, ca, cb)
            if out is not None:
                return out
        elif is_float(dtype):
            if (op == "mul" and cb == 1) or (op == "div" and cb == 1):
                return a
            if op == "mul" and ca == 1:
                return b
            if op == "sub" and cb == 0 and not _is_negative_zero(b) or op == "add" and _is_negative_zero(b):
                return a
        if op in COMPARE_OPS and lanes == 1:
            return self.compare(e)
        return e

    def int_rules(self, e: BinaryOp, ca: Number | None, cb: Number | None) -> PrimExpr | None:
        op, a, b = e.op, e.a, e.b
        zero = make_const(0, e.dtype, e.span)
        if op == "add":
            if ca == 0:
                return b
            if cb == 0:
                return a
            if ca is not None:           # constants to the right: c + x -> x + c
                return self.visit_expr(BinaryOp("add", b, a, e.span))
            if cb is not None and type(a) is BinaryOp and a.op in ("add", "sub") and scalar_const(a.b) is not None:
                return self.merge_offset(a, cb, e)
        elif op == "sub":
            if cb == 0:
                return a
            if a is b and type(a) is Var:
                return zero
            if cb is not None and type(a) is BinaryOp and a.op in ("add", "sub") and scalar_const(a.b) is not None:
                return self.merge_offset(a, -int(cb), e)
        elif op == "mul":
            if ca == 0 or cb == 0:
                return zero
            if ca == 1:
                return b
            if cb == 1:
                return a
            if ca is not None:
                return self.visit_expr(BinaryOp("mul", b, a, e.span))
            if cb is not None and type(a) is BinaryOp and a.op == "mul" and scalar_const(a.b) is not None:
                factor = fold_binary("mul", scalar_const(a.b), cb, e.dtype)  # type: ignore[arg-type]
                return self.visit_expr(BinaryOp("mul", a.a, make_const(factor, e.dtype, e.span), e.span))
        elif op in ("div", "floordiv", "floormod"):
            if cb == 1:
                return zero if op == "floormod" else a
            if op != "div" and cb is not None and cb > 0 and lanes_of(e.dtype) == 1:
                return self.divmod_rules(e, int(cb))
        elif op in ("min", "max"):
            if a is b:
                return a
            if lanes_of(e.dtype) == 1:
                ba, bb = self.bounds(a), self.bounds(b)
                if ba is not None and bb is not None:
                    a_first = ba[1] <= bb[0] if op == "min" else ba[0] >= bb[1]
                    b_first = bb[1] <= ba[0] if op == "min" else bb[0] >= ba[1]
                    if a_first:
                        return a
                    if b_first:
                        return b
        return None

    def merge_offset(self, inner: BinaryOp, offset: Number, e: BinaryOp) -> PrimExpr:
        """`(x ± c1) + offset` as `x + c` (exact in wrapping arithmetic)."""
        c1 = int(scalar_const(inner.b))  # type: ignore[arg-type]
        total = (c1 if inner.op == "add" else -c1) + int(offset)
        lo, hi = int_range(e.dtype)
        if lo < 0 and lo <= -total <= hi and total < 0:
            return self.visit_expr(BinaryOp("sub", inner.a, make_const(-total, e.dtype, e.span), e.span))
        folded = fold_binary("add", 0, total, e.dtype)
        return self.visit_expr(BinaryOp("add", inner.a, make_const(folded, e.dtype, e.span), e.span))  # type: ignore[arg-type]

    def divmod_rules(self, e: BinaryOp, c: int) -> PrimExpr:
        """floordiv/floormod by a positive constant, using bounds."""
        a = e.a
        bounds = self.bounds(a)
        if bounds is not None and bounds[0] // c == bounds[1] // c:
            k = bounds[0] // c
            if e.op == "floordiv":
                return make_const(k, e.dtype, e.span)
            return a if k == 0 else self.visit_expr(BinaryOp("sub", a, make_const(k * c, e.dtype, e.span), e.span))
        # (x * c + y) // c -> x + y // c and (x * c + y) % c -> y % c, when nothing wraps.
        if bounds is not None and type(a) is BinaryOp and a.op == "add":
            for scaled, rest in ((a.a, a.b), (a.b, a.a)):
                if (type(scaled) is BinaryOp and scaled.op == "mul" and scalar_const(scaled.b) == c
                        and self.bounds(scaled) is not None and self.bounds(rest) is not None):
                    inner = self.visit_expr(BinaryOp(e.op, rest, e.b, e.span))
                    if e.op == "floormod":
                        return inner
                    return self.visit_expr(BinaryOp("add", scaled.a, inner, e.span))
        if bounds is not None and type(a) is BinaryOp and a.op == "mul" and scalar_const(a.b) == c:
            return a.a if e.op == "floordiv" else make_const(0, e.dtype, e.span)
        return e

    def compare(self, e: BinaryOp) -> PrimExpr:
        a, b = self.bounds(e.a), self.bounds(e.b)
        if e.a is e.b and is_int(e.a.dtype):
            return make_const(int(e.op in ("eq", "le", "ge")), "bool", e.span)
        if a is None or b is None:
            return e
        decided = _decide(e.op, a, b)
        return e if decided is None else make_const(int(decided), "bool", e.span)


def _binary_bounds(op: str, a: Bounds, b: Bounds) -> Bounds | None:
    if op == "add":
        return a[0] + b[0], a[1] + b[1]
    if op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if op == "mul":
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    if op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    if op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    if op in ("floordiv", "floormod") and b[0] == b[1] and b[0] > 0:
        c = b[0]
        if op == "floordiv":
            return a[0] // c, a[1] // c
        if a[0] // c == a[1] // c:
            return a[0] % c, a[1] % c
        return 0, c - 1
    return None


def _decide(op: str, a: Bounds, b: Bounds) -> bool | None:
    """The comparison's value when the bounds settle it."""
    if op == "lt":
        return True if a[1] < b[0] else False if a[0] >= b[1] else None
    if op == "le":
        return True if a[1] <= b[0] else False if a[0] > b[1] else None
    if op == "gt":
        return _decide("lt", b, a)
    if op == "ge":
        return _decide("le", b, a)
    if op in ("eq", "ne"):
        if a[0] == a[1] == b[0] == b[1]:
            return op == "eq"
        if a[1] < b[0] or b[1] < a[0]:
            return op == "ne"
    return None


def _logic(e: BinaryOp, ca: Number | None, cb: Number | None) -> PrimExpr:
    a, b = e.a, e.b
    absorbing = 0 if e.op == "and" else 1
    for const, other in ((ca, b), (cb, a)):
        if const is None:
            continue
        if const == absorbing:
            return make_const(absorbing, e.dtype, e.span)
        return other
    return a if a is b else e


def _is_negative_zero(e: PrimExpr) -> bool:
    value = scalar_const(e)
    return isinstance(value, float) and value == 0 and str(value).startswith("-")


def _vector_rule(e: BinaryOp, simp: Callable[[PrimExpr], PrimExpr]) -> PrimExpr | None:
    """Lane-wise identities on broadcasts and ramps (integer ramps only: they wrap exactly);
    `simp` simplifies the new scalar operations."""
    a, b, op, span = e.a, e.b, e.op, e.span
    if type(a) is Broadcast and type(b) is Broadcast:
        return Broadcast(simp(BinaryOp(op, a.value, b.value, span)), a.lanes, span)
    if not is_int(e.dtype):
        return None
    if op in ("add", "sub") and type(a) is Ramp and type(b) is Broadcast:
        return Ramp(simp(BinaryOp(op, a.base, b.value, span)), a.stride, a.lanes, span)
    if op == "add" and type(a) is Broadcast and type(b) is Ramp:
        return Ramp(simp(BinaryOp("add", a.value, b.base, span)), b.stride, b.lanes, span)
    if op == "add" and type(a) is Ramp and type(b) is Ramp:
        return Ramp(simp(BinaryOp("add", a.base, b.base, span)), simp(BinaryOp("add", a.stride, b.stride, span)),
                    a.lanes, span)
    if op == "mul" and type(a) is Ramp and type(b) is Broadcast:
        return Ramp(simp(BinaryOp("mul", a.base, b.value, span)), simp(BinaryOp("mul", a.stride, b.value, span)),
                    a.lanes, span)
    return None


class Simplifier(ExprSimplifier):
    """Expression rules plus the statement cleanups (module docstring)."""

    def pre(self, stmt: Stmt) -> Stmt | None:
        if isinstance(stmt, For):
            begin, end = self.rewrite_expr(stmt.begin), self.rewrite_expr(stmt.end)
            if type(begin) is IntImm and type(end) is IntImm:
                extent = end.value - begin.value
                if extent <= 0:
                    return None
                if extent == 1:
                    self.var_map[id(stmt.var)] = begin
                    return stmt.body
                self.ranges[id(stmt.var)] = (begin.value, end.value - 1)
        elif isinstance(stmt, IfThenElse):
            cond = scalar_const(self.rewrite_expr(stmt.cond))
            if cond is not None:
                return stmt.then_body if cond else stmt.else_body
        elif isinstance(stmt, LetStmt):
            value = self.rewrite_expr(stmt.value)
            if is_const(value) or type(value) is Var:
                self.var_map[id(stmt.var)] = value
                return stmt.body
            bounds = self.bounds(value)
            if bounds is not None:
                self.ranges[id(stmt.var)] = bounds
        return stmt

    def post(self, original: Stmt, rebuilt: Stmt) -> Stmt | None:
        if isinstance(rebuilt, (For, Allocate, LetStmt)):
            return None if is_empty(rebuilt.body) else rebuilt
        if isinstance(rebuilt, IfThenElse):
            then_empty, else_empty = is_empty(rebuilt.then_body), is_empty(rebuilt.else_body)
            if then_empty and else_empty:
                return None
            if else_empty and rebuilt.else_body is not None:
                return IfThenElse(rebuilt.cond, rebuilt.then_body, None, rebuilt.span)
            if then_empty:
                return IfThenElse(self.rewrite_expr(Not(rebuilt.cond, rebuilt.span)), rebuilt.else_body, None,
                                  rebuilt.span)
            return rebuilt
        if isinstance(rebuilt, Evaluate):
            return None if is_const(rebuilt.value) or type(rebuilt.value) is Var else rebuilt
        if isinstance(rebuilt, AssertStmt):
            return None if scalar_const(rebuilt.cond) == 1 else rebuilt
        return rebuilt


class _DeadLets(TirRewriter):
    """Removes `let`s whose variable is unused, innermost first, so chains of them go at once."""

    def __init__(self, uses: dict[int, int]) -> None:
        super().__init__()
        self.uses = uses

    def post(self, original: Stmt, rebuilt: Stmt) -> Stmt | None:
        if isinstance(rebuilt, LetStmt) and self.uses.get(id(rebuilt.var), 0) == 0:
            for node in walk_exprs([rebuilt.value]):
                if type(node) is Var:
                    self.uses[id(node)] -= 1
            return rebuilt.body
        return rebuilt


def variable_uses(func: PrimFunc) -> dict[int, int]:
    """How many times each variable occurs in an expression of the function."""
    uses: dict[int, int] = {}
    stack: list[Stmt | None] = [func.body]
    while stack:
        stmt = stack.pop()
        if stmt is None:
            continue
        exprs, kids = stmt_parts(stmt)
        for node in walk_exprs(exprs):
            if type(node) is Var:
                uses[id(node)] = uses.get(id(node), 0) + 1
        stack.extend(kids)
    return uses


def remove_dead_lets(func: PrimFunc) -> PrimFunc:
    return _DeadLets(variable_uses(func)).rewrite_func(func)


def simplify_primfunc(func: PrimFunc) -> PrimFunc:
    """`func` simplified (the same object when nothing changed)."""
    return remove_dead_lets(Simplifier().rewrite_func(func))


def simplify_expr(expr: PrimExpr, ranges: dict[Var, Bounds] | None = None) -> PrimExpr:
    """One expression simplified, with optional inclusive bounds for its variables."""
    simplifier = ExprSimplifier()
    simplifier.ranges.update((id(v), r) for v, r in (ranges or {}).items())
    return simplifier.rewrite_expr(expr)

