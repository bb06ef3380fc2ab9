"""The IRModule: every definition of a program in one place (Relay functions, ADTs, later TIR)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from irtool.ir.adt import Constructor, TypeData
from irtool.ir.expr import Expr, Function
from irtool.core.span import Span

if TYPE_CHECKING:
    from irtool.ir.tir import PrimFunc


class IRModule:
    """Global definitions by name, in insertion order; the printer sorts them as TVM does.

    `metadata` holds the `#[metadata]` table (kind → list of entries, e.g. `relay.Constant`
    arrays) so that `meta[kind][i]` references resolve and re-print.
    """

    def __init__(self) -> None:
        self.functions: dict[str, Function | PrimFunc] = {}
        self.type_defs: dict[str, TypeData] = {}
        self.constructors: dict[str, Constructor] = {}
        self.metadata: dict[str, list[object]] = {}
        # Where each global was defined, for "redefinition" and "undefined" diagnostics.
        self.def_spans: dict[str, Span | None] = {}

    def relay_functions(self) -> Iterator[tuple[str, Function]]:
        """The Relay definitions only: Relay passes leave lowered `primfn`s alone."""
        for name, func in list(self.functions.items()):
            if isinstance(func, Function):
                yield name, func

    def add_function(self, name: str, func: Function | PrimFunc, span: Span | None = None) -> None:
        self.functions[name] = func
        self.def_spans[name] = span

    def add_type(self, data: TypeData) -> None:
        self.type_defs[data.name] = data
        for ctor in data.constructors:
            self.constructors[ctor.name] = ctor

    def __getitem__(self, name: str) -> Function | PrimFunc:
        return self.functions[name]

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def copy(self) -> IRModule:
        """A shallow copy: the definitions are shared (IR nodes are never mutated in place)."""
        out = IRModule()
        out.functions = dict(self.functions)
        out.type_defs = dict(self.type_defs)
        out.constructors = dict(self.constructors)
        out.metadata = {k: list(v) for k, v in self.metadata.items()}
        out.def_spans = dict(self.def_spans)
        return out

    def __repr__(self) -> str:
        return f"IRModule(functions={list(self.functions)}, types={list(self.type_defs)})"


Program = IRModule | Expr
