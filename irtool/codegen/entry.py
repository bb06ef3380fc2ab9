"""The lowered `main` → `int32_t <prefix>_run(const struct inputs*, struct outputs*, void* workspace)`
and `int32_t <prefix>_init(void)`, and the whole LLVM module around them (kernels, constants,
the workspace size).

`main` runs AOT style: its steps (liveness order) become straight-line calls of the kernels, with
every intermediate tensor at its memory-plan offset in the caller's workspace (which `_run`
rounds up to 64 bytes: the caller's pointers need only element alignment). The plan is read
from `main` (written by `plan-memory`, or by the build driver, `irtool.driver`, when the module
had none); each storage of the plan gets its own 64-byte-aligned region of the one workspace.
A kernel output that is also a result of `main` is written straight into the caller's output
buffer; other results (parameters, constants, hoisted tensors, a tensor returned twice) are copied
there at the end. Constant tensors become 64-byte-aligned global constant arrays, so one object
file is a whole model.

Steps that compute only from constants (*hoisted*, see `irtool.analysis.liveness`: the zoo's
`full(...)` weights and what is derived from them) run once, in `<prefix>_init`, into a static
zero-initialised pool (`.bss`: the object file stays small); `_run` calls `_init` on its first
call. Pool tensors read only by other hoisted steps share space once their readers have run.
"""

from __future__ import annotations

import binascii
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from irtool.analysis.liveness import compute_liveness
from irtool.analysis.steps import ALIAS, CALL, COPY, Liveness, Step, flatten_type
from irtool.analysis.memory_plan import INPUT
from irtool.analysis.plan_attrs import read_plan
from irtool.analysis.typecheck import infer_types
from irtool.target import TargetOptions
from irtool.codegen.thread_pool import EXPORTED_RUNTIME_TEXT, RUNTIME_DECLARATION, with_sections
from irtool.codegen.tir_to_llvm import STATUS_MISALIGNED, STATUS_OK, ModuleContext, primfunc_to_llvm
from irtool.codegen.types import element_bytes
from irtool.core.span import Span
from irtool.ir.expr import Function, GlobalVar, Op, Var
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.ir.types import TensorType, Type
from irtool.ir.signature import num_outputs
from irtool.lower.module import is_lowered
from irtool.core.diagnostics import DiagnosticError

ALIGN = 64

# Where a tensor of `main` lives: the caller's input or output buffers, a constant global, the
# caller's workspace, or the static pool of hoisted tensors.
INPUTS, OUTPUTS, CONSTANTS, WORKSPACE, POOL = "in", "out", "const", "ws", "pool"


@dataclass(frozen=True)
class TensorSpec:
    """One field of the inputs or outputs struct."""

    field: str      # the C identifier
    name: str       # the name users pass in Python (`x`, `t.0`, `output0`)
    shape: tuple[int, ...]   # -1 for a dynamic dimension (`?`)
    dtype: str

    @property
    def dynamic(self) -> bool:
        """Whether the tensor has a `?`: its field is followed by a shape field (`<field>_shape`)."""
        return any(d < 0 for d in self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass
class ABI:
    """What callers of `<prefix>_init` and `<prefix>_run` must know (the header states the same)."""

    prefix: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    workspace_bytes: int
    result_type: Type | None
    assert_messages: list[str] = field(default_factory=list)
    pool_bytes: int = 0   # the static pool `_init` fills (hoisted tensors)


@dataclass
class GeneratedModule:
    ir: str
    prefix: str
    abi: ABI | None   # None for a module without `main` (kernels only, exported by name)
    kernels: list[str]
    external_constants: dict[str, np.ndarray] = field(default_factory=dict)  # symbol -> data
    layout: MainLayout | None = None
    # Without embedded constants (the JIT), the pool is external too: the runtime binds this
    # symbol to memory of its own (numpy's, which asks the kernel for huge pages).
    pool_symbol: str | None = None
    # With `split`: the same code as separate LLVM modules (the entry functions first, then
    # modules of kernels), to be compiled in parallel and linked by the JIT; `ir` is their text joined.
    chunk_irs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Location:
    """`region` (INPUTS, OUTPUTS, CONSTANTS, WORKSPACE or POOL), `index` (the input or output slot,
    the constant's tensor; 0 otherwise), the byte offset in it, and the alignment the region's
    start guarantees: 64 where the module allocates (or realigns) the memory, only the element
    size for the caller's input and output buffers (the C ABI asks for natural alignment)."""

    region: str
    index: int
    offset: int
    base_align: int = ALIGN

    @property
    def align(self) -> int:
        """The alignment this location guarantees."""
        return min(self.base_align, self.offset & -self.offset if self.offset else ALIGN)


@dataclass
class MainLayout:
    """Where every tensor of `main` is while `_init` and `_run` execute: the generated code and
    the per-kernel profiler (`irtool.runtime.profile`) both place tensors by it."""

    live: Liveness
    locations: dict[int, Location]
    direct: dict[int, int]   # tensor -> the output slot a kernel writes it into directly
    workspace_bytes: int
    pool_bytes: int

    def run_steps(self) -> list[Step]:
        """The steps `_run` executes (kernels and copies that are not hoisted)."""
        return [s for s in self.live.steps if s.kind != ALIAS and not s.hoisted]

    def init_steps(self) -> list[Step]:
        """The steps `_init` executes once."""
        return [s for s in self.live.steps if s.hoisted]

    def copied_results(self) -> list[tuple[int, int]]:
        """(output slot, tensor) of the results `_run` copies at its end."""
        return [(k, t) for k, t in enumerate(self.live.outputs) if self.direct.get(t) != k]


def sanitize(name: str) -> str:
    """A C identifier for a name (non-identifier characters → `_`)."""
    text = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return text if text and not text[0].isdigit() else "_" + text


def _align_up(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _encode_bytes(data: bytes) -> str:
    """`c"\\00\\01..."`: every byte as a hex escape (vectorised, for large weights)."""
    if not data:
        return ""
    hexed = np.frombuffer(binascii.hexlify(data), np.uint8).reshape(-1, 2)
    out = np.empty((hexed.shape[0], 3), np.uint8)
    out[:, 0] = ord("\\")
    out[:, 1:] = hexed
    return out.tobytes().decode("ascii")


def constant_global(stem: str, array: np.ndarray, external: dict[str, np.ndarray] | None) -> tuple[str, str]:
    """(symbol, definition) of a constant tensor: embedded bytes (`@<stem>`), or with `external`
    an external global named by its content, its data recorded in `external` for the JIT to bind."""
    data = np.ascontiguousarray(array)
    if external is None:
        return stem, (f"@{stem} = internal unnamed_addr constant [{data.nbytes} x i8] "
                      f"c\"{_encode_bytes(data.tobytes())}\", align {ALIGN}")
    # Named by content, so that a cached engine never binds another module's data.
    digest = hashlib.sha256(data.tobytes()).hexdigest()[:16]
    name = f"{stem}_{data.dtype}_{digest}"
    external[name] = data
    return name, f"@{name} = external global [{data.nbytes} x i8], align {ALIGN}"


def misaligned(emit: Callable[[str], str], pointers: list[str], specs: list[TensorSpec]) -> str:
    """The `i1` that is true when one of the caller's buffers is not aligned to its element size
    (`false` when every element is a byte), computed with `emit`."""
    bad = "false"
    for ptr, spec in zip(pointers, specs):
        if element_bytes(spec.dtype) > 1:
            mask = element_bytes(spec.dtype) - 1
            low = emit(f"and i64 {emit(f'ptrtoint ptr {ptr} to i64')}, {mask}")
            bad = emit(f"or i1 {bad}, {emit(f'icmp ne i64 {low}, 0')}")
    return bad


def tensor_specs(params: list[Var], types: list[list[TensorType]]) -> list[TensorSpec]:
    """The fields of the inputs struct: one per tensor of each parameter (`t.0`, `t.1`, ... for a
    tuple), named by the parameter, made unique as C identifiers."""
    specs: list[TensorSpec] = []
    used: set[str] = set()
    for param, tensors in zip(params, types):
        many = len(tensors) > 1
        for i, ttype in enumerate(tensors):
            name = param.name_hint + (f".{i}" if many else "")
            c_name = sanitize(name)
            while c_name in used:
                c_name += "_"
            used.add(c_name)
            specs.append(TensorSpec(c_name, name, _dims(ttype), ttype.dtype))
    return specs


def output_specs(result: Type | None, span: Span | None) -> list[TensorSpec]:
    """The fields of the outputs struct, from `main`'s result type (a view shares its source's
    tensor but not its shape)."""
    return [TensorSpec(f"output{k}", f"output{k}", _dims(t), t.dtype)
            for k, t in enumerate(flatten_type(result, span))]


def _dims(t: TensorType) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else -1 for d in t.shape)


def plan_pool(live: Liveness) -> tuple[dict[int, int], int]:
    """Byte offsets of the hoisted tensors in the pool, and its size. A hoisted tensor read by a
    step of `_run` (or returned) lives for good; one read only by hoisted steps is dead after its
    last reader, and a later hoisted tensor may take its place (first fit, largest first)."""
    hoisted = live.hoisted()
    forever = len(live.steps)
    last = {t.index: t.step for t in hoisted}
    for step in live.steps:
        if step.kind == ALIAS:  # a view: its readers read the same tensor
            continue
        for t in step.inputs:
            if t in last:
                last[t] = max(last[t], step.index if step.hoisted else forever)
    for t in live.outputs:
        if t in last:
            last[t] = forever
    placed: list[tuple[int, int, int, int]] = []   # offset, end, first step, last step
    offsets: dict[int, int] = {}
    for t in sorted(hoisted, key=lambda t: (-t.nbytes, t.index)):
        size, first, end_step = _align_up(t.nbytes), t.step, last[t.index]
        at = 0
        for lo, hi in sorted((o, e) for o, e, f, lst in placed if f <= end_step and first <= lst):
            if at + size <= lo:
                break
            at = max(at, hi)
        offsets[t.index] = at
        placed.append((at, at + size, first, end_step))
    return offsets, max((e for _, e, _, _ in placed), default=0)


def direct_outputs(live: Liveness) -> dict[int, int]:
    """Results of `main` that a kernel of `_run` writes straight into the caller's output buffers
    (tensor -> output number): they take no workspace."""
    direct: dict[int, int] = {}
    for k, t in enumerate(live.outputs):
        if live.tensors[t].kind == CALL and t not in direct:
            direct[t] = k
    return direct


def layout_main(mod: IRModule) -> MainLayout:
    """The liveness of `main` (type checked) and the location of each of its tensors."""
    live = compute_liveness(mod, "main")
    direct = direct_outputs(live)
    plan = read_plan(live)
    if plan is None:
        raise DiagnosticError("irtool-llc: `main` has no memory plan; code generation takes a lowered, planned "
                              "module (`irtool.driver.prepare` plans one)", live.func.span)
    bases: dict[int, int] = {}
    ws_bytes = 0
    for s in plan.storages:
        if s.kind != INPUT:
            bases[s.index] = ws_bytes
            ws_bytes += _align_up(s.nbytes)
    locations: dict[int, Location] = {}
    for k, t in enumerate(t for ts in live.params for t in ts):
        locations[t] = Location(INPUTS, k, 0, element_bytes(live.tensors[t].ttype.dtype))
    for t in live.constants:
        locations[t] = Location(CONSTANTS, t, 0)
    for t, k in direct.items():
        locations[t] = Location(OUTPUTS, k, 0, element_bytes(live.tensors[t].ttype.dtype))
    for t, (storage, offset) in plan.placement.items():
        if live.tensors[t].kind == CALL and t not in locations:
            locations[t] = Location(WORKSPACE, 0, bases[storage] + offset)
    pool, pool_bytes = plan_pool(live)
    for t, offset in pool.items():
        locations[t] = Location(POOL, 0, offset)
    return MainLayout(live, locations, direct, ws_bytes, pool_bytes)


class _EntryBuilder:
    def __init__(self, mod: IRModule, prefix: str, ctx: ModuleContext,
                 external_constants: dict[str, np.ndarray] | None) -> None:
        self.mod = mod
        self.external_constants = external_constants
        self.prefix = prefix
        self.ctx = ctx
        self.lines: list[str] = []
        self.globals: list[str] = []
        self.temps = 0
        self.constant_symbols: dict[int, str] = {}
        # kernel name -> per-parameter alignment guaranteed by every call site
        self.kernel_align: dict[str, list[int]] = {}
        self.kernel_may_alias: set[str] = set()
        self.run_kernels: set[str] = set()   # kernels `_run` calls (the others only run in `_init`)
        self.in_init = False
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []

    def emit(self, text: str) -> str:
        self.temps += 1
        self.lines.append(f"  %e{self.temps} = {text}")
        return f"%e{self.temps}"

    def build(self, main: Function) -> tuple[str, ABI, MainLayout]:
        infer_types(self.mod)
        layout = layout_main(self.mod)
        live = layout.live
        inputs = tensor_specs(list(main.params), [[live.tensors[t].ttype for t in ts] for ts in live.params])
        outputs = output_specs(main.body.checked_type, main.span)
        self.inputs, self.outputs = inputs, outputs
        self.define_constants(live)
        init_text = self.init_function(layout)
        run_text = self.run_function(layout)
        # What the caller allocates: the plan, and the slack `_run` may skip to align it.
        ws_bytes = layout.workspace_bytes + ALIGN - 1 if layout.workspace_bytes else 0
        self.globals.append(f"@{self.prefix}_workspace_size = constant i64 {ws_bytes}, align 8")
        abi = ABI(self.prefix, inputs, outputs, ws_bytes, main.body.checked_type, pool_bytes=layout.pool_bytes)
        return init_text + run_text, abi, layout

    def define_constants(self, live: Liveness) -> None:
        for t, const in live.constants.items():
            name, text = constant_global(f"{self.prefix}_c{t}", const.data, self.external_constants)
            self.globals.append(text)
            self.constant_symbols[t] = name

    @property
    def pool(self) -> str:
        """The pool's symbol: `<prefix>_pool`, or in the JIT `<prefix>.pool` (made unique later)."""
        return f"@{self.prefix}_pool" if self.external_constants is None else f"@{self.prefix}.pool"

    def static_address(self, loc: Location) -> str:
        """The address of a constant or pool location, as a constant expression."""
        if loc.region == CONSTANTS:
            return f"@{self.constant_symbols[loc.index]}"
        base = self.pool
        return f"getelementptr inbounds (i8, ptr {base}, i64 {loc.offset})" if loc.offset else base

    def init_function(self, layout: MainLayout) -> str:
        """`<prefix>_init`: the hoisted steps, once (an acquire/release flag marks them done)."""
        p = self.prefix
        head = f"define i32 @{p}_init() #0 {{"
        steps = layout.init_steps()
        if not steps:
            return "\n".join([head, "entry:", f"  ret i32 {STATUS_OK}", "}", ""])
        storage = "internal global" if self.external_constants is None else "external global"
        initial = " zeroinitializer" if self.external_constants is None else ""
        self.globals += [f"{self.pool} = {storage} [{layout.pool_bytes} x i8]{initial}, align {ALIGN}",
                         f"@{p}_ready = internal global i8 0, align 1"]
        self.lines = ["entry:"]
        done = self.emit(f"load atomic i8, ptr @{p}_ready acquire, align 1")
        self.lines += [f"  br i1 {self.emit(f'icmp ne i8 {done}, 0')}, label %ready, label %body",
                       "ready:", f"  ret i32 {STATUS_OK}", "body:"]
        pointer = {t: self.static_address(loc) for t, loc in layout.locations.items()
                   if loc.region in (CONSTANTS, POOL)}
        self.in_init = True
        for step in steps:
            self.kernel_call(step, layout, pointer)
        self.in_init = False
        self.lines += [f"  store atomic i8 1, ptr @{p}_ready release, align 1", f"  ret i32 {STATUS_OK}"]
        return "\n".join([head, *self.lines, "}", ""])

    def run_function(self, layout: MainLayout) -> str:
        p = self.prefix
        live = layout.live
        self.lines = ["entry:"]
        in_ptrs = []
        for k in range(len(self.inputs)):
            slot = self.emit(f"getelementptr inbounds ptr, ptr %in, i64 {k}")
            in_ptrs.append(self.emit(f"load ptr, ptr {slot}, align 8"))
        out_ptrs = []
        for k in range(len(self.outputs)):
            slot = self.emit(f"getelementptr inbounds ptr, ptr %out, i64 {k}")
            out_ptrs.append(self.emit(f"load ptr, ptr {slot}, align 8"))
        # The caller's buffers need only their element alignment (a byte needs none).
        bad = misaligned(self.emit, in_ptrs + out_ptrs, self.inputs + self.outputs)
        if bad != "false":
            self.lines += [f"  br i1 {bad}, label %misaligned, label %body", "misaligned:",
                           f"  ret i32 {STATUS_MISALIGNED}", "body:"]
        # Any workspace pointer will do: `_run` rounds it up to 64 bytes itself (the header's
        # size includes the slack), so workspace tensors keep their 64-byte alignment.
        workspace = "%ws"
        if layout.workspace_bytes:
            self.ctx.declare("llvm.ptrmask.p0.i64", "declare ptr @llvm.ptrmask.p0.i64(ptr, i64)")
            end = self.emit(f"getelementptr i8, ptr %ws, i64 {ALIGN - 1}")
            workspace = self.emit(f"call ptr @llvm.ptrmask.p0.i64(ptr {end}, i64 {-ALIGN})")
        if layout.init_steps():
            done = self.emit(f"load atomic i8, ptr @{p}_ready acquire, align 1")
            self.lines.append(f"  br i1 {self.emit(f'icmp eq i8 {done}, 0')}, label %init, label %run")
            self.lines.append("init:")
            status = self.emit(f"call i32 @{p}_init()")
            self.lines += [f"  br i1 {self.emit(f'icmp ne i32 {status}, 0')}, label %init_failed, label %run",
                           "init_failed:", f"  ret i32 {status}", "run:"]

        pointer: dict[int, str] = {}
        for t, loc in layout.locations.items():
            if loc.region == INPUTS:
                pointer[t] = in_ptrs[loc.index]
            elif loc.region == OUTPUTS:
                pointer[t] = out_ptrs[loc.index]
            elif loc.region == WORKSPACE:
                pointer[t] = self.emit(f"getelementptr inbounds i8, ptr {workspace}, i64 {loc.offset}") \
                    if loc.offset else workspace
            else:
                pointer[t] = self.static_address(loc)
        for step in layout.run_steps():
            if step.kind == COPY:
                for src, dst in zip(step.inputs, step.outputs):
                    self.memcpy(pointer[dst], layout.locations[dst].align, pointer[src],
                                layout.locations[src].align, live.tensors[dst].nbytes)
            else:
                self.kernel_call(step, layout, pointer)
        for k, t in layout.copied_results():
            self.memcpy(out_ptrs[k], element_bytes(self.outputs[k].dtype), pointer[t], layout.locations[t].align,
                        live.tensors[t].nbytes)
        self.lines.append(f"  ret i32 {STATUS_OK}")
        head = (f"define i32 @{p}_run(ptr noalias nocapture readonly %in, "
                f"ptr noalias nocapture readonly %out, ptr %ws) #0 {{")
        return "\n".join([head, *self.lines, "}", ""])

    def memcpy(self, dst: str, dst_align: int, src: str, src_align: int, nbytes: int) -> None:
        if nbytes == 0:
            return
        self.ctx.declare("llvm.memcpy.p0.p0.i64", "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")
        self.lines.append(f"  call void @llvm.memcpy.p0.p0.i64(ptr align {dst_align} {dst}, "
                          f"ptr align {src_align} {src}, i64 {nbytes}, i1 false)")

    def kernel_call(self, step: Step, layout: MainLayout, pointer: dict[int, str]) -> None:
        name, _ = step_kernel(self.mod, step)
        if not self.in_init:
            self.run_kernels.add(name)
        tensors = list(step.inputs) + list(step.outputs)
        locs = [layout.locations[t] for t in tensors]
        aligns = [loc.align for loc in locs]
        old = self.kernel_align.get(name)
        self.kernel_align[name] = aligns if old is None else [min(a, b) for a, b in zip(old, aligns)]
        if step_aliases(step, layout):
            self.kernel_may_alias.add(name)   # an in-place plan: the kernel must not claim noalias
        args = ", ".join(f"ptr {pointer[t]}" for t in tensors)
        result = self.emit(f"call i32 @{self.prefix}_{sanitize(name)}({args})")
        failed = self.emit(f"icmp ne i32 {result}, 0")
        self.temps += 1
        ok = f"ok{self.temps}"
        fail = f"fail{self.temps}"
        self.lines += [f"  br i1 {failed}, label %{fail}, label %{ok}", f"{fail}:", f"  ret i32 {result}", f"{ok}:"]


def step_aliases(step: Step, layout: MainLayout) -> bool:
    """Whether an output of a kernel step overlaps another of its tensors (an in-place plan)."""
    live = layout.live
    tensors = list(step.inputs) + list(step.outputs)
    for t in step.outputs:
        loc = layout.locations[t]
        end = loc.offset + live.tensors[t].nbytes
        for u in tensors:
            other = layout.locations[u]
            if u != t and (other.region, other.index) == (loc.region, loc.index) \
                    and other.offset < end and loc.offset < other.offset + live.tensors[u].nbytes:
                return True
    return False


def aliasing_kernels(mod: IRModule, layout: MainLayout) -> set[str]:
    """The kernels some step of `main` calls with overlapping buffers: they may not claim
    `noalias`, and the dependence test (which assumes distinct buffers) does not hold for them."""
    return {step_kernel(mod, step)[0] for step in [*layout.init_steps(), *layout.run_steps()]
            if step.kind != COPY and step_aliases(step, layout)}


def step_kernel(mod: IRModule, step: Step) -> tuple[str, PrimFunc]:
    """The primfn a KERNEL step of a lowered `main` calls (its name and definition), checked
    against the step's tensors."""
    call = step.call
    target = call.args[0] if isinstance(call.op, Op) and call.op.name == "call_lowered" and call.args else None
    func = mod.functions.get(target.name_hint) if isinstance(target, GlobalVar) else None
    if not isinstance(func, PrimFunc):
        raise DiagnosticError(f"irtool-llc: `main` must only call lowered kernels (`call_lowered` of a primfn), "
                              f"reshape views and device copies; this step runs `{step.label}` — run the "
                              f"`lower` pipeline first", call.span)
    name = target.name_hint  # type: ignore[union-attr]
    n_tensors = len(step.inputs) + len(step.outputs)
    if n_tensors != len(func.params) or num_outputs(func) != len(step.outputs):
        raise DiagnosticError(f"irtool-llc: @{name} takes {len(func.params)} buffers "
                              f"({num_outputs(func)} outputs) but is called with {n_tensors}", call.span)
    return name, func


# Attribute groups of the kernels `main` calls: never inlined into `_init`/`_run` (inlining gains
# nothing there and makes one huge function, slow to optimise), and the kernels only `_init` runs,
# once, optimised for size: fully unrolled fill loops of weights took seconds of code generation.
RUN_KERNEL, INIT_KERNEL = "#1", "#2"


def _attribute_groups(base: str) -> list[str]:
    return [f"attributes #0 = {{ {base} }}", f"attributes {RUN_KERNEL} = {{ {base} noinline }}",
            f"attributes {INIT_KERNEL} = {{ {base} noinline optsize }}"]


def _with_attributes(define: str, group: str) -> str:
    """A kernel's text with its `define` line (the first) using attribute group `group`."""
    head, sep, rest = define.partition("\n")
    return head.replace(") #0 {", f") {group} {{") + sep + rest


# Kernels go to modules of about this much IR text: small enough that the modules keep both
# workers busy to the end and the first starts compiling while the rest are generated, large
# enough that LLVM's fixed cost per module (about 2 ms) stays small.
CHUNK_BYTES = 128 * 1024


class _Chunker:
    """Kernel texts gathered, in the order they are generated, into module texts of about
    `CHUNK_BYTES` each; each is handed to `sink` as soon as it is full (a worker process can
    compile it while the rest are generated). Every module declares what the kernels so far
    declared and the thread pool's entry when there is a parallel loop (unused declarations are
    dropped), and carries the loop metadata its kernels made (numbered module-wide)."""

    def __init__(self, header: str, ctx: ModuleContext, attributes: list[str],
                 sink: Callable[[str], None] | None) -> None:
        self.header, self.ctx, self.attributes, self.sink = header, ctx, attributes, sink
        self.texts: list[str] = []
        self.kernels: list[str] = []
        self.size = 0
        self.metadata_from = len(ctx.metadata)

    def add(self, kernel: str) -> None:
        self.kernels.append(kernel)
        self.size += len(kernel)
        if self.size >= CHUNK_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.kernels:
            return
        ctx = self.ctx
        pool = [RUNTIME_DECLARATION] if ctx.has_runtime else []
        text = "\n".join([self.header, "", *pool, *self.kernels, *sorted(ctx.declarations.values()), "",
                          *self.attributes, "", *ctx.metadata[self.metadata_from:], ""])
        self.texts.append(text)
        self.kernels, self.size, self.metadata_from = [], 0, len(ctx.metadata)
        if self.sink is not None:
            self.sink(text)


def _entry_text(header: str, globals_: list[str], arity: dict[str, int], entry_text: str, tail: list[str],
                threaded: bool) -> str:
    """The entry module: `_init` and `_run` declaring the kernels, and the thread pool if `threaded`."""
    declares = [f"declare i32 @{symbol}({', '.join(['ptr'] * n)})" for symbol, n in sorted(arity.items())]
    pool = [EXPORTED_RUNTIME_TEXT] if threaded else []
    return "\n".join([header, "", *globals_, "", *declares, "", entry_text, *pool, *tail])


def generate_module(mod: IRModule, prefix: str, options: TargetOptions,
                    embed_constants: bool = True, export_kernels: bool = False, split: bool = False,
                    sink: Callable[[str], None] | None = None) -> GeneratedModule:
    """The LLVM IR text of a lowered module: kernels, `<prefix>_init`, `<prefix>_run`, constants,
    workspace size. A module without `main` gives its kernels as exported functions
    `<prefix>_<name>`. With `embed_constants=False` constants are external globals whose data is
    returned in `external_constants` (the JIT binds them to the arrays: no weights pass through IR
    text). `export_kernels` gives `main`'s kernels external linkage too (the profiler calls them).
    `split` also splits a module with `main` into the entry functions and modules of kernels of
    about `CHUNK_BYTES` of text each (`chunk_irs`; kernels get external linkage, the thread pool
    stays with the entry), handing each kernel module to `sink` as soon as it is complete."""
    main = mod.functions.get("main")
    if not is_lowered(mod):
        raise DiagnosticError("irtool-llc: code generation takes a lowered module; `main` still calls operators "
                              "(`irtool.driver.prepare` lowers it)", getattr(main, "span", None))
    ctx = ModuleContext(fast_math=options.fast_math, threads=options.threads, vnni_bits=options.vnni_bits())
    prefix = sanitize(prefix)
    if isinstance(main, Function):
        from irtool.codegen.functions import generate_functions_module, is_dataflow_main  # builds on this module
        if not is_dataflow_main(mod):
            return generate_functions_module(mod, prefix, options, ctx, embed_constants, export_kernels)
    external: dict[str, np.ndarray] = {}
    header = f"; irtool-llc module `{prefix}`"
    attributes = _attribute_groups(options.function_attributes())
    chunker = _Chunker(header, ctx, attributes, sink) if split and main is not None else None
    kernels = {n: f for n, f in mod.functions.items() if isinstance(f, PrimFunc)}
    parts: list[str] = []
    kernel_defines: dict[str, str] = {}   # symbol -> `define` text, for main's kernels
    arity: dict[str, int] = {}
    entry_text = ""
    abi: ABI | None = None
    layout: MainLayout | None = None
    if main is not None:
        if not isinstance(main, Function):
            raise DiagnosticError("irtool-llc: `main` must be a Relay function", getattr(main, "span", None))
        builder = _EntryBuilder(mod, prefix, ctx, None if embed_constants else external)
        entry_text, abi, layout = builder.build(main)
        linkage = "" if export_kernels or split else "internal"
        for name in sorted(builder.kernel_align):
            symbol = f"{prefix}_{sanitize(name)}"
            before = len(ctx.functions)
            define = primfunc_to_llvm(ctx, kernels[name], symbol, builder.kernel_align[name],
                                      name not in builder.kernel_may_alias, linkage)
            # The kernel's parallel-loop workers travel with it (internal, so into its chunk).
            workers = ctx.functions[before:]
            del ctx.functions[before:]
            kernel_defines[symbol] = "\n".join([_with_attributes(define, RUN_KERNEL if name in builder.run_kernels
                                                                 else INIT_KERNEL), *workers])
            arity[symbol] = len(kernels[name].params)
            if chunker is not None:
                chunker.add(kernel_defines[symbol])
        if ctx.has_runtime:   # threaded: each inference is a section of the pool (its workers awake)
            entry_text = with_sections(entry_text, f"{prefix}_run")
        parts += [*kernel_defines.values(), entry_text]
        globals_ = builder.globals
        used = sorted(builder.kernel_align)
    else:
        if not kernels:
            raise DiagnosticError("irtool-llc: the module has neither `main` nor any primfn to compile")
        for name in sorted(kernels):
            parts.append(primfunc_to_llvm(ctx, kernels[name], f"{prefix}_{sanitize(name)}", None, True, ""))
        globals_ = []
        used = sorted(kernels)
    if abi is not None:
        abi.assert_messages = list(ctx.assert_messages)
    tail = [*sorted(ctx.declarations.values()), "", *attributes, "", *ctx.metadata, ""]
    if chunker is not None:
        chunker.flush()
    if chunker is not None and chunker.texts:
        chunk_irs = [_entry_text(header, globals_, arity, entry_text, tail, ctx.has_runtime), *chunker.texts]
        ir = "\n".join(chunk_irs)
    else:
        chunk_irs = []
        ir = "\n".join([header, "", *globals_, "", *parts, *ctx.added_functions(), *tail])
    pool_symbol = None
    if not embed_constants and layout is not None and f"@{prefix}.pool " in ir:
        # Named by the module's text: one pool (and one `_ready` flag, in the one cached engine) per module.
        # A pool of zero bytes (only empty tensors hoisted) is bound too: the JIT resolves every symbol.
        pool_symbol = f"{prefix}.pool.{hashlib.sha256(ir.encode()).hexdigest()[:16]}"
        ir = ir.replace(f"@{prefix}.pool", f"@{pool_symbol}")
        # Only the entry refers to the pool: kernel modules handed on already are unchanged.
        if chunk_irs:
            chunk_irs[0] = chunk_irs[0].replace(f"@{prefix}.pool", f"@{pool_symbol}")
    return GeneratedModule(ir, prefix, abi, used, external, layout, pool_symbol, chunk_irs)
