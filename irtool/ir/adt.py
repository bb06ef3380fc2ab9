"""Algebraic data types: definitions, constructors, and the patterns of `match`."""

from __future__ import annotations

from irtool.ir.expr import Expr, Var
from irtool.core.span import Span
from irtool.ir.types import Type, TypeVar


class Constructor(Expr):
    """A data constructor such as `Cons`; constructor names are unique within a module."""

    __slots__ = ("name", "inputs", "belong_to", "tag")

    def __init__(self, name: str, inputs: tuple[Type, ...], belong_to: str, tag: int,
                 span: Span | None = None) -> None:
        super().__init__(span)
        self.name = name
        self.inputs = inputs
        self.belong_to = belong_to
        self.tag = tag

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Constructor) and (other.name, other.belong_to) == (self.name, self.belong_to)

    def __hash__(self) -> int:
        return hash(("Constructor", self.name, self.belong_to))

    def __repr__(self) -> str:
        return f"Constructor({self.name})"


class TypeData:
    """`type Name[A, ...] { Ctor(T, ...), ... }`, or `extern type Name[...]` with no constructors."""

    __slots__ = ("name", "type_params", "constructors", "extern", "span")

    def __init__(self, name: str, type_params: tuple[TypeVar, ...], constructors: list[Constructor],
                 extern: bool = False, span: Span | None = None) -> None:
        self.name = name
        self.type_params = type_params
        self.constructors = constructors
        self.extern = extern
        self.span = span

    def __repr__(self) -> str:
        return f"TypeData({self.name}, {[c.name for c in self.constructors]})"


class Pattern:
    __slots__ = ("span",)

    def __init__(self, span: Span | None = None) -> None:
        self.span = span

    def bound_vars(self) -> list[Var]:
        """Variables this pattern binds, left to right (iterative: patterns can nest deeply)."""
        out: list[Var] = []
        stack: list[Pattern] = [self]
        while stack:
            p = stack.pop()
            if isinstance(p, PatternVar):
                out.append(p.var)
            elif isinstance(p, (PatternConstructor, PatternTuple)):
                stack.extend(reversed(p.patterns))
        return out


class PatternWildcard(Pattern):
    __slots__ = ()


class PatternVar(Pattern):
    __slots__ = ("var",)

    def __init__(self, var: Var, span: Span | None = None) -> None:
        super().__init__(span)
        self.var = var


class PatternConstructor(Pattern):
    __slots__ = ("constructor", "patterns")

    def __init__(self, constructor: Constructor, patterns: tuple[Pattern, ...] = (),
                 span: Span | None = None) -> None:
        super().__init__(span)
        self.constructor = constructor
        self.patterns = patterns


class PatternTuple(Pattern):
    __slots__ = ("patterns",)

    def __init__(self, patterns: tuple[Pattern, ...], span: Span | None = None) -> None:
        super().__init__(span)
        self.patterns = patterns


class Clause:
    __slots__ = ("lhs", "rhs")

    def __init__(self, lhs: Pattern, rhs: Expr) -> None:
        self.lhs = lhs
        self.rhs = rhs
