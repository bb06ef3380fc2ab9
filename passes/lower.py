"""`lower`: fused primitive functions become TIR `primfn`s; `main` an AOT list of `call_lowered`s.

TVM's LowerTE: each `fn (..., Primitive=1)` lowers through its operators' TIR compute rules to
one PrimFunc (deduplicated by structural equality), reshape-only groups become views. The
lowered form is described in docs/lowering.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from irtool.ir.module import IRModule
from irtool.lower.module import lower_module
from irtool.passes.base import ModulePass


@dataclass
class LowerPass(ModulePass):
    name: ClassVar[str] = "lower"
    description: ClassVar[str] = "lower primitive functions to TIR primfns; main becomes call_lowered steps"

    def apply(self, mod: IRModule) -> IRModule:
        return lower_module(mod)
