"""Choosing loops to run on threads: in each top-level nest, the outermost loop whose iterations
are disjoint (`irtool.tir_transform.dependence`) and carry enough work is marked `parallel` (the
`tir-parallelize` pass; the build driver applies it when it compiles for more than one thread).

Balance: the runtime cuts a parallel loop into `CHUNKS_PER_THREAD` chunks per thread, which the
threads claim one at a time, so a thread the scheduler delays leaves its share to the others.
A chosen loop with fewer iterations than that (a conv's 4 row blocks for 2 threads) is fused
with the loops directly inside it (output-channel blocks, pixel tiles) while they are disjoint
too, until it has enough: `for %s { for %no { B } }` becomes `for %s_no in parallel(0, S * NO)
{ let %s = floordiv(%s_no, NO); let %no = floormod(%s_no, NO); B }`. Sibling loops of one range
directly inside (a tile's main and remainder nests over the same channel blocks) count as one
loop (`for %k { let %no = %k; B1; let %no_1 = %k; B2 }`) when that jammed loop is disjoint.

In a kernel that gets parallel loops, serial loops of one iteration (a batch of 1) give way to
their body with the variable replaced by its value, so that no worker indexes with a captured
variable whose value its code cannot know.
"""

from __future__ import annotations

from irtool.ir.tir import (Allocate, AssertStmt, BinaryOp, BufferStore, Evaluate, For, IfThenElse, IntImm, LetStmt,
                           PrimExpr, PrimFunc, SeqStmt, Stmt, Var, int_range)
from irtool.tir_transform.dependence import iterations_disjoint
from irtool.tir_transform.mutator import TirRewriter, stmt_parts, walk_stmts

# A loop nest is worth threads when its innermost statements run at least this often (about
# 20-130 microseconds of work): with the pool of parked workers (irtool.codegen.thread_pool) a
# parallel loop costs a few microseconds (waking the workers, waiting for the last chunk), no
# longer a thread start. The nests above it hold 99.9 % of ResNet-50's statement count in 85
# parallel loops per inference and 96 % of SqueezeNet's in 39 (at 2^19: 98.7 % in 54, 78 % in 12).
MIN_WORK = 1 << 16
# Chunks per thread the runtime cuts a parallel loop into; fusion aims at that many iterations.
CHUNKS_PER_THREAD = 4


def _work(stmt: Stmt, limit: int) -> int:
    """How often the innermost statements run (unknown extents count 16), up to `limit`."""
    total = 0
    stack: list[tuple[Stmt | None, int]] = [(stmt, 1)]
    while stack and total < limit:
        node, times = stack.pop()
        if node is None:
            continue
        if isinstance(node, For):
            extent = _extent(node)
            stack.append((node.body, times * (16 if extent is None else max(extent, 0))))
        elif isinstance(node, (BufferStore, Evaluate, AssertStmt)):
            total += times
        else:
            stack.extend((kid, times) for kid in stmt_parts(node)[1])
    return total


def _extent(loop: For) -> int | None:
    if type(loop.begin) is IntImm and type(loop.end) is IntImm:
        return loop.end.value - loop.begin.value
    return None


def choose_parallel_loops(func: PrimFunc, min_work: int = MIN_WORK) -> set[int]:
    """ids of the loops to run on threads: in each top-level nest, the outermost serial loop that
    is safe, has two or more iterations and enough work under it. The walk enters blocks, lets,
    allocations, branches and one-iteration loops only, so that no chosen loop starts threads
    once per iteration of an enclosing loop."""
    chosen: set[int] = set()
    stack: list[Stmt | None] = [func.body]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        if isinstance(node, For):
            if node.kind != "serial":
                continue
            extent = _extent(node)
            if extent == 1:
                stack.append(node.body)
            elif (extent is None or extent >= 2) and _work(node, min_work) >= min_work \
                    and iterations_disjoint(node) is None:
                chosen.add(id(node))
        elif isinstance(node, (SeqStmt, LetStmt, Allocate, IfThenElse)):
            stack.extend(stmt_parts(node)[1])
    return chosen


def _inner_loop(body: Stmt, dtype: str) -> For | None:
    """The loop directly inside a loop's `body` that fusion may take: a serial loop of a known
    range of two or more iterations, or several such sibling loops of one range jammed into one
    (each binds its variable to the jammed loop's); None when there is none, or the iterations
    of that loop are not disjoint."""
    loops = [body] if isinstance(body, For) else list(body.stmts) if isinstance(body, SeqStmt) else []
    if not loops or not all(isinstance(s, For) and s.kind == "serial" and s.var.dtype == dtype
                            and type(s.begin) is IntImm and type(s.end) is IntImm
                            and (s.begin.value, s.end.value) == (loops[0].begin.value, loops[0].end.value)  # type: ignore[union-attr]
                            for s in loops):
        return None
    first: For = loops[0]  # type: ignore[assignment]
    if _extent(first) < 2:  # type: ignore[operator]
        return None
    if len(loops) == 1:
        inner = first
    else:
        k = Var(first.var.name, dtype, first.var.span)
        jammed = SeqStmt([LetStmt(s.var, k, s.body, s.span) for s in loops], body.span)  # type: ignore[union-attr]
        inner = For(k, first.begin, first.end, "serial", jammed, first.span)
    return inner if iterations_disjoint(inner) is None else None


def balance(loop: For, threads: int) -> For:
    """The chosen `loop` marked parallel, fused with the loops directly inside it while it has
    fewer than CHUNKS_PER_THREAD * threads iterations and they are disjoint too."""
    want = CHUNKS_PER_THREAD * threads
    chain = [loop]
    extent = _extent(loop)
    dtype = loop.var.dtype
    while extent is not None and extent < want:
        inner = _inner_loop(chain[-1].body, dtype)
        if inner is None or extent * _extent(inner) > int_range(dtype)[1]:  # type: ignore[operator]
            break
        chain.append(inner)
        extent *= _extent(inner)  # type: ignore[operator]
    if len(chain) == 1:
        return For(loop.var, loop.begin, loop.end, "parallel", loop.body, loop.span)
    fused = Var("_".join(s.var.name for s in chain), dtype, loop.var.span)
    body = chain[-1].body
    stride = 1
    for s in reversed(chain):
        n = _extent(s)
        index: BinaryOp | Var = fused if stride == 1 else BinaryOp("floordiv", fused, IntImm(stride, dtype))
        if s is not chain[0]:
            index = BinaryOp("floormod", index, IntImm(n, dtype))  # type: ignore[arg-type]
        value = index if s.begin.value == 0 else BinaryOp("add", index, s.begin)  # type: ignore[union-attr]
        body = LetStmt(s.var, value, body, s.span)
        stride *= n  # type: ignore[operator]
    return For(fused, IntImm(0, dtype), IntImm(extent, dtype), "parallel", body, loop.span)  # type: ignore[arg-type]


class _Marker(TirRewriter):
    def __init__(self, loops: set[int], threads: int) -> None:
        super().__init__()
        self.loops = loops
        self.threads = threads

    def rewrite_expr(self, root: PrimExpr) -> PrimExpr:
        # Only loops change, and the variables of one-iteration loops become their value.
        return super().rewrite_expr(root) if self.var_map else root

    def pre(self, stmt: Stmt) -> Stmt | None:
        """A serial loop of one iteration (a batch of 1) is replaced by its body with the variable
        replaced by its value: a parallel loop inside would otherwise capture the variable, and
        its worker, knowing nothing of its value, index with it (Inception-v2's and ShuffleNet's
        max pools took 1.5-2x the serial kernel's time)."""
        if isinstance(stmt, For) and stmt.kind == "serial" and type(stmt.begin) is IntImm and _extent(stmt) == 1:
            self.var_map[id(stmt.var)] = stmt.begin
            return stmt.body
        return stmt

    def post(self, original: Stmt, rebuilt: Stmt) -> Stmt | None:
        if isinstance(rebuilt, For) and id(original) in self.loops:
            return balance(rebuilt, self.threads)
        return rebuilt


def parallelize(func: PrimFunc, min_work: int = MIN_WORK, threads: int = 2) -> PrimFunc:
    """`func` with its outermost safe loops marked `parallel` and balanced for `threads`;
    unchanged when it already has a parallel loop (a schedule that chose its own)."""
    if any(isinstance(s, For) and s.kind == "parallel" for s in walk_stmts(func.body)):
        return func
    loops = choose_parallel_loops(func, min_work)
    return _Marker(loops, threads).rewrite_func(func) if loops else func
