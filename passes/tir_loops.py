"""Loop transformations on primfns, by loop-variable name: `tir-split{loop=i,factor=16}`,
`tir-reorder{loops=i,j}`, `tir-vectorize{loop=i}`, `tir-unroll{loop=i}`, `tir-parallelize{loop=i}` (without
`loop`, `tir-parallelize` chooses the loops itself).
`function=f` restricts a pass to `@f`; otherwise it applies to every primfn that has the loop(s)
and fails if none has them. Errors name the pass (`tir-reorder: cannot reorder ...`) and point at
the loop. The transformations themselves are in `irtool.tir_transform.loops`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.passes.base import ModulePass
from irtool.core.diagnostics import DiagnosticError
from irtool.tir_transform.loops import loop_names, reorder, set_kind, split
from irtool.tir_transform.module import located_as, map_primfuncs, primfunc_names
from irtool.tir_transform.parallel import MIN_WORK, parallelize


@dataclass
class _LoopPass(ModulePass):
    """Applies `transform` to the primfns that have the loops `wanted()` names."""

    function: str | None = None

    def wanted(self) -> list[str]:
        raise NotImplementedError

    def transform(self, name: str, func: PrimFunc) -> PrimFunc:
        raise NotImplementedError

    def apply(self, mod: IRModule) -> IRModule:
        names = [n.lstrip("%") for n in self.wanted()]
        with located_as(self.name):
            if not names or not all(names):
                raise DiagnosticError("a loop transformation needs a loop name (`loop=i`)")
            if self.function is not None:
                return map_primfuncs(mod, self.transform, self.function)
            chosen = [n for n in primfunc_names(mod, None)
                      if set(names) <= set(loop_names(mod.functions[n]))]  # type: ignore[arg-type]
            if not chosen:
                raise DiagnosticError(f"no primfn in the module has loop(s) {', '.join('%' + n for n in names)}")
            out = mod.copy()
            for name in chosen:
                out.functions[name] = self.transform(name, mod.functions[name])  # type: ignore[arg-type]
            return out


@dataclass
class TirSplitPass(_LoopPass):
    """Outer loop `%i_outer`, inner `%i_inner`; a non-dividing factor guards the body, or with
    `tail` leaves the remaining iterations to a copy of the original loop."""

    name: ClassVar[str] = "tir-split"
    description: ClassVar[str] = "split a loop into outer and inner loops of `factor` iterations (guard or tail)"

    loop: str = ""
    factor: int = 0
    tail: bool = False

    def wanted(self) -> list[str]:
        return [self.loop]

    def transform(self, name: str, func: PrimFunc) -> PrimFunc:
        return split(func, name, self.loop, self.factor, self.tail)


@dataclass
class TirReorderPass(_LoopPass):
    name: ClassVar[str] = "tir-reorder"
    description: ClassVar[str] = "reorder perfectly nested loops into the given order"

    loops: tuple[str, ...] = ()

    def wanted(self) -> list[str]:
        return list(self.loops) or [""]

    def transform(self, name: str, func: PrimFunc) -> PrimFunc:
        return reorder(func, name, list(self.loops))


@dataclass
class _SetKind(_LoopPass):
    """Marks the named loops with a loop kind (the subclasses fix which)."""

    kind: ClassVar[str]
    loop: str = ""

    def wanted(self) -> list[str]:
        return [self.loop]

    def transform(self, name: str, func: PrimFunc) -> PrimFunc:
        return set_kind(func, name, self.loop, self.kind, self.lowers())

    def lowers(self) -> bool:
        return False


@dataclass
class TirVectorizePass(_SetKind):
    """With `explicit` (the default), a loop whose body has a vector form is replaced by it
    (ramps and broadcasts); otherwise, or when it has none, the loop is marked `vectorized`."""

    name: ClassVar[str] = "tir-vectorize"
    description: ClassVar[str] = "vectorize a loop with a constant extent and independent iterations (ramps or mark)"
    kind: ClassVar[str] = "vectorized"
    explicit: bool = True

    def lowers(self) -> bool:
        return self.explicit


@dataclass
class TirUnrollPass(_SetKind):
    name: ClassVar[str] = "tir-unroll"
    description: ClassVar[str] = "mark a loop unrolled"
    kind: ClassVar[str] = "unrolled"


@dataclass
class TirParallelizePass(_SetKind):
    """With `loop`, marks that loop `parallel` (refused unless its iterations are disjoint);
    without, marks the outermost disjoint loop of each primfn nest that has at least `min_work`
    innermost statement runs, fused with the loops inside it until it has enough iterations for
    `threads` threads (`irtool.tir_transform.parallel`; the build driver applies the same choice
    when it compiles for more than one thread)."""

    name: ClassVar[str] = "tir-parallelize"
    description: ClassVar[str] = ("mark a loop parallel (`loop=i`, checked), or else the outermost safe loop of "
                                  "each primfn nest with enough work")
    kind: ClassVar[str] = "parallel"
    min_work: int = MIN_WORK
    threads: int = 2

    def apply(self, mod: IRModule) -> IRModule:
        if self.loop:
            return super().apply(mod)
        with located_as(self.name):
            return map_primfuncs(mod, lambda _, f: parallelize(f, self.min_work, self.threads), self.function)
