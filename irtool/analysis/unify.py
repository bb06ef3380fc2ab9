"""Type unification with holes: the constraint solver under type inference.

Holes are `IncompleteType` objects created by the solver; they are told apart by identity (the
IR's `IncompleteType.__eq__` treats all holes as equal, so nothing here compares holes with `==`).
Types are DAGs whose written-out form can be exponentially larger (a chain of `(%a, %a)` tuples),
so every walk here visits each shared part once, from an explicit stack: a walk costs the number
of distinct parts, and no nesting depth can exhaust Python's stack. Parts without holes
(`Type.complete`) are never walked. A hole is bound to its solution with every bound hole inside
already replaced, and the solution is kept once it has no holes left, so a chain of holes each
bound to a type over the previous one resolves in constant time per link; a binding that would
nest deeper than `MAX_TYPE_DEPTH` is refused (`TooDeep`).
"""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.types import MAX_TYPE_DEPTH, Any, CompoundType, FuncType, IncompleteType, TensorType, Type, TypeVar


class Mismatch(Exception):
    """Two types that cannot be made equal; the caller reports it with the outer types."""

    def __init__(self, left: Type, right: Type) -> None:
        super().__init__("type mismatch")
        self.left = left
        self.right = right


class TooDeep(Exception):
    """Unification would make a type nest deeper than `MAX_TYPE_DEPTH`."""


# What a walk does with one part: the part's replacement and whether to rebuild that replacement's
# own parts too (True), or take it as it is (False).
Visit = Callable[[Type], tuple[Type, bool]]


def rebuild(root: Type, visit: Visit, done: Callable[[Type, Type], None] | None = None) -> Type:
    """`root` with `visit` applied to every part, bottom-up, each shared part once.

    `done(part, result)`, if given, is told each part's final replacement.
    """
    memo: dict[int, Type] = {}
    alive: list[Type] = []   # replacements `visit` made stay referenced, so no id in `memo` is reused
    stack: list[tuple[Type, Type | None]] = [(root, None)]
    while stack:
        x, y = stack.pop()
        if y is not None:   # second visit: y's parts are rebuilt
            parts = y.parts()  # type: ignore[attr-defined]
            new = tuple(memo[id(p)] for p in parts)
            result = y if all(a is b for a, b in zip(parts, new)) else y.with_parts(new)  # type: ignore[attr-defined]
            memo[id(x)] = result
            if done is not None:
                done(x, result)
            continue
        if id(x) in memo:
            continue
        y, deeper = visit(x)
        if y is not x:
            alive.append(y)
        if not deeper or not isinstance(y, CompoundType):
            memo[id(x)] = y
            if done is not None:
                done(x, y)
            continue
        stack.append((x, y))
        stack.extend((p, None) for p in y.parts() if id(p) not in memo)
    return memo[id(root)]


class Solver:
    """A substitution from holes to types, grown by `unify`."""

    def __init__(self) -> None:
        self.bound: dict[int, Type] = {}
        # The complete (hole-free) solution of each hole known to have one; it never changes.
        self.solved: dict[int, Type] = {}
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
        """An annotation as the solver sees it: each `_` becomes its own fresh hole (one object
        used at two places of a DAG annotation is one hole)."""
        if t.complete:
            return t
        return rebuild(t, lambda x: (self.fresh(), False) if isinstance(x, IncompleteType) else (x, not x.complete))

    def resolve(self, t: Type) -> Type:
        """`t` with every solved hole replaced by its solution (unsolved holes stay)."""
        if t.complete:
            return t
        return rebuild(t, self._resolve_part, self._remember)

    def _resolve_part(self, x: Type) -> tuple[Type, bool]:
        if x.complete:
            return x, False
        if isinstance(x, IncompleteType):
            known = self.solved.get(id(x))
            if known is not None:
                return known, False
            y = self.find(x)
            return y, y is not x
        return x, True

    def _remember(self, part: Type, result: Type) -> None:
        if result.complete and isinstance(part, IncompleteType) and id(part) in self.bound:
            self.solved[id(part)] = result

    def has_hole(self, t: Type) -> bool:
        return not self.resolve(t).complete

    def instantiate(self, fn: FuncType, type_args: tuple[Type, ...] = ()) -> FuncType:
        """A polymorphic function type with its type parameters replaced by fresh holes (or `type_args`)."""
        if not fn.type_params:
            return fn
        fn = self.resolve(fn)  # type: ignore[assignment]
        args = type_args or tuple(self.fresh() for _ in fn.type_params)
        mapping = {p.name: a for p, a in zip(fn.type_params, args)}
        return substitute(FuncType(fn.arg_types, fn.ret_type), mapping)  # type: ignore[return-value]

    def unify(self, a: Type, b: Type) -> None:
        """Make `a` and `b` equal by binding holes; raises `Mismatch` at the first clash."""
        stack: list[tuple[Type, Type]] = [(a, b)]
        seen: set[tuple[int, int]] | None = None   # compound pairs already taken apart
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
            elif isinstance(x, TypeVar) and isinstance(y, TypeVar) and x.name == y.name:
                continue
            elif type(x) is type(y) and isinstance(x, CompoundType) and isinstance(y, CompoundType):
                if seen is None:
                    seen = set()
                key = (id(x), id(y))
                if key in seen:
                    continue
                seen.add(key)   # x and y stay reachable from a, b or the bindings: ids are stable
                if isinstance(x, FuncType) and isinstance(y, FuncType):
                    if len(x.arg_types) != len(y.arg_types):
                        raise Mismatch(x, y)
                    x, y = self._align_type_params(x, y)
                px, py = x.parts(), y.parts()
                if len(px) != len(py) or x.head() != y.head():
                    raise Mismatch(x, y)
                stack.extend(zip(px, py))
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
        renamed = substitute(FuncType(big.arg_types, big.ret_type), mapping)
        big = FuncType(renamed.arg_types, renamed.ret_type, small.type_params)  # type: ignore[attr-defined]
        return (small, big) if swapped else (big, small)

    def _bind(self, hole: IncompleteType, t: Type) -> None:
        solution = self.resolve(t)
        if solution.depth > MAX_TYPE_DEPTH:
            raise TooDeep()
        if not solution.complete and _holds(solution, hole):
            raise Mismatch(hole, t)   # the occurs check: `hole` cannot stand for a type holding itself
        self.bound[id(hole)] = solution
        if solution.complete:
            self.solved[id(hole)] = solution


def _holds(t: Type, hole: IncompleteType) -> bool:
    """Whether `hole` is a part of `t` (a resolved type: its holes are unbound); complete parts are skipped."""
    stack = [t]
    seen: set[int] = set()
    while stack:
        x = stack.pop()
        if x is hole:
            return True
        if isinstance(x, CompoundType) and not x.complete and id(x) not in seen:
            seen.add(id(x))
            stack.extend(x.parts())
    return False


def tensors_match(x: TensorType, y: TensorType) -> bool:
    """Same dtype and rank, and every dimension equal or unknown (`?` matches any dimension)."""
    if x.dtype != y.dtype or len(x.shape) != len(y.shape):
        return False
    return all(a == b or isinstance(a, Any) or isinstance(b, Any) for a, b in zip(x.shape, y.shape))


def substitute(t: Type, mapping: dict[str, Type]) -> Type:
    """Replace type variables by name; a nested polymorphic function type shadows its own parameters.

    A shadowing function type starts a walk of its own with the smaller mapping, so only such
    binders nested in one another (never the size of a type) deepen the Python stack.
    """
    def visit(x: Type) -> tuple[Type, bool]:
        if isinstance(x, TypeVar):
            return mapping.get(x.name, x), False
        if isinstance(x, FuncType) and x.type_params and any(p.name in mapping for p in x.type_params):
            inner = {k: v for k, v in mapping.items() if all(p.name != k for p in x.type_params)}
            return substitute(x, inner), False
        return x, isinstance(x, CompoundType)

    return rebuild(t, visit)
