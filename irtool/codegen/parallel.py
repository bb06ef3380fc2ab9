"""`parallel` loops on threads: outlining a loop into a worker, and the small runtime (LLVM IR
over pthreads) that runs the workers. Used only when the target's `threads` is above 1, so a
serial build has no pthread dependency at all.

A parallel loop `for %v in parallel(b, e) { body }` becomes
- `@<kernel>_parK_body(ptr noalias ... %b0, ..., <scalars> %v0, ..., i64 %begin, i64 %end)`: the loop
  over `[begin, end)` as a serial loop, taking the buffers and variables the body uses from
  outside as parameters (`noalias` and alignments as in the kernel, so alias analysis inside
  the worker knows what it knew in the kernel);
- `@<kernel>_parK(ptr %closure, i64 %begin, i64 %end)`: loads those values from a closure struct
  and calls the body (LLVM inlines it, turning `noalias` into scope metadata);
- at the loop's place in the kernel: the closure filled on the stack and
  `call i32 @irtool_parallel_for(ptr @<kernel>_parK, ptr %closure, i64 b, i64 e, i32 threads)`,
  returning the first non-zero status of the chunks (a failed `assert` inside the loop).

`@irtool_parallel_for` splits `[b, e)` into at most `threads` contiguous chunks of sizes that
differ by at most one, starts a thread for every chunk but the first (`pthread_create`), runs
the first on the calling thread and joins the others (`noinline`: its per-call arrays are
dynamic allocas, which must not pile up in a caller's loop). A thread that cannot be created leaves
its chunk to the calling thread, so running out of threads is never an error. The runtime is
`internal` in every module: objects carry their own copy and link with `-pthread` (on glibc
2.34 and later pthreads are in libc itself). Threads are started per parallel loop, which costs
tens of microseconds; codegen only marks loops with enough work (irtool/tir_transform/parallel.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from irtool.codegen.types import is_unsigned, value_type
from irtool.ir.tir import Allocate, Buffer, BufferLoad, BufferStore, For, LetStmt, Stmt, Var
from irtool.tir_transform.mutator import stmt_parts, walk_exprs, walk_stmts

if TYPE_CHECKING:
    from irtool.codegen.tir_to_llvm import FunctionEmitter

RUNTIME = "irtool_parallel_for"
_TASK = "%irtool.task"   # { worker, closure, begin, end, status }


def _field(ptr: str, k: int) -> str:
    return f"getelementptr inbounds {_TASK}, ptr {ptr}, i32 0, i32 {k}"


RUNTIME_TEXT = f"""{_TASK} = type {{ ptr, ptr, i64, i64, i32 }}

define internal ptr @irtool_parallel_task(ptr %task) #0 {{
entry:
  %fn.p = {_field("%task", 0)}
  %fn = load ptr, ptr %fn.p, align 8
  %closure.p = {_field("%task", 1)}
  %closure = load ptr, ptr %closure.p, align 8
  %begin.p = {_field("%task", 2)}
  %begin = load i64, ptr %begin.p, align 8
  %end.p = {_field("%task", 3)}
  %end = load i64, ptr %end.p, align 8
  %status = call i32 %fn(ptr %closure, i64 %begin, i64 %end)
  %status.p = {_field("%task", 4)}
  store i32 %status, ptr %status.p, align 8
  ret ptr null
}}

define internal i32 @{RUNTIME}(ptr %fn, ptr %closure, i64 %begin, i64 %end, i32 %threads) noinline #0 {{
entry:
  %n = sub i64 %end, %begin
  %t = zext i32 %threads to i64
  %fewer = icmp slt i64 %n, %t
  %k = select i1 %fewer, i64 %n, i64 %t
  %many = icmp sgt i64 %k, 1
  br i1 %many, label %split, label %serial
serial:
  %some = icmp sgt i64 %n, 0
  br i1 %some, label %alone, label %nothing
alone:
  %only = call i32 %fn(ptr %closure, i64 %begin, i64 %end)
  ret i32 %only
nothing:
  ret i32 0
split:
  %tasks = alloca {_TASK}, i64 %k, align 8
  %tids = alloca i64, i64 %k, align 8
  %started = alloca i8, i64 %k, align 1
  %base = sdiv i64 %n, %k
  %extra = srem i64 %n, %k
  br label %fill
fill:
  %c = phi i64 [ 0, %split ], [ %c.next, %fill ]
  %c.base = mul i64 %c, %base
  %c.long = icmp slt i64 %c, %extra
  %c.skew = select i1 %c.long, i64 %c, i64 %extra
  %c.off = add i64 %c.base, %c.skew
  %c.lo = add i64 %begin, %c.off
  %c.plus = zext i1 %c.long to i64
  %c.len = add i64 %base, %c.plus
  %c.hi = add i64 %c.lo, %c.len
  %c.task = getelementptr inbounds {_TASK}, ptr %tasks, i64 %c
  store ptr %fn, ptr %c.task, align 8
  %c.f1 = {_field("%c.task", 1)}
  store ptr %closure, ptr %c.f1, align 8
  %c.f2 = {_field("%c.task", 2)}
  store i64 %c.lo, ptr %c.f2, align 8
  %c.f3 = {_field("%c.task", 3)}
  store i64 %c.hi, ptr %c.f3, align 8
  %c.f4 = {_field("%c.task", 4)}
  store i32 0, ptr %c.f4, align 8
  %c.next = add i64 %c, 1
  %c.more = icmp slt i64 %c.next, %k
  br i1 %c.more, label %fill, label %spawn
spawn:
  %j = phi i64 [ 1, %fill ], [ %j.next, %spawned ]
  %j.task = getelementptr inbounds {_TASK}, ptr %tasks, i64 %j
  %j.tid = getelementptr inbounds i64, ptr %tids, i64 %j
  %j.rc = call i32 @pthread_create(ptr %j.tid, ptr null, ptr @irtool_parallel_task, ptr %j.task)
  %j.ok = icmp eq i32 %j.rc, 0
  %j.flag = getelementptr inbounds i8, ptr %started, i64 %j
  %j.byte = zext i1 %j.ok to i8
  store i8 %j.byte, ptr %j.flag, align 1
  br i1 %j.ok, label %spawned, label %here
here:
  %j.here = call ptr @irtool_parallel_task(ptr %j.task)
  br label %spawned
spawned:
  %j.next = add i64 %j, 1
  %j.more = icmp slt i64 %j.next, %k
  br i1 %j.more, label %spawn, label %first
first:
  %first.run = call ptr @irtool_parallel_task(ptr %tasks)
  br label %join
join:
  %q = phi i64 [ 1, %first ], [ %q.next, %joined ]
  %q.flag = getelementptr inbounds i8, ptr %started, i64 %q
  %q.byte = load i8, ptr %q.flag, align 1
  %q.started = icmp ne i8 %q.byte, 0
  br i1 %q.started, label %wait, label %joined
wait:
  %q.tid.p = getelementptr inbounds i64, ptr %tids, i64 %q
  %q.tid = load i64, ptr %q.tid.p, align 8
  %q.rc = call i32 @pthread_join(i64 %q.tid, ptr null)
  br label %joined
joined:
  %q.next = add i64 %q, 1
  %q.more = icmp slt i64 %q.next, %k
  br i1 %q.more, label %join, label %gather
gather:
  %r = phi i64 [ 0, %joined ], [ %r.next, %gather ]
  %acc = phi i32 [ 0, %joined ], [ %acc.next, %gather ]
  %r.task = getelementptr inbounds {_TASK}, ptr %tasks, i64 %r
  %r.status.p = {_field("%r.task", 4)}
  %r.status = load i32, ptr %r.status.p, align 8
  %acc.set = icmp ne i32 %acc, 0
  %acc.next = select i1 %acc.set, i32 %acc, i32 %r.status
  %r.next = add i64 %r, 1
  %r.more = icmp slt i64 %r.next, %k
  br i1 %r.more, label %gather, label %done
done:
  ret i32 %acc.next
}}
"""


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
        ctx.declare("pthread_create", "declare i32 @pthread_create(ptr, ptr, ptr, ptr)")
        ctx.declare("pthread_join", "declare i32 @pthread_join(i64, ptr)")
        ctx.functions.append(RUNTIME_TEXT)

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
    failed = emitter.emit(f"icmp ne i32 {status}, 0")
    bad, ok = emitter.label("parallel_failed"), emitter.label("parallel_done")
    emitter.lines.append(f"  br i1 {failed}, label %{bad}, label %{ok}")
    emitter.start_block(bad)
    emitter.lines.append(f"  ret i32 {status}")
    emitter.start_block(ok)


def _to_i64(emitter: FunctionEmitter, var: Var, value: str) -> str:
    ty = value_type(var.dtype)
    if ty == "i64":
        return value
    return emitter.emit(f"{'zext' if is_unsigned(var.dtype) else 'sext'} {ty} {value} to i64")


def loop_bound(emitter: FunctionEmitter, var: Var, wide: str) -> str:
    """A chunk bound (i64) in the loop variable's type."""
    ty = value_type(var.dtype)
    return wide if ty == "i64" else emitter.emit(f"trunc i64 {wide} to {ty}")


def body_of(loop: For, begin: Var, end: Var) -> Stmt:
    """The loop as the worker runs it: serial over `[begin, end)`."""
    return For(loop.var, begin, end, "serial", loop.body, loop.span)
