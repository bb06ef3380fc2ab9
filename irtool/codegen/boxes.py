"""Tensors of dynamic shape on the functions path (docs/native-relay.md, "Dynamic shapes").

A tensor whose type has a `?` is a *box*: a reference-counted heap object
`{ i64 refcount, ptr drop, ptr data, i64 dims[ndim] }`, its data inline after the dims (16-byte
aligned, what malloc gives) or, for `main`'s inputs, the caller's buffer. Boxes are object leaves
(`objects.Obj` of a `TensorType`), so they are held, retained, released, stored in ADTs and
carried through loops like any object. A kernel over run-time rows (irtool/lower/batch.py: its
buffers' row prefixes flattened) runs through a wrapper, `<kernel>.rows(i64 n, ptr buffers...)`: its 32-row twin on each whole
tile of rows, then the batch-1 kernel on each row left.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from irtool.codegen.entry import TensorSpec
from irtool.codegen.objects import ALLOC, RELEASE, Obj
from irtool.codegen.tir_to_llvm import STATUS_OUT_OF_MEMORY
from irtool.codegen.types import element_bytes
from irtool.ir.types import TensorType

# A run-time shape disagrees with the type or with another operand (a batch mismatch).
STATUS_SHAPE_MISMATCH = 5

DATA, DIMS = 16, 24
NEW_BOX = "irtool_rt_new_box"
# `main`'s dynamic results: copied to memory the caller frees with `<prefix>_free`.
FREE_SUFFIX = "_free"


def header_bytes(ndim: int) -> int:
    """Where a box's inline data starts."""
    return (DIMS + 8 * ndim + 15) // 16 * 16


def row_bytes(t: TensorType) -> int:
    """Bytes of one row of a batch-1 kernel's buffer: everything but axis 0 (its row prefix is
    ones, so that is the whole buffer for a batched one)."""
    return math.prod(int(d) for d in t.shape[1:]) * element_bytes(t.dtype)


def element_align(t: TensorType) -> int:
    """What a box's data is known to be aligned to: its element size (a caller's input buffer)."""
    return max(1, element_bytes(t.dtype))


BOX_RUNTIME_TEXT = f"""define internal ptr @{NEW_BOX}(i64 %header, i64 %bytes, ptr %data, ptr %drop) #0 {{
entry:
  %inline = icmp eq ptr %data, null
  %extra = select i1 %inline, i64 %bytes, i64 0
  %size = add i64 %header, %extra
  %o = call ptr @{ALLOC}(i64 %size, ptr %drop)
  %failed = icmp eq ptr %o, null
  br i1 %failed, label %fail, label %ok
ok:
  %own = getelementptr inbounds i8, ptr %o, i64 %header
  %d = select i1 %inline, ptr %own, ptr %data
  %dp = getelementptr inbounds i8, ptr %o, i64 {DATA}
  store ptr %d, ptr %dp, align 8
  ret ptr %o
fail:
  ret ptr null
}}
"""


def rows_wrapper(symbol: str, kernel: str, flags: tuple[int, ...], rows: list[int],
                 tile: tuple[str, int] | None) -> str:
    """`i32 @symbol(i64 %n, ptr buffers...)`: the kernel of `tile = (symbol, rows)` on each whole
    tile of the `n` rows, then the batch-1 `kernel` on each row left; batched buffers (`flags`)
    are stepped by their row's bytes (`rows`), the others passed as they are. The first failing
    status stops it."""
    params = ", ".join(f"ptr %b{k}" for k in range(len(flags)))
    lines = [f"define internal i32 @{symbol}(i64 %n, {params}) #0 {{", "entry:"]

    def call(callee: str, at: str, tag: str, next_label: str) -> list[str]:
        out, args = [], []
        for k, (flag, row) in enumerate(zip(flags, rows)):
            if flag:
                out += [f"  %{tag}o{k} = mul nsw i64 {at}, {row}",
                        f"  %{tag}p{k} = getelementptr inbounds i8, ptr %b{k}, i64 %{tag}o{k}"]
                args.append(f"ptr %{tag}p{k}")
            else:
                args.append(f"ptr %b{k}")
        return out + [f"  %{tag}s = call i32 @{callee}({', '.join(args)})", f"  %{tag}bad = icmp ne i32 %{tag}s, 0",
                      f"  br i1 %{tag}bad, label %{tag}fail, label %{next_label}", f"{tag}fail:", f"  ret i32 %{tag}s"]

    start = "0"
    if tile is not None:
        name, size = tile
        lines += ["  br label %thead", "thead:", "  %t = phi i64 [ 0, %entry ], [ %t.end, %tnext ]",
                  f"  %t.end = add nsw i64 %t, {size}", "  %tfits = icmp sle i64 %t.end, %n",
                  "  br i1 %tfits, label %tbody, label %rows", "tbody:", *call(name, "%t", "t", "tnext"),
                  "tnext:", "  br label %thead", "rows:"]
        start = "%t"
    pred = "rows" if tile is not None else "entry"
    lines += ["  br label %head", "head:", f"  %i = phi i64 [ {start}, %{pred} ], [ %i.next, %next ]",
              "  %more = icmp slt i64 %i, %n", "  br i1 %more, label %body, label %done", "body:",
              *call(kernel, "%i", "r", "next"), "next:", "  %i.next = add nsw i64 %i, 1", "  br label %head",
              "done:", "  ret i32 0", "}", ""]
    return "\n".join(lines)


def is_box(leaf: object) -> bool:
    """Whether a leaf is a tensor of dynamic shape."""
    return isinstance(leaf, Obj) and isinstance(leaf.rtype, TensorType)


def data_fields(specs: list[TensorSpec]) -> list[int]:
    """The index of each tensor's data pointer in its struct (a dynamic tensor's shape pointer follows)."""
    out, at = [], 0
    for spec in specs:
        out.append(at)
        at += 2 if spec.dynamic else 1
    return out


def free_function(prefix: str) -> str:
    """`<prefix>_free(ptr)`: releases a dynamic output `_run` allocated."""
    return "\n".join([f"define void @{prefix}{FREE_SUFFIX}(ptr %p) #0 {{", "entry:", "  call void @free(ptr %p)",
                      "  ret void", "}", ""])


def boxed_body(entry: str, inputs: list[TensorSpec], outputs: list[TensorSpec], emit: Callable[[str], str],
               lines: list[str], drop: str) -> None:
    """Appends to `lines` the body of `_body(ctx, in, out)` when `main` takes or returns dynamic
    tensors: each dynamic input's dims are checked against its type (status 5) and it is
    wrapped in a box over the caller's buffer; each dynamic result comes back as a box whose
    data is copied to `malloc`ed memory (the caller frees it with `<prefix>_free`) and whose dims
    are written to the caller's shape array. Every box is released on every path."""
    def field(array: str, k: int) -> str:
        return emit(f"load ptr, ptr {emit(f'getelementptr inbounds ptr, ptr {array}, i64 {k}')}, align 8")

    def at(base: str, offset: int) -> str:
        return emit(f"getelementptr inbounds i8, ptr {base}, i64 {offset}")

    status = emit("alloca i32, align 4")
    slots = {spec.name: emit("alloca ptr, align 8") for spec in inputs + outputs if spec.dynamic}
    copies = {spec.name: emit("alloca ptr, align 8") for spec in outputs if spec.dynamic}
    lines += [f"  store ptr null, ptr {slot}, align 8" for slot in [*slots.values(), *copies.values()]]
    lines.append(f"  store i32 {STATUS_SHAPE_MISMATCH}, ptr {status}, align 4")
    bad = "false"
    given: dict[str, tuple[str, list[str]]] = {}
    for spec, k in zip(inputs, data_fields(inputs)):
        data = field("%in", k)
        dims: list[str] = []
        if spec.dynamic:
            shape = field("%in", k + 1)
            dims = [emit(f"load i64, ptr {at(shape, 8 * axis)}, align 8") for axis in range(len(spec.shape))]
            for d, want in zip(dims, spec.shape):
                bad = emit(f"or i1 {bad}, {emit(f'icmp slt i64 {d}, 0' if want < 0 else f'icmp ne i64 {d}, {want}')}")
        given[spec.name] = (data, dims)
    lines += [f"  br i1 {bad}, label %cleanup, label %wrap0", "wrap0:"]
    args: list[str] = []
    step = 0
    for spec in inputs:
        data, dims = given[spec.name]
        if not spec.dynamic:
            args.append(data)
            continue
        box = emit(f"call ptr @{NEW_BOX}(i64 {header_bytes(len(dims))}, i64 0, ptr {data}, ptr @{drop})")
        lines.append(f"  store ptr {box}, ptr {slots[spec.name]}, align 8")
        lines.append(f"  store i32 {STATUS_OUT_OF_MEMORY}, ptr {status}, align 4")
        step += 1
        lines += [f"  br i1 {emit(f'icmp eq ptr {box}, null')}, label %cleanup, label %wrap{step}", f"wrap{step}:"]
        for axis, d in enumerate(dims):
            lines.append(f"  store i64 {d}, ptr {at(box, DIMS + 8 * axis)}, align 8")
        args.append(box)
    for spec, k in zip(outputs, data_fields(outputs)):
        args.append(slots[spec.name] if spec.dynamic else field("%out", k))
    result = emit(f"call i32 @{entry}(ptr %ctx, ptr null{''.join(', ptr ' + a for a in args)})")
    lines.append(f"  store i32 {result}, ptr {status}, align 4")
    lines += [f"  br i1 {emit(f'icmp ne i32 {result}, 0')}, label %cleanup, label %copy0", "copy0:"]
    # Every copy is allocated before any is handed out: a failure frees them all.
    step = 0
    sizes: list[tuple[str, str, int]] = []
    for spec, k in zip(outputs, data_fields(outputs)):
        if not spec.dynamic:
            continue
        box = emit(f"load ptr, ptr {slots[spec.name]}, align 8")
        shape = field("%out", k + 1)
        count = "1"
        for axis in range(len(spec.shape)):
            d = emit(f"load i64, ptr {at(box, DIMS + 8 * axis)}, align 8")
            lines.append(f"  store i64 {d}, ptr {at(shape, 8 * axis)}, align 8")
            count = emit(f"mul nsw i64 {count}, {d}")
        size = emit(f"mul nsw i64 {count}, {max(1, element_bytes(spec.dtype))}")
        copy = emit(f"call ptr @malloc(i64 {emit(f'add i64 {size}, 1')})")   # never 0 bytes: never null on success
        lines.append(f"  store ptr {copy}, ptr {copies[spec.name]}, align 8")
        step += 1
        lines += [f"  br i1 {emit(f'icmp eq ptr {copy}, null')}, label %oom, label %copy{step}", f"copy{step}:"]
        sizes.append((spec.name, size, k))
    for name, size, k in sizes:
        copy = emit(f"load ptr, ptr {copies[name]}, align 8")
        source = emit(f"load ptr, ptr {at(emit(f'load ptr, ptr {slots[name]}, align 8'), DATA)}, align 8")
        lines.append(f"  call void @llvm.memcpy.p0.p0.i64(ptr align 1 {copy}, ptr align 1 {source}, i64 {size}, i1 false)")
        lines.append(f"  store ptr {copy}, ptr {emit(f'getelementptr inbounds ptr, ptr %out, i64 {k}')}, align 8")
    lines += [f"  store i32 0, ptr {status}, align 4", "  br label %cleanup", "oom:"]
    lines += [f"  call void @free(ptr {emit(f'load ptr, ptr {slot}, align 8')})" for slot in copies.values()]
    lines += [f"  store i32 {STATUS_OUT_OF_MEMORY}, ptr {status}, align 4", "  br label %cleanup", "cleanup:"]
    for slot in slots.values():
        lines.append(f"  call void @{RELEASE}(ptr {emit(f'load ptr, ptr {slot}, align 8')})")
    lines.append(f"  ret i32 {emit(f'load i32, ptr {status}, align 4')}")
