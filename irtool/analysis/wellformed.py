"""The well-formedness check: binding and scoping rules that type inference takes for granted.

- every variable is bound by one binder (a `let`, a function parameter or a pattern), once;
- every use of a bound variable is inside its binder's scope (a `let` variable is in scope in its
  own value, so a let-bound function may call itself, as in TVM);
- variables bound nowhere (free variables) are allowed only in a lone expression (they are its
  inputs, e.g. `free_var %x`), never in a module's functions;
- every global a module mentions is defined in it, and every constructor (in expressions and
  patterns) is one of a defined type's constructors.

Shared (DAG) nodes are checked where they are first reached and, at every later use, their free
variables are checked against that use's scope, so a graph binding `%0 = ...` that escapes the
scope of a variable it uses is caught. Both walks use explicit stacks.
"""

from __future__ import annotations

from irtool.ir.adt import Constructor, Pattern, PatternConstructor, PatternTuple
from irtool.ir.expr import Expr, Function, GlobalVar, Let, Match, Var
from irtool.ir.module import IRModule
from irtool.core.span import Span
from irtool.ir.tir import PrimFunc
from irtool.ir.visitor import post_order
from irtool.core.diagnostics import DiagnosticError
from irtool.analysis.tir_verify import verify_primfunc


def check_well_formed(prog: IRModule | Expr, mod: IRModule | None = None) -> None:
    """Raise a located `DiagnosticError` for the first violated rule (see the module docstring).

    A lone expression may refer to the globals and constructors of `mod`.
    """
    if isinstance(prog, IRModule):
        checker = _Checker(prog, allow_free=False)
        for name, func in prog.functions.items():
            if isinstance(func, PrimFunc):
                verify_primfunc(func, name)
            else:
                checker.check(func, f"@{name}", prog.def_spans.get(name))
    else:
        _Checker(mod or IRModule(), allow_free=True).check(prog, "the expression", prog.span)


def binders(node: Expr) -> list[Var]:
    """The variables a node binds for (part of) its children."""
    if isinstance(node, Let):
        return [node.var]
    if isinstance(node, Function):
        return list(node.params)
    if isinstance(node, Match):
        return [v for c in node.clauses for v in c.lhs.bound_vars()]
    return []


def shared_free_vars(order: list[Expr], tracked: set[int] | None = None) -> dict[int, set[int]]:
    """Free variables (by id) of every node with more than one parent; `order` is a post-order.

    Only the variables in `tracked` are reported (default: all). Computed bottom-up; a child's
    set is reused in place when the child has a single parent, so a long let chain costs linear
    time instead of copying ever-growing sets.
    """
    if tracked is not None and not tracked:
        return {}  # e.g. a graph whose only binders are its function's parameters
    counts: dict[int, int] = {}
    for node in order:
        for child in node.children():
            counts[id(child)] = counts.get(id(child), 0) + 1
    if not any(n > 1 and not isinstance(node, Var) for node in order if (n := counts.get(id(node), 0))):
        return {}  # a tree apart from variable uses (e.g. a let chain): nothing to check at reuses
    fv: dict[int, set[int]] = {}  # nodes without (tracked) free variables have no entry
    shared: dict[int, set[int]] = {}
    for node in order:
        if isinstance(node, Var):
            if tracked is None or id(node) in tracked:
                fv[id(node)] = {id(node)}
            continue
        children = node.children()
        if not any(id(c) in fv for c in children):
            continue  # the common case in a graph: nothing to propagate
        owned: list[set[int]] = []
        borrowed: list[set[int]] = []
        for child, excluded in _scoped_children(node):
            cs = fv.get(id(child))
            if not cs:
                continue
            unique = counts.get(id(child), 0) <= 1 and not isinstance(child, Var)
            if excluded and not cs.isdisjoint(excluded):
                if unique:
                    cs.difference_update(excluded)
                else:
                    cs, unique = cs - excluded, True
            (owned if unique else borrowed).append(cs)
        if not owned and not borrowed:
            continue
        owned.sort(key=len, reverse=True)
        result = owned[0] if owned else set()
        for cs in owned[1:] + borrowed:
            result |= cs
        fv[id(node)] = result
        for child in children:
            if counts.get(id(child), 0) <= 1 and not isinstance(child, Var):
                fv.pop(id(child), None)
        if counts.get(id(node), 0) > 1:
            shared[id(node)] = result
    return shared


_NO_VARS: frozenset[int] = frozenset()


def _scoped_children(node: Expr) -> list[tuple[Expr, frozenset[int] | set[int]]]:
    """A node's children paired with the variables (by id) the node binds over each."""
    if isinstance(node, Let):
        bound = {id(node.var)}
        return [(node.value, bound), (node.body, bound)]
    if isinstance(node, Function):
        return [(node.body, {id(p) for p in node.params})]
    if isinstance(node, Match):
        return [(node.data, _NO_VARS)] + [(c.rhs, {id(v) for v in c.lhs.bound_vars()}) for c in node.clauses]
    return [(c, _NO_VARS) for c in node.children()]


class _Checker:
    def __init__(self, mod: IRModule, allow_free: bool) -> None:
        self.mod = mod
        self.allow_free = allow_free
        self.bound_once: set[int] = set()
        self.visited: set[int] = set()

    def check(self, root: Expr, where: str, where_span: Span | None) -> None:
        """Check one function (or the lone expression); each is its own binding world, as in TVM."""
        self.bound_once.clear()
        self.visited.clear()
        order = post_order(root)
        all_bound = {id(v) for node in order for v in binders(node)}
        shared = shared_free_vars(order, _reuse_checked(root, all_bound))
        in_scope: set[int] = set()
        visited = self.visited
        # Entries: (VISIT, node, parent) | (BIND, vars, binder) | (UNBIND, vars, None)
        stack: list[tuple[int, object, Expr | None]] = [(_VISIT, root, None)]
        while stack:
            action, item, parent = stack.pop()
            if action == _VISIT:
                node: Expr = item  # type: ignore[assignment]
                if isinstance(node, Var):
                    if id(node) not in in_scope:
                        self.unbound_use(node, all_bound, where, _span_of(parent, where_span))
                elif id(node) in visited:
                    for var_id in shared.get(id(node), ()):
                        if var_id not in in_scope and (var_id in all_bound or not self.allow_free):
                            self.fail_scope(_var_of(node, var_id), where, node.span or _span_of(parent, where_span))
                else:
                    visited.add(id(node))
                    self.push_children(node, stack, where_span if parent is None else parent.span or where_span)
            elif action == _BIND:
                self.bind(item, parent, in_scope)  # type: ignore[arg-type]
            else:
                in_scope.difference_update(id(v) for v in item)  # type: ignore[union-attr]

    def push_children(self, node: Expr, stack: list[tuple[int, object, Expr | None]], at: Span | None) -> None:
        """Schedule a node's children, with its binders in scope for the parts they cover."""
        if isinstance(node, Let):
            stack += [(_UNBIND, (node.var,), None), (_VISIT, node.body, node), (_VISIT, node.value, node),
                      (_BIND, (node.var,), node)]
        elif isinstance(node, Function):
            stack += [(_UNBIND, node.params, None), (_VISIT, node.body, node), (_BIND, node.params, node)]
        elif isinstance(node, Match):
            for clause in reversed(node.clauses):
                self.check_pattern(clause.lhs, node)
                pattern_vars = clause.lhs.bound_vars()
                stack += [(_UNBIND, pattern_vars, None), (_VISIT, clause.rhs, node), (_BIND, pattern_vars, node)]
            stack.append((_VISIT, node.data, node))
        else:
            self.check_globals(node, at)
            stack.extend((_VISIT, c, node) for c in reversed(node.children()))

    def bind(self, variables: tuple[Var, ...] | list[Var], binder: Expr, in_scope: set[int]) -> None:
        for var in variables:
            if id(var) in self.bound_once:
                raise DiagnosticError(f"variable %{var.name_hint} is bound more than once",
                                      var.span or binder.span)
            self.bound_once.add(id(var))
            in_scope.add(id(var))

    def unbound_use(self, var: Var, all_bound: set[int], where: str, at: Span | None) -> None:
        """A use of a variable not in scope: an error unless it is a lone expression's free variable."""
        if id(var) in all_bound:
            self.fail_scope(var, where, at)
        if not self.allow_free:
            raise DiagnosticError(f"free variable %{var.name_hint} in {where}", at or var.span)

    def fail_scope(self, var: Var | None, where: str, at: Span | None) -> None:
        name = f"%{var.name_hint}" if var is not None else "a variable"
        raise DiagnosticError(f"{name} is used outside the scope of its binding in {where}", at)

    def check_globals(self, node: Expr, at: Span | None) -> None:
        if isinstance(node, GlobalVar) and node.name_hint not in self.mod.functions:
            raise DiagnosticError(f"undefined global @{node.name_hint}", node.span or at)
        if isinstance(node, Constructor):
            self.check_constructor(node, node.span or at)

    def check_constructor(self, ctor: Constructor, at: Span | None) -> None:
        data = self.mod.type_defs.get(ctor.belong_to)
        if data is None or ctor not in data.constructors:
            raise DiagnosticError(f"constructor {ctor.name} does not belong to a defined type", at)

    def check_pattern(self, root: Pattern, match: Match) -> None:
        stack = [root]
        while stack:
            pat = stack.pop()
            if isinstance(pat, PatternConstructor):
                self.check_constructor(pat.constructor, pat.span or match.span)
            if isinstance(pat, (PatternConstructor, PatternTuple)):
                stack.extend(pat.patterns)


_VISIT, _BIND, _UNBIND = 0, 1, 2


def _reuse_checked(root: Expr, all_bound: set[int]) -> set[int]:
    """The variables whose scope a reused (shared) node can escape, so must be checked at reuses.

    A function's own parameters are in scope in its whole body (binding one of them again is
    reported where that happens, before any reuse below it). A variable bound nowhere is either
    allowed (a lone expression's input) or already reported at its first use, which the walk
    reaches before any reuse of a node containing it.
    """
    params = {id(p) for p in root.params} if isinstance(root, Function) else set()
    return all_bound - params


def _span_of(parent: Expr | None, fallback: Span | None) -> Span | None:
    return parent.span if parent is not None and parent.span is not None else fallback


def _var_of(root: Expr, var_id: int) -> Var | None:
    """The variable with this id inside `root` (only used to name it in an error)."""
    for node in post_order(root):
        if isinstance(node, Var) and id(node) == var_id:
            return node
    return None
