"""`plan-memory`: a static memory plan for the intermediate tensors of `main`, written into the IR.

Runs on a fused (or lowered) `main`. The plan shows in the printed text: `main` gets
`memory_plan`, `alignment`, `workspace_bytes` and `storage_bytes` (one entry per storage; plus
`storage_devices` when devices are annotated, `param_storage_ids`/`constant_storage_ids` and
`tvm_storage_sizes` for `tvm-greedy`), and every call that writes tensors gets
`storage_id=S, storage_offset=O` (lists for tuple results). Steps computed from constants only are
hoisted (run once, outside the arena) and carry no storage; with `hoist-constants=false` they are
planned like the rest and `main` says `hoist_constants=false`. docs/memory-planning.md has the details.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from irtool.analysis.liveness import compute_liveness
from irtool.analysis.memory_plan import PLANNERS, plan_memory
from irtool.analysis.plan_attrs import annotate
from irtool.analysis.typecheck import infer_types
from irtool.ir.module import IRModule
from irtool.passes.base import ModulePass
from irtool.core.diagnostics import DiagnosticError, suggest


@dataclass
class PlanMemoryPass(ModulePass):
    name: ClassVar[str] = "plan-memory"
    description: ClassVar[str] = "liveness-based static memory plan of main (greedy-by-size, greedy-best, tvm-greedy, none)"

    algorithm: str = "greedy-by-size"
    alignment: int = 64
    in_place: bool = False
    concat_in_place: bool = False
    hoist_constants: bool = True
    entry: str = "main"

    def apply(self, mod: IRModule) -> IRModule:
        if self.algorithm not in PLANNERS:
            hint = suggest(self.algorithm, set(PLANNERS))
            raise DiagnosticError(f"plan-memory: unknown algorithm `{self.algorithm}`"
                                  + (f"; did you mean `{hint}`?" if hint else
                                     f" (choose one of {', '.join(sorted(PLANNERS))})"))
        if self.alignment < 1 or self.alignment & (self.alignment - 1):
            raise DiagnosticError(f"plan-memory: alignment must be a power of two, got {self.alignment}")
        if self.entry not in mod.functions:
            raise DiagnosticError(f"plan-memory: no function @{self.entry} to plan")
        infer_types(mod)
        live = compute_liveness(mod, self.entry, hoist_constants=self.hoist_constants)
        plan = plan_memory(live, self.algorithm, self.alignment, self.in_place, self.concat_in_place)
        return annotate(mod, live, plan, self.entry)
