"""Loop transformations on primfns, by loop-variable name: `tir-split{loop=i,factor=16}`,
`tir-reorder{loops=i,j}`, `tir-vectorize{loop=i}`, `tir-unroll{loop=i}`, `tir-parallel{loop=i}`.
`function=f` restricts a pass to `@f`; otherwise it applies to every primfn that has the loop
(and fails if none has it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.passes.base import ModulePass, register_pass
from irtool.syntax.diagnostics import DiagnosticError
from irtool.tir_transform.loops import loop_names, reorder, set_kind, split
from irtool.tir_transform.module import map_primfuncs, primfunc_names


def _apply_where_present(mod: IRModule, function: str | None, names: list[str],
                         transform: Callable[[str, PrimFunc], PrimFunc]) -> IRModule:
    """Run `transform` on the selected primfns that have all loops `names` (all selected ones
    when `function` names one, so that its error reports the missing loop)."""
    if not names or any(not n for n in names):
        raise DiagnosticError("a loop transformation needs a loop name (`loop=i`)")
    if function is not None:
        return map_primfuncs(mod, transform, function)
    chosen = [n for n in primfunc_names(mod, None)
              if set(n2.lstrip("%") for n2 in names) <= set(loop_names(mod.functions[n]))]  # type: ignore[arg-type]
    if not chosen:
        raise DiagnosticError(f"no primfn in the module has loop(s) {', '.join('%' + n.lstrip('%') for n in names)}")
    out = mod.copy()
    for name in chosen:
        out.functions[name] = transform(name, mod.functions[name])  # type: ignore[arg-type]
    return out


@register_pass
@dataclass
class TirSplit(ModulePass):
    name: ClassVar[str] = "tir-split"
    description: ClassVar[str] = "split a loop into outer and inner loops of `factor` iterations (guard or tail)"

    loop: str = ""
    factor: int = 0
    tail: bool = False
    function: str | None = None

    def apply(self, mod: IRModule) -> IRModule:
        return _apply_where_present(mod, self.function, [self.loop],
                                    lambda name, f: split(f, name, self.loop, self.factor, self.tail))


@register_pass
@dataclass
class TirReorder(ModulePass):
    name: ClassVar[str] = "tir-reorder"
    description: ClassVar[str] = "reorder perfectly nested loops into the given order"

    loops: tuple[str, ...] = ()
    function: str | None = None

    def apply(self, mod: IRModule) -> IRModule:
        return _apply_where_present(mod, self.function, list(self.loops) or [""],
                                    lambda name, f: reorder(f, name, list(self.loops)))


@dataclass
class _SetKind(ModulePass):
    """Marks the named loops with a loop kind (the subclasses fix which)."""

    kind: ClassVar[str]
    loop: str = ""
    function: str | None = None

    def apply(self, mod: IRModule) -> IRModule:
        return _apply_where_present(mod, self.function, [self.loop],
                                    lambda name, f: set_kind(f, name, self.loop, self.kind, self.lowers()))

    def lowers(self) -> bool:
        return False


@register_pass
@dataclass
class TirVectorize(_SetKind):
    """With `explicit` (the default), a loop whose body has a vector form is replaced by it
    (ramps and broadcasts); otherwise, or when it has none, the loop is marked `vectorized`."""

    name: ClassVar[str] = "tir-vectorize"
    description: ClassVar[str] = "vectorize a loop with a constant extent and independent iterations (ramps or mark)"
    kind: ClassVar[str] = "vectorized"
    explicit: bool = True

    def lowers(self) -> bool:
        return self.explicit


@register_pass
@dataclass
class TirUnroll(_SetKind):
    name: ClassVar[str] = "tir-unroll"
    description: ClassVar[str] = "mark a loop unrolled"
    kind: ClassVar[str] = "unrolled"


@register_pass
@dataclass
class TirParallel(_SetKind):
    name: ClassVar[str] = "tir-parallel"
    description: ClassVar[str] = "mark a loop with independent iterations parallel"
    kind: ClassVar[str] = "parallel"
