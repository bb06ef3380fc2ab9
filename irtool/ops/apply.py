"""Applying one operator: to IR arguments (`op_call`, a canonical `Call` that rewriting passes
build), or to concrete values with every facet checked against the others (`apply_op`).

Used by tests and by tools that evaluate a single call (constant folding, the interpreter's
debugging mode): attributes are validated, the type relation predicts the result type, the
reference implementation runs, and the two must agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from irtool.ir.expr import AttrValue, Call, Expr, Op
from irtool.core.span import Span
from irtool.ir.types import TensorType, TupleType, Type
from irtool.ops.registry import Value, get_op


def op_call(name: str, args: list[Expr], span: Span | None, **attrs: object) -> Call:
    """A call of a registered operator with canonical (non-default) attributes."""
    opdef = get_op(name)
    assert opdef is not None, name
    return Call(Op(name), args, opdef.normalize_attrs(attrs, span), span)  # type: ignore[arg-type]


def value_type(value: Value) -> Type:
    """The Relay type of a numpy value or a (nested) tuple of them."""
    if isinstance(value, tuple):
        return TupleType(tuple(value_type(v) for v in value))
    arr = np.asarray(value)
    return TensorType(tuple(int(d) for d in arr.shape), str(arr.dtype))


def apply_op(name: str, args: Sequence[Value], attrs: Mapping[str, AttrValue] | None = None,
             span: Span | None = None) -> tuple[Type, Value]:
    """(inferred type, computed value) of `name(*args, **attrs)`.

    Raises DiagnosticError for bad attributes, TypeRelError for ill-typed arguments, and
    AssertionError if the implementation's result disagrees with the type relation.
    """
    op = get_op(name)
    if op is None:
        raise KeyError(f"unknown operator {name}")
    full = op.full_attrs(op.normalize_attrs(attrs or {}, span))
    assert op.type_rel is not None and op.compute is not None
    result_type = op.type_rel([value_type(a) for a in args], full)
    with np.errstate(all="ignore"):
        value = op.compute(list(args), full)
    got = value_type(value)
    if got != result_type:
        raise AssertionError(f"{name}: implementation returned {got}, type relation says "
                             f"{result_type}")
    return result_type, value
