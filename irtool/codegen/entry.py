"""The lowered `main` → `int32_t <prefix>_run(const struct inputs*, struct outputs*, void* workspace)`,
and the whole LLVM module around it (kernels, constants, the workspace size).

`main` runs AOT style: its steps (liveness order) become straight-line calls of the kernels, with
every intermediate tensor at its memory-plan offset in the caller's workspace. The plan is read
from `main` when `plan-memory` wrote it, otherwise computed here (greedy-by-size, 64-byte
alignment); each storage of the plan gets its own 64-byte-aligned region of the one workspace.
A kernel output that is also a result of `main` is written straight into the caller's output
buffer; other results (parameters, constants, a tensor returned twice) are copied there at the end.
Constant tensors become 64-byte-aligned global constant arrays, so one object file is a whole model.
"""

from __future__ import annotations

import binascii
import hashlib
import re
from dataclasses import dataclass, field, replace

import numpy as np

from irtool.analysis.liveness import ALIAS, CALL, COPY, Liveness, compute_liveness, flatten_type
from irtool.analysis.memory_plan import INPUT, MemoryPlan, plan_memory, read_plan
from irtool.analysis.typecheck import infer_types
from irtool.codegen.target import TargetOptions
from irtool.codegen.tir_to_llvm import STATUS_MISALIGNED, STATUS_OK, ModuleContext, primfunc_to_llvm
from irtool.ir.expr import Function, GlobalVar, Op
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.ir.types import TensorType, Type
from irtool.lower.signature import num_outputs
from irtool.syntax.diagnostics import DiagnosticError

ALIGN = 64


@dataclass(frozen=True)
class TensorSpec:
    """One field of the inputs or outputs struct."""

    field: str      # the C identifier
    name: str       # the name users pass in Python (`x`, `t.0`, `output0`)
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass
class ABI:
    """What callers of `<prefix>_run` must know (the header states the same)."""

    prefix: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    workspace_bytes: int
    result_type: Type | None
    assert_messages: list[str] = field(default_factory=list)


@dataclass
class GeneratedModule:
    ir: str
    prefix: str
    abi: ABI | None   # None for a module without `main` (kernels only, exported by name)
    kernels: list[str]
    external_constants: dict[str, np.ndarray] = field(default_factory=dict)  # symbol -> data


def sanitize(name: str) -> str:
    """A C identifier for a name (non-identifier characters → `_`)."""
    text = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return text if text and not text[0].isdigit() else "_" + text


def _pow2_align(offset: int) -> int:
    return ALIGN if offset % ALIGN == 0 else offset & -offset


def _encode_bytes(data: bytes) -> str:
    """`c"\\00\\01..."`: every byte as a hex escape (vectorised, for large weights)."""
    if not data:
        return ""
    hexed = np.frombuffer(binascii.hexlify(data), np.uint8).reshape(-1, 2)
    out = np.empty((hexed.shape[0], 3), np.uint8)
    out[:, 0] = ord("\\")
    out[:, 1:] = hexed
    return out.tobytes().decode("ascii")


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
        # kernel name -> per-parameter alignment guaranteed by every call site
        self.kernel_align: dict[str, list[int]] = {}
        self.kernel_may_alias: set[str] = set()

    def emit(self, text: str) -> str:
        self.temps += 1
        self.lines.append(f"  %e{self.temps} = {text}")
        return f"%e{self.temps}"

    def build(self, main: Function) -> tuple[str, ABI]:
        infer_types(self.mod)
        live = compute_liveness(self.mod, "main")
        # Results of main that a kernel writes go straight to the caller's output buffers.
        direct: dict[int, int] = {}
        for k, t in enumerate(live.outputs):
            if live.tensors[t].kind == CALL and t not in direct:
                direct[t] = k
        plan = read_plan(live) or self.plan(live, set(direct))
        bases, ws_bytes = self.layout(plan)
        inputs = self.input_specs(main, live)
        # Shapes from main's result type: a view (reshape) shares its source's tensor but not its shape.
        result_types = flatten_type(main.body.checked_type, main.span)
        outputs = [TensorSpec(f"output{k}", f"output{k}", tuple(int(d) for d in t.shape), t.dtype)
                   for k, t in enumerate(result_types)]

        self.lines.append("entry:")
        in_ptrs = []
        for k, _ in enumerate(inputs):
            slot = self.emit(f"getelementptr inbounds ptr, ptr %in, i64 {k}")
            in_ptrs.append(self.emit(f"load ptr, ptr {slot}, align 8"))
        out_ptrs = []
        for k, _ in enumerate(outputs):
            slot = self.emit(f"getelementptr inbounds ptr, ptr %out, i64 {k}")
            out_ptrs.append(self.emit(f"load ptr, ptr {slot}, align 8"))
        checks = in_ptrs + out_ptrs + (["%ws"] if ws_bytes else [])
        bad = "false"
        for p in checks:
            low = self.emit(f"and i64 {self.emit(f'ptrtoint ptr {p} to i64')}, {ALIGN - 1}")
            bad = self.emit(f"or i1 {bad}, {self.emit(f'icmp ne i64 {low}, 0')}")
        self.lines += [f"  br i1 {bad}, label %misaligned, label %body", "misaligned:",
                       f"  ret i32 {STATUS_MISALIGNED}", "body:"]

        # tensor -> (LLVM pointer value, alignment, memory region, byte offset in the region)
        pointer: dict[int, tuple[str, int, str, int]] = {}
        flat_params = [t for ts in live.params for t in ts]
        for k, t in enumerate(flat_params):
            pointer[t] = (in_ptrs[k], ALIGN, f"in{k}", 0)
        for t, const in live.constants.items():
            data = np.ascontiguousarray(const.data)
            if self.external_constants is None:
                name = f"{self.prefix}_c{t}"
                self.globals.append(f"@{name} = internal unnamed_addr constant [{data.nbytes} x i8] "
                                    f"c\"{_encode_bytes(data.tobytes())}\", align {ALIGN}")
            else:
                # Named by content, so that a cached engine never binds another module's data.
                digest = hashlib.sha256(data.tobytes()).hexdigest()[:16]
                name = f"{self.prefix}_c{t}_{data.dtype}_{digest}"
                self.globals.append(f"@{name} = external global [{data.nbytes} x i8], align {ALIGN}")
                self.external_constants[name] = data
            pointer[t] = (f"@{name}", ALIGN, name, 0)
        for t, k in direct.items():
            pointer[t] = (out_ptrs[k], ALIGN, f"out{k}", 0)
        for t, (storage, offset) in plan.placement.items():
            tensor = live.tensors[t]
            if tensor.kind != CALL or t in pointer:
                continue
            at = bases[storage] + offset
            value = self.emit(f"getelementptr inbounds i8, ptr %ws, i64 {at}") if at else "%ws"
            pointer[t] = (value, _pow2_align(at), "ws", at)

        for step in live.steps:
            if step.kind == ALIAS:
                continue
            if step.kind == COPY:
                for src, dst in zip(step.inputs, step.outputs):
                    self.memcpy(pointer[dst][0], pointer[src][0], live.tensors[dst].nbytes)
                continue
            self.kernel_call(step, live, pointer)
        for k, t in enumerate(live.outputs):
            if direct.get(t) != k:
                self.memcpy(out_ptrs[k], pointer[t][0], live.tensors[t].nbytes)
        self.lines.append(f"  ret i32 {STATUS_OK}")

        head = (f"define i32 @{self.prefix}_run(ptr noalias nocapture readonly %in, "
                f"ptr noalias nocapture readonly %out, ptr %ws) #0 {{")
        self.globals.append(f"@{self.prefix}_workspace_size = constant i64 {ws_bytes}, align 8")
        abi = ABI(self.prefix, inputs, outputs, ws_bytes, main.body.checked_type)
        return "\n".join([head, *self.lines, "}", ""]), abi

    @staticmethod
    def plan(live: Liveness, outside: set[int]) -> MemoryPlan:
        """greedy-by-size over the tensors that live in the workspace: those in `outside` count
        as taking no bytes there."""
        tensors = [replace(t, nbytes=0) if t.index in outside else t for t in live.tensors]
        return plan_memory(replace(live, tensors=tensors), "greedy-by-size", ALIGN)

    def layout(self, plan: MemoryPlan) -> tuple[dict[int, int], int]:
        """Byte base of every non-input storage in the workspace, and the workspace size."""
        bases: dict[int, int] = {}
        at = 0
        for s in plan.storages:
            if s.kind == INPUT:
                continue
            bases[s.index] = at
            at += (s.nbytes + ALIGN - 1) // ALIGN * ALIGN
        return bases, at

    def input_specs(self, main: Function, live: Liveness) -> list[TensorSpec]:
        specs: list[TensorSpec] = []
        used: set[str] = set()
        for param, tensors in zip(main.params, live.params):
            many = len(tensors) > 1
            for i, t in enumerate(tensors):
                ttype: TensorType = live.tensors[t].ttype
                name = param.name_hint + (f".{i}" if many else "")
                c_name = sanitize(name)
                while c_name in used:
                    c_name += "_"
                used.add(c_name)
                specs.append(TensorSpec(c_name, name, tuple(int(d) for d in ttype.shape), ttype.dtype))
        return specs

    def memcpy(self, dst: str, src: str, nbytes: int) -> None:
        if nbytes == 0:
            return
        self.ctx.declare("llvm.memcpy.p0.p0.i64", "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")
        self.lines.append(f"  call void @llvm.memcpy.p0.p0.i64(ptr align {ALIGN} {dst}, ptr align 1 {src}, "
                          f"i64 {nbytes}, i1 false)")

    def kernel_call(self, step: object, live: Liveness, pointer: dict[int, tuple[str, int, str, int]]) -> None:
        call = step.call  # type: ignore[attr-defined]
        target = call.args[0] if isinstance(call.op, Op) and call.op.name == "call_lowered" and call.args else None
        func = self.mod.functions.get(target.name_hint) if isinstance(target, GlobalVar) else None
        if not isinstance(func, PrimFunc):
            label = step.label  # type: ignore[attr-defined]
            raise DiagnosticError(f"irtool-llc: `main` must only call lowered kernels (`call_lowered` of a primfn), "
                                  f"reshape views and device copies; this step runs `{label}` — run the "
                                  f"`lower` pipeline first", call.span)
        name = target.name_hint
        tensors = list(step.inputs) + list(step.outputs)  # type: ignore[attr-defined]
        if len(tensors) != len(func.params) or num_outputs(func) != len(step.outputs):  # type: ignore[attr-defined]
            raise DiagnosticError(f"irtool-llc: @{name} takes {len(func.params)} buffers "
                                  f"({num_outputs(func)} outputs) but is called with {len(tensors)}", call.span)
        aligns = [pointer[t][1] for t in tensors]
        old = self.kernel_align.get(name)
        self.kernel_align[name] = aligns if old is None else [min(a, b) for a, b in zip(old, aligns)]
        outputs = set(step.outputs)  # type: ignore[attr-defined]
        for t in outputs:
            _, _, region, at = pointer[t]
            end = at + live.tensors[t].nbytes
            for u in tensors:
                if u == t:
                    continue
                _, _, r2, at2 = pointer[u]
                if r2 == region and at2 < end and at < at2 + live.tensors[u].nbytes:
                    self.kernel_may_alias.add(name)   # an in-place plan: the kernel must not claim noalias
        args = ", ".join(f"ptr {pointer[t][0]}" for t in tensors)
        result = self.emit(f"call i32 @{self.prefix}_{sanitize(name)}({args})")
        failed = self.emit(f"icmp ne i32 {result}, 0")
        self.temps += 1
        ok = f"ok{self.temps}"
        fail = f"fail{self.temps}"
        self.lines += [f"  br i1 {failed}, label %{fail}, label %{ok}", f"{fail}:", f"  ret i32 {result}", f"{ok}:"]


def generate_module(mod: IRModule, prefix: str, options: TargetOptions,
                    embed_constants: bool = True) -> GeneratedModule:
    """The LLVM IR text of a lowered module: kernels, `<prefix>_run`, constants, workspace size.
    A module without `main` gives its kernels as exported functions `<prefix>_<name>`.
    With `embed_constants=False` constants are external globals whose data is returned in
    `external_constants` (the JIT binds them to the arrays: no weights pass through IR text)."""
    ctx = ModuleContext(fast_math=options.fast_math)
    prefix = sanitize(prefix)
    external: dict[str, np.ndarray] = {}
    main = mod.functions.get("main")
    kernels = {n: f for n, f in mod.functions.items() if isinstance(f, PrimFunc)}
    parts: list[str] = []
    abi: ABI | None = None
    entry_text = ""
    if main is not None:
        if not isinstance(main, Function):
            raise DiagnosticError("irtool-llc: `main` must be a Relay function", getattr(main, "span", None))
        builder = _EntryBuilder(mod, prefix, ctx, None if embed_constants else external)
        entry_text, abi = builder.build(main)
        for name in sorted(builder.kernel_align):
            parts.append(primfunc_to_llvm(ctx, kernels[name], f"{prefix}_{sanitize(name)}",
                                          builder.kernel_align[name], name not in builder.kernel_may_alias))
        parts.append(entry_text)
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
    text = [f"; irtool-llc module `{prefix}`", "", *globals_, "", *parts, *sorted(ctx.declarations.values()), "",
            f"attributes #0 = {{ {options.function_attributes()} }}", "", *ctx.metadata, ""]
    return GeneratedModule("\n".join(text), prefix, abi, used, external)

