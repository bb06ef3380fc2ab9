"""One function instance of the functions path (docs/native-relay.md) as an LLVM function.

`FunctionBuilder` compiles an instance's body with an explicit task stack, in the interpreter's
evaluation order (no recursion with the size or nesting of the program): values are lists of
leaves (`LV`: tensor data pointers, object references), tensor results are written into the
caller's destinations, temporaries into the activation's frame, object references into slots
released on return; a self tail call is a jump through carry buffers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from irtool.analysis.unify import substitute
from irtool.codegen import data_dependent
from irtool.codegen.boxes import (DATA, DIMS, NEW_BOX, STATUS_SHAPE_MISMATCH, element_align, header_bytes,
                                  row_bytes)
from irtool.codegen.captures import only_called
from irtool.codegen.in_place import in_place_twin, read_once
from irtool.codegen.objects import (ADT_FIELDS, ALLOC, CLOSURE_FIELDS, CODE, MAX_STACK_FRAME, REF_FIELDS, RELEASE,
                                    STATUS_NO_MATCH, STATUS_STACK_OVERFLOW, TAG, Leaf, Obj, field_offsets,
                                    inline_align, leaves_of, nbytes)
from irtool.codegen.tir_to_llvm import STATUS_OK, STATUS_OUT_OF_MEMORY
from irtool.codegen.types import element_bytes, memory_type
from irtool.core.diagnostics import DiagnosticError
from irtool.ir.adt import Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar
from irtool.ir.expr import (Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, RefRead,
                            RefWrite, Tuple, TupleGetItem, Var)
from irtool.ir.signature import (BATCH_TILE_KERNEL, BATCH_TILE_ROWS, Extent, batch_checks, batch_dims, batch_flags,
                                 extent_product, num_outputs)
from irtool.ir.tir import PrimFunc
from irtool.ir.types import FuncType, RefType, TensorType, TupleType, Type, TypeCall, TypeVar, type_parts, type_to_text
from irtool.ir.visitor import free_vars
from irtool.ops.definitions.data_dependent import is_data_dependent

if TYPE_CHECKING:
    from irtool.codegen.functions import ProgramBuilder

# Operators that are views or copies of their argument (the AOT path takes them in a dataflow `main`).
VIEW_OPS = frozenset({"reshape", "device_copy", "on_device"})
# Rows of a box's static first axis, read or replaced without a kernel (`lower/module.py`).
BOX_ROW_OPS = frozenset({"take", "scatter_nd", "concatenate"})

Subst = dict[str, Type]


def match_type(pattern: Type, concrete: Type, params: set[str], out: Subst) -> bool:
    """Binds the type variables `params` of `pattern` so that it equals `concrete` (into `out`)."""
    stack = [(pattern, concrete)]
    while stack:
        p, c = stack.pop()
        if isinstance(c, FuncType) and c.type_params:
            continue   # a polymorphic function value: its own instantiation follows from the others
        if isinstance(p, TypeVar) and p.name in params:
            if p.name in out and out[p.name] != c:
                return False
            out[p.name] = c
        elif isinstance(p, TupleType) and isinstance(c, TupleType) and len(p.fields) == len(c.fields):
            stack.extend(zip(p.fields, c.fields))
        elif isinstance(p, FuncType) and isinstance(c, FuncType) and len(p.arg_types) == len(c.arg_types):
            stack.extend(zip((*p.arg_types, p.ret_type), (*c.arg_types, c.ret_type)))
        elif isinstance(p, TypeCall) and isinstance(c, TypeCall) and p.name == c.name and len(p.args) == len(c.args):
            stack.extend(zip(p.args, c.args))
        elif isinstance(p, RefType) and isinstance(c, RefType):
            stack.append((p.value, c.value))
        elif p != c and not isinstance(c, TypeVar):
            return False
    return True


@dataclass(frozen=True)
class LV:
    """A leaf at run time: its LLVM value, what it is, and for a tensor the alignment of its data;
    `code` is the code of a closure known to come from one literal (called directly)."""

    value: str
    leaf: Leaf
    align: int = 1
    code: str | None = None


Value = tuple[LV, ...]


@dataclass
class Instance:
    """One LLVM function: a global (`env` unused) or a function literal (captures read from `env`)."""

    symbol: str
    func: Function
    subst: Subst
    captures: list[Var] = field(default_factory=list)
    self_var: Var | None = None   # a `let`-bound literal's own variable (a recursive closure)
    borrows: bool = False         # captured tensors are pointers, not copies (captures.py)


def has_type_vars(t: Type) -> bool:
    return any(isinstance(p, TypeVar) for p in type_parts(t))


Task = Callable[[], None]


def capture_offsets(leaves: tuple[Leaf, ...], borrowed: bool) -> tuple[list[int], int]:
    """The offsets of a closure's captured leaves and its size: inline (`field_offsets`), or one
    pointer each when its tensors are borrowed."""
    if not borrowed:
        return field_offsets(leaves, CLOSURE_FIELDS)
    return [CLOSURE_FIELDS + 8 * k for k in range(len(leaves))], CLOSURE_FIELDS + 8 * len(leaves)


class FunctionBuilder:
    """One instance's `define`: entry (frame, slots, stack check), the body, the exit (releases)."""

    def __init__(self, prog: ProgramBuilder, inst: Instance) -> None:
        self.prog = prog
        self.inst = inst
        self.func = inst.func
        self.lines: list[str] = []
        self.temps = 0
        self.labels = 0
        self.open = True          # whether the current block still needs a terminator
        self.scopes: list[dict[int, Value]] = [{}]
        self.tasks: list[Task] = []
        self.vals: list[Value] = []
        self.frame_top = 0
        self.frame_size = 0
        self.frame_align = 8    # 64 once a temporary is large enough to be vector-aligned
        self.owned: list[str] = []            # slots of object references this activation holds
        self.tail: set[int] = set()
        self.recursive_lets: dict[int, Var] = {}
        self.borrowing: set[int] = set()      # literals that borrow their captured tensors
        self.instantiations: dict[int, Subst] = {}
        self.callees: set[str] = prog.calls.setdefault(inst.symbol, set())
        # Self tail calls: the parameters live in slots, tensor arguments in two carry buffers.
        self.loop = False
        self.param_leaves: list[Leaf] = []
        self.param_values: list[str] = []
        self.carry_offsets: dict[int, tuple[int, int]] = {}
        self.carry_size = 0
        # Parameters updated in place (irtool/codegen/in_place.py): their one carry buffer, and
        # the kernel calls that update it, each with its in-place twin.
        self.in_place_offsets: dict[int, int] = {}
        self.in_place_calls: dict[int, str] = {}
        self.results: tuple[Leaf, ...] = ()
        self.result_dests: tuple[LV | None, ...] = ()

    # -- emission helpers
    def emit(self, text: str) -> str:
        self.ensure_open()
        self.temps += 1
        self.lines.append(f"  %v{self.temps} = {text}")
        return f"%v{self.temps}"

    def do(self, text: str) -> None:
        self.ensure_open()
        self.lines.append(f"  {text}")

    def ensure_open(self) -> None:
        if not self.open:   # code after a jump (a tail call, a failing path) is unreachable
            self.start(self.label("dead"))

    def label(self, hint: str) -> str:
        self.labels += 1
        return f"{hint}{self.labels}"

    def start(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.open = True

    def br(self, label: str) -> None:
        if self.open:
            self.lines.append(f"  br label %{label}")
            self.open = False

    def condbr(self, cond: str, yes: str, no: str) -> None:
        self.do(f"br i1 {cond}, label %{yes}, label %{no}")
        self.open = False

    def fail_if(self, cond: str, status: int | str) -> None:
        """Leaves with `status` when `cond` holds (through the exit, which releases what is held)."""
        fail, ok = self.label("fail"), self.label("ok")
        self.condbr(cond, fail, ok)
        self.start(fail)
        self.lines.append(f"  store i32 {status}, ptr %status, align 4")
        self.br("exit")
        self.start(ok)

    def check_status(self, status: str) -> None:
        self.fail_if(self.emit(f"icmp ne i32 {status}, 0"), status)

    def error(self, message: str, node: Expr | Pattern | None) -> DiagnosticError:
        span = getattr(node, "span", None) or self.func.span
        return DiagnosticError(f"native code: {message}", span)

    def type_of(self, node: Expr) -> Type:
        t = node.checked_type
        if t is None and isinstance(node, Var):
            t = node.type_annotation
        if t is None:
            raise self.error("expression has no inferred type", node)
        return substitute(t, self.inst.subst) if self.inst.subst else t

    def leaves(self, node: Expr) -> tuple[Leaf, ...]:
        return leaves_of(self.type_of(node), node.span)

    # -- memory
    def temp(self, t: TensorType) -> LV:
        size = nbytes(t)
        align = 64 if size >= 64 else 8
        at = (self.frame_top + align - 1) // align * align
        self.frame_top = at + size
        self.frame_size = max(self.frame_size, self.frame_top, 1)
        self.frame_align = max(self.frame_align, align)
        ptr = self.emit(f"getelementptr inbounds i8, ptr %frame, i64 {at}") if at else "%frame"
        return LV(ptr, t, align)

    def owned_slot(self) -> str:
        slot = f"%own{len(self.owned)}"
        self.owned.append(slot)
        return slot

    def hold(self, value: str, leaf: Obj, code: str | None = None) -> LV:
        """An object reference this activation now owns (released on return)."""
        self.do(f"store ptr {value}, ptr {self.owned_slot()}, align 8")
        return LV(value, leaf, 8, code)

    def retain(self, obj: str) -> None:
        rc = self.emit(f"load i64, ptr {obj}, align 8")
        self.do(f"store i64 {self.emit(f'add i64 {rc}, 1')}, ptr {obj}, align 8")

    def memcpy(self, dst: LV, src: LV) -> None:
        size = nbytes(dst.leaf)  # type: ignore[arg-type]
        if size == 0 or dst.value == src.value:
            return
        self.prog.ctx.declare("llvm.memcpy.p0.p0.i64", "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")
        self.do(f"call void @llvm.memcpy.p0.p0.i64(ptr align {dst.align} {dst.value}, ptr align {src.align} "
                f"{src.value}, i64 {size}, i1 false)")

    def deliver(self, value: Value, dests: tuple[LV | None, ...] | None) -> Value:
        """`value` with its tensors copied into `dests` (those given)."""
        if dests is None:
            return value
        out = []
        for lv, d in zip(value, dests):
            if d is not None:
                self.memcpy(d, self.coerce(lv, d.leaf))
                out.append(d)
            else:
                out.append(lv)
        return tuple(out)

    def alloc(self, size: int, drop: str) -> str:
        obj = self.emit(f"call ptr @{ALLOC}(i64 {size}, ptr @{drop})")
        self.fail_if(self.emit(f"icmp eq ptr {obj}, null"), STATUS_OUT_OF_MEMORY)
        return obj

    def field_ptr(self, obj: str, offset: int) -> str:
        return self.emit(f"getelementptr inbounds i8, ptr {obj}, i64 {offset}")

    def coerce(self, lv: LV, want: Leaf) -> LV:
        """`lv` as a leaf of the type a place expects, where a static and a dynamic shape meet (`?`
        unifies with any size): a static tensor where a box is expected is copied into a new one;
        a box where a static tensor is expected is its data, once its size is checked."""
        if isinstance(want, Obj) and isinstance(want.rtype, TensorType) and isinstance(lv.leaf, TensorType):
            box = self.new_box(Obj(lv.leaf), [str(d) for d in lv.leaf.shape])
            self.memcpy(LV(self.box_data(box), lv.leaf, element_align(lv.leaf)), lv)
            return LV(box.value, want, 8)
        if isinstance(want, TensorType) and isinstance(lv.leaf, Obj) and isinstance(lv.leaf.rtype, TensorType):
            for axis, d in enumerate(want.shape):
                self.fail_if(self.emit(f"icmp ne i64 {self.box_dim(lv, axis)}, {d}"), STATUS_SHAPE_MISMATCH)
            return LV(self.box_data(lv), want, element_align(want))
        return lv

    def coerce_all(self, value: Value, want: tuple[Leaf, ...]) -> Value:
        return tuple(self.coerce(lv, leaf) for lv, leaf in zip(value, want))

    def store_leaves(self, obj: str, value: Value, offsets: list[int], leaves: tuple[Leaf, ...] | None = None) -> None:
        """Copies a value into an object (as the object's `leaves`, when given): tensors inline,
        object references retained."""
        if leaves is not None:
            value = self.coerce_all(value, leaves)
        for lv, off in zip(value, offsets):
            ptr = self.field_ptr(obj, off)
            if isinstance(lv.leaf, Obj):
                self.retain(lv.value)
                self.do(f"store ptr {lv.value}, ptr {ptr}, align 8")
            else:
                self.memcpy(LV(ptr, lv.leaf, inline_align(lv.leaf)), lv)

    def load_leaves(self, obj: str, leaves: tuple[Leaf, ...], offsets: list[int]) -> Value:
        """A value stored in an object, borrowed: tensors point into it, references are loaded."""
        out = []
        for leaf, off in zip(leaves, offsets):
            ptr = self.field_ptr(obj, off)
            if isinstance(leaf, Obj):
                out.append(LV(self.emit(f"load ptr, ptr {ptr}, align 8"), leaf, 8))
            else:
                out.append(LV(ptr, leaf, inline_align(leaf)))
        return tuple(out)

    # -- scopes
    def lookup(self, node: Expr) -> Value | None:
        for scope in reversed(self.scopes):
            v = scope.get(id(node))
            if v is not None:
                return v
        return None

    def bind(self, node: Expr, value: Value) -> None:
        self.scopes[-1][id(node)] = value

    # -- the function
    def build(self) -> str:
        inst, func = self.inst, self.func
        self.mark_tail_positions()
        params: list[str] = ["ptr %ctx", "ptr %env"]
        bound: list[tuple[Var, tuple[Leaf, ...]]] = []
        for p in func.params:
            leaves = self.leaves(p)
            bound.append((p, leaves))
            self.param_leaves.extend(leaves)
        params += [f"ptr %a{k}" for k in range(len(self.param_leaves))]
        # The declared result type: the body's may be more precise (a static shape for a `?`).
        fn_t = func.checked_type
        ret = substitute(fn_t.ret_type, inst.subst) if isinstance(fn_t, FuncType) else self.type_of(func.body)
        results = self.results = leaves_of(ret, func.body.span)
        params += [f"ptr %r{k}" for k in range(len(results))]
        self.start("top")
        k = 0
        for p, leaves in bound:
            vals = []
            for leaf in leaves:
                slot_value = self.emit(f"load ptr, ptr %param{k}, align 8")
                self.param_values.append(slot_value)
                align = 8 if isinstance(leaf, Obj) else max(1, element_bytes(leaf.dtype))
                vals.append(LV(slot_value, leaf, align))
                k += 1
            self.bind(p, tuple(vals))
        if inst.captures or inst.self_var is not None:
            self.bind_captures()
        dests = tuple(None if isinstance(leaf, Obj) else LV(f"%r{j}", leaf, max(1, element_bytes(leaf.dtype)))
                      for j, leaf in enumerate(results))
        self.result_dests = dests
        self.tasks.append(self.finish_body)
        self.tasks.append(lambda: self.eval(func.body, dests))
        while self.tasks:
            self.tasks.pop()()
        return self.assemble(params)

    def finish_body(self) -> None:
        """The body's value is the result: object references are handed to the caller."""
        value = self.vals.pop()
        if not self.open:   # the body ended in a self tail call
            return
        value = self.deliver(self.coerce_all(value, self.results), self.result_dests)
        for j, lv in enumerate(value):
            if isinstance(lv.leaf, Obj):
                self.retain(lv.value)
                self.do(f"store ptr {lv.value}, ptr %r{j}, align 8")
        self.do(f"store i32 {STATUS_OK}, ptr %status, align 4")
        self.br("exit")

    def bind_captures(self) -> None:
        inst = self.inst
        leaves = tuple(leaf for v in inst.captures for leaf in self.leaves(v))
        offsets, _ = capture_offsets(leaves, inst.borrows)
        if inst.borrows:
            value = tuple(LV(self.emit(f"load ptr, ptr {self.field_ptr('%env', off)}, align 8"), leaf,
                             8 if isinstance(leaf, Obj) else max(1, element_bytes(leaf.dtype)))
                          for leaf, off in zip(leaves, offsets))
        else:
            value = self.load_leaves("%env", leaves, offsets)
        at = 0
        for v in inst.captures:
            n = len(self.leaves(v))
            self.bind(v, value[at:at + n])
            at += n
        if inst.self_var is not None:
            self.bind(inst.self_var, (LV("%env", Obj(self.type_of(inst.self_var)), 8, inst.symbol),))

    def assemble(self, params: list[str]) -> str:
        regions = [("frame", self.frame_size), ("carry", self.carry_size)]
        heap = {name: size > MAX_STACK_FRAME for name, size in regions}
        tensors = [k for k, leaf in enumerate(self.param_leaves) if isinstance(leaf, TensorType)]
        objects = [k for k, leaf in enumerate(self.param_leaves) if isinstance(leaf, Obj)]
        # Every alloca first, so that LLVM promotes the slots to registers.
        entry = ["entry:", "  %status = alloca i32, align 4"]
        aligns = {"frame": self.frame_align, "carry": 64}
        entry += [f"  %{name} = alloca [{size} x i8], align {aligns[name]}" for name, size in regions
                  if size and not heap[name]]
        entry += [f"  {slot} = alloca ptr, align 8" for slot in self.owned]
        entry += [f"  %param{k} = alloca ptr, align 8" for k in range(len(self.param_leaves))]
        if self.loop:
            entry += [f"  %next{k} = alloca ptr, align 8" for k in range(len(self.param_leaves))]
            entry += [f"  %flip{k} = alloca i1, align 1" for k in tensors if k in self.carry_offsets]
        entry += [f"  store ptr null, ptr {slot}, align 8" for slot in self.owned]
        entry += [f"  store ptr %a{k}, ptr %param{k}, align 8" for k in range(len(self.param_leaves))]
        if self.loop:
            entry += [f"  store i1 false, ptr %flip{k}, align 1" for k in tensors if k in self.carry_offsets]
        # The stack check: this frame's address against the limit in the context.
        entry += ["  %sp = ptrtoint ptr %status to i64", "  %limit = load i64, ptr %ctx, align 8",
                  "  %deep = icmp ult i64 %sp, %limit", "  br i1 %deep, label %overflow, label %start",
                  "overflow:", f"  ret i32 {STATUS_STACK_OVERFLOW}", "start:"]
        frees: list[str] = []
        for name, size in regions:
            if size and heap[name]:
                self.prog.ctx.declare("aligned_alloc", "declare noalias ptr @aligned_alloc(i64, i64)")
                self.prog.ctx.declare("free", "declare void @free(ptr)")
                entry += [f"  %{name} = call ptr @aligned_alloc(i64 64, i64 {(size + 63) // 64 * 64})",
                          f"  %{name}.null = icmp eq ptr %{name}, null",
                          f"  br i1 %{name}.null, label %{name}.fail, label %{name}.ok", f"{name}.fail:",
                          *frees, f"  ret i32 {STATUS_OUT_OF_MEMORY}", f"{name}.ok:"]
                frees.append(f"  call void @free(ptr %{name})")
        if self.loop:   # the loop owns its object parameters: each iteration releases them
            for k in objects:
                entry += [f"  %rc{k} = load i64, ptr %a{k}, align 8", f"  %rc{k}.1 = add i64 %rc{k}, 1",
                          f"  store i64 %rc{k}.1, ptr %a{k}, align 8"]
        entry.append("  br label %top")
        exit_lines = ["exit:"]
        releases = [slot for slot in self.owned]
        if self.loop:
            releases += [f"%param{k}" for k in objects]
        for j, slot in enumerate(releases):
            exit_lines += [f"  %x{j} = load ptr, ptr {slot}, align 8", f"  call void @{RELEASE}(ptr %x{j})"]
        exit_lines += frees
        exit_lines += ["  %result = load i32, ptr %status, align 4", "  ret i32 %result"]
        iterate = self.iterate_block(objects) if self.loop else []
        head = f"define internal i32 @{self.inst.symbol}({', '.join(params)}) #0 {{"
        return "\n".join([head, *entry, *self.lines, *iterate, *exit_lines, "}", ""])

    def iterate_block(self, objects: list[int]) -> list[str]:
        """The back edge of self tail calls: release what the iteration held and the old object
        parameters, then take the pending arguments as the parameters."""
        out = ["iterate:"]
        for j, slot in enumerate(self.owned):
            out += [f"  %i{j} = load ptr, ptr {slot}, align 8", f"  call void @{RELEASE}(ptr %i{j})",
                    f"  store ptr null, ptr {slot}, align 8"]
        for k in objects:
            out += [f"  %o{k} = load ptr, ptr %param{k}, align 8", f"  call void @{RELEASE}(ptr %o{k})"]
        for k in range(len(self.param_leaves)):
            out += [f"  %n{k} = load ptr, ptr %next{k}, align 8", f"  store ptr %n{k}, ptr %param{k}, align 8"]
        out.append("  br label %top")
        return out

    def mark_tail_positions(self) -> None:
        stack: list[Expr] = [self.func.body]
        while stack:
            node = stack.pop()
            if id(node) in self.tail:
                continue
            self.tail.add(id(node))
            if isinstance(node, Let):
                stack.append(node.body)
            elif isinstance(node, If):
                stack += [node.true_branch, node.false_branch]
            elif isinstance(node, Match):
                stack += [c.rhs for c in node.clauses]
            elif isinstance(node, Call) and isinstance(node.op, Function) and not node.op.is_primitive:
                stack.append(node.op.body)

    # -- the machine
    def push(self, task: Task) -> None:
        self.tasks.append(task)

    def eval(self, node: Expr, dests: tuple[LV | None, ...] | None) -> None:
        hit = self.lookup(node)
        if hit is not None:
            self.vals.append(self.deliver(hit, dests))
            return
        if isinstance(node, Var):
            raise self.error(f"%{node.name_hint} has no value here", node)
        if isinstance(node, Constant):
            self.done(node, (LV(f"@{self.prog.constant(node)}", self.leaves(node)[0], 64),), dests)
        elif isinstance(node, Tuple):
            self.eval_tuple(node, dests)
        elif isinstance(node, TupleGetItem):
            self.push(lambda: self.done(node, self.project(node, self.vals.pop()), dests))
            self.push(lambda: self.eval(node.tuple_value, None))
        elif isinstance(node, Let):
            self.eval_let(node, dests)
        elif isinstance(node, If):
            self.push(lambda: self.branch_if(node, self.vals.pop(), dests))
            self.push(lambda: self.eval(node.cond, None))
        elif isinstance(node, Match):
            self.push(lambda: self.branch_match(node, self.vals.pop(), dests))
            self.push(lambda: self.eval(node.data, None))
        elif isinstance(node, Call):
            self.eval_call(node, dests)
        elif isinstance(node, Function):
            self.done(node, (self.closure(node),), dests)
        elif isinstance(node, GlobalVar):
            self.done(node, (self.global_value(node),), dests)
        elif isinstance(node, RefCreate):
            self.push(lambda: self.done(node, self.ref_create(node, self.vals.pop()), dests))
            self.push(lambda: self.eval(node.value, None))
        elif isinstance(node, RefRead):
            self.push(lambda: self.done(node, self.ref_read(node, self.vals.pop(), dests), dests))
            self.push(lambda: self.eval(node.ref, None))
        elif isinstance(node, RefWrite):
            self.push(lambda: self.ref_write(node, dests))
            self.push(lambda: self.eval(node.value, None))
            self.push(lambda: self.eval(node.ref, None))
        elif isinstance(node, Constructor):
            raise self.error(f"the constructor {node.name} used as a function value is not compiled natively yet "
                             "(call it, or wrap it in a function literal)", node)
        else:
            raise self.error(f"{type(node).__name__} cannot be compiled", node)

    def done(self, node: Expr, value: Value, dests: tuple[LV | None, ...] | None) -> None:
        value = self.deliver(value, dests)
        self.bind(node, value)
        self.vals.append(value)

    def split(self, dests: tuple[LV | None, ...] | None, parts: list[Expr]) -> list[tuple[LV | None, ...] | None]:
        if dests is None:
            return [None] * len(parts)
        out, at = [], 0
        for e in parts:
            n = len(self.leaves(e))
            out.append(dests[at:at + n])
            at += n
        return out

    def eval_tuple(self, node: Tuple, dests: tuple[LV | None, ...] | None) -> None:
        n = len(node.fields)

        def finish() -> None:
            parts = self.vals[len(self.vals) - n:] if n else []
            del self.vals[len(self.vals) - n:]
            self.done(node, tuple(lv for part in parts for lv in part), None)
        self.push(finish)
        for f, d in reversed(list(zip(node.fields, self.split(dests, list(node.fields))))):
            self.push(lambda f=f, d=d: self.eval(f, d))   # type: ignore[misc]

    def project(self, node: TupleGetItem, value: Value) -> Value:
        t = self.type_of(node.tuple_value)
        if not isinstance(t, TupleType):
            raise self.error(f"projection of a value of type {type_to_text(t)}", node)
        at = sum(len(leaves_of(f, node.span)) for f in t.fields[:node.index])
        return value[at:at + len(leaves_of(t.fields[node.index], node.span))]

    def eval_let(self, node: Let, dests: tuple[LV | None, ...] | None) -> None:
        if isinstance(node.value, Function) and any(v is node.var for v in free_vars(node.value)):
            self.recursive_lets[id(node.value)] = node.var
        if only_called(node):
            self.borrowing.add(id(node.value))

        def body() -> None:
            self.bind(node.var, self.coerce_all(self.vals.pop(), self.leaves(node.var)))
            self.push(lambda: self.bind(node, self.vals[-1]))
            self.push(lambda: self.eval(node.body, dests))
        self.push(body)
        self.push(lambda: self.eval(node.value, None))

    # -- branches
    def result_places(self, node: Expr, dests: tuple[LV | None, ...] | None) -> tuple[tuple[LV | None, ...], list[str]]:
        """Where every branch of `node` puts its result: tensors in `dests` (or temporaries made
        here, before the branches), object references in owned slots."""
        leaves = self.leaves(node)
        places = tuple(d if d is not None else (None if isinstance(leaf, Obj) else self.temp(leaf))
                       for leaf, d in zip(leaves, dests if dests is not None else [None] * len(leaves)))
        slots = [self.owned_slot() if isinstance(leaf, Obj) else "" for leaf in leaves]
        return places, slots

    def truth(self, node: If, cond: Value) -> str:
        lv = cond[0]
        t = lv.leaf
        if not isinstance(t, TensorType) or int(np.prod(t.shape, dtype=np.int64)) != 1:
            raise self.error("the condition of `if` must be a one-element tensor", node.cond)
        mem = memory_type(t.dtype)
        x = self.emit(f"load {mem}, ptr {lv.value}, align {max(1, element_bytes(t.dtype))}")
        if t.dtype.startswith(("float", "bfloat")):
            return self.emit(f"fcmp une {mem} {x}, 0.0")
        return self.emit(f"icmp ne {mem} {x}, 0")

    def branch_if(self, node: If, cond: Value, dests: tuple[LV | None, ...] | None) -> None:
        c = self.truth(node, cond)
        places, slots = self.result_places(node, dests)
        yes, no, join = self.label("then"), self.label("else"), self.label("join")
        self.condbr(c, yes, no)
        self.join_branches(node, [(yes, node.true_branch, []), (no, node.false_branch, [])], places, slots, join)

    def join_branches(self, node: Expr, arms: list[tuple[str, Expr, list[tuple[Var, Value]]]],
                      places: tuple[LV | None, ...], slots: list[str], join: str) -> None:
        mark = self.frame_top
        reached = [False]

        def begin(label: str, bindings: list[tuple[Var, Value]]) -> Task:
            def run() -> None:
                self.start(label)
                self.scopes.append({})
                self.frame_top = mark
                for var, value in bindings:
                    self.bind(var, value)
            return run

        def end() -> None:
            value = self.vals.pop()
            if self.open:
                value = self.deliver(self.coerce_all(value, self.leaves(node)), places)
                for lv, slot in zip(value, slots):
                    if slot:
                        self.retain(lv.value)
                        self.do(f"store ptr {lv.value}, ptr {slot}, align 8")
                reached[0] = True
                self.br(join)
            self.scopes.pop()
            self.frame_top = mark

        def finish() -> None:
            self.start(join)
            if not reached[0]:
                self.do("unreachable")
                self.open = False
            out = []
            for place, slot, leaf in zip(places, slots, self.leaves(node)):
                if slot:
                    out.append(LV(self.emit(f"load ptr, ptr {slot}, align 8"), leaf, 8))  # type: ignore[arg-type]
                else:
                    out.append(place)   # type: ignore[arg-type]
            self.bind(node, tuple(out))
            self.vals.append(tuple(out))

        self.push(finish)
        for label, expr, bindings in reversed(arms):
            self.push(end)
            self.push(lambda expr=expr: self.eval(expr, places))   # type: ignore[misc]
            self.push(begin(label, bindings))

    def branch_match(self, node: Match, data: Value, dests: tuple[LV | None, ...] | None) -> None:
        places, slots = self.result_places(node, dests)
        join = self.label("join")
        data_t = self.type_of(node.data)
        arms: list[tuple[str, Expr, list[tuple[Var, Value]]]] = []
        for clause in node.clauses:
            body, next_test = self.label("clause"), self.label("test")
            bindings = self.pattern_test(clause.lhs, data, data_t, next_test)
            self.br(body)
            arms.append((body, clause.rhs, bindings))
            self.start(next_test)
        self.do(f"store i32 {STATUS_NO_MATCH}, ptr %status, align 4")
        self.br("exit")
        self.join_branches(node, arms, places, slots, join)

    def pattern_test(self, pattern: Pattern, value: Value, t: Type, fail: str) -> list[tuple[Var, Value]]:
        """Emits the tag tests of `pattern` against `value` (to `fail` on a mismatch) and returns
        the variables it binds; the code falls through when every test passed."""
        bindings: list[tuple[Var, Value]] = []
        stack: list[tuple[Pattern, Value, Type]] = [(pattern, value, t)]
        while stack:
            p, v, pt = stack.pop()
            if isinstance(p, PatternVar):
                bindings.append((p.var, v))
            elif isinstance(p, PatternTuple):
                if not isinstance(pt, TupleType):
                    raise self.error(f"a tuple pattern on a value of type {type_to_text(pt)}", p)
                at = 0
                for q, ft in zip(p.patterns, pt.fields):
                    n = len(leaves_of(ft, p.span))
                    stack.append((q, v[at:at + n], ft))
                    at += n
            elif isinstance(p, PatternConstructor):
                ctor = p.constructor
                obj = v[0].value
                tag = self.emit(f"load i32, ptr {self.field_ptr(obj, TAG)}, align 4")
                ok = self.label("fields")
                self.condbr(self.emit(f"icmp eq i32 {tag}, {ctor.tag}"), ok, fail)
                self.start(ok)
                field_types = self.constructor_fields(ctor, pt, p)
                leaves = tuple(leaf for ft in field_types for leaf in leaves_of(ft, p.span))
                offsets, _ = field_offsets(leaves, ADT_FIELDS)
                fields = self.load_leaves(obj, leaves, offsets)
                at = 0
                for q, ft in zip(p.patterns, field_types):
                    n = len(leaves_of(ft, p.span))
                    stack.append((q, fields[at:at + n], ft))
                    at += n
        return bindings

    def constructor_fields(self, ctor: Constructor, adt: Type, at: Expr | Pattern) -> list[Type]:
        """The field types of `ctor` in the ADT instance `adt` (`List[float32]`)."""
        data = self.prog.mod.type_defs.get(ctor.belong_to)
        if data is None or not isinstance(adt, TypeCall):
            raise self.error(f"the constructor {ctor.name} of a value of type {type_to_text(adt)}", at)
        mapping = {p.name: a for p, a in zip(data.type_params, adt.args)}
        return [substitute(t, mapping) for t in ctor.inputs]

    # -- calls
    def eval_call(self, node: Call, dests: tuple[LV | None, ...] | None) -> None:
        op = node.op
        if isinstance(op, Op):
            self.eval_op(node, op, dests)
            return

        if isinstance(op, GlobalVar):
            callee = self.prog.mod.functions.get(op.name_hint)
            if isinstance(callee, PrimFunc):
                self.args_then(node, lambda args: self.done(node, self.kernel_call(node, op.name_hint, args, dests), None))
                return
            if not isinstance(callee, Function):
                raise self.error(f"@{op.name_hint} is not defined", op)
            subst = self.prog.instantiate(callee, [self.type_of(a) for a in node.args], self.type_of(node), node.span,
                                          f"function @{op.name_hint}")
            self.note_function_args(node, callee, subst)
            inst = self.prog.global_instance(op.name_hint, subst, node.span)
            if inst is self.inst and id(node) in self.tail:
                self.eval_tail_call(node)
                return
            self.args_then(node, lambda args: self.call_instance(node, inst.symbol, "null", args, dests,
                                                      params=self.instance_params(inst)))
        elif isinstance(op, Constructor):
            self.args_then(node, lambda args: self.done(node, (self.construct(node, op, args),), dests))
        elif isinstance(op, Function) and not op.is_primitive:
            self.args_then(node, lambda args: self.inline(node, op, args, dests))
        elif isinstance(op, Function):
            raise self.error("a primitive function is called without being lowered (run `lower` first)", node)
        else:   # a function value: the callee is evaluated first, then the arguments
            known = self.lookup(op)
            if known is not None and known[0].value == "%env" and known[0].code == self.inst.symbol \
                    and id(node) in self.tail:   # a literal calling itself through its own variable
                self.eval_tail_call(node)
                return
            self.args_then(node, lambda args: self.call_closure(node, self.vals.pop()[0], args, dests))
            self.push(lambda: self.eval(op, None))

    def args_then(self, node: Call, then: Callable[[list[Value]], None]) -> None:
        """`then(values of node's arguments)` once they are evaluated (on the explicit stack)."""
        n = len(node.args)
        self.push(lambda: then(self.take(n)))
        for a in reversed(node.args):
            self.push(lambda a=a: self.eval(a, None))   # type: ignore[misc]

    def take(self, n: int) -> list[Value]:
        """The last `n` values computed, in order."""
        args = self.vals[len(self.vals) - n:] if n else []
        del self.vals[len(self.vals) - n:]
        return args

    def note_function_args(self, node: Call, callee: Function, subst: Subst) -> None:
        """Polymorphic function values passed to `callee` take their instantiation from its
        parameter types."""
        for a, p in zip(node.args, callee.params):
            t = a.checked_type
            if isinstance(a, (Function, GlobalVar)) and isinstance(t, FuncType) and t.type_params:
                want = substitute(p.checked_type or p.type_annotation, subst)  # type: ignore[arg-type]
                out: Subst = {}
                params = {q.name for q in t.type_params}
                if match_type(FuncType(t.arg_types, t.ret_type), want, params, out) and set(out) == params:
                    self.instantiations[id(a)] = out

    def eval_op(self, node: Call, op: Op, dests: tuple[LV | None, ...] | None) -> None:
        name = op.name
        if name == "call_lowered":
            target = node.args[0] if node.args else None
            if not isinstance(target, GlobalVar):
                raise self.error("call_lowered of something that is not a global", node)
            callee = self.prog.mod.functions.get(target.name_hint)
            if isinstance(callee, PrimFunc):
                def kernel() -> None:
                    self.done(node, self.kernel_call(node, target.name_hint, [self.vals.pop()], dests), None)
                self.push(kernel)
                self.push(lambda: self.eval(node.args[1], None))
                return
            if not isinstance(callee, Function):
                raise self.error(f"@{target.name_hint} is not defined", target)
            packed = node.args[1]
            packed_t = self.type_of(packed)
            arg_types = list(packed_t.fields) if isinstance(packed_t, TupleType) else [packed_t]
            subst = self.prog.instantiate(callee, arg_types, self.type_of(node), node.span,
                                          f"function @{target.name_hint}")
            inst = self.prog.global_instance(target.name_hint, subst, node.span)
            self.push(lambda: self.call_instance(node, inst.symbol, "null", [self.vals.pop()], dests,
                                                 params=self.instance_params(inst)))
            self.push(lambda: self.eval(packed, None))
            return
        if name in VIEW_OPS or name == "memory.kill":
            def view() -> None:
                value = self.vals.pop()
                if name == "memory.kill":
                    self.done(node, (), dests)
                elif name == "reshape":
                    self.done(node, (self.reshape(node, value[0]),), dests)
                else:
                    self.done(node, value, dests)
            self.push(view)
            self.push(lambda: self.eval(node.args[0], None))
            return
        if is_data_dependent(name):
            self.args_then(node, lambda args: self.done(node, data_dependent.emit_call(self, node, args, dests), None))
            return
        if name in BOX_ROW_OPS:
            def rows(values: list[Value]) -> None:
                rows = self.box_join(node, list(values[0])) if name == "concatenate" else \
                    self.box_row(node, [v[0] for v in values])
                self.done(node, (rows,), dests)
            self.args_then(node, rows)
            return
        raise self.error(f"the operator `{name}` is not compiled natively (lower the module first)", node)

    def kernel_call(self, node: Call, name: str, args: list[Value], dests: tuple[LV | None, ...] | None) -> Value:
        func = self.prog.mod.functions[name]
        assert isinstance(func, PrimFunc)
        inputs = [lv for v in args for lv in v]
        k = num_outputs(func)
        if len(inputs) + k != len(func.params):
            raise self.error(f"@{name} takes {len(func.params)} buffers ({k} outputs) but is called with "
                             f"{len(inputs)} inputs", node)
        out_leaves = self.leaves(node)
        flags = batch_flags(func)
        if any(flags):
            return self.rows_call(node, name, func, inputs, out_leaves, flags)
        twin = self.in_place_calls.get(id(node))
        if twin is not None:   # into the parameter's own buffer (or, read first elsewhere, a temporary)
            dest = dests[0] if dests is not None else None
            return (self.update_in_place(twin, inputs, dest or self.temp(out_leaves[0])),)  # type: ignore[arg-type]
        outs = [d if d is not None else self.temp(leaf)  # type: ignore[arg-type]
                for leaf, d in zip(out_leaves, dests if dests is not None else [None] * len(out_leaves))]
        self.prog.kernel(name, [lv.align for lv in inputs + outs])
        call_args = ", ".join(f"ptr {lv.value}" for lv in inputs + outs)
        self.check_status(self.emit(f"call i32 @{self.prog.kernel_symbol(name)}({call_args})"))
        return tuple(outs)

    def update_in_place(self, twin: str, inputs: list[LV], dest: LV) -> LV:
        """The kernel's in-place twin on `dest`, which must first hold the data (`inputs[0]`): a
        copy when it does not yet (the loop's first iteration), nothing when it is the data."""
        copy, ready = self.label("copy"), self.label("in_place")
        self.condbr(self.emit(f"icmp eq ptr {inputs[0].value}, {dest.value}"), ready, copy)
        self.start(copy)
        self.memcpy(dest, inputs[0])
        self.br(ready)
        self.start(ready)
        rest = inputs[1:] + [dest]
        self.prog.kernel(twin, [lv.align for lv in rest])
        call_args = ", ".join(f"ptr {lv.value}" for lv in rest)
        self.check_status(self.emit(f"call i32 @{self.prog.kernel_symbol(twin)}({call_args})"))
        return dest

    def rows_call(self, node: Call, name: str, func: PrimFunc, inputs: list[LV], out_leaves: tuple[Leaf, ...],
                  flags: tuple[int, ...]) -> Value:
        """A batch-1 kernel over the run-time rows of its batched inputs: the extents its shape
        function pairs are compared (status 5), the results are new boxes with the extents it
        gives, and the kernel runs once per row (the product of a buffer's row prefix)."""
        dims = batch_dims(func)
        values: dict[Extent, str] = {}   # each input dim loaded, each product computed, once

        def extent(e: Extent) -> str:
            if not e or any(e[k] >= len(inputs) or not flags[e[k]] for k in range(1, len(e), 2)):
                raise self.error(f"@{name}: its row extents (`batch_dims`) do not name its inputs' dims", node)
            if e not in values:
                for k in range(1, len(e), 2):
                    if (1, *e[k:k + 2]) not in values:
                        values[(1, *e[k:k + 2])] = self.box_dim(inputs[e[k]], e[k + 1])
                values[e] = self.product([*([str(e[0])] if e[0] != 1 or len(e) == 1 else []),
                                          *(values[(1, *e[k:k + 2])] for k in range(1, len(e), 2))])
            return values[e]

        for want, got in batch_checks(func):
            self.fail_if(self.emit(f"icmp ne i64 {extent(want)}, {extent(got)}"), STATUS_SHAPE_MISMATCH)
        n = extent(extent_product(next(prefix for prefix in dims if prefix)))
        pointers = [self.box_data(lv) if flag else lv.value for lv, flag in zip(inputs, flags)]
        outs: list[LV] = []
        for leaf, prefix in zip(out_leaves, dims[len(inputs):]):
            assert isinstance(leaf, Obj) and isinstance(leaf.rtype, TensorType)
            box = self.new_box(leaf, [*map(extent, prefix), *(str(d) for d in leaf.rtype.shape[len(prefix):])])
            outs.append(box)
            pointers.append(self.box_data(box))
        buffers = [TensorType(b.shape, b.dtype) for b in func.params]
        aligns = [element_align(b) for b in buffers]
        self.prog.kernel(name, aligns)
        tile_name, tile_rows = func.attrs.get(BATCH_TILE_KERNEL), func.attrs.get(BATCH_TILE_ROWS)
        tile = None
        if isinstance(tile_name, str) and isinstance(tile_rows, int):
            self.prog.kernel(tile_name, aligns)
            tile = (self.prog.kernel_symbol(tile_name), tile_rows)
        symbol = self.prog.rows_symbol(name, flags, [row_bytes(b) for b in buffers], tile)
        call_args = ", ".join(["i64 " + n, *(f"ptr {p}" for p in pointers)])
        self.check_status(self.emit(f"call i32 @{symbol}({call_args})"))
        return tuple(outs)

    # -- boxes (tensors of dynamic shape)
    def box_data(self, box: LV) -> str:
        return self.emit(f"load ptr, ptr {self.field_ptr(box.value, DATA)}, align 8")

    def box_dim(self, box: LV, axis: int) -> str:
        return self.emit(f"load i64, ptr {self.field_ptr(box.value, DIMS + 8 * axis)}, align 8")

    def new_box(self, leaf: Obj, dims: list[str]) -> LV:
        """A box (held by this activation) of `dims` (i64 values) with room for its data."""
        t = leaf.rtype
        assert isinstance(t, TensorType)
        count = self.product(dims)
        size = self.emit(f"mul nsw i64 {count}, {max(1, element_bytes(t.dtype))}")
        box = self.emit(f"call ptr @{NEW_BOX}(i64 {header_bytes(len(dims))}, i64 {size}, ptr null, "
                        f"ptr @{self.prog.box_drop()})")
        self.fail_if(self.emit(f"icmp eq ptr {box}, null"), STATUS_OUT_OF_MEMORY)
        for axis, d in enumerate(dims):
            self.do(f"store i64 {d}, ptr {self.field_ptr(box, DIMS + 8 * axis)}, align 8")
        return self.hold(box, leaf)

    def box_elements(self, box: LV) -> str:
        t = box.leaf.rtype  # type: ignore[union-attr]
        return self.product([self.box_dim(box, axis) for axis in range(len(t.shape))])

    def product(self, values: list[str]) -> str:
        """The i64 product of `values` (left to right; one value is itself, none is 1)."""
        out = values[0] if values else "1"
        for v in values[1:]:
            out = self.emit(f"mul nsw i64 {out}, {v}")
        return out

    def reshape(self, node: Call, src: LV) -> LV:
        """`reshape` of or to a box: a static result views the box's data once its size is
        checked; a dynamic one is a new box with its last `?` sized from the element count and
        each `?` before it the source's extent on the same axis (lowering writes such a reshape
        only where it copies those axes: irtool/lower/module.py, `_reshape_attrs`)."""
        out = self.leaves(node)[0]
        if not isinstance(src.leaf, Obj):
            if isinstance(out, TensorType):
                return LV(src.value, out, src.align)
            src = self.coerce(src, Obj(src.leaf))
        count = self.box_elements(src)
        if isinstance(out, TensorType):
            self.fail_if(self.emit(f"icmp ne i64 {count}, {int(np.prod(out.shape, dtype=np.int64))}"),
                         STATUS_SHAPE_MISMATCH)
            return LV(self.box_data(src), out, element_align(out))
        t = out.rtype
        assert isinstance(t, TensorType)
        newshape = list(node.attrs["newshape"])  # type: ignore[call-overload]
        plain = next((k for k, d in enumerate(newshape) if d < 0), len(newshape))  # copies before any special code
        dims = [str(d) if isinstance(d, int) else self.box_dim(src, axis) if axis < plain and newshape[axis] == 0
                else "" for axis, d in enumerate(t.shape)]
        static = int(np.prod([d for d in t.shape if isinstance(d, int)], dtype=np.int64))
        if dims.count("") > 1 or static == 0:
            raise self.error(f"unsupported: `reshape` to {type_to_text(t)} with several `?` it does not copy "
                             "(newshape 0 after nothing but copies and static dims), or with an empty axis", node)
        if "" in dims:
            # The operand's elements outside the copied axes over the static dims (so an empty
            # copied axis leaves it defined, as the interpreter's reshape).
            ndim = len(src.leaf.rtype.shape)  # type: ignore[union-attr]
            copied = {axis for axis, (d, e) in enumerate(zip(dims, t.shape)) if d and not isinstance(e, int)}
            rest = self.product([self.box_dim(src, axis) for axis in range(ndim) if axis not in copied]) \
                if copied else count
            self.fail_if(self.emit(f"icmp ne i64 {self.emit(f'srem i64 {rest}, {static}')}, 0"), STATUS_SHAPE_MISMATCH)
            dims[dims.index("")] = self.emit(f"sdiv i64 {rest}, {static}")
        else:
            self.fail_if(self.emit(f"icmp ne i64 {count}, {self.product(dims)}"), STATUS_SHAPE_MISMATCH)
        box = self.new_box(out, dims)
        size = self.emit(f"mul nsw i64 {count}, {max(1, element_bytes(t.dtype))}")
        self.prog.ctx.declare("llvm.memcpy.p0.p0.i64", "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")
        self.do(f"call void @llvm.memcpy.p0.p0.i64(ptr align 1 {self.box_data(box)}, ptr align 1 "
                f"{self.box_data(src)}, i64 {size}, i1 false)")
        return box

    def box_row(self, node: Call, args: list[LV]) -> LV:
        """`take` of row i of a box's static first axis (a new box of that slab, i clipped into
        range; of a vector of rows, `take_rows`), or `scatter_nd` of one row (a copy of the box with the slab replaced: boxes are
        never written in place, so a loop collecting its outputs copies them each step)."""
        data = args[0] if isinstance(args[0].leaf, Obj) else self.coerce(args[0], Obj(args[0].leaf))
        t = data.leaf.rtype  # type: ignore[union-attr]
        assert isinstance(t, TensorType) and isinstance(t.shape[0], int)
        rest = [self.box_dim(data, axis) for axis in range(1, len(t.shape))]
        slab = self.emit(f"mul nsw i64 {self.product(rest)}, {max(1, element_bytes(t.dtype))}")
        out = self.leaves(node)[0]
        assert isinstance(out, Obj), "a row of a box is a box"
        self.prog.ctx.declare("llvm.memcpy.p0.p0.i64", "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")
        index = self.type_of(node.args[1])
        if node.op.name == "take" and isinstance(index, TensorType) and index.ndim == 1:
            return self.take_rows(data, args[1], int(index.shape[0]), index.dtype, out, rest, slab)  # type: ignore[arg-type]
        if node.op.name == "take":  # type: ignore[union-attr]
            at = self.row_at(data, self.emit(f"load i64, ptr {args[1].value}, align 8"), slab)
            box = self.new_box(out, rest)
            self.do(f"call void @llvm.memcpy.p0.p0.i64(ptr align 1 {self.box_data(box)}, ptr align 1 {at}, "
                    f"i64 {slab}, i1 false)")
            return box
        row = args[2] if isinstance(args[2].leaf, Obj) else self.coerce(args[2], Obj(args[2].leaf))
        for axis, d in enumerate(rest):
            self.fail_if(self.emit(f"icmp ne i64 {self.box_dim(row, axis)}, {d}"), STATUS_SHAPE_MISMATCH)
        box = self.new_box(out, [str(t.shape[0]), *rest])
        whole = self.emit(f"mul nsw i64 {slab}, {t.shape[0]}")
        self.do(f"call void @llvm.memcpy.p0.p0.i64(ptr align 1 {self.box_data(box)}, ptr align 1 "
                f"{self.box_data(data)}, i64 {whole}, i1 false)")
        at = self.row_at(box, self.emit(f"load i64, ptr {args[1].value}, align 8"), slab)
        self.do(f"call void @llvm.memcpy.p0.p0.i64(ptr align 1 {at}, ptr align 1 {self.box_data(row)}, "
                f"i64 {slab}, i1 false)")
        return box

    def row_at(self, box: LV, i: str, slab: str) -> str:
        """The address of row `i` of a box's static first axis, `i` clipped into range."""
        last = box.leaf.rtype.shape[0] - 1  # type: ignore[union-attr]
        i = self.emit(f"select i1 {self.emit(f'icmp slt i64 {i}, 0')}, i64 0, i64 {i}")
        i = self.emit(f"select i1 {self.emit(f'icmp sgt i64 {i}, {last}')}, i64 {last}, i64 {i}")
        return self.emit(f"getelementptr i8, ptr {self.box_data(box)}, i64 {self.emit(f'mul nsw i64 {i}, {slab}')}")

    def take_rows(self, data: LV, index: LV, count: int, dtype: str, out: Obj, rest: list[str], slab: str) -> LV:
        """`take` of a vector of rows of a box's static first axis: a new box of `count` slabs,
        copied in a loop (each index clipped into range; a reverse sequence reads X this way)."""
        box = self.new_box(out, [str(count), *rest])
        wide = "i32" if dtype == "int32" else "i64"

        def row(j: str) -> None:
            i = self.emit(f"load {wide}, ptr {self.emit(f'getelementptr {wide}, ptr {index.value}, i64 {j}')}, align 4")
            i = self.emit(f"sext i32 {i} to i64") if wide == "i32" else i
            to = self.emit(f"getelementptr i8, ptr {self.box_data(box)}, i64 {self.emit(f'mul nsw i64 {j}, {slab}')}")
            self.do(f"call void @llvm.memcpy.p0.p0.i64(ptr align 1 {to}, ptr align 1 {self.row_at(data, i, slab)}, "
                    f"i64 {slab}, i1 false)")
        self.counted_loop(str(count), row)
        return box

    def box_join(self, node: Call, parts: list[LV]) -> LV:
        """`concatenate` on an axis before a `?` (`box_rows.is_box_join`): a new box whose axis is
        the parts' sum (their other dims must agree: status 5), filled by copying, for each index
        of the axes before it, each part's slab in turn."""
        boxes = [p if isinstance(p.leaf, Obj) else self.coerce(p, Obj(p.leaf)) for p in parts]
        t = boxes[0].leaf.rtype  # type: ignore[union-attr]
        assert isinstance(t, TensorType)
        axis = int(node.attrs.get("axis", 0))  # type: ignore[call-overload]
        axis = axis + t.ndim if axis < 0 else axis
        dims = [[self.box_dim(b, d) for d in range(t.ndim)] for b in boxes]
        for other in dims[1:]:
            for d in (d for d in range(t.ndim) if d != axis):
                self.fail_if(self.emit(f"icmp ne i64 {other[d]}, {dims[0][d]}"), STATUS_SHAPE_MISMATCH)
        joined = dims[0][axis]
        for other in dims[1:]:
            joined = self.emit(f"add nsw i64 {joined}, {other[axis]}")
        out = self.leaves(node)[0]
        assert isinstance(out, Obj), "a join of boxes is a box"
        box = self.new_box(out, [*dims[0][:axis], joined, *dims[0][axis + 1:]])
        inner = self.emit(f"mul nsw i64 {self.product(dims[0][axis + 1:])}, {max(1, element_bytes(t.dtype))}")
        slabs = [self.emit(f"mul nsw i64 {d[axis]}, {inner}") for d in dims]
        stride = self.emit(f"mul nsw i64 {joined}, {inner}")
        self.prog.ctx.declare("llvm.memcpy.p0.p0.i64", "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")

        def outer(o: str) -> None:
            to = self.emit(f"getelementptr i8, ptr {self.box_data(box)}, i64 {self.emit(f'mul nsw i64 {o}, {stride}')}")
            for b, slab in zip(boxes, slabs):
                at = self.emit(f"getelementptr i8, ptr {self.box_data(b)}, i64 {self.emit(f'mul nsw i64 {o}, {slab}')}")
                self.do(f"call void @llvm.memcpy.p0.p0.i64(ptr align 1 {to}, ptr align 1 {at}, i64 {slab}, i1 false)")
                to = self.emit(f"getelementptr i8, ptr {to}, i64 {slab}")
        self.counted_loop(self.product(dims[0][:axis]), outer)
        return box

    def counted_loop(self, count: str, body: Callable[[str], None]) -> None:
        """`body(j)` for j in 0..count-1; the body emits straight-line code (no blocks of its own)."""
        pre, head, loop, done = (self.label(h) for h in ("loop_pre", "loop_head", "loop_body", "loop_done"))
        self.br(pre)
        self.start(pre)
        self.br(head)
        self.start(head)
        j = self.emit("phi i64 [0, %PRE], [%NEXT, %BODY]")
        at_phi = len(self.lines) - 1
        self.condbr(self.emit(f"icmp slt i64 {j}, {count}"), loop, done)
        self.start(loop)
        body(j)
        step = self.emit(f"add nuw nsw i64 {j}, 1")
        self.lines[at_phi] = self.lines[at_phi].replace("%PRE", f"%{pre}").replace("%NEXT", step).replace(
            "%BODY", f"%{loop}")
        self.br(head)
        self.start(done)

    def result_args(self, node: Expr, dests: tuple[LV | None, ...] | None) -> tuple[list[LV | str], list[str]]:
        """What a call's result pointers are: tensors' destinations (or temporaries), and owned slots
        that receive the object references."""
        leaves = self.leaves(node)
        out: list[LV | str] = []
        for leaf, d in zip(leaves, dests if dests is not None else [None] * len(leaves)):
            out.append(self.owned_slot() if isinstance(leaf, Obj) else (d if d is not None else self.temp(leaf)))
        return out, [o if isinstance(o, str) else o.value for o in out]

    def call_instance(self, node: Call, symbol: str, env: str, args: list[Value],
                      dests: tuple[LV | None, ...] | None, known: str | None = None,
                      params: tuple[Leaf, ...] | None = None) -> None:
        """A call of a function instance (`params`: its parameters' leaves, when they may differ
        from the arguments' in where shapes are dynamic)."""
        flat = [lv for v in args for lv in v]
        if params is not None:
            flat = list(self.coerce_all(tuple(flat), params))
        self.callees.add(symbol)
        places, pointers = self.result_args(node, dests)
        call_args = ", ".join(["ptr %ctx", f"ptr {env}", *(f"ptr {lv.value}" for lv in flat),
                               *(f"ptr {p}" for p in pointers)])
        target = f"@{symbol}" if known is None else known
        self.check_status(self.emit(f"call i32 {target}({call_args})"))
        out = []
        for place, leaf in zip(places, self.leaves(node)):
            if isinstance(place, str):
                out.append(LV(self.emit(f"load ptr, ptr {place}, align 8"), leaf, 8))  # type: ignore[arg-type]
            else:
                out.append(place)
        self.done(node, tuple(out), None)

    def instance_params(self, inst: Instance) -> tuple[Leaf, ...]:
        return tuple(leaf for p in inst.func.params
                     for leaf in leaves_of(substitute(p.checked_type or p.type_annotation, inst.subst)  # type: ignore[arg-type]
                                           if inst.subst else (p.checked_type or p.type_annotation), p.span))

    def call_closure(self, node: Call, callee: LV, args: list[Value], dests: tuple[LV | None, ...] | None) -> None:
        fn_t = callee.leaf.rtype if isinstance(callee.leaf, Obj) else None
        params = tuple(leaf for t in fn_t.arg_types for leaf in leaves_of(t, node.span)) \
            if isinstance(fn_t, FuncType) and not fn_t.type_params else None
        if callee.code is not None:
            self.call_instance(node, callee.code, callee.value, args, dests, params=params)
            return
        self.prog.calls_closures.add(self.inst.symbol)
        code = self.emit(f"load ptr, ptr {self.field_ptr(callee.value, CODE)}, align 8")
        self.call_instance(node, "", callee.value, args, dests, known=code, params=params)

    def eval_tail_call(self, node: Call) -> None:
        """A self tail call: the arguments become the parameters of the next iteration. Each
        tensor parameter has two carry buffers; a new value is computed into the one not holding
        the current value (so no argument overwrites another before it is read), a parameter
        passed on unchanged keeps its buffer, and object arguments are retained for the next
        iteration, whose parameters the loop owns. A parameter whose new value is an update with
        an in-place twin of its last read (`in_place.py`) has one buffer, updated in place."""
        self.loop = True
        places: list[LV | None] = []
        flips: list[tuple[int, str]] = []
        arg_dests: list[tuple[LV | None, ...]] = []
        k = 0
        for p, a in zip(self.func.params, node.args):
            mine: list[LV | None] = []
            own = self.updated_in_place(node, p, a, k)
            if own is not None:
                places.append(own)
                arg_dests.append((own,))
                k += 1
                continue
            for leaf in self.leaves(p):
                if isinstance(leaf, TensorType) and a is not p:
                    flip = self.emit(f"load i1, ptr %flip{k}, align 1")
                    first, second = self.carry_buffers(k, leaf)
                    at = self.emit(f"select i1 {flip}, i64 {second}, i64 {first}")
                    mine.append(LV(self.emit(f"getelementptr inbounds i8, ptr %carry, i64 {at}"), leaf,
                                   max(1, element_bytes(leaf.dtype))))
                    flips.append((k, flip))
                else:
                    mine.append(None)
                k += 1
            places += mine
            arg_dests.append(tuple(mine))

        def jump() -> None:
            args = self.coerce_all(tuple(lv for v in self.take(len(node.args)) for lv in v), tuple(self.param_leaves))
            for j, (lv, place) in enumerate(zip(args, places)):
                if isinstance(lv.leaf, Obj):
                    self.retain(lv.value)
                elif place is not None:
                    self.memcpy(place, lv)   # nothing to copy when the value was computed in place
                    lv = place
                self.do(f"store ptr {lv.value}, ptr %next{j}, align 8")
            for j, flip in flips:
                self.do(f"store i1 {self.emit(f'xor i1 {flip}, true')}, ptr %flip{j}, align 1")
            self.br("iterate")
            self.vals.append(tuple(LV("undef", leaf) for leaf in self.leaves(node)))   # never used: dead code
        self.push(jump)
        for a, d in reversed(list(zip(node.args, arg_dests))):
            self.push(lambda a=a, d=d: self.eval(a, d))   # type: ignore[misc]

    def carry_buffers(self, k: int, leaf: TensorType) -> tuple[int, int]:
        """The offsets of parameter `k`'s two carry buffers (made when a call first changes it)."""
        pair = self.carry_offsets.get(k)
        if pair is None:
            first = (self.carry_size + 63) // 64 * 64
            second = (first + nbytes(leaf) + 63) // 64 * 64
            pair = self.carry_offsets[k] = (first, second)
            self.carry_size = second + nbytes(leaf)
        return pair

    def updated_in_place(self, call: Call, p: Var, a: Expr, k: int) -> LV | None:
        """The one carry buffer of parameter `p` (leaf `k`) when the tail call's argument `a` is
        an update of `p` in place (`in_place.py`); the update is then its in-place twin."""
        update = in_place_twin(self.prog.mod, a)
        leaves = self.leaves(p)
        if update is None or update[1] is not p or len(leaves) != 1 or not isinstance(leaves[0], TensorType) \
                or not read_once(self.func.body, call, p):
            return None
        self.in_place_calls[id(a)] = update[0]
        at = self.in_place_buffer(k, leaves[0])
        return LV(self.emit(f"getelementptr inbounds i8, ptr %carry, i64 {at}"), leaves[0], 64)

    def in_place_buffer(self, k: int, leaf: TensorType) -> int:
        """The offset of parameter `k`'s one carry buffer, updated in place by every iteration."""
        at = self.in_place_offsets.get(k)
        if at is None:
            at = self.in_place_offsets[k] = (self.carry_size + 63) // 64 * 64
            self.carry_size = at + nbytes(leaf)
        return at

    def inline(self, node: Call, fn: Function, args: list[Value], dests: tuple[LV | None, ...] | None) -> None:
        """A function literal called where it is written: its body, with the parameters bound."""
        self.scopes.append({})
        for p, v in zip(fn.params, args):
            self.bind(p, v)

        def end() -> None:
            value = self.vals.pop()
            self.scopes.pop()
            self.bind(node, value)
            self.vals.append(value)
        self.push(end)
        self.push(lambda: self.eval(fn.body, dests))

    # -- objects
    def construct(self, node: Call, ctor: Constructor, args: list[Value]) -> LV:
        adt = self.type_of(node)
        field_types = self.constructor_fields(ctor, adt, node)
        leaves = tuple(leaf for ft in field_types for leaf in leaves_of(ft, node.span))
        offsets, size = field_offsets(leaves, ADT_FIELDS)
        drop = self.prog.drop(("adt", leaves), leaves, offsets)
        obj = self.alloc(size, drop)
        self.do(f"store i32 {ctor.tag}, ptr {self.field_ptr(obj, TAG)}, align 4")
        self.store_leaves(obj, tuple(lv for v in args for lv in v), offsets, leaves)
        return self.hold(obj, Obj(adt))

    def closure(self, func: Function) -> LV:
        if func.is_primitive:
            raise self.error("a primitive function used as a value (run `lower` first)", func)
        subst = dict(self.inst.subst)
        fn_t = func.checked_type
        if isinstance(fn_t, FuncType) and fn_t.type_params:
            own = self.instantiations.get(id(func))
            if own is None:
                raise self.error(f"a polymorphic function literal of type {type_to_text(fn_t)} whose instantiation "
                                 "is not given by a call it is passed to", func)
            subst.update(own)
        self_var = self.recursive_lets.get(id(func))
        inst = self.prog.lambda_instance(func, subst, self_var, id(func) in self.borrowing)
        self.prog.function_values.add(inst.symbol)
        values = []
        for v in inst.captures:
            hit = self.lookup(v)
            if hit is None:
                raise self.error(f"%{v.name_hint}, which this function captures, has no value here", func)
            values.extend(hit)
        leaves = tuple(lv.leaf for lv in values)
        offsets, size = capture_offsets(leaves, inst.borrows)
        obj = self.alloc(size, self.prog.drop(("closure", inst.borrows, leaves), leaves, offsets))
        self.do(f"store ptr @{inst.symbol}, ptr {self.field_ptr(obj, CODE)}, align 8")
        if inst.borrows:   # tensors as pointers to where they are, objects retained
            for lv, off in zip(values, offsets):
                if isinstance(lv.leaf, Obj):
                    self.retain(lv.value)
                self.do(f"store ptr {lv.value}, ptr {self.field_ptr(obj, off)}, align 8")
        else:
            self.store_leaves(obj, tuple(values), offsets)
        t = self.type_of(func)
        if isinstance(t, FuncType) and t.type_params:
            t = substitute(FuncType(t.arg_types, t.ret_type), subst)
        return self.hold(obj, Obj(t), inst.symbol)

    def global_value(self, node: GlobalVar) -> LV:
        func = self.prog.mod.functions.get(node.name_hint)
        if not isinstance(func, Function):
            raise self.error(f"@{node.name_hint} is not a Relay function", node)
        t = self.type_of(node)
        subst: Subst = {}
        if isinstance(t, FuncType) and t.type_params:
            given = self.instantiations.get(id(node))
            if given is None:
                raise self.error(f"the polymorphic function @{node.name_hint} used as a value whose instantiation "
                                 "is not given by a call it is passed to", node)
            subst = given
            t = substitute(FuncType(t.arg_types, t.ret_type), subst)
        inst = self.prog.global_instance(node.name_hint, subst, node.span)
        self.prog.function_values.add(inst.symbol)
        obj = self.alloc(CLOSURE_FIELDS, self.prog.drop(("closure", ()), (), []))
        self.do(f"store ptr @{inst.symbol}, ptr {self.field_ptr(obj, CODE)}, align 8")
        return self.hold(obj, Obj(t), inst.symbol)

    def ref_create(self, node: RefCreate, value: Value) -> Value:
        leaves = tuple(lv.leaf for lv in value)
        offsets, size = field_offsets(leaves, REF_FIELDS)
        obj = self.alloc(size, self.prog.drop(("ref", leaves), leaves, offsets))
        self.store_leaves(obj, value, offsets)
        return (self.hold(obj, Obj(self.type_of(node))),)

    def ref_leaves(self, node: Expr, ref_t: Type) -> tuple[tuple[Leaf, ...], list[int]]:
        if not isinstance(ref_t, RefType):
            raise self.error(f"a reference operation on a value of type {type_to_text(ref_t)}", node)
        leaves = leaves_of(ref_t.value, node.span)
        return leaves, field_offsets(leaves, REF_FIELDS)[0]

    def ref_read(self, node: RefRead, ref: Value, dests: tuple[LV | None, ...] | None) -> Value:
        """The content, copied out: a later `ref_write` overwrites the cell in place."""
        leaves, offsets = self.ref_leaves(node, self.type_of(node.ref))
        stored = self.load_leaves(ref[0].value, leaves, offsets)
        out = []
        for lv, d in zip(stored, dests if dests is not None else [None] * len(stored)):
            if isinstance(lv.leaf, Obj):
                self.retain(lv.value)
                out.append(self.hold(lv.value, lv.leaf))
            else:
                place = d if d is not None else self.temp(lv.leaf)
                self.memcpy(place, lv)
                out.append(place)
        return tuple(out)

    def ref_write(self, node: RefWrite, dests: tuple[LV | None, ...] | None) -> None:
        value = self.vals.pop()
        ref = self.vals.pop()
        leaves, offsets = self.ref_leaves(node, self.type_of(node.ref))
        for lv, off in zip(value, offsets):
            ptr = self.field_ptr(ref[0].value, off)
            if isinstance(lv.leaf, Obj):
                self.retain(lv.value)
                old = self.emit(f"load ptr, ptr {ptr}, align 8")
                self.do(f"store ptr {lv.value}, ptr {ptr}, align 8")
                self.do(f"call void @{RELEASE}(ptr {old})")
            else:
                self.memcpy(LV(ptr, lv.leaf, inline_align(lv.leaf)), lv)
        self.done(node, (), dests)

