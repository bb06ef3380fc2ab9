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
  returning 0 or a failing chunk's status.

`@irtool_parallel_for` cuts `[b, e)` into contiguous chunks (4 per thread, sizes differing by at
most one) held in a reference-counted job on the heap, starts `threads - 1` detached threads
(`pthread_create`, `pthread_detach`), and works on the job itself: every participant claims the
next chunk with an atomic increment until none is left. The caller then waits (`sched_yield`)
until every claimed chunk is done and returns the status of a failing chunk (a failed `assert`
inside the loop), or 0. So a thread the scheduler starts late - the machine is busy - finds no
chunk left and only drops its reference, instead of holding the caller up; a thread that cannot
be created (or a job that cannot be allocated) leaves the work to the caller: running out of
threads is never an error. The runtime is `internal` in every module (`noinline`): objects carry
their own copy and link with `-pthread` (on glibc 2.34 and later pthreads are in libc itself).
Threads are started per parallel loop, which costs tens of microseconds; codegen only marks
loops with enough work (irtool/tir_transform/parallel.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from irtool.codegen.types import is_unsigned, value_type
from irtool.ir.tir import Allocate, Buffer, BufferLoad, BufferStore, For, LetStmt, Stmt, Var
from irtool.tir_transform.mutator import stmt_parts, walk_exprs, walk_stmts

if TYPE_CHECKING:
    from irtool.codegen.tir_to_llvm import FunctionEmitter

RUNTIME = "irtool_parallel_for"
_JOB = "%irtool.job"
# The fields of a job: what runs, how it is cut, who holds it.
_FN, _CLOSURE, _BEGIN, _N, _CHUNKS, _NEXT, _DONE, _REFS, _STATUS = range(9)
CHUNKS_PER_THREAD = 4


def _field(ptr: str, k: int) -> str:
    return f"getelementptr inbounds {_JOB}, ptr {ptr}, i32 0, i32 {k}"


RUNTIME_TEXT = f"""{_JOB} = type {{ ptr, ptr, i64, i64, i64, i64, i64, i32, i32 }}

define internal void @irtool_parallel_chunks(ptr %job) #0 {{
entry:
  %fn.p = {_field("%job", _FN)}
  %fn = load ptr, ptr %fn.p, align 8
  %closure.p = {_field("%job", _CLOSURE)}
  %closure = load ptr, ptr %closure.p, align 8
  %begin.p = {_field("%job", _BEGIN)}
  %begin = load i64, ptr %begin.p, align 8
  %n.p = {_field("%job", _N)}
  %n = load i64, ptr %n.p, align 8
  %chunks.p = {_field("%job", _CHUNKS)}
  %chunks = load i64, ptr %chunks.p, align 8
  %next.p = {_field("%job", _NEXT)}
  %done.p = {_field("%job", _DONE)}
  %status.p = {_field("%job", _STATUS)}
  %base = sdiv i64 %n, %chunks
  %extra = srem i64 %n, %chunks
  br label %claim
claim:
  %c = atomicrmw add ptr %next.p, i64 1 seq_cst
  %left = icmp slt i64 %c, %chunks
  br i1 %left, label %run, label %out
run:
  %c.base = mul i64 %c, %base
  %c.long = icmp slt i64 %c, %extra
  %c.skew = select i1 %c.long, i64 %c, i64 %extra
  %c.off = add i64 %c.base, %c.skew
  %c.lo = add i64 %begin, %c.off
  %c.plus = zext i1 %c.long to i64
  %c.len = add i64 %base, %c.plus
  %c.hi = add i64 %c.lo, %c.len
  %s = call i32 %fn(ptr %closure, i64 %c.lo, i64 %c.hi)
  %failed = icmp ne i32 %s, 0
  br i1 %failed, label %record, label %count
record:
  %first = cmpxchg ptr %status.p, i32 0, i32 %s seq_cst seq_cst
  br label %count
count:
  %d = atomicrmw add ptr %done.p, i64 1 seq_cst
  br label %claim
out:
  ret void
}}

define internal void @irtool_parallel_release(ptr %job) #0 {{
entry:
  %refs.p = {_field("%job", _REFS)}
  %r = atomicrmw sub ptr %refs.p, i32 1 seq_cst
  %last = icmp eq i32 %r, 1
  br i1 %last, label %drop, label %keep
drop:
  call void @free(ptr %job)
  ret void
keep:
  ret void
}}

define internal ptr @irtool_parallel_thread(ptr %job) #0 {{
entry:
  call void @irtool_parallel_chunks(ptr %job)
  call void @irtool_parallel_release(ptr %job)
  ret ptr null
}}

define internal i32 @{RUNTIME}(ptr %fn, ptr %closure, i64 %begin, i64 %end, i32 %threads) noinline #0 {{
entry:
  %tid = alloca i64, align 8
  %n = sub i64 %end, %begin
  %t = zext i32 %threads to i64
  %several = icmp sgt i64 %n, 1
  %helpers = icmp sgt i64 %t, 1
  %split = and i1 %several, %helpers
  br i1 %split, label %cut, label %serial
serial:
  %some = icmp sgt i64 %n, 0
  br i1 %some, label %alone, label %nothing
alone:
  %only = call i32 %fn(ptr %closure, i64 %begin, i64 %end)
  ret i32 %only
nothing:
  ret i32 0
cut:
  %want = mul i64 %t, {CHUNKS_PER_THREAD}
  %short = icmp slt i64 %n, %want
  %chunks = select i1 %short, i64 %n, i64 %want
  %few = icmp slt i64 %chunks, %t
  %team = select i1 %few, i64 %chunks, i64 %t
  %job = call ptr @malloc(i64 64)
  %nomem = icmp eq ptr %job, null
  br i1 %nomem, label %alone, label %fill
fill:
  store ptr %fn, ptr %job, align 8
  %closure.p = {_field("%job", _CLOSURE)}
  store ptr %closure, ptr %closure.p, align 8
  %begin.p = {_field("%job", _BEGIN)}
  store i64 %begin, ptr %begin.p, align 8
  %n.p = {_field("%job", _N)}
  store i64 %n, ptr %n.p, align 8
  %chunks.p = {_field("%job", _CHUNKS)}
  store i64 %chunks, ptr %chunks.p, align 8
  %next.p = {_field("%job", _NEXT)}
  store i64 0, ptr %next.p, align 8
  %done.p = {_field("%job", _DONE)}
  store i64 0, ptr %done.p, align 8
  %refs.p = {_field("%job", _REFS)}
  %refs = trunc i64 %team to i32
  store i32 %refs, ptr %refs.p, align 8
  %status.p = {_field("%job", _STATUS)}
  store i32 0, ptr %status.p, align 4
  br label %spawn
spawn:
  %j = phi i64 [ 1, %fill ], [ %j.next, %spawned ]
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @irtool_parallel_thread, ptr %job)
  %started = icmp eq i32 %rc, 0
  br i1 %started, label %detach, label %unstarted
detach:
  %id = load i64, ptr %tid, align 8
  %detached = call i32 @pthread_detach(i64 %id)
  br label %spawned
unstarted:
  call void @irtool_parallel_release(ptr %job)
  br label %spawned
spawned:
  %j.next = add i64 %j, 1
  %j.more = icmp slt i64 %j.next, %team
  br i1 %j.more, label %spawn, label %work
work:
  call void @irtool_parallel_chunks(ptr %job)
  br label %wait
wait:
  %d = load atomic i64, ptr %done.p seq_cst, align 8
  %all = icmp sge i64 %d, %chunks
  br i1 %all, label %finish, label %yield
yield:
  %y = call i32 @sched_yield()
  br label %wait
finish:
  %status = load atomic i32, ptr %status.p seq_cst, align 4
  call void @irtool_parallel_release(ptr %job)
  ret i32 %status
}}
"""

_DECLARATIONS = {"pthread_create": "declare i32 @pthread_create(ptr, ptr, ptr, ptr)",
                 "pthread_detach": "declare i32 @pthread_detach(i64)",
                 "sched_yield": "declare i32 @sched_yield()",
                 "malloc": "declare noalias ptr @malloc(i64)",
                 "free": "declare void @free(ptr)"}


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
        for name, text in _DECLARATIONS.items():
            ctx.declare(name, text)
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
    emitter.return_status_if(emitter.emit(f"icmp ne i32 {status}, 0"), status, "parallel")


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
