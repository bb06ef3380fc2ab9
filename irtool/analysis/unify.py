"""Type unification with holes: the constraint solver under type inference.

Holes are `IncompleteType` objects created by the solver; they are told apart by identity (the
IR's `IncompleteType.__eq__` treats all holes as equal, so nothing here compares holes with `==`).
Types are small, so walking one type's structure recursively is fine; nothing here recurses over
a program.
"""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.types import (Any, FuncType, IncompleteType, RefType, TensorType, TupleType, Type, TypeCall,
                             TypeVar)


class Mismatch(Exception):
    """Two types that cannot be made equal; the caller reports it with the outer types."""

    def __init__(self, left: Type, right: Type) -> None:
        super().__init__(f"{left} vs {right}")
        self.left = left
        self.right = right


class Solver:
    """A substitution from holes to types, grown by `unify`."""

    def __init__(self) -> None:
        self.bound: dict[int, Type] = {}
        # Every hole made here stays referenced, so `id` keys are never reused.
        self.holes: list[IncompleteType] = []

    def fresh(self) -> IncompleteType:
        hole = IncompleteType(len(self.holes) + 1)
        self.holes.append(hole)
        return hole

    def find(self, t: Type) -> Type:
        """The type a hole stands for at the top level (path-compressed)."""
        if not isinstance(t, IncompleteType):
            return t
        chain: list[IncompleteType] = []
        while isinstance(t, IncompleteType):
            nxt = self.bound.get(id(t))
            if nxt is None:
                break
            chain.append(t)
            t = nxt
        for hole in chain[:-1]:
            self.bound[id(hole)] = t
        return t

    def import_type(self, t: Type) -> Type:
        """An annotation as the solver sees it: each `_` becomes its own fresh hole."""
        if isinstance(t, IncompleteType):
            return self.fresh()
        if isinstance(t, (TensorType, TypeVar)):
            return t
        return _rebuild(t, self.import_type)

    def resolve(self, t: Type) -> Type:
        """`t` with every solved hole replaced by its solution (unsolved holes stay)."""
        if type(t) is TensorType:
            return t
        t = self.find(t)
        if isinstance(t, (TensorType, TypeVar, IncompleteType)):
            return t
        return _rebuild(t, self.resolve)

    def has_hole(self, t: Type) -> bool:
        if type(t) is TensorType:
            return False
        t = self.find(t)
        if isinstance(t, IncompleteType):
            return True
        return any(self.has_hole(c) for c in _components(t))

    def instantiate(self, fn: FuncType, type_args: tuple[Type, ...] = ()) -> FuncType:
        """A polymorphic function type with its type parameters replaced by fresh holes (or `type_args`)."""
        if not fn.type_params:
            return fn
        fn = self.resolve(fn)  # type: ignore[assignment]
        args = type_args or tuple(self.fresh() for _ in fn.type_params)
        mapping = {p.name: a for p, a in zip(fn.type_params, args)}
        return FuncType(tuple(substitute(a, mapping) for a in fn.arg_types), substitute(fn.ret_type, mapping))

    def unify(self, a: Type, b: Type) -> None:
        """Make `a` and `b` equal by binding holes; raises `Mismatch` at the first clash."""
        stack: list[tuple[Type, Type]] = [(a, b)]
        while stack:
            x, y = stack.pop()
            x, y = self.find(x), self.find(y)
            if x is y:
                continue
            if isinstance(x, IncompleteType):
                self._bind(x, y)
            elif isinstance(y, IncompleteType):
                self._bind(y, x)
            elif isinstance(x, TensorType) and isinstance(y, TensorType):
                if not tensors_match(x, y):
                    raise Mismatch(x, y)
            elif isinstance(x, TupleType) and isinstance(y, TupleType):
                if len(x.fields) != len(y.fields):
                    raise Mismatch(x, y)
                stack.extend(zip(x.fields, y.fields))
            elif isinstance(x, FuncType) and isinstance(y, FuncType):
                if len(x.arg_types) != len(y.arg_types):
                    raise Mismatch(x, y)
                x, y = self._align_type_params(x, y)
                stack.extend(zip(x.arg_types, y.arg_types))
                stack.append((x.ret_type, y.ret_type))
            elif isinstance(x, TypeCall) and isinstance(y, TypeCall):
                if x.name != y.name or len(x.args) != len(y.args):
                    raise Mismatch(x, y)
                stack.extend(zip(x.args, y.args))
            elif isinstance(x, RefType) and isinstance(y, RefType):
                stack.append((x.value, y.value))
            elif isinstance(x, TypeVar) and isinstance(y, TypeVar) and x.name == y.name:
                continue
            else:
                raise Mismatch(x, y)

    def _align_type_params(self, x: FuncType, y: FuncType) -> tuple[FuncType, FuncType]:
        """Rename the shared type parameters alike and instantiate the extra ones with holes.

        So a polymorphic function (`fn [A](A) -> A`) is accepted where a monomorphic one is
        expected, as TVM's unifier does.
        """
        if len(x.type_params) == len(y.type_params) and x.type_params == y.type_params:
            return x, y
        swapped = len(x.type_params) < len(y.type_params)
        big, small = (y, x) if swapped else (x, y)
        big = self.resolve(big)  # type: ignore[assignment]
        mapping: dict[str, Type] = {}
        for i, p in enumerate(big.type_params):
            mapping[p.name] = small.type_params[i] if i < len(small.type_params) else self.fresh()
        big = FuncType(tuple(substitute(a, mapping) for a in big.arg_types), substitute(big.ret_type, mapping),
                       small.type_params)
        return (small, big) if swapped else (big, small)

    def _bind(self, hole: IncompleteType, t: Type) -> None:
        if self._occurs(hole, t):
            raise Mismatch(hole, t)
        self.bound[id(hole)] = t

    def _occurs(self, hole: IncompleteType, t: Type) -> bool:
        t = self.find(t)
        if t is hole:
            return True
        return any(self._occurs(hole, c) for c in _components(t))


def tensors_match(x: TensorType, y: TensorType) -> bool:
    """Same dtype and rank, and every dimension equal or unknown (`?` matches any dimension)."""
    if x.dtype != y.dtype or len(x.shape) != len(y.shape):
        return False
    return all(a == b or isinstance(a, Any) or isinstance(b, Any) for a, b in zip(x.shape, y.shape))


def substitute(t: Type, mapping: dict[str, Type]) -> Type:
    """Replace type variables by name; a nested polymorphic function type shadows its own parameters."""
    if isinstance(t, TypeVar):
        return mapping.get(t.name, t)
    if isinstance(t, (TensorType, IncompleteType)):
        return t
    if isinstance(t, FuncType) and t.type_params:
        inner = {k: v for k, v in mapping.items() if all(p.name != k for p in t.type_params)}
        return _rebuild(t, lambda c: substitute(c, inner))
    return _rebuild(t, lambda c: substitute(c, mapping))


def _components(t: Type) -> tuple[Type, ...]:
    if isinstance(t, TupleType):
        return t.fields
    if isinstance(t, FuncType):
        return (*t.arg_types, t.ret_type)
    if isinstance(t, TypeCall):
        return t.args
    if isinstance(t, RefType):
        return (t.value,)
    return ()


def _rebuild(t: Type, f: Callable[[Type], Type]) -> Type:
    """`t` with `f` applied to its immediate component types (the same object if nothing changed)."""
    parts = _components(t)
    new = tuple(f(c) for c in parts)
    if all(a is b for a, b in zip(parts, new)):
        return t
    if isinstance(t, TupleType):
        return TupleType(new)
    if isinstance(t, FuncType):
        return FuncType(new[:-1], new[-1], t.type_params)
    if isinstance(t, TypeCall):
        return TypeCall(t.name, new)
    if isinstance(t, RefType):
        return RefType(new[0])
    return t
