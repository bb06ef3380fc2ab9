"""The operator registry: one declaration per operator with every facet passes need.

Passes never switch on operator names; they ask the registry (pattern kind for fusion, type
relation for inference, numpy implementation for the interpreter, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from irtool.ir.expr import Attrs, AttrValue
from irtool.core.span import Span
from irtool.ir.types import Type


class OpPattern(IntEnum):
    """Fusion pattern kinds, with TVM's numbering (the order matters: fusion compares them)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


class TypeRelError(Exception):
    """Raised by a type relation; type inference adds the location of the offending call."""


@dataclass(frozen=True)
class AttrField:
    """One attribute of an operator's schema.

    `kind` is one of the keys of `irtool.ops.attrs.KINDS`: int, float, bool, str, dtype,
    int_list, float_list, int_or_list, int_list_list, meta (a `meta[...][i]` reference), device
    (a meta[VirtualDevice] reference, device number or name), any.
    `optional` allows `None` as a value; `required` makes leaving the attribute out an error.
    `check` validates a well-kinded value and returns an error message (or None when fine),
    e.g. `positive` for `groups`, `lengths(1, 2, 4)` for `padding`.
    """

    name: str
    kind: str
    default: AttrValue = None
    optional: bool = False
    doc: str = ""
    required: bool = False
    check: Callable[[AttrValue], str | None] | None = None


# A value flowing through the interpreter: a tensor or a (nested) tuple of them.
Value = np.ndarray | tuple


@dataclass
class OpDef:
    """One operator with every facet passes consult; declared once in `definitions/<family>.py`.

    `extra` holds optional flags: `reshape_only` (the result is a view of the input's bytes, so
    memory planning may alias it, as TVM's TReshapeOp).
    """

    name: str
    # Number of arguments; None for variadic.
    num_inputs: int | None
    # Attribute schema in the order TVM declares (and prints) the fields; None = any keys accepted.
    attrs: tuple[AttrField, ...] | None = ()
    pattern: OpPattern = OpPattern.OPAQUE
    # Shape/dtype inference: (argument types, full attributes with defaults) -> result type.
    type_rel: Callable[[list[Type], Mapping[str, AttrValue]], Type] | None = None
    # Reference implementation: (argument values, full attributes) -> result value.
    compute: Callable[[list[Value], Mapping[str, AttrValue]], Value] | None = None
    description: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    def normalize_attrs(self, given: Mapping[str, AttrValue], span: Span | None = None) -> Attrs:
        """Validate call attributes and keep only non-default ones, in schema order.

        This makes `Call.attrs` canonical: `conv2d(x, w)` and `conv2d(x, w, groups=1)` are the
        same call, and the printer writes only what differs from the default (as TVM does).
        """
        from irtool.ops.attrs import normalize
        return normalize(self, given, span)

    def full_attrs(self, attrs: Mapping[str, AttrValue]) -> dict[str, AttrValue]:
        """Defaults merged with the call's attributes: what type relations and kernels read."""
        if self.attrs is None:
            return dict(attrs)
        out = {f.name: f.default for f in self.attrs}
        out.update(attrs)
        return out


REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY:
        raise ValueError(f"operator {op.name} registered twice")
    REGISTRY[op.name] = op
    return op


def get_op(name: str) -> OpDef | None:
    _load_all()
    return REGISTRY.get(name)


def op_names() -> list[str]:
    _load_all()
    return sorted(REGISTRY)


_loaded = False


def _load_all() -> None:
    """Import every operator definition module once (they register themselves). The TIR compute
    rules are not a facet here: lowering keeps its own table (`irtool.lower.rules.compute_rule`),
    so the registry, and everything that parses or type checks, never loads lowering."""
    global _loaded
    if not _loaded:
        _loaded = True
        import irtool.ops.definitions  # noqa: F401
