"""Iterative walkers over expression DAGs.

Real models are long chains (hundreds of thousands of nodes), so nothing here recurses: walks use
an explicit stack and visit each shared node once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from irtool.ir.adt import Clause, Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar
from irtool.ir.expr import (Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate,
                            RefRead, RefWrite, Tuple, TupleGetItem, Var)


def post_order(root: Expr, children: Callable[[Expr], Sequence[Expr]] | None = None) -> list[Expr]:
    """Every distinct node reachable from `root`, each after all of its children.

    `children` replaces `Expr.children` for walks that follow other edges (not entering primitive
    functions, another operand order); `None` calls the method directly, as this walk is hot.
    """
    order: list[Expr] = []
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for child in reversed(node.children() if children is None else children(node)):
            if id(child) not in seen:
                stack.append((child, False))
    return order


def use_counts(root: Expr) -> dict[int, int]:
    """How many parent edges point at each distinct node (by id); the root counts one use."""
    counts: dict[int, int] = {id(root): 1}
    for node in post_order(root):
        for child in node.children():
            counts[id(child)] = counts.get(id(child), 0) + 1
    return counts


def bound_var_ids(nodes: list[Expr]) -> set[int]:
    """Ids of the variables the given nodes bind (parameters, let variables, pattern variables)."""
    out: set[int] = set()
    for node in nodes:
        if isinstance(node, Function):
            out.update(id(p) for p in node.params)
        elif isinstance(node, Let):
            out.add(id(node.var))
        elif isinstance(node, Match):
            for clause in node.clauses:
                out.update(id(v) for v in clause.lhs.bound_vars())
    return out


def free_vars(root: Expr) -> list[Var]:
    """Variables used but not bound inside `root`, in first-use order."""
    nodes = post_order(root)
    bound = bound_var_ids(nodes)
    seen: set[int] = set()
    out: list[Var] = []
    for node in nodes:
        if isinstance(node, Var) and id(node) not in bound and id(node) not in seen:
            seen.add(id(node))
            out.append(node)
    return out


def rewrite_pattern(pattern: Pattern, var_map: Callable[[Var], Expr]) -> Pattern:
    """The pattern with its bound variables replaced (iterative over nesting)."""
    if not pattern.bound_vars():
        return pattern
    results: dict[int, Pattern] = {}
    stack: list[tuple[Pattern, bool]] = [(pattern, False)]
    while stack:
        p, expanded = stack.pop()
        if isinstance(p, (PatternConstructor, PatternTuple)) and not expanded:
            stack.append((p, True))
            stack.extend((q, False) for q in p.patterns)
            continue
        if isinstance(p, PatternVar):
            new_var = var_map(p.var)
            results[id(p)] = p if new_var is p.var else PatternVar(new_var, p.span)  # type: ignore[arg-type]
        elif isinstance(p, PatternConstructor):
            results[id(p)] = PatternConstructor(p.constructor, tuple(results[id(q)] for q in p.patterns), p.span)
        elif isinstance(p, PatternTuple):
            results[id(p)] = PatternTuple(tuple(results[id(q)] for q in p.patterns), p.span)
        else:
            results[id(p)] = p
    return results[id(pattern)]


class ExprMutator:
    """Rebuilds an expression bottom-up; override `rewrite_<kind>` hooks to change nodes.

    Each hook receives the original node after its children have been rewritten; `self.new(child)`
    gives a child's replacement. A node whose children are all unchanged is kept as is, so sharing
    and checked types survive untouched parts. Memoised by node identity, so DAGs stay DAGs.
    """

    def __init__(self) -> None:
        self.memo: dict[int, Expr] = {}

    def visit(self, root: Expr) -> Expr:
        for node in post_order(root):
            if id(node) not in self.memo:
                self.memo[id(node)] = self.rewrite(node)
        return self.memo[id(root)]

    def new(self, expr: Expr) -> Expr:
        return self.memo.get(id(expr), expr)

    def new_var(self, var: Var) -> Var:
        out = self.new(var)
        return out if isinstance(out, Var) else var

    def rewrite(self, node: Expr) -> Expr:
        hook = getattr(self, _HOOKS.get(type(node), "rewrite_other"))
        return hook(node)

    # Default hooks: rebuild when a child changed.
    def rewrite_other(self, node: Expr) -> Expr:
        return node

    def rewrite_var(self, node: Var) -> Expr:
        return node

    def rewrite_call(self, node: Call) -> Expr:
        op, args = self.new(node.op), tuple(self.new(a) for a in node.args)
        if op is node.op and all(a is b for a, b in zip(args, node.args)):
            return node
        return Call(op, args, node.attrs, node.span, node.type_args)

    def rewrite_function(self, node: Function) -> Expr:
        params, body = tuple(self.new_var(p) for p in node.params), self.new(node.body)
        if body is node.body and all(a is b for a, b in zip(params, node.params)):
            return node
        return Function(params, body, node.ret_type, node.type_params, node.attrs, node.span)

    def rewrite_let(self, node: Let) -> Expr:
        var, value, body = self.new_var(node.var), self.new(node.value), self.new(node.body)
        if var is node.var and value is node.value and body is node.body:
            return node
        return Let(var, value, body, node.span)

    def rewrite_if(self, node: If) -> Expr:
        c, t, f = self.new(node.cond), self.new(node.true_branch), self.new(node.false_branch)
        if c is node.cond and t is node.true_branch and f is node.false_branch:
            return node
        return If(c, t, f, node.span)

    def rewrite_tuple(self, node: Tuple) -> Expr:
        fields = tuple(self.new(f) for f in node.fields)
        if all(a is b for a, b in zip(fields, node.fields)):
            return node
        return Tuple(fields, node.span)

    def rewrite_tuple_get_item(self, node: TupleGetItem) -> Expr:
        t = self.new(node.tuple_value)
        return node if t is node.tuple_value else TupleGetItem(t, node.index, node.span)

    def rewrite_ref_create(self, node: RefCreate) -> Expr:
        v = self.new(node.value)
        return node if v is node.value else RefCreate(v, node.span)

    def rewrite_ref_read(self, node: RefRead) -> Expr:
        r = self.new(node.ref)
        return node if r is node.ref else RefRead(r, node.span)

    def rewrite_ref_write(self, node: RefWrite) -> Expr:
        r, v = self.new(node.ref), self.new(node.value)
        return node if r is node.ref and v is node.value else RefWrite(r, v, node.span)

    def rewrite_match(self, node: Match) -> Expr:
        data = self.new(node.data)
        clauses = tuple(Clause(rewrite_pattern(c.lhs, self.new_var), self.new(c.rhs)) for c in node.clauses)
        if data is node.data and all(a.lhs is b.lhs and a.rhs is b.rhs for a, b in zip(clauses, node.clauses)):
            return node
        return Match(data, clauses, node.complete, node.span)


_HOOKS: dict[type, str] = {
    Var: "rewrite_var", Call: "rewrite_call", Function: "rewrite_function", Let: "rewrite_let",
    If: "rewrite_if", Tuple: "rewrite_tuple", TupleGetItem: "rewrite_tuple_get_item",
    RefCreate: "rewrite_ref_create", RefRead: "rewrite_ref_read", RefWrite: "rewrite_ref_write",
    Match: "rewrite_match", GlobalVar: "rewrite_other", Op: "rewrite_other", Constant: "rewrite_other",
    Constructor: "rewrite_other",
}
