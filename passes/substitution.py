"""Variable substitution and binding-aware walks shared by the Relay passes.

`substitute` binds parameters to arguments (inlining, beta reduction) and gives every variable
bound inside the copied expression a fresh `Var`, so a body inlined twice never binds the same
variable twice. `LetSubstMutator` lets a pass replace a let-bound variable by the rewritten value
in the same single walk (the walk visits a let's value before its variable and body).
"""

from __future__ import annotations

from collections.abc import Mapping

from irtool.ir.expr import Expr, Function, Let, Var
from irtool.ir.visitor import ExprMutator, bound_var_ids, post_order


def fresh_var(var: Var) -> Var:
    return Var(var.name_hint, var.type_annotation, var.span, var.attrs)


class _Substitute(ExprMutator):
    def __init__(self, mapping: Mapping[int, Expr], bound: set[int]) -> None:
        super().__init__()
        self.mapping = mapping
        self.bound = bound

    def rewrite_var(self, node: Var) -> Expr:
        if id(node) in self.mapping:
            return self.mapping[id(node)]
        if id(node) in self.bound:
            return fresh_var(node)
        return node


def substitute(expr: Expr, mapping: Mapping[Var, Expr] | Mapping[int, Expr]) -> Expr:
    """A copy of `expr` with free variables replaced per `mapping` and inner binders renamed.

    `mapping` is keyed by `Var` or by `id(var)`.
    """
    by_id = {(k if isinstance(k, int) else id(k)): v for k, v in mapping.items()}
    return _Substitute(by_id, bound_var_ids(post_order(expr))).visit(expr)


def copy_function(func: Function) -> Function:
    """The function with fresh parameters and binders (for placing one definition in many spots)."""
    out = substitute(func, {})
    assert isinstance(out, Function)
    return out


def value_first_order(root: Expr) -> list[Expr]:
    """Like `post_order`, but a `Let`'s value comes before its variable (and then its body)."""
    return post_order(root, _value_first_children)


def _value_first_children(node: Expr) -> tuple[Expr, ...]:
    return (node.value, node.var, node.body) if isinstance(node, Let) else node.children()


class LetSubstMutator(ExprMutator):
    """An `ExprMutator` that can drop a let and use its rewritten value in place of the variable.

    Subclasses decide with `eliminate(let, new_value)`; when it says yes, every use of the
    variable becomes the new value and the let becomes its body.
    """

    def __init__(self) -> None:
        super().__init__()
        self.let_of: dict[int, Let] = {}
        self.dropped: set[int] = set()

    def visit(self, root: Expr) -> Expr:
        order = value_first_order(root)
        self.let_of.update((id(n.var), n) for n in order if isinstance(n, Let))
        for node in order:
            if id(node) not in self.memo:
                self.memo[id(node)] = self.rewrite(node)
        return self.memo[id(root)]

    def eliminate(self, let: Let, new_value: Expr) -> bool:
        raise NotImplementedError

    def rewrite_var(self, node: Var) -> Expr:
        let = self.let_of.get(id(node))
        # A variable reached before its let's value is rewritten is used inside that value
        # (a recursive closure); such a let always stays.
        if let is not None and id(let.value) in self.memo:
            value = self.new(let.value)
            if self.eliminate(let, value):
                self.dropped.add(id(let))
                return value
        return node

    def rewrite_let(self, node: Let) -> Expr:
        if id(node) in self.dropped:
            return self.new(node.body)
        return super().rewrite_let(node)
