"""The machine code is generated for: triple, CPU, features, optimisation level.

By default the host: its CPU name and features go both on the target machine and on every
function (`"target-cpu"`/`"target-features"`), because with neither LLVM falls back to SSE2. On
a CPU with AVX-512, `"prefer-vector-width"="512"` keeps LLVM from stopping at 256-bit vectors.
Only LLVM's new pass manager exists in llvmlite 0.50 (`default<O1..O3>` pipelines).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import llvmlite.binding as llvm

from irtool.syntax.diagnostics import DiagnosticError


@lru_cache(maxsize=None)
def initialize() -> None:
    # `llvm.initialize()` raises in llvmlite 0.50; these two are what is needed.
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


@dataclass(frozen=True)
class TargetOptions:
    """`cpu` is `native` (the host) or an LLVM CPU name; `triple` None is the host's; `features`
    None means the host's when the CPU is native, none otherwise. `threads` > 1 runs `parallel`
    loops on that many threads (pthreads; codegen marks a safe loop of each kernel parallel);
    1 generates serial code without any threading runtime."""

    cpu: str = "native"
    triple: str | None = None
    features: str | None = None
    opt_level: int = 3
    fast_math: bool = False
    threads: int = 1

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise DiagnosticError(f"the thread count must be at least 1, got {self.threads}")

    def resolved(self) -> tuple[str, str, str]:
        """(triple, cpu name, feature string)."""
        initialize()
        triple = self.triple or llvm.get_process_triple()
        if self.cpu == "native":
            host = triple == llvm.get_process_triple()
            cpu = llvm.get_host_cpu_name() if host else "generic"
            features = self.features if self.features is not None else \
                (llvm.get_host_cpu_features().flatten() if host else "")
        else:
            cpu, features = self.cpu, self.features or ""
        return triple, cpu, features

    def function_attributes(self) -> str:
        _, cpu, features = self.resolved()
        attrs = ["nounwind", f'"target-cpu"="{cpu}"']
        if features:
            attrs.append(f'"target-features"="{features}"')
        if "+avx512f" in features.split(","):
            attrs.append('"prefer-vector-width"="512"')
        return " ".join(attrs)


def target_machine(options: TargetOptions, jit: bool = False) -> llvm.TargetMachine:
    triple, cpu, features = options.resolved()
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as exc:
        raise DiagnosticError(f"unknown target triple `{triple}`: {exc}") from None
    opt = max(0, min(3, options.opt_level))
    if jit:
        return target.create_target_machine(cpu=cpu, features=features, opt=opt, jit=True)
    return target.create_target_machine(cpu=cpu, features=features, opt=opt, reloc="pic", codemodel="default")


def parse_and_optimize(ir_text: str, options: TargetOptions, tm: llvm.TargetMachine) -> llvm.ModuleRef:
    """Parsed, verified and optimised at `options.opt_level`."""
    initialize()
    try:
        mod = llvm.parse_assembly(ir_text)
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
    except RuntimeError as exc:
        raise DiagnosticError(f"internal codegen error: LLVM rejected the generated IR: {exc}") from None
    if options.opt_level > 0:
        pto = llvm.create_pipeline_tuning_options(speed_level=options.opt_level)
        pto.loop_vectorization = options.opt_level >= 2
        pto.slp_vectorization = options.opt_level >= 2
        pto.loop_unrolling = True
        pto.loop_interleaving = options.opt_level >= 2
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
    return mod
