"""Hypothesis strategies for TIR: random well-typed PrimFuncs covering the whole text format.

`primfuncs()` draws a function over 1-3 parameter buffers (ranks 0-3, scalar and vector dtypes,
strides/alignment options) whose body uses every statement kind (serial/parallel/vectorized/
unrolled loops, stores, allocations in both scopes, lets, if with and without else, nested
blocks, evaluate, assert) and every expression kind (literals of every dtype with a text form
including -0 and inf, infix and call operators, comparisons and logic, select, casts, loads,
intrinsics, ramp/broadcast vectors, select and if_then_else). Names come from a tiny pool, so shadowing and same-named
binders are common and the printer's renaming is exercised. The functions pass the verifier;
indices are not kept in bounds (use them for syntax and structure, not for running).

Generation recurses on a small depth budget (the generator, not the code under test).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from irtool.ir.expr import Attrs
from irtool.ir.tir import (ARITH_OPS, COMPARE_OPS, INTRINSICS, LOOP_KINDS, Allocate, AssertStmt, BinaryOp,
                           Broadcast, Buffer, BufferLoad, BufferStore, Call, Cast, Evaluate, FloatImm, For,
                           IfExpr, IfThenElse, IntImm, LetStmt, Not, PrimExpr, PrimFunc, Ramp, Select, Stmt, Var,
                           element_of, is_float, is_int, lanes_of, seq, with_lanes)

NAMES = ("i", "j", "x", "A", "B", "", "x_1", "1k")
INT_DTYPES = ("int32", "int64", "int8", "int16", "uint8", "uint32")
FLOAT_DTYPES = ("float32", "float64", "float16")
SCALAR_DTYPES = (*FLOAT_DTYPES, *INT_DTYPES, "bool")
BUFFER_DTYPES = (*SCALAR_DTYPES, "float32x4", "int32x4")
LANES = 4
MESSAGES = ("out of bounds", "", "shape mismatch: n != 4")


class _Gen:
    """One function's generator state: what is in scope, and the draw function."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.vars: list[Var] = []
        self.buffers: list[Buffer] = []

    def name(self) -> str:
        return self.draw(st.sampled_from(NAMES))

    def buffer(self, scopes: tuple[str, ...]) -> Buffer:
        draw = self.draw
        rank = draw(st.integers(0, 3))
        shape = tuple(draw(st.lists(st.integers(1, 8), min_size=rank, max_size=rank)))
        strides = draw(st.none() | st.lists(st.integers(1, 64), min_size=rank, max_size=rank).map(tuple))
        return Buffer(self.name(), shape, draw(st.sampled_from(BUFFER_DTYPES)), strides,
                      draw(st.sampled_from((0, 0, 16, 64))), draw(st.sampled_from(scopes)))

    # -- expressions
    def literal(self, dtype: str) -> PrimExpr:
        draw = self.draw
        if dtype == "bool":
            return IntImm(draw(st.booleans()), "bool")
        if is_int(dtype):
            info = np.iinfo(dtype)
            return IntImm(draw(st.integers(int(info.min), int(info.max)) | st.integers(-3, 3).filter(
                lambda v: v >= int(info.min))), dtype)
        width = int(dtype[5:])
        return FloatImm(draw(st.floats(width=width, allow_nan=False) | st.sampled_from((0.0, -0.0, 1.5))), dtype)

    def index(self, depth: int) -> PrimExpr:
        return self.expr("int32", depth)

    def expr(self, dtype: str, depth: int) -> PrimExpr:
        """A well-typed expression of `dtype` (scalar or vector)."""
        draw = self.draw
        lanes = lanes_of(dtype)
        elem = element_of(dtype)
        choices = ["leaf"]
        if depth > 0:
            choices += ["binary", "select", "load"]
            if lanes == 1:
                choices += ["cast"] + (["call"] if is_float(dtype) else [])
                choices += ["compare", "logic"] if dtype == "bool" else []
            else:
                choices += ["broadcast"] + (["ramp"] if is_int(dtype) else [])
        kind = draw(st.sampled_from(choices))
        if kind == "leaf":
            if lanes > 1:
                return Broadcast(self.literal(elem), lanes)
            scoped = [v for v in self.vars if v.dtype == dtype]
            if scoped and draw(st.booleans()):
                return draw(st.sampled_from(scoped))
            return self.literal(dtype)
        if kind == "binary":
            if dtype.startswith("bool"):
                op = draw(st.sampled_from(("and", "or", "not")))
                if op == "not":
                    return Not(self.expr(dtype, depth - 1))
            else:
                ops = [op for op in ARITH_OPS if is_int(dtype) or op not in ("floordiv", "floormod")]
                op = draw(st.sampled_from(ops))
            return BinaryOp(op, self.expr(dtype, depth - 1), self.expr(dtype, depth - 1))
        if kind == "compare":
            operand = draw(st.sampled_from(SCALAR_DTYPES[:-1]))
            return BinaryOp(draw(st.sampled_from(COMPARE_OPS)), self.expr(operand, depth - 1),
                            self.expr(operand, depth - 1))
        if kind == "logic":
            return BinaryOp(draw(st.sampled_from(("and", "or"))), self.expr("bool", depth - 1),
                            self.expr("bool", depth - 1))
        if kind == "select":
            if draw(st.booleans()):
                return IfExpr(self.expr("bool", depth - 1), self.expr(dtype, depth - 1), self.expr(dtype, depth - 1))
            cond = with_lanes("bool", draw(st.sampled_from((1, lanes))))
            return Select(self.expr(cond, depth - 1), self.expr(dtype, depth - 1), self.expr(dtype, depth - 1))
        if kind == "cast":
            source = draw(st.sampled_from(SCALAR_DTYPES))
            value = self.expr(source, depth - 1)
            if isinstance(value, (IntImm, FloatImm)):   # `int8(5)` reads back as a literal, not a cast
                value = BinaryOp("max", value, value) if source != "bool" else Not(value)
            return Cast(dtype, value)
        if kind == "call":
            name = draw(st.sampled_from(sorted(INTRINSICS)))
            return Call(name, [self.expr(dtype, depth - 1) for _ in range(INTRINSICS[name])])
        if kind == "broadcast":
            return Broadcast(self.expr(elem, depth - 1), lanes)
        if kind == "ramp":
            return Ramp(self.expr(elem, depth - 1), self.expr(elem, depth - 1), lanes)
        return self.load(dtype, depth)

    def load(self, dtype: str, depth: int) -> PrimExpr:
        """A load of a buffer holding `dtype` (a ramp index for a vector of a scalar buffer), or a literal."""
        lanes = lanes_of(dtype)
        exact = [b for b in self.buffers if b.dtype == dtype]
        by_lane = [b for b in self.buffers if lanes > 1 and b.dtype == element_of(dtype) and b.shape]
        if not exact and not by_lane:
            return self.expr(dtype, 0)
        buf = self.draw(st.sampled_from(exact + by_lane))
        return BufferLoad(buf, self.indices(buf, dtype, depth - 1))

    def indices(self, buf: Buffer, dtype: str, depth: int) -> list[PrimExpr]:
        indices = [self.index(depth) for _ in buf.shape]
        if lanes_of(dtype) > 1 and lanes_of(buf.dtype) == 1:
            at = self.draw(st.integers(0, len(indices) - 1))
            indices[at] = Ramp(self.index(depth), self.expr("int32", 0), lanes_of(dtype))
        return indices

    # -- statements
    def block(self, depth: int) -> Stmt:
        n = self.draw(st.integers(0, 3 if depth > 0 else 1))
        stmts: list[Stmt] = []
        for _ in range(n):
            stmts.append(self.stmt(depth))
        return seq(stmts)

    def stmt(self, depth: int) -> Stmt:
        draw = self.draw
        kinds = ["store", "evaluate", "assert"] + (["for", "allocate", "let", "if", "let_inside"] if depth > 0 else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "store":
            buf = draw(st.sampled_from(self.buffers))
            vector = lanes_of(buf.dtype) == 1 and buf.shape and draw(st.booleans())
            dtype = with_lanes(buf.dtype, LANES) if vector else buf.dtype
            return BufferStore(buf, self.indices(buf, dtype, 1), self.expr(dtype, 2))
        if kind == "evaluate":
            return Evaluate(self.expr(draw(st.sampled_from(SCALAR_DTYPES)), 1))
        if kind == "assert":
            return AssertStmt(self.expr("bool", 2), draw(st.sampled_from(MESSAGES)))
        if kind == "for":
            begin = self.expr(draw(st.sampled_from(("int32", "int64"))), 1)
            var = Var(self.name(), begin.dtype)
            end = self.expr(begin.dtype, 1)
            return For(var, begin, end, draw(st.sampled_from(LOOP_KINDS)), self.scoped(var, depth - 1))
        if kind == "allocate":
            buf = self.buffer(("global", "local"))
            return Allocate(buf, self.scoped(buf, depth - 1))
        if kind in ("let", "let_inside"):
            value = self.expr(draw(st.sampled_from(SCALAR_DTYPES + ("float32x4",))), 2)
            var = Var(self.name(), value.dtype)
            let = LetStmt(var, value, self.scoped(var, depth - 1))
            if kind == "let_inside":   # a let followed by statements outside its scope
                return seq([let, self.stmt(0)])
            return let
        cond = self.expr("bool", 2)
        then_body = self.block(depth - 1)
        return IfThenElse(cond, then_body, self.block(depth - 1) if draw(st.booleans()) else None)

    def scoped(self, binder: Var | Buffer, depth: int) -> Stmt:
        into = self.vars if isinstance(binder, Var) else self.buffers
        into.append(binder)
        try:
            return self.block(depth)
        finally:
            into.pop()


ATTR_VALUES = st.one_of(st.integers(-5, 100), st.booleans(), st.sampled_from(("f", "llvm -mcpu=znver5", "")))


@st.composite
def primfuncs(draw: st.DrawFn, max_depth: int = 3) -> PrimFunc:
    gen = _Gen(draw)
    params = [gen.buffer(("global",)) for _ in range(draw(st.integers(1, 3)))]
    gen.buffers.extend(params)
    attrs = draw(st.dictionaries(st.sampled_from(("global_symbol", "tir.noalias", "target")), ATTR_VALUES,
                                 max_size=2))
    return PrimFunc(params, gen.block(draw(st.integers(1, max_depth))), Attrs(attrs))
