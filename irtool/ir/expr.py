"""Relay expressions.

Expressions are compared by identity: the same object reached twice is a shared (DAG) node, as a
`%N = ...;` graph binding makes it. Structural comparison lives in `equality.py`. Every node has
a `span` (where it came from) and a `checked_type` slot that type inference fills.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from irtool.core.span import Span
from irtool.ir.types import Type

if TYPE_CHECKING:
    from irtool.ir.adt import Clause


class MetaRef:
    """An attribute value that names an entry of the `#[metadata]` table, e.g. `meta[VirtualDevice][0]`."""

    __slots__ = ("kind", "index")

    def __init__(self, kind: str, index: int) -> None:
        self.kind = kind
        self.index = index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetaRef) and (self.kind, self.index) == (other.kind, other.index)

    def __hash__(self) -> int:
        return hash((self.kind, self.index))

    def __repr__(self) -> str:
        return f"meta[{self.kind}][{self.index}]"


# An attribute value as the text can write it.
AttrValue = int | float | bool | str | None | tuple | MetaRef


class Attrs(Mapping[str, AttrValue]):
    """An immutable, ordered attribute dictionary (call attributes, function attributes).

    Lists are stored as tuples so that attributes hash and compare by value. Order is kept because
    the printer writes attributes in the order the operator schema declares them.
    """

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping[str, AttrValue] | None = None) -> None:
        self._items: dict[str, AttrValue] = {k: freeze_attr(v) for k, v in (items or {}).items()}
        self._hash: int | None = None

    def __getitem__(self, key: str) -> AttrValue:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Attrs):
            return NotImplemented
        return attrs_key(self._items) == attrs_key(other._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(attrs_key(self._items))
        return self._hash

    def __repr__(self) -> str:
        return f"Attrs({self._items!r})"

    def with_items(self, **updates: AttrValue) -> Attrs:
        merged = dict(self._items)
        merged.update(updates)
        return Attrs(merged)

    def without(self, *keys: str) -> Attrs:
        return Attrs({k: v for k, v in self._items.items() if k not in keys})


def freeze_attr(value: object) -> AttrValue:
    if isinstance(value, (list, tuple)):
        return tuple(freeze_attr(v) for v in value)
    return value  # type: ignore[return-value]


def attrs_key(items: Mapping[str, AttrValue]) -> tuple:
    """A hashable key that tells `1`, `1.0` and `True` apart (Python's == would not)."""
    def typed(v: AttrValue) -> object:
        if isinstance(v, tuple):
            return ("list", tuple(typed(x) for x in v))
        return (type(v).__name__, v)
    return tuple((k, typed(v)) for k, v in items.items())


EMPTY_ATTRS = Attrs()


class Expr:
    """Base of all Relay expressions."""

    __slots__ = ("span", "checked_type")

    def __init__(self, span: Span | None = None) -> None:
        self.span = span
        self.checked_type: Type | None = None

    def children(self) -> tuple[Expr, ...]:
        """Sub-expressions in evaluation order (used by the iterative walkers)."""
        return ()


class Var(Expr):
    """A local variable `%name`. Identity is the variable; `name_hint` is only for printing."""

    __slots__ = ("name_hint", "type_annotation", "attrs")

    def __init__(self, name_hint: str, type_annotation: Type | None = None,
                 span: Span | None = None, attrs: Attrs = EMPTY_ATTRS) -> None:
        super().__init__(span)
        self.name_hint = name_hint
        self.type_annotation = type_annotation
        # Binder attributes such as `{virtual_device=meta[VirtualDevice][0]}`.
        self.attrs = attrs

    def __repr__(self) -> str:
        return f"Var(%{self.name_hint})"


class GlobalVar(Expr):
    """A reference to a module-level definition `@name`; equal by name."""

    __slots__ = ("name_hint",)

    def __init__(self, name_hint: str, span: Span | None = None) -> None:
        super().__init__(span)
        self.name_hint = name_hint

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GlobalVar) and other.name_hint == self.name_hint

    def __hash__(self) -> int:
        return hash(("GlobalVar", self.name_hint))

    def __repr__(self) -> str:
        return f"GlobalVar(@{self.name_hint})"


class Op(Expr):
    """A reference to a registered primitive operator such as `nn.conv2d`."""

    __slots__ = ("name",)

    def __init__(self, name: str, span: Span | None = None) -> None:
        super().__init__(span)
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Op) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("Op", self.name))

    def __repr__(self) -> str:
        return f"Op({self.name})"


class Constant(Expr):
    """A tensor constant; scalars print as literals, others via the metadata table."""

    __slots__ = ("data",)

    def __init__(self, data: np.ndarray, span: Span | None = None) -> None:
        super().__init__(span)
        self.data = data

    def __repr__(self) -> str:
        return f"Constant({self.data.dtype}{list(self.data.shape)})"


class Call(Expr):
    __slots__ = ("op", "args", "attrs", "type_args")

    def __init__(self, op: Expr, args: tuple[Expr, ...] | list[Expr], attrs: Attrs = EMPTY_ATTRS,
                 span: Span | None = None, type_args: tuple[Type, ...] = ()) -> None:
        super().__init__(span)
        self.op = op
        self.args = tuple(args)
        self.attrs = attrs
        self.type_args = type_args

    def children(self) -> tuple[Expr, ...]:
        return (self.op, *self.args)

    def __repr__(self) -> str:
        return f"Call({self.op!r}, {len(self.args)} args)"


class Function(Expr):
    __slots__ = ("params", "body", "ret_type", "type_params", "attrs")

    def __init__(self, params: tuple[Var, ...] | list[Var], body: Expr, ret_type: Type | None = None,
                 type_params: tuple = (), attrs: Attrs = EMPTY_ATTRS, span: Span | None = None) -> None:
        super().__init__(span)
        self.params = tuple(params)
        self.body = body
        self.ret_type = ret_type
        self.type_params = tuple(type_params)
        self.attrs = attrs

    def children(self) -> tuple[Expr, ...]:
        return (*self.params, self.body)

    @property
    def is_primitive(self) -> bool:
        return bool(self.attrs.get("Primitive", 0))

    def __repr__(self) -> str:
        return f"Function({len(self.params)} params)"


class Let(Expr):
    __slots__ = ("var", "value", "body")

    def __init__(self, var: Var, value: Expr, body: Expr, span: Span | None = None) -> None:
        super().__init__(span)
        self.var = var
        self.value = value
        self.body = body

    def children(self) -> tuple[Expr, ...]:
        return (self.var, self.value, self.body)


class If(Expr):
    __slots__ = ("cond", "true_branch", "false_branch")

    def __init__(self, cond: Expr, true_branch: Expr, false_branch: Expr, span: Span | None = None) -> None:
        super().__init__(span)
        self.cond = cond
        self.true_branch = true_branch
        self.false_branch = false_branch

    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.true_branch, self.false_branch)


class Tuple(Expr):
    __slots__ = ("fields",)

    def __init__(self, fields: tuple[Expr, ...] | list[Expr], span: Span | None = None) -> None:
        super().__init__(span)
        self.fields = tuple(fields)

    def children(self) -> tuple[Expr, ...]:
        return self.fields


class TupleGetItem(Expr):
    __slots__ = ("tuple_value", "index")

    def __init__(self, tuple_value: Expr, index: int, span: Span | None = None) -> None:
        super().__init__(span)
        self.tuple_value = tuple_value
        self.index = index

    def children(self) -> tuple[Expr, ...]:
        return (self.tuple_value,)


class RefCreate(Expr):
    __slots__ = ("value",)

    def __init__(self, value: Expr, span: Span | None = None) -> None:
        super().__init__(span)
        self.value = value

    def children(self) -> tuple[Expr, ...]:
        return (self.value,)


class RefRead(Expr):
    __slots__ = ("ref",)

    def __init__(self, ref: Expr, span: Span | None = None) -> None:
        super().__init__(span)
        self.ref = ref

    def children(self) -> tuple[Expr, ...]:
        return (self.ref,)


class RefWrite(Expr):
    __slots__ = ("ref", "value")

    def __init__(self, ref: Expr, value: Expr, span: Span | None = None) -> None:
        super().__init__(span)
        self.ref = ref
        self.value = value

    def children(self) -> tuple[Expr, ...]:
        return (self.ref, self.value)


class Match(Expr):
    """`match (data) { clauses }`; `complete=False` is `match?`."""

    __slots__ = ("data", "clauses", "complete")

    def __init__(self, data: Expr, clauses: tuple[Clause, ...] | list[Clause], complete: bool = True,
                 span: Span | None = None) -> None:
        super().__init__(span)
        self.data = data
        self.clauses = tuple(clauses)
        self.complete = complete

    def children(self) -> tuple[Expr, ...]:
        out: list[Expr] = [self.data]
        for clause in self.clauses:
            out.extend(clause.lhs.bound_vars())
            out.append(clause.rhs)
        return tuple(out)

