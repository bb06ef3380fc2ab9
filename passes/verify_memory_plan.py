"""`verify-memory-plan`: the independent check of the memory plan written on `main`
(`irtool.analysis.plan_check`), as a pass. It recomputes liveness from the IR and reads the plan
back from the attributes, so a bug in a planner or a hand-edited plan is caught the same way.
The pass manager's `verify` runs the same check whenever `main` carries a plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from irtool.analysis.plan_attrs import PLAN_ALGORITHM, plan_liveness, read_plan
from irtool.analysis.typecheck import infer_types
from irtool.ir.module import IRModule
from irtool.passes.base import ModulePass
from irtool.core.diagnostics import DiagnosticError


def check_memory_plan(mod: IRModule, entry: str = "main") -> bool:
    """Check the plan on `entry` if it has one (the module must be type checked); True if checked."""
    func = mod.functions.get(entry)
    if func is None or PLAN_ALGORITHM not in func.attrs:
        return False
    return read_plan(plan_liveness(mod, entry)) is not None  # reading checks it


@dataclass
class VerifyMemoryPlanPass(ModulePass):
    name: ClassVar[str] = "verify-memory-plan"
    description: ClassVar[str] = "check the memory plan on main: no live overlap, fits, aligned, per device"

    entry: str = "main"

    def apply(self, mod: IRModule) -> IRModule:
        infer_types(mod)
        if not check_memory_plan(mod, self.entry):
            raise DiagnosticError(f"verify-memory-plan: @{self.entry} carries no memory plan "
                                  "(run plan-memory first)", mod.def_spans.get(self.entry))
        return mod
