"""Values of the functions path (docs/native-relay.md) and the small runtime they need, as LLVM IR.

A Relay value is a fixed list of *leaves* decided by its type: a tensor of static shape is one
tensor leaf (a data pointer), a tuple is the leaves of its fields, and an ADT value, a closure,
a reference or a tensor of dynamic shape (a box, `irtool/codegen/boxes.py`) is one object leaf (a pointer to a reference-counted heap object). Every object
starts with `{ i64 refcount, ptr drop }`; `drop(o)` releases all but one of the object fields of
`o`, frees it and returns that last field, which `irtool_rt_release` then releases in its own
loop, so long chains (a list's spine) are freed without recursion. Tensors inside objects are
stored inline. Allocation is libc's `malloc`/`free`; the runtime functions are `internal` in
every module.

A program that may recurse deeply runs `main` on a thread with a large stack
(`irtool_rt_on_big_stack`); every function compares its frame's address with the limit in the
context (`ctx`) on entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from irtool.analysis.steps import tensor_bytes
from irtool.codegen.tir_to_llvm import STATUS_OUT_OF_MEMORY
from irtool.codegen.types import element_bytes
from irtool.core.diagnostics import DiagnosticError
from irtool.core.span import Span
from irtool.ir.types import FuncType, RefType, TensorType, TupleType, Type, TypeCall, type_to_text

# Statuses beyond the kernels' (irtool/codegen/tir_to_llvm.py: 0 ok, 1 misaligned, 2 out of memory).
STATUS_STACK_OVERFLOW = 3
STATUS_NO_MATCH = 4

# Object header: reference count, drop function; then an ADT's tag or a closure's code pointer.
RC, DROP, TAG, CODE = 0, 8, 16, 16
HEADER = 16
ADT_FIELDS = CLOSURE_FIELDS = 24
REF_FIELDS = HEADER

# A recursive program first runs on the caller's stack, using at most this much of it.
CALLER_STACK_BUDGET = 512 * 1024
# The stack of the thread that runs deeply recursive programs (virtual memory: only the pages
# touched are backed), and what is kept free below the limit for kernels' scratch and libm.
BIG_STACK_BYTES = 1 << 30
STACK_MARGIN = 1 << 20
# Frames up to this size are `alloca`s; larger ones come from the heap.
MAX_STACK_FRAME = 64 * 1024

RELEASE = "irtool_rt_release"
ALLOC = "irtool_rt_alloc"
ON_BIG_STACK = "irtool_rt_on_big_stack"


@dataclass(frozen=True)
class Obj:
    """The leaf of a heap object of Relay type `rtype` (an ADT, a closure or a reference)."""

    rtype: Type


Leaf = TensorType | Obj


def leaves_of(t: Type | None, span: Span | None) -> tuple[Leaf, ...]:
    """The leaves of a value of type `t`, left to right."""
    out: list[Leaf] = []
    stack: list[Type | None] = [t]
    while stack:
        cur = stack.pop()
        if isinstance(cur, TupleType):
            stack.extend(reversed(cur.fields))
        elif isinstance(cur, TensorType):
            out.append(cur if cur.is_static else Obj(cur))   # a dynamic shape: a box (codegen/boxes.py)
        elif isinstance(cur, (TypeCall, FuncType, RefType)):
            out.append(Obj(cur))
        else:
            what = "an unknown type" if cur is None else type_to_text(cur)
            raise DiagnosticError(f"native code: a value of {what} cannot be compiled (its type is not known "
                                  "after monomorphisation)", span)
    return tuple(out)


def nbytes(t: TensorType) -> int:
    return tensor_bytes(t, None)


def inline_align(t: TensorType) -> int:
    """Alignment of a tensor stored in an object: 16 bytes (what malloc gives) when it is that
    large, else its element size."""
    return 16 if nbytes(t) >= 16 else max(1, element_bytes(t.dtype))


def field_offsets(leaves: tuple[Leaf, ...], start: int) -> tuple[list[int], int]:
    """Byte offsets of the leaves stored from `start` on, and the object's size."""
    offsets: list[int] = []
    at = start
    for leaf in leaves:
        align = 8 if isinstance(leaf, Obj) else inline_align(leaf)
        at = (at + align - 1) // align * align
        offsets.append(at)
        at += 8 if isinstance(leaf, Obj) else nbytes(leaf)
    return offsets, max(at, start)


def drop_function(symbol: str, leaves: tuple[Leaf, ...], offsets: list[int]) -> str:
    """`ptr @symbol(ptr %o)`: releases the object fields but the last, frees `%o`, returns the last."""
    objs = [off for leaf, off in zip(leaves, offsets) if isinstance(leaf, Obj)]
    lines = [f"define internal ptr @{symbol}(ptr %o) #0 {{", "entry:"]
    for k, off in enumerate(objs[:-1]):
        lines += [f"  %p{k} = getelementptr inbounds i8, ptr %o, i64 {off}", f"  %f{k} = load ptr, ptr %p{k}, align 8",
                  f"  call void @{RELEASE}(ptr %f{k})"]
    last = "null"
    if objs:
        lines += [f"  %plast = getelementptr inbounds i8, ptr %o, i64 {objs[-1]}",
                  "  %last = load ptr, ptr %plast, align 8"]
        last = "%last"
    lines += ["  call void @free(ptr %o)", f"  ret ptr {last}", "}", ""]
    return "\n".join(lines)


RUNTIME_TEXT = f"""define internal void @{RELEASE}(ptr %o) #0 {{
entry:
  br label %loop
loop:
  %cur = phi ptr [ %o, %entry ], [ %next, %drop ]
  %isnull = icmp eq ptr %cur, null
  br i1 %isnull, label %done, label %count
count:
  %rc = load i64, ptr %cur, align 8
  %rc1 = sub i64 %rc, 1
  store i64 %rc1, ptr %cur, align 8
  %dead = icmp eq i64 %rc1, 0
  br i1 %dead, label %drop, label %done
drop:
  %dp = getelementptr inbounds i8, ptr %cur, i64 {DROP}
  %dropfn = load ptr, ptr %dp, align 8
  %next = call ptr %dropfn(ptr %cur)
  br label %loop
done:
  ret void
}}

define internal ptr @{ALLOC}(i64 %size, ptr %drop) #0 {{
entry:
  %o = call ptr @malloc(i64 %size)
  %failed = icmp eq ptr %o, null
  br i1 %failed, label %fail, label %ok
ok:
  store i64 1, ptr %o, align 8
  %dp = getelementptr inbounds i8, ptr %o, i64 {DROP}
  store ptr %drop, ptr %dp, align 8
  ret ptr %o
fail:
  ret ptr null
}}
"""

RUNTIME_DECLARATIONS = {"malloc": "declare noalias ptr @malloc(i64)", "free": "declare void @free(ptr)"}

# The task a big-stack thread runs: the body (`i32 (ptr ctx, ptr in, ptr out)`), its arguments
# and the status it returned.
_TASK = "%irtool.task"

BIG_STACK_TEXT = f"""{_TASK} = type {{ ptr, ptr, ptr, i32 }}

define internal ptr @irtool_rt_thread(ptr %task) #0 {{
entry:
  %ctx = alloca i64, align 8
  %here = ptrtoint ptr %ctx to i64
  %limit = sub i64 %here, {BIG_STACK_BYTES - STACK_MARGIN}
  store i64 %limit, ptr %ctx, align 8
  %fn.p = getelementptr inbounds {_TASK}, ptr %task, i32 0, i32 0
  %fn = load ptr, ptr %fn.p, align 8
  %in.p = getelementptr inbounds {_TASK}, ptr %task, i32 0, i32 1
  %in = load ptr, ptr %in.p, align 8
  %out.p = getelementptr inbounds {_TASK}, ptr %task, i32 0, i32 2
  %out = load ptr, ptr %out.p, align 8
  %status = call i32 %fn(ptr %ctx, ptr %in, ptr %out)
  %status.p = getelementptr inbounds {_TASK}, ptr %task, i32 0, i32 3
  store i32 %status, ptr %status.p, align 4
  ret ptr null
}}

define internal i32 @{ON_BIG_STACK}(ptr %fn, ptr %in, ptr %out) #0 {{
entry:
  %task = alloca {_TASK}, align 8
  %fn.p = getelementptr inbounds {_TASK}, ptr %task, i32 0, i32 0
  store ptr %fn, ptr %fn.p, align 8
  %in.p = getelementptr inbounds {_TASK}, ptr %task, i32 0, i32 1
  store ptr %in, ptr %in.p, align 8
  %out.p = getelementptr inbounds {_TASK}, ptr %task, i32 0, i32 2
  store ptr %out, ptr %out.p, align 8
  %attr = alloca [128 x i8], align 16
  %tid = alloca i64, align 8
  call i32 @pthread_attr_init(ptr %attr)
  call i32 @pthread_attr_setstacksize(ptr %attr, i64 {BIG_STACK_BYTES})
  %rc = call i32 @pthread_create(ptr %tid, ptr %attr, ptr @irtool_rt_thread, ptr %task)
  call i32 @pthread_attr_destroy(ptr %attr)
  %failed = icmp ne i32 %rc, 0
  br i1 %failed, label %fail, label %started
started:
  %id = load i64, ptr %tid, align 8
  call i32 @pthread_join(i64 %id, ptr null)
  %status.p = getelementptr inbounds {_TASK}, ptr %task, i32 0, i32 3
  %status = load i32, ptr %status.p, align 4
  ret i32 %status
fail:
  ret i32 {STATUS_OUT_OF_MEMORY}
}}
"""

BIG_STACK_DECLARATIONS = {
    "pthread_attr_init": "declare i32 @pthread_attr_init(ptr)",
    "pthread_attr_setstacksize": "declare i32 @pthread_attr_setstacksize(ptr, i64)",
    "pthread_attr_destroy": "declare i32 @pthread_attr_destroy(ptr)",
    "pthread_create": "declare i32 @pthread_create(ptr, ptr, ptr, ptr)",
    "pthread_join": "declare i32 @pthread_join(i64, ptr)",
}
