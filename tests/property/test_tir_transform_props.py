"""TIR passes preserve meaning: random PrimFuncs run in the TIR interpreter before and after each
pass (and random pipelines of them) give bit-identical buffers; the results verify and print
and re-parse to a structurally equal function.

Two sources of functions: `kernels()` below draws runnable loop nests (elementwise stages,
reductions, staged computation through scratch buffers, lets, guards, trivial and empty loops,
index arithmetic that the simplifier can fold) whose accesses stay in bounds; helper I's
`primfuncs()` draws every statement and expression kind with arbitrary indices (most runs of
those fail at an out-of-bounds access: then only verification and round trip are checked, and a
transformed function is allowed to do anything but crash).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support.tir_strategies import primfuncs

from irtool.analysis.tir_verify import verify_primfunc
from irtool.eval.tir_interp import array_shape, numpy_dtype, run_primfunc
from irtool.ir.expr import Attrs
from irtool.ir.module import IRModule
from irtool.ir.tir import (Allocate, BinaryOp, Buffer, BufferLoad, BufferStore, Cast, Evaluate, FloatImm, For,
                           IfThenElse, IntImm, LetStmt, PrimExpr, PrimFunc, Select, Stmt, Var, is_float, seq)
from irtool.ir.tir_equality import tir_structural_equal
from irtool.passes import parse_pipeline
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse_module
from irtool.syntax.printer import print_module
from irtool.tir_transform.flatten import flat_extent, layout_strides, needs_flattening
from irtool.tir_transform.index_width import with_int64_indices
from irtool.tir_transform.loops import loop_names
from irtool.tir_transform.mutator import stmt_parts, walk_stmts

DTYPES = ("float32", "float64", "int32", "int8")
KINDS = ("serial", "serial", "parallel", "vectorized", "unrolled")


class _Kernel:
    """Draws one runnable function over an input `%A`, a second input `%C` and outputs."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        rank = draw(st.integers(1, 3))
        self.shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
        self.dtype = draw(st.sampled_from(DTYPES))
        strides = draw(st.none() | st.just("padded"))
        padded = None if strides is None else tuple(layout_strides(Buffer("p", [d + 1 for d in self.shape], "int8")))
        self.a = Buffer("A", self.shape, self.dtype, padded, draw(st.sampled_from((0, 64))))
        self.c = Buffer("C", self.shape, self.dtype)
        self.out = Buffer("B", self.shape, self.dtype)
        self.red = Buffer("R", self.shape[:-1], self.dtype)

    def const(self, value: float) -> PrimExpr:
        return FloatImm(value, self.dtype) if is_float(self.dtype) else IntImm(int(value), self.dtype)

    def index_for(self, var: Var, extent: int) -> PrimExpr:
        """An in-bounds index computed from `var` (0 <= var < extent), sometimes roundabout."""
        kind = self.draw(st.sampled_from(("plain", "plain", "shift", "clamp", "mul1", "div")))
        if kind == "shift":   # floormod(var + k, extent) stays in bounds, and simplifies when extent == 1
            return BinaryOp("floormod", BinaryOp("add", var, IntImm(self.draw(st.integers(0, 5)))), IntImm(extent))
        if kind == "clamp":
            return BinaryOp("min", BinaryOp("add", var, IntImm(1)), IntImm(extent - 1))
        if kind == "mul1":
            return BinaryOp("add", BinaryOp("mul", var, IntImm(1)), IntImm(0))
        if kind == "div":
            return BinaryOp("floordiv", BinaryOp("mul", var, IntImm(2)), IntImm(2))
        return var

    def value(self, idx_vars: list[tuple[Var, int]], depth: int) -> PrimExpr:
        draw = self.draw
        choice = draw(st.sampled_from(("load", "load", "const", "var") + (("binary", "binary", "select", "ident")
                                                                           if depth > 0 else ())))
        if choice == "load":
            buf = draw(st.sampled_from((self.a, self.c)))
            indices = [self.index_for(v, n) for v, n in idx_vars]
            return BufferLoad(buf, indices)
        if choice == "const":
            return self.const(draw(st.integers(-3, 3)))
        if choice == "var":
            var, _ = draw(st.sampled_from(idx_vars))
            return Cast(self.dtype, var)
        if choice == "binary":
            ops = ["add", "sub", "mul", "min", "max"] + (["div"] if is_float(self.dtype) else ["floordiv", "floormod"])
            op = draw(st.sampled_from(ops))
            rhs = self.const(draw(st.integers(1, 3))) if op in ("floordiv", "floormod") else self.value(idx_vars,
                                                                                                         depth - 1)
            return BinaryOp(op, self.value(idx_vars, depth - 1), rhs)
        if choice == "select":
            var, n = draw(st.sampled_from(idx_vars))
            cond = BinaryOp(draw(st.sampled_from(("lt", "ge", "eq"))), var, IntImm(draw(st.integers(-1, n))))
            return Select(cond, self.value(idx_vars, depth - 1), self.value(idx_vars, depth - 1))
        ident = draw(st.sampled_from(("mul1", "add0", "mul0", "sub0")))
        inner = self.value(idx_vars, depth - 1)
        if ident == "mul1":
            return BinaryOp("mul", self.const(1), inner)
        if ident == "sub0":
            return BinaryOp("sub", inner, self.const(0))
        if ident == "mul0" and not is_float(self.dtype):
            return BinaryOp("add", BinaryOp("mul", inner, self.const(0)), self.value(idx_vars, 0))
        return BinaryOp("add", inner, self.const(0)) if not is_float(self.dtype) else inner

    def nest(self, dims: list[int], body_of: object) -> Stmt:
        """Loops over `dims` (named i0, i1, ...), with the body built from their (var, extent)s.
        Some loops start at 1 and index with `var - 1`; some are wrapped in a trivial loop."""
        draw = self.draw
        loops: list[tuple[Var, int, int]] = []
        idx_vars: list[tuple[PrimExpr, int]] = []
        for k, n in enumerate(dims):
            var = Var(f"i{k}", "int32")
            offset = draw(st.sampled_from((0, 0, 1)))
            loops.append((var, offset, n))
            idx_vars.append((var if offset == 0 else BinaryOp("sub", var, IntImm(offset)), n))
        body: Stmt = body_of(idx_vars)  # type: ignore[operator]
        if draw(st.booleans()):
            body = For(Var("t", "int32"), IntImm(3), IntImm(4), "serial", body)
        if draw(st.integers(0, 5)) == 0:
            body = seq([body, For(Var("e", "int32"), IntImm(2), IntImm(2), "serial", body_of(idx_vars))])  # type: ignore[operator]
        for var, offset, n in reversed(loops):
            body = For(var, IntImm(offset), IntImm(n + offset), draw(st.sampled_from(KINDS)), body)
        return body

    def elementwise(self, target: Buffer) -> Stmt:
        def body(idx_vars: list[tuple[PrimExpr, int]]) -> Stmt:
            value = self.value(idx_vars, 3)  # type: ignore[arg-type]
            indices = [v for v, _ in idx_vars]
            if self.draw(st.booleans()):
                tmp = Var("x", self.dtype)
                return LetStmt(tmp, value, BufferStore(target, indices, BinaryOp("add", tmp, self.value(
                    idx_vars, 1))))  # type: ignore[arg-type]
            if self.draw(st.booleans()):
                var, n = idx_vars[0]
                cond = BinaryOp("lt", var, IntImm(self.draw(st.integers(0, n))))
                return IfThenElse(cond, BufferStore(target, indices, value),
                                  BufferStore(target, indices, self.value(idx_vars, 1)))  # type: ignore[arg-type]
            return BufferStore(target, indices, value)
        return self.nest(list(self.shape), body)

    def reduction(self) -> Stmt:
        """R[i...] = 1; then R[i...] += value over the last axis (`%k`)."""
        extent = self.shape[-1]

        def update(idx_vars: list[tuple[PrimExpr, int]]) -> Stmt:
            k = Var("k", "int32")
            outer = [v for v, _ in idx_vars]
            value = self.value([*idx_vars, (k, extent)], 2)  # type: ignore[list-item]
            return For(k, IntImm(0), IntImm(extent), "serial",
                       BufferStore(self.red, outer, BinaryOp("add", BufferLoad(self.red, outer), value)))

        init = self.nest(list(self.shape[:-1]), lambda iv: BufferStore(self.red, [v for v, _ in iv], self.const(1)))
        return seq([init, self.nest(list(self.shape[:-1]), update)])

    def staged(self) -> Stmt:
        """A scratch buffer computed by one nest and read by the next."""
        scope = self.draw(st.sampled_from(("global", "local")))
        tmp = Buffer("T", self.shape, self.dtype, None, 0, scope)
        first = self.elementwise(tmp)
        second = self.nest(list(self.shape), lambda iv: BufferStore(
            self.out, [v for v, _ in iv], BinaryOp("mul", BufferLoad(tmp, [v for v, _ in iv]), self.const(2))))
        return Allocate(tmp, seq([first, second]))


@st.composite
def kernels(draw: st.DrawFn) -> PrimFunc:
    k = _Kernel(draw)
    stages = draw(st.lists(st.sampled_from(("elementwise", "reduction", "staged")), min_size=1, max_size=2))
    body: list[Stmt] = []
    for stage in stages:
        if stage == "elementwise":
            body.append(k.elementwise(k.out))
        elif stage == "reduction":
            body.append(k.reduction())
        else:
            body.append(k.staged())
    if draw(st.booleans()):
        body.append(Evaluate(IntImm(0)))
    return PrimFunc([k.a, k.c, k.out, k.red], seq(body), Attrs({"global_symbol": "kernel"}))


# ---- running and comparing ---------------------------------------------------------------------

def random_inputs(func: PrimFunc, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for p in func.params:
        dtype = numpy_dtype(p.dtype)
        shape = array_shape(p)
        if dtype.kind == "f":
            values = rng.integers(-8, 8, shape) / 4
        elif dtype.kind == "b":
            values = rng.integers(0, 2, shape)
        else:
            info = np.iinfo(dtype)
            values = rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True)
        arrays.append(np.array(values, dtype))
    return arrays


def run(func: PrimFunc, arrays: list[np.ndarray]) -> list[np.ndarray] | None:
    """The buffers after running `func` on copies of `arrays`, or None when the run fails."""
    copies = [a.copy() for a in arrays]
    try:
        run_primfunc(func, copies)
    except DiagnosticError:
        return None
    return copies


def offsets(buf: Buffer) -> np.ndarray:
    """The flat offset of every element of `buf` under its layout (what flattening uses)."""
    grids = np.indices(buf.shape, dtype=np.int64) if buf.shape else np.zeros((0,), np.int64)
    strides = layout_strides(buf)
    total = np.zeros(buf.shape, np.int64)
    for axis, stride in enumerate(strides):
        total += grids[axis] * stride
    return total


def to_layout(before: PrimFunc, after: PrimFunc, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Inputs for `after` when it flattened some of `before`'s parameters."""
    out = []
    for old, new, arr in zip(before.params, after.params, arrays):
        if old.shape == new.shape:
            out.append(arr)
            continue
        flat = np.zeros(array_shape(new), arr.dtype)
        flat[offsets(old)] = arr
        out.append(flat)
    return out


def from_layout(before: PrimFunc, after: PrimFunc, arrays: list[np.ndarray]) -> list[np.ndarray]:
    return [arr if old.shape == new.shape else arr[offsets(old)]
            for old, new, arr in zip(before.params, after.params, arrays)]


def aliased(func: PrimFunc) -> bool:
    """Whether some parameter's strides map two elements to one offset (then flattening follows
    the memory layout, which the interpreter's logical indexing does not model)."""
    for p in func.params:
        if needs_flattening(p) and p.shape:
            offs = offsets(p).ravel()
            if len(np.unique(offs)) != offs.size or flat_extent(p) > 4096:
                return True
    return False


def cheap_to_run(func: PrimFunc, limit: int = 4096) -> bool:
    """Whether the function runs at most `limit` loop iterations in total (random functions can
    have loops of 2**31 iterations, or bounds read from memory)."""
    total = 0
    stack: list[tuple[Stmt | None, int]] = [(func.body, 1)]
    while stack:
        stmt, times = stack.pop()
        if stmt is None:
            continue
        if isinstance(stmt, For):
            if type(stmt.begin) is not IntImm or type(stmt.end) is not IntImm:
                return False
            times *= max(stmt.end.value - stmt.begin.value, 0)
            total += times
            if total > limit:
                return False
        stack.extend((kid, times) for kid in stmt_parts(stmt)[1])
    return True


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(a, b))


def module_of(func: PrimFunc) -> IRModule:
    mod = IRModule()
    mod.add_function("kernel", func)  # type: ignore[arg-type]
    return mod


def check_pipeline(func: PrimFunc, pipeline: str, seed: int) -> PrimFunc | None:
    """Applies `pipeline`; checks verification, round trip and (when the original runs) results.
    Returns the result, or None when a loop pass refused the function with a diagnostic."""
    mod = module_of(func)
    try:
        for p in parse_pipeline(pipeline):
            mod = p.apply(mod)
    except DiagnosticError as exc:
        assert pipeline_refusal(exc), str(exc)
        return None
    after = mod.functions["kernel"]
    assert isinstance(after, PrimFunc)
    verify_primfunc(after, "kernel")
    text = print_module(mod)
    reparsed = parse_module(text, "after.tir").functions["kernel"]
    assert tir_structural_equal(reparsed, after), text
    if not cheap_to_run(func):
        return after
    arrays = random_inputs(func, seed)
    want = run(func, arrays)
    if want is not None and not aliased(func):
        got = run(after, to_layout(func, after, arrays))
        assert got is not None, text
        assert same(from_layout(func, after, got), want), text
    return after


def pipeline_refusal(exc: DiagnosticError) -> bool:
    """Loop passes may refuse (illegal reorder, non-constant vectorize extent, ...)."""
    pass_name, _, message = str(exc).partition(": ")
    return pass_name.startswith("tir-") and message.startswith(("cannot ", "no perfect nest", "no loop", "no primfn"))


# ---- the properties -----------------------------------------------------------------------------

@settings()
@given(kernels(), st.integers(0, 2**16))
def test_simplify_preserves_results(func: PrimFunc, seed: int) -> None:
    after = check_pipeline(func, "tir-simplify", seed)
    assert after is not None
    # Idempotent up to structure: a second run finds nothing the first left.
    again = check_pipeline(after, "tir-simplify", seed)
    assert again is not None and tir_structural_equal(again, after)


@settings()
@given(kernels(), st.integers(0, 2**16))
def test_flatten_preserves_results(func: PrimFunc, seed: int) -> None:
    after = check_pipeline(func, "tir-flatten-buffers", seed)
    assert after is not None
    assert all(len(p.shape) <= 1 for p in after.params)


@st.composite
def loop_pipelines(draw: st.DrawFn, func: PrimFunc) -> str:
    """A pipeline of 1-4 loop passes on loops that `func` has (before each pass)."""
    names = loop_names(func)
    passes = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(("split", "split", "reorder", "vectorize", "unroll", "parallel", "simplify",
                                     "flatten")))
        loop = draw(st.sampled_from(names))
        if kind == "split":
            tail = draw(st.booleans())
            passes.append(f"tir-split{{loop={loop},factor={draw(st.integers(1, 5))},tail={str(tail).lower()}}}")
            if draw(st.booleans()):
                names = names + [f"{loop}_outer", f"{loop}_inner"]
        elif kind == "reorder" and len(set(names)) > 1:
            other = draw(st.sampled_from([n for n in names if n != loop]))
            passes.append(f"tir-reorder{{loops=[{loop},{other}]}}")
        elif kind in ("vectorize", "unroll"):
            passes.append(f"tir-{kind}{{loop={loop}}}")
        elif kind == "parallel":
            passes.append(f"tir-parallelize{{loop={loop}}}")
        elif kind in ("simplify", "flatten"):
            passes.append("tir-simplify" if kind == "simplify" else "tir-flatten-buffers")
    return ",".join(passes)


@settings()
@given(st.data(), st.integers(0, 2**16))
def test_loop_pipelines_preserve_results(data: st.DataObject, seed: int) -> None:
    func = data.draw(kernels())
    pipeline = data.draw(loop_pipelines(func))
    check_pipeline(func, pipeline, seed)


@settings()
@given(primfuncs(), st.integers(0, 2**16))
def test_passes_on_arbitrary_primfuncs(func: PrimFunc, seed: int) -> None:
    """Every statement and expression kind: the passes keep functions valid (and meaning, when
    the original runs at all)."""
    check_pipeline(func, "tir-simplify", seed)
    check_pipeline(func, "tir-flatten-buffers,tir-simplify", seed)


@settings()
@given(kernels(), st.integers(0, 2**16), st.booleans())
def test_vectorize_innermost_loops(func: PrimFunc, seed: int, more: bool) -> None:
    """The innermost spatial loop (`%i<rank-1>`) usually has a vector form: ramps and broadcasts
    must compute what the loop did, also after simplification and flattening."""
    innermost = max([n for n in loop_names(func) if n.startswith("i")] or loop_names(func))
    pipeline = f"tir-vectorize{{loop={innermost}}}" + (",tir-simplify,tir-flatten-buffers" if more else "")
    check_pipeline(func, pipeline, seed)


@settings(max_examples=60)
@given(kernels(), st.integers(0, 2 ** 32 - 1))
def test_int64_indices_preserve_results(func: PrimFunc, seed: int) -> None:
    """Widening a kernel's index arithmetic to int64 (what a kernel over more than 2^31 elements
    gets) keeps it well typed and computes the same values; no loop variable stays int32."""
    wide = with_int64_indices(func)
    verify_primfunc(wide)
    loops = [s for s in walk_stmts(wide.body) if isinstance(s, For)]
    assert loops and all(s.var.dtype == "int64" for s in loops)
    arrays = random_inputs(func, seed)
    want = run(func, arrays)
    if want is not None:
        got = run(wide, arrays)
        assert got is not None and same(want, got)
