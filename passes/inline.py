"""`inline`: replace calls of global functions by their bodies, as TVM's `relay.transform.Inline`.

TVM's rule: visit globals callees-first (reverse topological order of the call graph); a call
`@g(...)` or a bare `@g` is replaced when `@g` has a non-zero `Inline` attribute, is not
recursive and (at that point) calls no other global. Without `Compiler`/`Extern` attributes the
body is substituted with parameters bound to arguments; with them the call becomes a call of the
function literal. Globals marked `Inline` are then removed unless they are entry points (never
referenced) or recursive.

Beyond TVM: `all=true` inlines every global that is not part of a recursive cycle (so a network
becomes one `main`), and `beta-reduce=true` also reduces calls of `let`-bound function literals
and of function literals called in place.
"""

from __future__ import annotations

import dataclasses

from irtool.ir.expr import Call, Expr, Function, GlobalVar, Let
from irtool.ir.module import IRModule
from irtool.ir.visitor import ExprMutator, post_order
from irtool.passes.base import ModulePass
from irtool.passes.call_graph import callees_first, cyclic_globals, referenced_globals
from irtool.passes.substitution import LetSubstMutator, copy_function, substitute
from irtool.core.diagnostics import DiagnosticError


def attr_is_set(func: Function, key: str, name: str, mod: IRModule) -> bool:
    """Whether an integer-like function attribute (`Inline`, `Extern`, `Primitive`) is non-zero."""
    value = func.attrs.get(key)
    if value is None:
        return False
    if isinstance(value, (bool, int, float)):
        return bool(value)
    raise DiagnosticError(f"attribute `{key}` of @{name} must be an integer, not {value!r}",
                          mod.def_spans.get(name) or func.span)


def keeps_closure(func: Function, name: str, mod: IRModule) -> bool:
    """External or primitive functions are inlined as a call of the function literal, not their body."""
    return ("Compiler" in func.attrs or attr_is_set(func, "Extern", name, mod)
            or attr_is_set(func, "Primitive", name, mod))


class _Inliner(ExprMutator):
    """Rewrites one global's body, replacing references to the globals `can_inline` accepts."""

    def __init__(self, mod: IRModule, inlinable: set[str], closures: set[str], body: Expr) -> None:
        super().__init__()
        self.mod = mod
        self.inlinable = inlinable
        self.closures = closures
        # GlobalVar nodes that appear somewhere other than in call position.
        self.bare: set[int] = set()
        for node in post_order(body):
            kids = node.args if isinstance(node, Call) else node.children()
            self.bare.update(id(k) for k in kids if isinstance(k, GlobalVar))
        if isinstance(body, GlobalVar):
            self.bare.add(id(body))

    def rewrite_other(self, node: Expr) -> Expr:
        if isinstance(node, GlobalVar) and id(node) in self.bare and node.name_hint in self.inlinable:
            return copy_function(self.mod.functions[node.name_hint])
        return node

    def rewrite_call(self, node: Call) -> Expr:
        op = node.op
        if not (isinstance(op, GlobalVar) and op.name_hint in self.inlinable):
            return super().rewrite_call(node)
        callee = self.mod.functions[op.name_hint]
        args = tuple(self.new(a) for a in node.args)
        if len(args) != len(callee.params):
            raise DiagnosticError(f"@{op.name_hint} expects {len(callee.params)} arguments, got {len(args)}",
                                  node.span)
        if op.name_hint in self.closures:
            return Call(copy_function(callee), args, node.attrs, node.span, node.type_args)
        return substitute(callee.body, dict(zip(callee.params, args)))


@dataclasses.dataclass
class InlinePass(ModulePass):
    """TVM's global-function inliner, plus whole-program inlining and beta reduction on request."""

    name = "inline"
    description = "inline global functions marked Inline=1 into their callers (all=true: every non-recursive one)"

    all: bool = False
    beta_reduce: bool = False

    def apply(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        calls = {name: referenced_globals(f) for name, f in out.functions.items()}
        referenced = set().union(*calls.values()) if calls else set()
        entries = {name for name in calls if name not in referenced}
        recursive = cyclic_globals(calls) if self.all else {n for n in calls if n in calls[n]}
        marked = {n for n, f in out.relay_functions() if attr_is_set(f, "Inline", n, out)}
        closures = {n for n, f in out.relay_functions() if keeps_closure(f, n, out)}
        for name in callees_first(calls):
            if not calls[name] - {name}:
                continue
            candidates = {g for g in calls[name] - recursive
                          if isinstance(out.functions.get(g), Function)
                          and (self.all or (g in marked and not calls[g]))}
            if not candidates:
                continue
            func = out.functions[name]
            new_func = _Inliner(out, candidates, closures, func).visit(func)
            if new_func is not func:
                out.functions[name] = new_func  # type: ignore[assignment]
                calls[name] = referenced_globals(new_func)
        if self.beta_reduce:
            for name, func in out.relay_functions():
                out.functions[name] = beta_reduce(func)
            calls = {name: referenced_globals(f) for name, f in out.functions.items()}
        self._remove_inlined(out, calls, entries, recursive, marked)
        return out

    def _remove_inlined(self, out: IRModule, calls: dict[str, set[str]], entries: set[str],
                        recursive: set[str], marked: set[str]) -> None:
        still_used = {g for name, gs in calls.items() for g in gs if g != name}
        for name, _ in out.relay_functions():
            if name in entries or name in recursive or not (self.all or name in marked):
                continue
            if name in still_used:
                # TVM asserts here; the user marked a function that the rules cannot inline.
                blockers = sorted(g for g in calls[name] if g != name)
                why = f"it calls {', '.join('@' + g for g in blockers)}" if blockers else "it is still referenced"
                raise DiagnosticError(f"@{name} is marked Inline but cannot be inlined: {why}",
                                      out.def_spans.get(name) or out.functions[name].span)
            del out.functions[name]
            out.def_spans.pop(name, None)


def _reducible(func: Expr) -> bool:
    return isinstance(func, Function) and not any(k in func.attrs for k in ("Primitive", "Compiler", "Extern"))


class _BetaReducer(LetSubstMutator):
    """Calls of function literals (directly or through a let whose every use is a call) become bodies."""

    def __init__(self, only_called: set[int]) -> None:
        super().__init__()
        self.only_called = only_called

    def eliminate(self, let: Let, new_value: Expr) -> bool:
        return id(let.var) in self.only_called and _reducible(new_value)

    def rewrite_call(self, node: Call) -> Expr:
        op = self.new(node.op)
        if _reducible(op) and len(op.params) == len(node.args):  # type: ignore[union-attr]
            args = tuple(self.new(a) for a in node.args)
            return substitute(op.body, dict(zip(op.params, args)))  # type: ignore[union-attr]
        return super().rewrite_call(node)


def beta_reduce(func: Function) -> Function:
    """Reduce direct calls of function literals and of let-bound ones used only as callees."""
    let_vars = {id(n.var) for n in post_order(func) if isinstance(n, Let)}
    callee_uses: dict[int, int] = {}
    other_uses: set[int] = set()
    for node in post_order(func):
        if isinstance(node, Call) and id(node.op) in let_vars:
            callee_uses[id(node.op)] = callee_uses.get(id(node.op), 0) + 1
        kids = node.args if isinstance(node, Call) else (
            (node.value, node.body) if isinstance(node, Let) else node.children())
        other_uses.update(id(k) for k in kids if id(k) in let_vars)
    only_called = {v for v in callee_uses if v not in other_uses}
    out = _BetaReducer(only_called).visit(func)
    assert isinstance(out, Function)
    return out
