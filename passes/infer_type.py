"""`infer-type`: type inference as a pass, optionally writing the inferred types into the text."""

from __future__ import annotations

import dataclasses

from irtool.analysis.typecheck import infer_types
from irtool.ir.expr import Expr, Function, Var
from irtool.ir.module import IRModule
from irtool.ir.types import IncompleteType, Type
from irtool.ir.visitor import ExprMutator
from irtool.passes.base import ModulePass


def _missing(t: Type | None) -> bool:
    return t is None or isinstance(t, IncompleteType)


class _Annotate(ExprMutator):
    """Binders without a type annotation get their inferred type; functions get their return type.

    A binder is visited before its uses, so every use picks up the annotated variable.
    """

    def rewrite_var(self, node: Var) -> Expr:
        if node.name_hint and _missing(node.type_annotation) and node.checked_type is not None:
            out = Var(node.name_hint, node.checked_type, node.span, node.attrs)
            out.checked_type = node.checked_type
            return out
        return node

    def rewrite_function(self, node: Function) -> Expr:
        out = super().rewrite_function(node)
        assert isinstance(out, Function)
        ret = node.body.checked_type
        if _missing(out.ret_type) and ret is not None:
            out = Function(out.params, out.body, ret, out.type_params, out.attrs, out.span)
        return out


@dataclasses.dataclass
class InferTypePass(ModulePass):
    """Fill in every expression's type (shown by `--print-types`); `annotate=true` also writes
    inferred types on unannotated parameters, let variables and function results."""

    name = "infer-type"
    description = "infer the type of every expression (annotate=true: write them on binders and results)"

    annotate: bool = False

    def apply(self, mod: IRModule) -> IRModule:
        infer_types(mod)
        out = mod.copy()
        if self.annotate:
            for name, func in mod.relay_functions():
                annotated = _Annotate().visit(func)
                assert isinstance(annotated, Function)
                annotated.checked_type = func.checked_type
                out.functions[name] = annotated
        return out
