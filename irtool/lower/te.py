"""Tensor expressions: the small TOPI-like layer compute rules are written in.

A rule describes its result as a `Tensor` whose element `[i, j, ...]` is a TIR expression of the
index expressions (`Compute`), or whose element needs statements (a `Reduce`: an accumulator and
a loop nest). `Builder` turns the tensor expression of a whole primitive function into one
PrimFunc body: one loop nest per output; `Compute` tensors are inlined at the point of use; a
`Reduce` read at the nest's own index accumulates in a local buffer inside that nest (so its
elementwise consumers run on the accumulator), and one read anywhere else becomes a stage of
its own (an allocated buffer computed before). A `Scheduled` tensor (a register-tiled kernel)
read only at the output's own index gets the output's expression as an epilogue applied to
its tile's vectors before the one store; read anywhere else it is a stage. A `Compute` marked
`stage=True` (padding) is always its own stage. Element expressions are memoised per nest and index (common
subexpressions are built once), and chains of inlined tensors are evaluated by an explicit
work stack, never by Python recursion proportional to the group's size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from irtool.ir.tir import (
    Allocate,
    BinaryOp,
    Broadcast,
    Buffer,
    BufferLoad,
    BufferStore,
    Cast,
    FloatImm,
    For,
    IntImm,
    PrimExpr,
    Ramp,
    Select,
    Stmt,
    Var,
    children,
    is_bool,
    is_float,
    lanes_of,
    seq,
    with_lanes,
)
# The index arithmetic lives with the TIR passes (unrolling folds with it); rules import it from here.
from irtool.tir_transform.arith import INDEX, add, const, floordiv, floormod, int_value, mul, sub  # noqa: F401
from irtool.tir_transform.vectorize import widen_expr

Idx = tuple[PrimExpr, ...]
_T = TypeVar("_T")


# Elementwise rows narrower than this are one vector statement (`Builder.finish_nest`).
SHORT_ROW = 32


class Tensor:
    """A value of a primitive function: static shape and dtype, elements defined by a subclass."""

    __slots__ = ("dtype", "name", "shape")

    def __init__(self, shape: Sequence[int], dtype: str, name: str) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.name = name

    @property
    def ndim(self) -> int:
        return len(self.shape)


class Placeholder(Tensor):
    """A buffer parameter of the PrimFunc."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: Buffer) -> None:
        super().__init__(buffer.shape, buffer.dtype, buffer.name)
        self.buffer = buffer


class Compute(Tensor):
    """Element = `fcompute(ctx, idx)`, inlined where read; inputs are read with `ctx.load`.

    `fcompute` must be pure apart from those loads: the builder may run it more than once.
    """

    __slots__ = ("fcompute", "stage")

    def __init__(self, shape: Sequence[int], dtype: str, fcompute: Callable[[Element, Idx], PrimExpr],
                 name: str = "T", stage: bool = False) -> None:
        super().__init__(shape, dtype, name)
        self.fcompute = fcompute
        self.stage = stage


class Concat(Compute):
    """A concatenation: inlined as a `select` chain where read, but written piece by piece (one
    nest per part, no selects) when it is an output or a stage of its own."""

    __slots__ = ("axis", "parts")

    def __init__(self, shape: Sequence[int], dtype: str, fcompute: Callable[[Element, Idx], PrimExpr],
                 parts: Sequence[Tensor], axis: int) -> None:
        super().__init__(shape, dtype, fcompute, "concatenate")
        self.parts = tuple(parts)
        self.axis = axis


class Reduce(Tensor):
    """Element = what `fbody(ctx, idx)` returns after emitting its statements into `ctx`."""

    __slots__ = ("fbody",)

    def __init__(self, shape: Sequence[int], dtype: str, fbody: Callable[[Element, Idx], PrimExpr],
                 name: str = "red") -> None:
        super().__init__(shape, dtype, name)
        self.fbody = fbody


class Scheduled(Tensor):
    """A tensor whose whole loop nest a schedule writes (e.g. a register-tiled kernel,
    irtool/lower/schedules/): `emit(builder, store)` returns the statements, calling
    `store(idx, value)` for each element or vector of elements (`idx` may hold one `ramp`).
    Written directly when it is an output; when an output reads it only at the output's own
    index, `store` applies the output's expression to the value first (a fused epilogue);
    read anywhere else, it is a stage of its own."""

    __slots__ = ("emit",)

    def __init__(self, shape: Sequence[int], dtype: str,
                 emit: Callable[[Builder, Callable[[Idx, PrimExpr], Stmt]], Stmt], name: str = "sched") -> None:
        super().__init__(shape, dtype, name)
        self.emit = emit


# ---- index arithmetic with light constant folding (keeps the printed TIR readable) ------------

def clamp(a: PrimExpr, low: int, high: int) -> PrimExpr:
    """`a` limited to [low, high]: keeps a load in bounds when `select` discards its value."""
    x = int_value(a)
    if x is not None:
        return const(min(max(x, low), high), a.dtype)
    return BinaryOp("min", BinaryOp("max", a, const(low, a.dtype)), const(high, a.dtype))


def cmp(op: str, a: PrimExpr, b: PrimExpr | int) -> PrimExpr:
    b = const(b, a.dtype) if isinstance(b, int) else b
    return BinaryOp(op, a, b)


def all_of(conds: Sequence[PrimExpr]) -> PrimExpr | None:
    out: PrimExpr | None = None
    for c in conds:
        out = c if out is None else BinaryOp("and", out, c)
    return out


def in_range(a: PrimExpr, low: int, high: int) -> list[PrimExpr]:
    """Conditions for low <= a < high; a constant offset moves to the bounds (`i >= 1`, not
    `i - 1 >= 0`)."""
    if type(a) is BinaryOp and a.op in ("add", "sub") and type(a.b) is IntImm:  # type: ignore[attr-defined]
        shift = a.b.value if a.op == "sub" else -a.b.value  # type: ignore[attr-defined]
        a, low, high = a.a, low + shift, high + shift  # type: ignore[attr-defined]
    return [cmp("ge", a, low), cmp("lt", a, high)]


def imm(value: float | bool, dtype: str) -> PrimExpr:
    """A literal of a tensor dtype (values converted as numpy converts them)."""
    if is_float(dtype):
        return FloatImm(float(np.asarray(value).astype(dtype)), dtype)
    if is_bool(dtype):
        return IntImm(int(bool(value)), "bool")
    return IntImm(int(np.asarray(value).astype(dtype)), dtype)


def cast(dtype: str, e: PrimExpr) -> PrimExpr:
    return e if e.dtype == dtype else Cast(dtype, e)


def select(cond: PrimExpr | None, t: PrimExpr, f: PrimExpr) -> PrimExpr:
    return t if cond is None else Select(cond, t, f)


def unravel(flat: PrimExpr, shape: Sequence[int]) -> Idx:
    """Row-major multi-index of a flat index."""
    out: list[PrimExpr] = []
    stride = int(np.prod(shape, dtype=np.int64)) if shape else 1
    for d in shape:
        stride //= max(d, 1)
        out.append(floormod(floordiv(flat, stride), d) if out else floordiv(flat, stride))
    return tuple(out)


def ravel(idx: Sequence[PrimExpr], shape: Sequence[int]) -> PrimExpr:
    flat: PrimExpr = const(0)
    for i, d in zip(idx, shape):
        flat = add(mul(flat, d), i)
    return flat


# ---- the builder --------------------------------------------------------------------------------

class Element:
    """Where the statements of one element of a loop nest go (the nest's body, before the store)."""

    def __init__(self, builder: Builder, loop_vars: Idx) -> None:
        self.builder = builder
        self.vars = loop_vars
        self.prelude: list[Stmt] = []
        self.locals: list[Buffer] = []

    def load(self, t: Tensor, idx: Sequence[PrimExpr]) -> PrimExpr:
        return self.builder.load(t, tuple(idx), self)

    def accumulator(self, dtype: str, init: PrimExpr, name: str = "acc") -> Buffer:
        """A one-element local buffer set to `init`."""
        buf = Buffer(name, (1,), dtype, scope="local")
        self.locals.append(buf)
        self.prelude.append(BufferStore(buf, (const(0),), init))
        return buf

    def loop(self, extents: Sequence[int], names: Sequence[str],
             body: Callable[[Idx], Stmt | list[Stmt]]) -> None:
        """Emits a serial loop nest; `body` gets the loop variables."""
        loop_vars = tuple(self.builder.fresh_var(n) for n in names)
        inner = body(loop_vars)
        stmt = seq(inner) if isinstance(inner, list) else inner
        for v, e in zip(reversed(loop_vars), reversed(list(extents))):
            stmt = For(v, const(0), const(e), "serial", stmt)
        self.prelude.append(stmt)


def acc_load(acc: Buffer) -> PrimExpr:
    return BufferLoad(acc, (const(0),))


def acc_store(acc: Buffer, value: PrimExpr) -> Stmt:
    return BufferStore(acc, (const(0),), value)


class _Need(Exception):
    """Raised inside a Compute's `fcompute`: input `tensor` at `idx` must be evaluated first."""

    def __init__(self, tensor: Compute, idx: Idx) -> None:
        super().__init__()
        self.tensor = tensor
        self.idx = idx


def index_key(idx: Idx) -> tuple[object, ...]:
    """A structural key of index expressions (variables by identity), built without recursion."""
    out: list[object] = []
    stack: list[object] = list(reversed(idx))
    while stack:
        e = stack.pop()
        t = type(e)
        if t is Var:
            out.append(id(e))
        elif t is IntImm or t is FloatImm:
            out.append((e.value, e.dtype))  # type: ignore[attr-defined]
        else:  # an operator, or an intrinsic by its name
            out.append((t.__name__, getattr(e, "op", None) or getattr(e, "name", None), getattr(e, "dtype", None),
                        id(getattr(e, "buffer", None))))
            stack.extend(reversed(children(e)))  # type: ignore[arg-type]
    return tuple(out)


class _Epilogue:
    """While an output's element is built: the `Scheduled` tensors it reads at its own index,
    each standing for a variable (its value) that a fused store replaces by the tile's vector."""

    def __init__(self, loop_vars: Idx, shape: tuple[int, ...]) -> None:
        self.vars = loop_vars
        self.shape = shape
        self.values: dict[int, tuple[Scheduled, Var]] = {}

    def value_of(self, t: Scheduled, idx: Idx) -> Var | None:
        if not (t.shape == self.shape and len(idx) == len(self.vars)
                and all(a is b for a, b in zip(idx, self.vars))):
            return None
        if id(t) not in self.values:
            self.values[id(t)] = (t, Var(f"{t.name}_value", t.dtype))
        return self.values[id(t)][1]


class Builder:
    """Lowers tensor expressions into statements for one PrimFunc."""

    def __init__(self) -> None:
        self.stages: list[tuple[Buffer, Stmt]] = []
        self.materialized: dict[int, Buffer] = {}
        # (tensor, element, index identity) -> (keep-alive, value): CSE of inlined elements.
        self.memo: dict[tuple[int, ...], tuple[object, PrimExpr]] = {}
        self.in_compute = False
        self.epilogue: _Epilogue | None = None   # set while an output's own element is built
        self.fused: set[int] = set()              # Scheduled tensors already computed by a fused nest

    def fresh_var(self, name: str) -> Var:
        return Var(name, INDEX)

    def load(self, t: Tensor, idx: Idx, ctx: Element) -> PrimExpr:
        if type(t) is Placeholder:
            return BufferLoad(t.buffer, idx)  # type: ignore[attr-defined]
        buf = self.materialized.get(id(t))
        if buf is not None:
            return BufferLoad(buf, idx)
        key = (id(t), id(ctx), index_key(idx))
        hit = self.memo.get(key)
        if hit is not None:
            return hit[1]
        if isinstance(t, Scheduled) and self.epilogue is not None:
            value = self.epilogue.value_of(t, idx)
            if value is not None:
                return value
        if isinstance(t, Scheduled) or (isinstance(t, Compute) and t.stage):
            return BufferLoad(self.outside_compute(self.materialize, t), idx)
        if isinstance(t, Compute):
            if self.in_compute:  # let the driver evaluate it first, then re-run the reader
                raise _Need(t, idx)
            return self.evaluate(t, idx, ctx)
        if not (len(idx) == len(ctx.vars) and all(a is b for a, b in zip(idx, ctx.vars))):
            return BufferLoad(self.outside_compute(self.materialize, t), idx)
        value = self.outside_compute(t.fbody, ctx, idx)  # type: ignore[attr-defined]
        self.memo[key] = (idx, value)
        return value

    def outside_compute(self, fn: Callable[..., _T], *args: object) -> _T:
        """Runs `fn` (a reduction body, a stage) as a fresh evaluation, not as part of a reader."""
        saved, self.in_compute = self.in_compute, False
        try:
            return fn(*args)
        finally:
            self.in_compute = saved

    def materialize(self, t: Tensor) -> Buffer:
        """Computes `t` into a buffer of its own, as a stage before the consumer (a stage's own
        nest never fuses an epilogue: only outputs do)."""
        saved, self.epilogue = self.epilogue, None
        try:
            buf = Buffer(f"{t.name}", t.shape, t.dtype)
            stmt = self.nest(t, buf)
            self.materialized[id(t)] = buf
            self.stages.append((buf, stmt))
            return buf
        finally:
            self.epilogue = saved

    def evaluate(self, t: Tensor, idx: Idx, ctx: Element) -> PrimExpr:
        """The element of `t` at `idx`, emitting what it needs into `ctx`.

        A Compute reading an unevaluated Compute raises `_Need`; the reader is re-run once the
        input is memoised. The pending readers live on an explicit stack, so a long chain of
        fused operators (elementwise or index-changing) never recurses in Python.
        """
        if not isinstance(t, Compute):
            return self.load(t, idx, ctx)
        stack: list[tuple[Compute, Idx]] = [(t, idx)]
        value: PrimExpr | None = None
        saved, self.in_compute = self.in_compute, True
        try:
            while stack:
                cur, at = stack[-1]
                key = (id(cur), id(ctx), index_key(at))
                hit = self.memo.get(key)
                if hit is not None:
                    value = hit[1]
                    stack.pop()
                    continue
                try:
                    value = cur.fcompute(ctx, at)
                except _Need as need:
                    stack.append((need.tensor, need.idx))
                    continue
                self.memo[key] = (at, value)
                stack.pop()
        finally:
            self.in_compute = saved
        assert value is not None
        return value

    def store_element(self, t: Tensor, idx: Idx, out: Buffer, where: Idx) -> Stmt:
        """`out[where] = t[idx]` with `t`'s element built right there (a `Compute` is inlined, not
        made a stage): a schedule copying an input into its own layout reads a computed input
        (a weight that is a `full(...)` fill, a transpose) without a buffer of it."""
        ctx = Element(self, idx)
        value = self.load(t, idx, ctx)
        body: Stmt = seq([*ctx.prelude, BufferStore(out, where, cast(out.dtype, value))])
        for buf in reversed(ctx.locals):
            body = Allocate(buf, body)
        return body

    def buffer_of(self, t: Tensor) -> Buffer:
        """`t` as a buffer a schedule can index freely: a parameter, or a stage computed before."""
        if type(t) is Placeholder:
            return t.buffer  # type: ignore[attr-defined]
        return self.materialized.get(id(t)) or self.outside_compute(self.materialize, t)

    def nest(self, t: Tensor, out: Buffer) -> Stmt:
        """A loop nest storing every element of `t` into `out`."""
        if type(t) is Concat:
            nests, offset = [], 0
            for part in t.parts:  # type: ignore[attr-defined]
                nests.append(self.nest_into(part, out, t.axis, offset))  # type: ignore[attr-defined]
                offset += part.shape[t.axis]  # type: ignore[attr-defined]
            return seq(nests)
        return self.nest_into(t, out, 0, 0)

    def nest_into(self, t: Tensor, out: Buffer, axis: int, offset: int) -> Stmt:
        """Stores `t` into `out`, shifted by `offset` along `axis`."""
        if isinstance(t, Scheduled):
            def store(idx: Idx, value: PrimExpr) -> Stmt:
                where = idx[:axis] + (add(idx[axis], offset),) + idx[axis + 1:] if offset else idx
                return BufferStore(out, where, value)   # the schedule computes in out's dtype
            return t.emit(self, store)
        names = [f"i{k}" for k in range(t.ndim)]
        loop_vars = tuple(self.fresh_var(n) for n in names)
        ctx = Element(self, loop_vars)
        value = self.evaluate(t, loop_vars, ctx) if isinstance(t, Compute) else self.load(t, loop_vars, ctx)
        return self.finish_nest(t, out, loop_vars, ctx, value, axis, offset)

    def finish_nest(self, t: Tensor, out: Buffer, loop_vars: Idx, ctx: Element, value: PrimExpr, axis: int,
                    offset: int) -> Stmt:
        """The loop nest over `t`'s shape storing the element `value` (built in `ctx`) into `out`."""
        if value.dtype != out.dtype:
            value = cast(out.dtype, value)
        where = loop_vars[:axis] + (add(loop_vars[axis], offset),) + loop_vars[axis + 1:] if offset else loop_vars
        body: Stmt = seq([*ctx.prelude, BufferStore(out, where, value)])
        for buf in reversed(ctx.locals):
            body = Allocate(buf, body)
        # A short innermost row of a plain elementwise nest is one vector statement: left to
        # LLVM, a 28-wide row was unrolled and the loop around it vectorized with gathers and
        # scatters (a squeeze-excite scale, 1x240x28x28, ran at 2 GFLOP/s on znver5; 56-wide
        # rows were vectorized along).
        short = not ctx.prelude and bool(t.shape) and 1 < t.shape[-1] < SHORT_ROW
        for k, (v, e) in enumerate(zip(reversed(loop_vars), reversed(t.shape))):
            body = For(v, const(0), const(e), "vectorized" if short and k == 0 else "serial", body)
        return body

    def output_nest(self, t: Tensor, out: Buffer, scheduled_outputs: set[int]) -> Stmt:
        """The nest of one output; a Compute reading one `Scheduled` tensor only at its own index
        becomes that tensor's schedule with the Compute's expression fused into each store."""
        if isinstance(t, Scheduled) or type(t) is Concat or not isinstance(t, Compute):
            return self.nest(t, out)
        loop_vars = tuple(self.fresh_var(f"i{k}") for k in range(t.ndim))
        ctx = Element(self, loop_vars)
        self.epilogue = _Epilogue(loop_vars, t.shape)
        try:
            value = self.evaluate(t, loop_vars, ctx)
        finally:
            reads, self.epilogue = self.epilogue.values, None
        if not reads:
            return self.finish_nest(t, out, loop_vars, ctx, value, 0, 0)
        sched, placeholder = next(iter(reads.values()))
        as_vectors: dict[int, PrimExpr] = {id(v): Ramp(v, const(1), 2) for v in loop_vars}
        as_vectors[id(placeholder)] = Broadcast(placeholder, 2)
        fusable = (len(reads) == 1 and not ctx.prelude and id(sched) not in self.materialized
                   and id(sched) not in self.fused and id(sched) not in scheduled_outputs
                   and widen_expr(value, as_vectors) is not None)
        if not fusable:   # build the element again, reading every Scheduled tensor from a stage
            for other, _ in reads.values():
                self.buffer_of(other)
            return self.nest(t, out)
        self.fused.add(id(sched))

        def store(idx: Idx, acc: PrimExpr) -> Stmt:
            subst = {id(v): i for v, i in zip(loop_vars, idx)}
            subst[id(placeholder)] = acc
            result = widen_expr(value, subst)
            assert result is not None   # checked above with every variable a vector
            return BufferStore(out, idx, cast(with_lanes(out.dtype, lanes_of(result.dtype)), result))
        return sched.emit(self, store)

    def function_body(self, outputs: Sequence[tuple[Tensor, Buffer]]) -> Stmt:
        scheduled_outputs = {id(t) for t, _ in outputs if isinstance(t, Scheduled)}
        nests = [self.output_nest(t, buf, scheduled_outputs) for t, buf in outputs]
        body = seq([stmt for _, stmt in self.stages] + nests)
        for buf, _ in reversed(self.stages):
            body = Allocate(buf, body)
        return body
