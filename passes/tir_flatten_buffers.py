"""`tir-flatten-buffers`: multi-dimensional buffers become 1-d, accesses use linear offsets from
the buffers' strides (row-major when none). Parameters of a primfn that Relay code calls keep
their shapes, since those are the primfn's Relay type (`call_lowered` checks it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from irtool.ir.module import IRModule
from irtool.passes.base import ModulePass
from irtool.tir_transform.flatten import flatten_buffers
from irtool.tir_transform.module import called_from_relay, located_as, map_primfuncs


@dataclass
class TirFlattenBuffersPass(ModulePass):
    name: ClassVar[str] = "tir-flatten-buffers"
    description: ClassVar[str] = "flatten multi-dimensional TIR buffers to 1-d with strided linear indices"

    function: str | None = None
    params: bool = True

    def apply(self, mod: IRModule) -> IRModule:
        fixed = called_from_relay(mod)
        with located_as(self.name):
            return map_primfuncs(mod, lambda name, f: flatten_buffers(f, self.params and name not in fixed),
                                 self.function)
