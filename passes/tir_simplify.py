"""`tir-simplify`: constant folding, exact algebraic identities and loop/branch cleanup on
every PrimFunc (see `irtool.tir_transform.simplify` for the rules)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from irtool.ir.module import IRModule
from irtool.passes.base import ModulePass
from irtool.tir_transform.module import located_as, map_primfuncs
from irtool.tir_transform.simplify import simplify_primfunc


@dataclass
class TirSimplifyPass(ModulePass):
    name: ClassVar[str] = "tir-simplify"
    description: ClassVar[str] = "fold constants, apply exact identities, drop trivial loops, branches and lets in primfns"

    function: str | None = None

    def apply(self, mod: IRModule) -> IRModule:
        with located_as(self.name):
            return map_primfuncs(mod, lambda _, f: simplify_primfunc(f), self.function)
