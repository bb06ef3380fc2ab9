"""LLVM target machines and the optimisation pipeline for a `TargetOptions` (`irtool.target`).

Only LLVM's new pass manager exists in llvmlite 0.50 (`default<O1..O3>` pipelines).
"""

from __future__ import annotations

import llvmlite.binding as llvm

from irtool.core.diagnostics import DiagnosticError
from irtool.target import TargetOptions, initialize


def target_machine(options: TargetOptions, jit: bool = False) -> llvm.TargetMachine:
    triple, cpu, features = options.resolved()
    target = llvm.Target.from_triple(triple)   # checked when the options were made
    opt = options.opt_level
    if jit:
        return target.create_target_machine(cpu=cpu, features=features, opt=opt, jit=True)
    return target.create_target_machine(cpu=cpu, features=features, opt=opt, reloc="pic", codemodel="default")


def parse_and_optimize(ir_text: str, options: TargetOptions, tm: llvm.TargetMachine) -> llvm.ModuleRef:
    """Parsed, verified and optimised at `options.opt_level`."""
    mod = parse(ir_text, tm)
    optimize(mod, options, tm)
    return mod


def parse(ir_text: str, tm: llvm.TargetMachine) -> llvm.ModuleRef:
    """Parsed and verified, for `tm`'s triple and data layout."""
    initialize()
    try:
        mod = llvm.parse_assembly(ir_text)
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
    except RuntimeError as exc:
        raise DiagnosticError(f"internal codegen error: LLVM rejected the generated IR: {exc}") from None
    return mod


def optimize(mod: llvm.ModuleRef, options: TargetOptions, tm: llvm.TargetMachine) -> None:
    """`mod` optimised in place at `options.opt_level` (`default<On>`)."""
    if options.opt_level > 0:
        pto = llvm.create_pipeline_tuning_options(speed_level=options.opt_level)
        pto.loop_vectorization = options.opt_level >= 2
        pto.slp_vectorization = options.opt_level >= 2
        pto.loop_unrolling = True
        pto.loop_interleaving = options.opt_level >= 2
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
