"""`dead-code`: drop let bindings nobody uses (when their value is pure) and unreachable globals."""

from __future__ import annotations

import dataclasses

from irtool.ir.expr import Expr, Function, Let, Match, Var
from irtool.ir.module import IRModule
from irtool.ir.visitor import ExprMutator
from irtool.passes.base import ModulePass
from irtool.passes.call_graph import referenced_globals
from irtool.passes.purity import Purity
from irtool.core.diagnostics import DiagnosticError, suggest


def _live_uses(root: Expr) -> tuple[set[int], set[int]]:
    """(variables used by live code, lets that must stay), found top-down.

    A let's value is live only if its variable is used by the live part of its body (or the
    value has effects), so a let is decided after its body has been walked. The walk is a
    stack: a let pushes a decision marker under its body, which pops once the body is done.
    """
    pure = Purity(root)
    used: set[int] = set()
    kept: set[int] = set()
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, decide = stack.pop()
        if decide:
            assert isinstance(node, Let)
            if id(node.var) in used or not pure(node.value):
                kept.add(id(node))
                stack.append((node.value, False))
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Var):
            used.add(id(node))
        elif isinstance(node, Let):
            stack.append((node, True))
            stack.append((node.body, False))
        elif isinstance(node, Function):
            stack.append((node.body, False))
        elif isinstance(node, Match):
            stack.append((node.data, False))
            stack.extend((c.rhs, False) for c in node.clauses)
        else:
            stack.extend((c, False) for c in node.children())
    return used, kept


class _DropDeadLets(ExprMutator):
    def __init__(self, kept: set[int]) -> None:
        super().__init__()
        self.kept = kept

    def rewrite_let(self, node: Let) -> Expr:
        if id(node) not in self.kept:
            return self.new(node.body)
        return super().rewrite_let(node)


def drop_dead_lets(func: Function) -> Function:
    _, kept = _live_uses(func)
    out = _DropDeadLets(kept).visit(func)
    assert isinstance(out, Function)
    return out


def reachable_globals(mod: IRModule, roots: set[str]) -> set[str]:
    """Globals reachable from `roots` through references (calls or bare `@f`), iteratively."""
    reached = set(roots)
    stack = list(roots)
    while stack:
        name = stack.pop()
        for callee in referenced_globals(mod.functions[name]):
            if callee in mod.functions and callee not in reached:
                reached.add(callee)
                stack.append(callee)
    return reached


@dataclasses.dataclass
class DeadCodePass(ModulePass):
    """Unused pure `let`s go; so do globals no entry point can reach.

    Entry points are `entries` when given, else `@main` when there is one, else every global
    no other global refers to. `keep-entries=true` additionally keeps all of those.
    """

    name = "dead-code"
    description = "remove unused pure let bindings and globals unreachable from the entry points"

    entries: tuple[str, ...] = ()
    keep_entries: bool = False

    def apply(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        for name, func in mod.relay_functions():
            out.functions[name] = drop_dead_lets(func)
        roots = self._roots(out)
        live = reachable_globals(out, roots)
        for name in list(out.functions):
            if name not in live:
                del out.functions[name]
                out.def_spans.pop(name, None)
        return out

    def _roots(self, mod: IRModule) -> set[str]:
        for name in self.entries:
            if name not in mod.functions:
                hint = suggest(name, set(mod.functions))
                raise DiagnosticError(f"dead-code: entry @{name} is not defined"
                                      + (f"; did you mean @{hint}?" if hint else ""))
        referenced = {g for name, f in mod.functions.items() for g in referenced_globals(f) if g != name}
        unreferenced = {n for n in mod.functions if n not in referenced}
        if self.entries:
            roots = set(self.entries)
        elif "main" in mod.functions:
            roots = {"main"}
        else:
            roots = set(unreferenced)
        return roots | unreferenced if self.keep_entries else roots

