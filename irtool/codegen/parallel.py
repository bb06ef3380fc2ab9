"""`parallel` loops on threads: outlining a loop into a worker that the thread pool
(`irtool.codegen.thread_pool`) runs in chunks. Used only when the target's `threads` is above 1, so a
serial build has no pthread dependency at all.

A parallel loop `for %v in parallel(b, e) { body }` becomes
- `@<kernel>_parK_body(ptr noalias ... %b0, ..., <scalars> %v0, ..., i64 %begin, i64 %end)`: the loop
  over `[begin, end)` as a serial loop, taking the buffers and variables the body uses from
  outside as parameters (`noalias` and alignments as in the kernel, so alias analysis inside
  the worker knows what it knew in the kernel);
- `@<kernel>_parK(ptr %closure, i64 %begin, i64 %end)`: loads those values from a closure struct
  and calls the body, which is `noinline` (inlined, its `noalias` parameters became scope
  metadata on every access and -O3 took about twice the serial kernel's time);
- at the loop's place in the kernel: the closure filled on the stack and
  `call i32 @irtool_parallel_for(ptr @<kernel>_parK, ptr %closure, i64 b, i64 e, i32 threads)`,
  returning 0 or a failing chunk's status.

`@irtool_parallel_for` is the thread pool of `irtool.codegen.thread_pool` (LLVM IR text added
once per module that has a parallel loop): workers started once and parked between loops, the
caller working too, a failing chunk's status returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from irtool.codegen.thread_pool import DECLARATIONS, RUNTIME
from irtool.codegen.types import is_unsigned, value_type
from irtool.ir.tir import Allocate, BinaryOp, Buffer, BufferLoad, BufferStore, For, IntImm, LetStmt, Stmt, Var
from irtool.tir_transform.mutator import stmt_parts, walk_exprs, walk_stmts

if TYPE_CHECKING:
    from irtool.codegen.tir_to_llvm import FunctionEmitter


def captures(loop: For) -> tuple[list[Buffer], list[Var]]:
    """The buffers and variables the loop's body uses but does not bind (in first-use order)."""
    bound: set[int] = {id(loop.var)}
    local: set[int] = set()
    buffers: dict[int, Buffer] = {}
    variables: dict[int, Var] = {}
    for stmt in walk_stmts(loop.body):
        if isinstance(stmt, (For, LetStmt)):
            bound.add(id(stmt.var))
        elif isinstance(stmt, BufferStore):
            buffers.setdefault(id(stmt.buffer), stmt.buffer)
        elif isinstance(stmt, Allocate):
            local.add(id(stmt.buffer))
        for node in walk_exprs(stmt_parts(stmt)[0]):
            if isinstance(node, BufferLoad):
                buffers.setdefault(id(node.buffer), node.buffer)
            elif isinstance(node, Var):
                variables.setdefault(id(node), node)
    return ([b for k, b in buffers.items() if k not in local],
            [v for k, v in variables.items() if k not in bound])


def emit_parallel_loop(emitter: FunctionEmitter, loop: For) -> None:
    """Replaces `loop` in the kernel being emitted by a call of the runtime on an outlined worker."""
    ctx = emitter.ctx
    buffers, variables = captures(loop)
    worker = f"{emitter.symbol}_par{emitter.workers}"
    emitter.workers += 1
    ctx.functions.append(emitter.outline(loop, worker + "_body", buffers, variables))

    slots = [("ptr", emitter.pointers[id(b)][0]) for b in buffers]
    slots += [(value_type(v.dtype), emitter.values[id(v)]) for v in variables]
    struct = "{ " + ", ".join(ty for ty, _ in slots) + " }" if slots else "{}"
    loads, args = [], []
    for k, (ty, _) in enumerate(slots):
        loads.append(f"  %f{k} = getelementptr inbounds {struct}, ptr %closure, i32 0, i32 {k}")
        loads.append(f"  %x{k} = load {ty}, ptr %f{k}")
        args.append(f"{ty} %x{k}")
    args += ["i64 %begin", "i64 %end"]
    ctx.functions.append("\n".join([
        f"define internal i32 @{worker}(ptr nocapture readonly %closure, i64 %begin, i64 %end) #0 {{", "entry:",
        *loads, f"  %status = call i32 @{worker}_body({', '.join(args)})", "  ret i32 %status", "}", ""]))
    if not ctx.has_runtime:
        ctx.has_runtime = True
        for name, text in DECLARATIONS.items():
            ctx.declare(name, text)

    closure = "null"
    if slots:
        closure = f"%closure{len(emitter.allocas)}"
        emitter.allocas.append(f"  {closure} = alloca {struct}, align 64")
        for k, (ty, value) in enumerate(slots):
            field = emitter.emit(f"getelementptr inbounds {struct}, ptr {closure}, i32 0, i32 {k}")
            emitter.lines.append(f"  store {ty} {value}, ptr {field}")
    begin, end = emitter.expr(loop.begin), emitter.expr(loop.end)
    wide = [_to_i64(emitter, loop.var, v) for v in (begin, end)]
    status = emitter.emit(f"call i32 @{RUNTIME}(ptr @{worker}, ptr {closure}, i64 {wide[0]}, i64 {wide[1]}, "
                          f"i32 {ctx.threads})")
    emitter.return_status_if(emitter.emit(f"icmp ne i32 {status}, 0"), status, "parallel")


def _to_i64(emitter: FunctionEmitter, var: Var, value: str) -> str:
    ty = value_type(var.dtype)
    if ty == "i64" or value.lstrip("-").isdigit():   # a literal is the same text as an i64
        return value
    return emitter.emit(f"{'zext' if is_unsigned(var.dtype) else 'sext'} {ty} {value} to i64")


def loop_bound(emitter: FunctionEmitter, var: Var, wide: str) -> str:
    """A chunk bound (i64) in the loop variable's type."""
    ty = value_type(var.dtype)
    return wide if ty == "i64" else emitter.emit(f"trunc i64 {wide} to {ty}")


def body_of(loop: For, begin: Var, end: Var) -> Stmt:
    """The loop as the worker runs it: serial over `[begin, end)`. Where the loop's range is
    constant the body sees the variable clamped to it, which changes nothing (every chunk lies
    inside the range) but gives LLVM the variable's range as the serial kernel's constant bounds
    do: without it a `floordiv` of the variable kept its sign fix-ups, which the SLP vectorizer
    turned into vector code whose row pointers spilled the accumulators of a conv's inner loop
    (Inception-v2's 3x3 conv of 64 to 192 channels took 1.5-4x the serial kernel's time)."""
    if type(loop.begin) is not IntImm or type(loop.end) is not IntImm:
        return For(loop.var, begin, end, "serial", loop.body, loop.span)
    var = loop.var
    chunk = Var(f"{var.name}_chunk", var.dtype, var.span)
    last = IntImm(loop.end.value - 1, var.dtype)
    clamped = BinaryOp("max", BinaryOp("min", chunk, last), loop.begin)
    return For(chunk, begin, end, "serial", LetStmt(var, clamped, loop.body, loop.span), loop.span)
