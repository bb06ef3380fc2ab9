"""One TIR PrimFunc → one LLVM function, as textual IR (opaque pointers).

A kernel is `define internal i32 @sym(ptr noalias nocapture align A %b0, ...)`: buffer
parameters in order, returning 0, or a status (see `STATUS_*`) when an `assert` fails or a large
scratch buffer cannot be allocated. Semantics follow the TIR interpreter (docs/tir.md), with
these native differences, documented in docs/codegen.md:
- out-of-bounds accesses and integer division by zero are not checked (the interpreter reports
  them); division by zero yields an unspecified value instead of trapping;
- a `vectorized` loop with constant bounds and a straight-line body becomes vector code
  (`irtool.tir_transform.vectorize`); other vectorized loops carry `llvm.loop.vectorize.enable` for
  LLVM's vectorizer; explicit `ramp`/`broadcast` TIR is vector IR directly; an `unrolled` loop
  with literal bounds is expanded here, one copy of the body per iteration with constant indices
  (`irtool.tir_transform.unroll`: register tiles rely on it), other `unrolled` loops carry
  `llvm.loop.unroll.full`; `parallel` loops run on `threads` threads when the module is
  compiled for more than one (`irtool.codegen.parallel`; the build driver marks the outermost safe
  loop of each kernel parallel first), serially otherwise;
- `allocate`d buffers start undefined (the interpreter fills them with NaN).
Both walks (statements, expressions) use explicit stacks: fused chains make deep trees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from irtool.ir.tir import (Allocate, AssertStmt, BinaryOp, Broadcast, Buffer, BufferLoad, BufferStore, Call, Cast,
                           Evaluate, FloatImm, For, IfExpr, IfThenElse, IntImm, LetStmt, Not, PrimExpr, PrimFunc,
                           Ramp, Select, SeqStmt, Stmt, Var, children, element_of, int_range, is_bool, is_float,
                           lanes_of, with_lanes)
from irtool.codegen.types import (constant, element_bytes, intrinsic_suffix, is_unsigned, memory_type,
                                  scalar_type, value_type)
from irtool.codegen.vector_math import Float32Math
from irtool.codegen.parallel import body_of, emit_parallel_loop, loop_bound
from irtool.codegen.thread_pool import RUNTIME_TEXT
from irtool.core.diagnostics import DiagnosticError
from irtool.tir_transform.unroll import constant_extent, unroll_loop
from irtool.tir_transform.vectorize import vectorize_loop

STATUS_OK = 0
STATUS_MISALIGNED = 1
STATUS_OUT_OF_MEMORY = 2
STATUS_ASSERT_BASE = 16  # an `assert` failing returns STATUS_ASSERT_BASE + its index in the module

# Scratch buffers up to this size live on the stack (one alloca in the entry block); larger ones
# come from aligned_alloc, so a big padding stage cannot overflow a thread's stack.
MAX_STACK_BYTES = 64 * 1024

# Math intrinsics that are LLVM intrinsics of the same (or the named) name.
_LLVM_INTRINSICS = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log10": "log10", "sqrt": "sqrt",
                    "tanh": "tanh", "fabs": "fabs", "floor": "floor", "ceil": "ceil", "round": "nearbyint",
                    "trunc": "trunc", "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos",
                    "atan": "atan", "sinh": "sinh", "cosh": "cosh", "pow": "pow", "fma": "fma"}
# float32 math emitted inline (`irtool.codegen.vector_math`): libm would be called lane by lane.
_INLINE_FLOAT32 = ("exp", "tanh", "erf", "sigmoid")
# Math intrinsics LLVM has no intrinsic for: libm calls, lane by lane.
_LIBM = ("erf", "asinh", "acosh", "atanh")
_FCMP = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
_ICMP_SIGNED = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
_ICMP_UNSIGNED = {"eq": "eq", "ne": "ne", "lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge"}
# Instructions that read or write memory, call, or bind per block: never reused by `emit`.
_NOT_REUSED = ("load ", "call ", "phi ", "alloca ", "freeze ")


def _small_integer_exponent(e: PrimExpr) -> int | None:
    """2 or 3 when the float exponent `e` is that constant (or it broadcast), else None."""
    if isinstance(e, Broadcast):
        e = e.value
    if isinstance(e, FloatImm) and e.value in (2.0, 3.0):
        return int(e.value)
    return None


@dataclass
class ModuleContext:
    """What the functions of one LLVM module share: declarations (each declared once), loop
    metadata numbering, assert messages, the fast-math flags, the thread count, and the
    functions codegen adds beside the kernels (parallel-loop workers; `has_runtime`: a parallel
    loop needs the thread pool)."""

    fast_math: bool = False
    threads: int = 1
    vnni_bits: int = 0       # `TargetOptions.vnni_bits`: where `dot_u8s8` is one `vpdpbusd`
    declarations: dict[str, str] = field(default_factory=dict)
    functions: list[str] = field(default_factory=list)
    has_runtime: bool = False
    metadata: list[str] = field(default_factory=list)
    assert_messages: list[str] = field(default_factory=list)

    def added_functions(self) -> list[str]:
        """What a module adds beside its kernels: the workers left in `functions`, then the pool."""
        return [*self.functions, *([RUNTIME_TEXT] if self.has_runtime else [])]

    def declare(self, name: str, text: str) -> str:
        self.declarations.setdefault(name, text)
        return name

    def loop_metadata(self, key: str, value: str) -> str:
        """A distinct `!llvm.loop` node carrying one property."""
        prop = len(self.metadata)
        self.metadata.append(f'!{prop} = !{{!"{key}", {value}}}')
        loop = len(self.metadata)
        self.metadata.append(f"!{loop} = distinct !{{!{loop}, !{prop}}}")
        return f"!{loop}"

    @property
    def fmf(self) -> str:
        return "fast " if self.fast_math else ""


def _literal_int(value: str) -> int | None:
    """The value of an integer literal operand (`12`, `-3`), None for anything else."""
    return int(value) if value.lstrip("-").isdigit() else None


def _wrapped(value: int, dtype: str) -> int:
    """`value` modulo 2^bits, in `dtype`'s signed or unsigned range (LLVM's wrapping arithmetic)."""
    bits = element_bytes(dtype) * 8
    value &= (1 << bits) - 1
    return value - (1 << bits) if not is_unsigned(dtype) and value >> (bits - 1) else value


def _round_up(n: int, k: int) -> int:
    return (n + k - 1) // k * k


def buffer_bytes(buf: Buffer) -> int:
    n = element_bytes(buf.dtype) * lanes_of(buf.dtype)
    for d in buf.shape:
        n *= d
    return n


def _strides(buf: Buffer) -> tuple[int, ...]:
    if buf.strides is not None:
        return buf.strides
    out, acc = [], 1
    for d in reversed(buf.shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def buffer_access(func: PrimFunc) -> tuple[set[int], set[int]]:
    """ids of the buffers the function loads from and stores to (for readonly/writeonly)."""
    return _accessed(func.body)


def _accessed(root: Stmt) -> tuple[set[int], set[int]]:
    loads: set[int] = set()
    stores: set[int] = set()
    seen: set[int] = set()   # each shared node once: a DAG is walked in its own size
    stack: list[object] = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, BufferLoad):
            loads.add(id(node.buffer))
        elif isinstance(node, BufferStore):
            stores.add(id(node.buffer))
        stack.extend(children(node))  # type: ignore[arg-type]
    return loads, stores


def as_ramp(index: PrimExpr) -> tuple[PrimExpr, int] | None:
    """(scalar base, constant stride) of a vector index that is an arithmetic sequence:
    `ramp(b, s, n)`, or a ramp plus or minus a broadcast (what loop vectorization writes)."""
    if isinstance(index, Ramp):
        return (index.base, index.stride.value) if isinstance(index.stride, IntImm) else None
    if isinstance(index, BinaryOp) and index.op in ("add", "sub"):
        a, b = index.a, index.b
        if index.op == "add" and isinstance(a, Broadcast):
            a, b = b, a
        inner = as_ramp(a) if isinstance(b, Broadcast) else None
        if inner is not None:
            return BinaryOp(index.op, inner[0], b.value), inner[1]  # type: ignore[union-attr]
    return None


def _sequence(buf: Buffer, indices: tuple[PrimExpr, ...]) -> tuple[int, PrimExpr, int] | None:
    """(position, scalar base, elements between lanes in memory) of a vector access whose one
    vector index is an arithmetic sequence, the others scalars; None for any other access."""
    vector = [k for k, i in enumerate(indices) if lanes_of(i.dtype) > 1]
    ramp = as_ramp(indices[vector[0]]) if len(vector) == 1 else None
    if ramp is None:
        return None
    return vector[0], ramp[0], ramp[1] * _strides(buf)[vector[0]]


def index_operands(buf: Buffer, indices: tuple[PrimExpr, ...], steps: tuple[int, ...]) -> tuple[PrimExpr, ...]:
    """What an access evaluates of its indices: all of them, but only the base of the ramp
    when its lanes are `steps` elements apart (the access addresses its first lane; the vector
    of indices would be emitted unused)."""
    sequence = _sequence(buf, indices)
    if sequence is None or sequence[2] not in steps:
        return indices
    position, base, _ = sequence
    return (*indices[:position], base, *indices[position + 1:])


class FunctionEmitter:
    """Emits one kernel. `param_align[i]` is the alignment every caller guarantees for param i."""

    def __init__(self, ctx: ModuleContext, func: PrimFunc, symbol: str, param_align: list[int],
                 noalias: bool = True, linkage: str = "internal") -> None:
        self.ctx = ctx
        self.func = func
        self.symbol = symbol
        self.param_align = param_align
        self.noalias = noalias
        self.linkage = linkage
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.values: dict[int, str] = {}    # Var id -> SSA value
        self.pointers: dict[int, tuple[str, int]] = {}   # Buffer id -> (pointer value, alignment)
        self.temps = 0
        self.labels = 0
        self.block = "entry"
        self.reuse: dict[str, str] = {}   # instruction text -> its value, in the current block
        self.where = func.span
        self.workers = 0             # parallel loops outlined so far (their functions' numbering)
        self.in_parallel = False     # a worker's loops run serially: one level of threads
        self.attributes = ""         # function attributes besides the group `#0`

    # -- small emission helpers
    def tmp(self) -> str:
        self.temps += 1
        return f"%t{self.temps}"

    def label(self, hint: str) -> str:
        self.labels += 1
        return f"{hint}{self.labels}"

    def emit(self, text: str) -> str:
        """Emits `%tN = text` and returns `%tN`; an instruction without side effects that the
        current block already computes is not emitted again (the earlier value dominates): the
        index arithmetic and splats of a written-out register tile repeat per access."""
        reusable = not text.startswith(_NOT_REUSED)
        if reusable and text in self.reuse:
            return self.reuse[text]
        name = self.tmp()
        self.lines.append(f"  {name} = {text}")
        if reusable:
            self.reuse[text] = name
        return name

    def start_block(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label
        self.reuse = {}

    def fail(self, message: str, node: object) -> DiagnosticError:
        return DiagnosticError(f"codegen: {message}", getattr(node, "span", None) or self.where)

    # -- the function
    def generate(self) -> str:
        loads, stores = buffer_access(self.func)
        params = []
        for i, buf in enumerate(self.func.params):
            params.append(self.pointer_param(i, buf, self.param_align[i], loads, stores))
        self.statements(self.func.body)
        return self.finish(params)

    def pointer_param(self, i: int, buf: Buffer, align: int, loads: set[int], stores: set[int]) -> str:
        """Parameter `%b<i>` for `buf`, with the aliasing, access and alignment facts LLVM may use."""
        flags = "noalias nocapture" if self.noalias else "nocapture"
        if id(buf) not in stores:
            flags += " readonly"
        elif id(buf) not in loads:
            flags += " writeonly"
        self.pointers[id(buf)] = (f"%b{i}", align)
        return f"ptr {flags} align {align} %b{i}"

    def finish(self, params: list[str]) -> str:
        self.lines.append(f"  ret i32 {STATUS_OK}")
        linkage = f"{self.linkage} " if self.linkage else ""
        head = f"define {linkage}i32 @{self.symbol}({', '.join(params)}) {self.attributes}#0 {{"
        return "\n".join([head, "entry:", *self.allocas, *self.lines, "}", ""])

    def outline(self, loop: For, symbol: str, buffers: list[Buffer], variables: list[Var]) -> str:
        """The `define` of a parallel loop's worker body: the loop over `[%begin, %end)`, with the
        captured buffers (alignment and aliasing as in this kernel) and variables as parameters."""
        worker = FunctionEmitter(self.ctx, self.func, symbol, [], self.noalias, "internal")
        worker.in_parallel = True
        # Kept out of its `_parK` wrapper: inlined, its `noalias` parameters would become scope
        # metadata on every access, and -O3 took 1.3-2x the serial kernel's time; out of line it
        # optimises about as the serial kernel does (docs/codegen.md, Compile time).
        worker.attributes = "noinline "
        worker.where = loop.span or self.where
        loads, stores = _accessed(loop.body)
        params = []
        for i, buf in enumerate(buffers):
            params.append(worker.pointer_param(i, buf, self.pointers[id(buf)][1], loads, stores))
        for i, var in enumerate(variables):
            params.append(f"{value_type(var.dtype)} %v{i}")
            worker.values[id(var)] = f"%v{i}"
        params += ["i64 %begin", "i64 %end"]
        lo, hi = Var("begin", loop.var.dtype), Var("end", loop.var.dtype)
        worker.values[id(lo)] = loop_bound(worker, loop.var, "%begin")
        worker.values[id(hi)] = loop_bound(worker, loop.var, "%end")
        worker.statements(body_of(loop, lo, hi))
        return worker.finish(params)

    # -- statements
    def statements(self, root: Stmt) -> None:
        stack: list[Stmt | Callable[[], None]] = [root]
        while stack:
            item = stack.pop()
            if callable(item):
                item()
                continue
            self.where = item.span or self.where
            if isinstance(item, SeqStmt):
                stack.extend(reversed(item.stmts))
            elif isinstance(item, For):
                if item.kind == "parallel" and self.ctx.threads > 1 and not self.in_parallel:
                    emit_parallel_loop(self, item)
                    continue
                vector = vectorize_loop(item) if item.kind == "vectorized" else None
                if vector is not None:
                    stack.append(vector)
                    continue
                if item.kind == "unrolled" and constant_extent(item) is not None:
                    stack.append(unroll_loop(item))
                    continue
                stack.append(self.loop(item))
                stack.append(item.body)
            elif isinstance(item, LetStmt):
                self.values[id(item.var)] = self.expr(item.value)
                stack.append(item.body)
            elif isinstance(item, Allocate):
                after = self.allocate(item.buffer)
                if after is not None:
                    stack.append(after)
                stack.append(item.body)
            elif isinstance(item, BufferStore):
                self.store(item)
            elif isinstance(item, IfThenElse):
                stack.extend(reversed(self.branch(item)))
            elif isinstance(item, Evaluate):
                self.expr(item.value)
            elif isinstance(item, AssertStmt):
                self.assertion(item)
            else:
                raise self.fail(f"unsupported statement {type(item).__name__}", item)

    def loop(self, node: For) -> Callable[[], None]:
        """Opens the loop (header, body block) and returns what closes it after the body."""
        ty = value_type(node.var.dtype)
        unsigned = is_unsigned(node.var.dtype)
        low, high = int_range(node.var.dtype)
        for bound in (node.begin, node.end):
            if isinstance(bound, IntImm) and not low <= bound.value <= high:
                raise self.fail(f"loop bound {bound.value} does not fit the {node.var.dtype} loop variable "
                                f"%{node.var.name} (use an int64 one)", node)
        begin = self.expr(node.begin)
        end = self.expr(node.end)
        pre = self.block
        header, body, exit_ = self.label("loop"), self.label("body"), self.label("done")
        self.lines.append(f"  br label %{header}")
        self.start_block(header)
        var = self.tmp()
        phi_at = len(self.lines)
        self.lines.append("")  # the phi, written when the latch is known
        cond = self.emit(f"icmp {'ult' if unsigned else 'slt'} {ty} {var}, {end}")
        self.lines.append(f"  br i1 {cond}, label %{body}, label %{exit_}")
        self.start_block(body)
        self.values[id(node.var)] = var
        metadata = {"vectorized": ("llvm.loop.vectorize.enable", "i1 true"),
                    "unrolled": ("llvm.loop.unroll.full", None)}.get(node.kind)

        def close() -> None:
            nxt = self.emit(f"add {'nuw' if unsigned else 'nsw'} {ty} {var}, 1")
            latch = self.block
            self.lines[phi_at] = f"  {var} = phi {ty} [ {begin}, %{pre} ], [ {nxt}, %{latch} ]"
            tag = ""
            if metadata is not None:
                key, value = metadata
                tag = ", !llvm.loop " + (self.ctx.loop_metadata(key, value) if value else self._unroll_full())
            self.lines.append(f"  br label %{header}{tag}")
            self.start_block(exit_)
        return close

    def _unroll_full(self) -> str:
        loop = len(self.ctx.metadata)
        prop = loop + 1
        self.ctx.metadata.append(f"!{loop} = distinct !{{!{loop}, !{prop}}}")
        self.ctx.metadata.append(f'!{prop} = !{{!"llvm.loop.unroll.full"}}')
        return f"!{loop}"

    def allocate(self, buf: Buffer) -> Callable[[], None] | None:
        nbytes = max(_round_up(buffer_bytes(buf), 64), 64)
        if nbytes <= MAX_STACK_BYTES:
            name = f"%a{len(self.allocas)}"
            self.allocas.append(f"  {name} = alloca [{nbytes} x i8], align 64")
            self.pointers[id(buf)] = (name, 64)
            return None
        alloc = self.ctx.declare("aligned_alloc", "declare noalias ptr @aligned_alloc(i64, i64)")
        free = self.ctx.declare("free", "declare void @free(ptr)")
        ptr = self.emit(f"call ptr @{alloc}(i64 64, i64 {nbytes})")
        self.return_status_if(self.emit(f"icmp eq ptr {ptr}, null"), STATUS_OUT_OF_MEMORY, "alloc")
        self.pointers[id(buf)] = (ptr, 64)
        return lambda: self.lines.append(f"  call void @{free}(ptr {ptr})")

    def branch(self, node: IfThenElse) -> list[Stmt | Callable[[], None]]:
        """Opens the `then` block; returns the work in order (then body, switch, else body, join)."""
        cond = self.expr(node.cond)
        then, other, join = self.label("then"), self.label("else"), self.label("endif")
        has_else = node.else_body is not None
        self.lines.append(f"  br i1 {cond}, label %{then}, label %{other if has_else else join}")
        self.start_block(then)

        def to_else() -> None:
            self.lines.append(f"  br label %{join}")
            self.start_block(other)

        def to_join() -> None:
            self.lines.append(f"  br label %{join}")
            self.start_block(join)
        if has_else:
            return [node.then_body, to_else, node.else_body, to_join]  # type: ignore[list-item]
        return [node.then_body, to_join]

    def assertion(self, node: AssertStmt) -> None:
        failed = self.emit(f"xor i1 {self.expr(node.cond)}, true")
        code = STATUS_ASSERT_BASE + len(self.ctx.assert_messages)
        self.ctx.assert_messages.append(node.message)
        self.return_status_if(failed, code, "assert")

    def return_status_if(self, failed: str, status: int | str, what: str) -> None:
        """When the i1 `failed` holds, return `status` from the function; go on in a new block."""
        bad, ok = self.label(f"{what}_failed"), self.label(f"{what}_ok")
        self.lines.append(f"  br i1 {failed}, label %{bad}, label %{ok}")
        self.start_block(bad)
        self.lines.append(f"  ret i32 {status}")
        self.start_block(ok)

    # -- memory
    def address(self, buf: Buffer, indices: tuple[PrimExpr, ...], values: list[str], node: object
                ) -> tuple[str, int, bool]:
        """(pointer or vector of pointers, lanes, contiguous) of an access."""
        if id(buf) not in self.pointers:
            raise self.fail(f"buffer %{buf.name} is used outside its scope", node)
        base, _ = self.pointers[id(buf)]
        mem = memory_type(buf.dtype)
        strides = _strides(buf)
        lanes = max((lanes_of(i.dtype) for i in indices), default=1)
        if lanes == 1:
            offset = self.scalar_offset(indices, values, strides)
            return self.emit(f"getelementptr inbounds {mem}, ptr {base}, i64 {offset}"), 1, True
        first = self.first_element(buf, indices, values, 1)
        if first is not None:
            return first, lanes, True
        vty = f"<{lanes} x i64>"
        total = None
        for index, value, stride in zip(indices, values, strides):
            wide = self.widen(index.dtype, value, lanes)
            term = self.emit(f"mul {vty} {wide}, splat (i64 {stride})")
            total = term if total is None else self.emit(f"add {vty} {total}, {term}")
        return self.emit(f"getelementptr inbounds {mem}, ptr {base}, {vty} {total}"), lanes, False

    def first_element(self, buf: Buffer, indices: tuple[PrimExpr, ...], values: list[str], step: int) -> str | None:
        """The pointer to the first lane of a vector access whose lanes are `step` elements apart
        in memory (one index a ramp, the others scalars), or None for any other access. `values`
        are those of `index_operands`: the ramp's base in its place."""
        sequence = _sequence(buf, indices)
        if sequence is None or sequence[2] != step:
            return None
        scalar_indices = list(indices)
        scalar_indices[sequence[0]] = sequence[1]
        offset = self.scalar_offset(tuple(scalar_indices), values, _strides(buf))
        base, _ = self.pointers[id(buf)]
        return self.emit(f"getelementptr inbounds {memory_type(buf.dtype)}, ptr {base}, i64 {offset}")

    def strided_load(self, node: BufferLoad, values: list[str]) -> str | None:
        """A load of lanes two elements apart (a stride-2 convolution's or pooling window's
        columns) as two contiguous vector loads, the second ending at the last lane, and one
        shuffle of the even elements, instead of a scalar load per lane; None for other
        accesses. Every element loaded lies between two that the access reads, so none is out
        of bounds."""
        lanes = max((lanes_of(i.dtype) for i in node.indices), default=1)
        if lanes == 1 or id(node.buffer) not in self.pointers:
            return None
        first = self.first_element(node.buffer, node.indices, values, 2)
        if first is None:
            return None
        mem = memory_type(node.buffer.dtype)
        vty, align = f"<{lanes} x {mem}>", element_bytes(node.buffer.dtype)
        low = self.emit(f"load {vty}, ptr {first}, align {align}")
        second = self.emit(f"getelementptr inbounds {mem}, ptr {first}, i64 {lanes - 1}")
        high = self.emit(f"load {vty}, ptr {second}, align {align}")
        picks = ", ".join(f"i32 {2 * k if 2 * k < lanes else 2 * k + 1}" for k in range(lanes))
        return self.emit(f"shufflevector {vty} {low}, {vty} {high}, <{lanes} x i32> <{picks}>")

    def widen(self, dtype: str, value: str, lanes: int) -> str:
        """An integer index as i64 (splat to `lanes` when it is a scalar)."""
        src = value_type(dtype)
        n = lanes_of(dtype)
        dst = "i64" if n == 1 else f"<{n} x i64>"
        if n == 1 and _literal_int(value) is not None:
            pass   # an integer literal is the same text in every integer type it fits
        elif scalar_type(dtype) != "i64":
            op = "zext" if is_unsigned(dtype) or is_bool(dtype) else "sext"
            value = self.emit(f"{op} {src} {value} to {dst}")
        if n == 1 and lanes > 1:
            value = self.splat("i64", value, lanes)
        return value

    def splat(self, scalar: str, value: str, lanes: int) -> str:
        """`value` in every lane: a constant vector when it is a literal."""
        if not value.startswith("%"):
            return f"splat ({scalar} {value})"
        vty = f"<{lanes} x {scalar}>"
        one = self.emit(f"insertelement {vty} poison, {scalar} {value}, i64 0")
        return self.emit(f"shufflevector {vty} {one}, {vty} poison, <{lanes} x i32> zeroinitializer")

    def scalar_offset(self, indices: tuple[PrimExpr, ...], values: list[str], strides: tuple[int, ...]) -> str:
        """The element offset of scalar indices (i64), literal where they are."""
        total: str | None = None
        for index, value, stride in zip(indices, values, strides):
            wide = self.widen(index.dtype, value, 1)
            known = _literal_int(wide)
            if known is not None:
                if known * stride == 0:
                    continue
                term = str(known * stride)
            else:
                term = wide if stride == 1 else self.emit(f"mul nsw i64 {wide}, {stride}")
            if total is None:
                total = term
            elif _literal_int(total) is not None and known is not None:
                total = str(int(total) + known * stride)
            else:
                total = self.emit(f"add nsw i64 {total}, {term}")
        return total if total is not None else "0"

    def load(self, node: BufferLoad, values: list[str]) -> str:
        buf = node.buffer
        mem = memory_type(buf.dtype)
        raw, lanes = self.raw_load(node, values)
        if is_bool(buf.dtype):
            ty = mem if lanes == 1 else f"<{lanes} x {mem}>"
            return self.emit(f"icmp ne {ty} {raw}, {'zeroinitializer' if lanes > 1 else '0'}")
        return raw

    def raw_load(self, node: BufferLoad, values: list[str]) -> tuple[str, int]:
        """(the loaded value in its memory type, lanes)."""
        buf = node.buffer
        strided = self.strided_load(node, values)
        if strided is not None:
            return strided, max(lanes_of(i.dtype) for i in node.indices)
        ptr, lanes, contiguous = self.address(buf, node.indices, values, node)
        mem = memory_type(buf.dtype)
        align = element_bytes(buf.dtype)
        if lanes == 1:
            return self.emit(f"load {mem}, ptr {ptr}, align {align}"), 1
        if contiguous:
            return self.emit(f"load <{lanes} x {mem}>, ptr {ptr}, align {align}"), lanes
        vty = f"<{lanes} x {mem}>"
        name = self.masked("gather", buf.dtype, lanes, f"{vty} @%s(<{lanes} x ptr>, <{lanes} x i1>, {vty})")
        return self.emit(f"call {vty} @{name}(<{lanes} x ptr> align {align} {ptr}, "
                         f"<{lanes} x i1> splat (i1 true), {vty} poison)"), lanes

    def masked(self, kind: str, dtype: str, lanes: int, signature: str) -> str:
        """The declared `llvm.masked.<kind>` (gather or scatter) of `lanes` elements of `dtype`
        (`signature` with `%s` for the name). Lanes at unrelated addresses (a channel vector of
        an NCHW tensor) go through one such call, with every lane enabled, not a scalar access
        per lane: LLVM's optimiser saw 16 extracts, loads and inserts per vector access, which
        were half of a convolution's IR and a third of its compile time; the backend chooses
        gather/scatter instructions or the same scalar accesses."""
        element = intrinsic_suffix(with_lanes("int8" if is_bool(dtype) else dtype, lanes))
        name = f"llvm.masked.{kind}.{element}.v{lanes}p0"
        return self.ctx.declare(name, "declare " + signature % name)

    def store(self, node: BufferStore) -> None:
        buf = node.buffer
        values = [self.expr(i) for i in index_operands(node.buffer, node.indices, (1,))]
        value = self.expr(node.value)
        ptr, lanes, contiguous = self.address(buf, node.indices, values, node)
        mem = memory_type(buf.dtype)
        align = element_bytes(buf.dtype)
        vty = mem if lanes == 1 else f"<{lanes} x {mem}>"
        if is_bool(buf.dtype):
            value = self.emit(f"zext {value_type(node.value.dtype)} {value} to {vty}")
        if lanes == 1 or contiguous:
            self.lines.append(f"  store {vty} {value}, ptr {ptr}, align {align}")
            return
        name = self.masked("scatter", buf.dtype, lanes, f"void @%s({vty}, <{lanes} x ptr>, <{lanes} x i1>)")
        self.lines.append(f"  call void @{name}({vty} {value}, <{lanes} x ptr> align {align} {ptr}, "
                          f"<{lanes} x i1> splat (i1 true))")

    # -- expressions: post-order over an explicit stack; `if_then_else` opens blocks
    def expr(self, root: PrimExpr) -> str:
        """The SSA value of `root`. A node shared within it is emitted once (memoised on identity:
        a DAG of fused elements must not become a tree); a value computed inside an
        `if_then_else` arm is reused only inside that arm, where it dominates."""
        results: list[str] = []
        scopes: list[dict[int, str]] = [{}]
        tasks: list[tuple[str, PrimExpr, tuple[str, ...]]] = [("eval", root, ())]
        while tasks:
            kind, node, state = tasks.pop()
            if kind == "eval":
                known = next((s[id(node)] for s in reversed(scopes) if id(node) in s), None)
                if known is not None:
                    results.append(known)
                    continue
                if isinstance(node, IfExpr):
                    tasks.append(("if_cond", node, ()))
                    tasks.append(("eval", node.cond, ()))
                    continue
                kids = self.operands(node)
                tasks.append(("apply", node, ()))
                tasks.extend(("eval", k, ()) for k in reversed(kids))
            elif kind == "apply":
                n = len(self.operands(node))
                args = results[len(results) - n:] if n else []
                if n:
                    del results[-n:]
                results.append(self.operation(node, args))
                scopes[-1][id(node)] = results[-1]
            elif kind == "if_cond":
                cond = results.pop()
                then, other, join = self.label("if_true"), self.label("if_false"), self.label("if_join")
                self.lines.append(f"  br i1 {cond}, label %{then}, label %{other}")
                self.start_block(then)
                scopes.append({})
                tasks.append(("if_then", node, (other, join)))
                tasks.append(("eval", node.true_value, ()))  # type: ignore[attr-defined]
            elif kind == "if_then":
                other, join = state
                tasks.append(("if_else", node, (join, results.pop(), self.block)))
                self.lines.append(f"  br label %{join}")
                self.start_block(other)
                scopes[-1] = {}
                tasks.append(("eval", node.false_value, ()))  # type: ignore[attr-defined]
            else:  # if_else
                join, then_value, then_block = state
                else_value, else_block = results.pop(), self.block
                scopes.pop()
                self.lines.append(f"  br label %{join}")
                self.start_block(join)
                results.append(self.emit(f"phi {value_type(node.dtype)} [ {then_value}, %{then_block} ], "
                                         f"[ {else_value}, %{else_block} ]"))
                scopes[-1][id(node)] = results[-1]
        return results[0]

    @staticmethod
    def operands(node: PrimExpr) -> tuple[PrimExpr, ...]:
        if isinstance(node, Var):
            return ()
        if isinstance(node, BufferLoad):   # a contiguous or stride-2 load reads the ramp's base
            return index_operands(node.buffer, node.indices, (1, 2))
        return children(node)  # type: ignore[return-value]

    def operation(self, node: PrimExpr, args: list[str]) -> str:
        if isinstance(node, Var):
            if id(node) not in self.values:
                raise self.fail(f"variable %{node.name} is used outside its scope", node)
            return self.values[id(node)]
        if isinstance(node, (IntImm, FloatImm)):
            return constant(node.dtype, node.value)
        if isinstance(node, BufferLoad):
            return self.load(node, args)
        if isinstance(node, BinaryOp):
            return self.binary(node, args[0], args[1])
        if isinstance(node, Not):
            return self.emit(f"xor {value_type(node.dtype)} {args[0]}, {constant(node.dtype, 1)}")
        if isinstance(node, Select):
            cty = value_type(node.cond.dtype)
            ty = value_type(node.dtype)
            return self.emit(f"select {cty} {args[0]}, {ty} {args[1]}, {ty} {args[2]}")
        if isinstance(node, Cast):
            return self.cast(node.value.dtype, node.dtype, args[0])
        if isinstance(node, Broadcast):
            return self.splat(value_type(node.value.dtype), args[0], node.lanes)
        if isinstance(node, Ramp):
            return self.ramp(node, args[0], args[1])
        if isinstance(node, Call):
            return self.intrinsic(node, args)
        raise self.fail(f"unsupported expression {type(node).__name__}", node)

    def ramp(self, node: Ramp, base: str, stride: str) -> str:
        """`base + k * stride` in lane k: a constant vector for literal operands, one `add` of the
        splat base and the constant steps for a literal stride."""
        ty = value_type(node.dtype)
        scalar = scalar_type(node.dtype)
        dtype = element_of(node.dtype)
        step, start = _literal_int(stride), _literal_int(base)
        if step is not None:
            offsets = [_wrapped(k * step, dtype) for k in range(node.lanes)]
            if start is not None:
                return "<" + ", ".join(f"{scalar} {_wrapped(start + k, dtype)}" for k in offsets) + ">"
            steps = "<" + ", ".join(f"{scalar} {k}" for k in offsets) + ">"
            return self.emit(f"add {ty} {self.splat(scalar, base, node.lanes)}, {steps}")
        iota = ", ".join(f"{scalar} {k}" for k in range(node.lanes))
        steps = self.emit(f"mul {ty} {self.splat(scalar, stride, node.lanes)}, <{iota}>")
        return self.emit(f"add {ty} {self.splat(scalar, base, node.lanes)}, {steps}")

    def binary(self, node: BinaryOp, a: str, b: str) -> str:
        op, dtype = node.op, node.a.dtype
        ty = value_type(dtype)
        fmf = self.ctx.fmf
        if is_float(dtype):
            if op in ("add", "sub", "mul", "div"):
                return self.emit(f"f{op} {fmf}{ty} {a}, {b}")
            if op in _FCMP:
                return self.emit(f"fcmp {fmf}{_FCMP[op]} {ty} {a}, {b}")
            if op in ("min", "max"):
                name = f"llvm.{op}imum.{intrinsic_suffix(dtype)}"
                self.ctx.declare(name, f"declare {ty} @{name}({ty}, {ty})")
                return self.emit(f"call {fmf}{ty} @{name}({ty} {a}, {ty} {b})")
            raise self.fail(f"`{op}` on floats", node)
        unsigned = is_unsigned(dtype) or is_bool(dtype)
        if op in ("add", "sub", "mul"):
            x, y = _literal_int(a), _literal_int(b)
            if x is not None and y is not None and not is_bool(dtype):
                return constant(dtype, _wrapped({"add": x + y, "sub": x - y, "mul": x * y}[op], dtype))
            return self.emit(f"{op} {ty} {a}, {b}")
        if op in _ICMP_SIGNED:
            return self.emit(f"icmp {(_ICMP_UNSIGNED if unsigned else _ICMP_SIGNED)[op]} {ty} {a}, {b}")
        if op in ("and", "or"):
            return self.emit(f"{op} {ty} {a}, {b}")
        if op in ("min", "max"):
            if is_bool(dtype):
                return self.emit(f"{'and' if op == 'min' else 'or'} {ty} {a}, {b}")
            name = f"llvm.{'u' if unsigned else 's'}{op}.{intrinsic_suffix(dtype)}"
            self.ctx.declare(name, f"declare {ty} @{name}({ty}, {ty})")
            return self.emit(f"call {ty} @{name}({ty} {a}, {ty} {b})")
        if op in ("div", "floordiv", "floormod"):
            return self.division(node, a, b, ty, unsigned)
        if op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            return self.emit(f"{op.removeprefix('bitwise_')} {ty} {a}, {b}")
        if op in ("shift_left", "shift_right"):
            return self.shift(node, a, b, ty, unsigned)
        raise self.fail(f"unsupported operator `{op}`", node)

    def shift(self, node: BinaryOp, a: str, b: str, ty: str, unsigned: bool) -> str:
        """LLVM's shifts are poison for a count outside [0, bits); TIR's shift every bit out then
        (an arithmetic right shift by bits - 1 fills with the sign, as such a count does)."""
        dtype = node.a.dtype
        cty = self.cmp_type(dtype)
        bits = element_bytes(dtype) * 8
        in_range = self.emit(f"icmp ult {ty} {b}, {constant(dtype, bits)}")
        if node.op == "shift_right" and not unsigned:
            count = self.emit(f"select {cty} {in_range}, {ty} {b}, {ty} {constant(dtype, bits - 1)}")
            return self.emit(f"ashr {ty} {a}, {count}")
        zero = constant(dtype, 0)
        count = self.emit(f"select {cty} {in_range}, {ty} {b}, {ty} {zero}")
        shifted = self.emit(f"{'shl' if node.op == 'shift_left' else 'lshr'} {ty} {a}, {count}")
        return self.emit(f"select {cty} {in_range}, {ty} {shifted}, {ty} {zero}")

    def division(self, node: BinaryOp, a: str, b: str, ty: str, unsigned: bool) -> str:
        """Integer `/` (truncating), `floordiv`, `floormod`. A zero divisor (an error in TIR) is
        replaced by 1 and `x / -1` is computed as a negation, so neither can trap."""
        op, dtype = node.op, node.a.dtype
        known = node.b.value if isinstance(node.b, IntImm) else None
        zero, one = constant(dtype, 0), constant(dtype, 1)
        if unsigned:
            if known:
                safe = b
            else:
                is_zero = self.emit(f"icmp eq {ty} {b}, {zero}")
                safe = self.emit(f"select {self.cmp_type(dtype)} {is_zero}, {ty} {one}, {ty} {b}")
            return self.emit(f"{'urem' if op == 'floormod' else 'udiv'} {ty} {a}, {safe}")
        if known is not None and known not in (0, -1):
            safe, minus_one = b, None
        else:
            minus_one = self.emit(f"icmp eq {ty} {b}, {constant(dtype, -1)}")
            is_zero = self.emit(f"icmp eq {ty} {b}, {zero}")
            bad = self.emit(f"or {self.cmp_type(dtype)} {minus_one}, {is_zero}")
            safe = self.emit(f"select {self.cmp_type(dtype)} {bad}, {ty} {one}, {ty} {b}")
        quotient = self.emit(f"sdiv {ty} {a}, {safe}")
        if minus_one is not None:
            negated = self.emit(f"sub {ty} {zero}, {a}")
            quotient = self.emit(f"select {self.cmp_type(dtype)} {minus_one}, {ty} {negated}, {ty} {quotient}")
        if op == "div":
            return quotient
        rem = self.emit(f"srem {ty} {a}, {safe}")  # 0 when b is -1 (safe is then 1), as it should be
        cty = self.cmp_type(dtype)
        nonzero = self.emit(f"icmp ne {ty} {rem}, {zero}")
        signs = self.emit(f"xor {ty} {rem}, {b}")
        differ = self.emit(f"icmp slt {ty} {signs}, {zero}")
        adjust = self.emit(f"and {cty} {nonzero}, {differ}")
        if op == "floordiv":
            step = self.emit(f"zext {cty} {adjust} to {ty}")
            return self.emit(f"sub {ty} {quotient}, {step}")
        return self.emit(f"add {ty} {rem}, {self.emit(f'select {cty} {adjust}, {ty} {b}, {ty} {zero}')}")

    @staticmethod
    def cmp_type(dtype: str) -> str:
        return value_type(with_lanes("bool", lanes_of(dtype)))

    def cast(self, src: str, dst: str, value: str) -> str:
        s, d = value_type(src), value_type(dst)
        if element_of(src) == element_of(dst):
            return value
        if is_bool(dst):   # numpy: nonzero is True
            if is_float(src):
                return self.emit(f"fcmp une {s} {value}, {constant(src, 0)}")
            return self.emit(f"icmp ne {s} {value}, {constant(src, 0)}")
        src_float, dst_float = is_float(src), is_float(dst)
        if src_float and dst_float:
            wider = element_bytes(dst) > element_bytes(src)
            if element_bytes(dst) == element_bytes(src):   # half <-> bfloat: through float
                mid = value_type(with_lanes("float32", lanes_of(src)))
                return self.emit(f"fptrunc {mid} {self.emit(f'fpext {s} {value} to {mid}')} to {d}")
            return self.emit(f"{'fpext' if wider else 'fptrunc'} {s} {value} to {d}")
        unsigned_src = is_unsigned(src) or is_bool(src)
        if dst_float:
            return self.emit(f"{'uitofp' if unsigned_src else 'sitofp'} {s} {value} to {d}")
        if src_float:
            # Out-of-range conversions are poison in LLVM; freeze keeps them to one unknown value.
            raw = self.emit(f"{'fptoui' if is_unsigned(dst) else 'fptosi'} {s} {value} to {d}")
            return self.emit(f"freeze {d} {raw}")
        sbits, dbits = element_bytes(src) * 8, element_bytes(dst) * 8
        if is_bool(src):
            sbits = 1
        if dbits == sbits:
            return value
        if dbits < sbits:
            return self.emit(f"trunc {s} {value} to {d}")
        return self.emit(f"{'zext' if unsigned_src else 'sext'} {s} {value} to {d}")

    def intrinsic(self, node: Call, args: list[str]) -> str:
        dtype = node.dtype
        ty = value_type(dtype)
        fmf = self.ctx.fmf
        name = node.name
        if name == "dot_u8s8":
            return self.dot_u8s8(lanes_of(dtype), args)
        if name in _INLINE_FLOAT32 and scalar_type(dtype) in ("float", "half", "bfloat"):
            return self.inline_float32(name, dtype, args[0])
        if name == "pow" and (n := _small_integer_exponent(node.args[1])) is not None:
            # pow(x, 3) is a libm call per lane unless fast-math lets LLVM rewrite it (GPT-2's GELU
            # writes Pow(x, 3)); x*x is the correctly rounded square, x*x*x within 1 ulp of the
            # exact cube, with the same infinities, NaNs and signed zeros.
            square = self.emit(f"fmul {fmf}{ty} {args[0]}, {args[0]}")
            return square if n == 2 else self.emit(f"fmul {fmf}{ty} {square}, {args[0]}")
        if name in _LLVM_INTRINSICS:
            full = f"llvm.{_LLVM_INTRINSICS[name]}.{intrinsic_suffix(dtype)}"
            self.ctx.declare(full, f"declare {ty} @{full}({', '.join([ty] * len(args))})")
            return self.emit(f"call {fmf}{ty} @{full}({', '.join(f'{ty} {a}' for a in args)})")
        one = constant(dtype, 1.0)
        if name == "rsqrt":
            root = self.intrinsic(Call("sqrt", node.args), args)
            return self.emit(f"fdiv {fmf}{ty} {one}, {root}")
        if name == "sigmoid":   # float64: 1 / (1 + exp(-x)), as the interpreter computes it
            neg = self.emit(f"fneg {fmf}{ty} {args[0]}")
            e = self.intrinsic(Call("exp", node.args), [neg])
            return self.emit(f"fdiv {fmf}{ty} {one}, {self.emit(f'fadd {fmf}{ty} {one}, {e}')}")
        if name == "fmod":   # C's fmod
            return self.emit(f"frem {fmf}{ty} {args[0]}, {args[1]}")
        if name in _LIBM:
            return self.libm(name, dtype, args[0])
        raise self.fail(f"unsupported intrinsic `{name}`", node)

    def dot_u8s8(self, lanes: int, args: list[str]) -> str:
        """`vpdpbusd` where the target has it at this width; otherwise the bytes split into
        16-bit lanes by masks and shifts (even bytes, odd bytes; the signed ones sign-extended)
        and two pairwise 16-bit multiply-adds, the pattern LLVM selects `pmaddwd` for on x86."""
        acc, a, b = args
        vec = f"<{lanes} x i32>"
        if lanes * 32 == self.ctx.vnni_bits:
            full = f"llvm.x86.avx512.vpdpbusd.{lanes * 32}"
            self.ctx.declare(full, f"declare {vec} @{full}({vec}, {vec}, {vec})")
            return self.emit(f"call {vec} @{full}({vec} {acc}, {vec} {a}, {vec} {b})")
        if lanes == 1:
            acc, a, b = (self.emit(f"bitcast i32 {v} to <1 x i32>") for v in args)
        half = f"<{2 * lanes} x i16>"

        def splat16(value: int) -> str:
            return "<" + ", ".join([f"i16 {value}"] * (2 * lanes)) + ">"
        a16, b16 = (self.emit(f"bitcast {vec} {v} to {half}") for v in (a, b))
        a_even = self.emit(f"and {half} {a16}, {splat16(255)}")
        a_odd = self.emit(f"lshr {half} {a16}, {splat16(8)}")
        b_even = self.emit(f"ashr {half} {self.emit(f'shl {half} {b16}, {splat16(8)}')}, {splat16(8)}")
        b_odd = self.emit(f"ashr {half} {b16}, {splat16(8)}")
        total = self.emit(f"add {vec} {self.pairwise_madd(lanes, a_even, b_even)}, "
                          f"{self.pairwise_madd(lanes, a_odd, b_odd)}")
        out = self.emit(f"add {vec} {total}, {acc}")
        return self.emit(f"bitcast <1 x i32> {out} to i32") if lanes == 1 else out

    def pairwise_madd(self, lanes: int, x: str, y: str) -> str:
        """Lane j: x[2j]·y[2j] + x[2j+1]·y[2j+1] of two <2·lanes x i16> vectors, in i32."""
        half, wide, vec = f"<{2 * lanes} x i16>", f"<{2 * lanes} x i32>", f"<{lanes} x i32>"
        product = self.emit(f"mul {wide} {self.emit(f'sext {half} {x} to {wide}')}, "
                            f"{self.emit(f'sext {half} {y} to {wide}')}")
        even, odd = ("<" + ", ".join(f"i32 {i}" for i in range(k, 2 * lanes, 2)) + ">" for k in (0, 1))
        return self.emit(f"add {vec} {self.emit(f'shufflevector {wide} {product}, {wide} poison, <{lanes} x i32> {even}')}, "
                         f"{self.emit(f'shufflevector {wide} {product}, {wide} poison, <{lanes} x i32> {odd}')}")

    def inline_float32(self, name: str, dtype: str, value: str) -> str:
        """`exp`/`tanh` from `vector_math` (half and bfloat through float, as libm would be)."""
        lanes = lanes_of(dtype)
        wide = with_lanes("float32", lanes)
        narrow = element_of(dtype) != "float32"
        if narrow:
            value = self.emit(f"fpext {value_type(dtype)} {value} to {value_type(wide)}")
        result = getattr(Float32Math(self.emit, self.ctx.declare, lanes), name)(value)
        if narrow:
            result = self.emit(f"fptrunc {value_type(wide)} {result} to {value_type(dtype)}")
        return result

    def libm(self, base: str, dtype: str, value: str) -> str:
        """A one-argument libm function lane by lane (half/bfloat via float)."""
        lanes = lanes_of(dtype)
        scalar = scalar_type(dtype)
        compute = "double" if scalar == "double" else "float"
        fname = base if compute == "double" else base + "f"
        self.ctx.declare(fname, f"declare {compute} @{fname}({compute})")
        out = "poison"
        for k in range(lanes):
            lane = value if lanes == 1 else self.emit(f"extractelement <{lanes} x {scalar}> {value}, i64 {k}")
            if scalar != compute:
                lane = self.emit(f"fpext {scalar} {lane} to {compute}")
            r = self.emit(f"call {compute} @{fname}({compute} {lane})")
            if scalar != compute:
                r = self.emit(f"fptrunc {compute} {r} to {scalar}")
            if lanes == 1:
                return r
            out = self.emit(f"insertelement <{lanes} x {scalar}> {out}, {scalar} {r}, i64 {k}")
        return out


def primfunc_to_llvm(ctx: ModuleContext, func: PrimFunc, symbol: str, param_align: list[int] | None = None,
                     noalias: bool = True, linkage: str = "internal") -> str:
    """The `define` of one kernel (declarations, metadata and parallel-loop workers go to `ctx`;
    attributes are `#0`). Without `param_align`, a buffer's own `align` (or its element size) is
    assumed. Which loops are parallel is the driver's choice (`irtool.driver.parallelize_kernels`)."""
    aligns = param_align if param_align is not None else [max(b.align, element_bytes(b.dtype)) for b in func.params]
    return FunctionEmitter(ctx, func, symbol, aligns, noalias, linkage).generate()
