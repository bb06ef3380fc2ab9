"""`tir-parallelize`: marks the outermost loop of each primfn whose iterations write disjoint
elements `parallel` (`irtool.tir_transform.parallel` has the dependence test and the choice).
Codegen applies the same marking itself when it compiles for more than one thread
(`irtool-llc --threads N`, `irtool.build(..., threads=N)`); the pass shows what it would pick."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from irtool.ir.module import IRModule
from irtool.passes.base import ModulePass, register_pass
from irtool.tir_transform.module import located_as, map_primfuncs
from irtool.tir_transform.parallel import MIN_WORK, parallelize


@register_pass
@dataclass
class TirParallelize(ModulePass):
    name: ClassVar[str] = "tir-parallelize"
    description: ClassVar[str] = "mark the outermost safe loop of each primfn nest parallel (when it has enough work)"

    function: str | None = None
    min_work: int = MIN_WORK

    def apply(self, mod: IRModule) -> IRModule:
        with located_as(self.name):
            return map_primfuncs(mod, lambda _, f: parallelize(f, self.min_work), self.function)
