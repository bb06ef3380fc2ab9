"""Relay types. Types are small immutable values: equality and hashing are structural.

Types are DAGs: inference shares parts (the type of `(%a, %a)` holds the type of `%a` twice), so
a chain of such tuples is exponentially longer written out than it is in memory. Nothing here
walks a type as a tree, nor recursively: a compound type learns its nesting depth and whether it
holds a hole `_` when it is built (from its parts, which already know theirs), caches its hash,
compares each pair of shared parts once, and is written out from an explicit stack.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

# The deepest nesting of tuple, function, `ref` and ADT types that the parser and type inference
# accept (each level is one type built of others). Programs need a handful; the bound keeps every
# later consumer of a type (interpreter, code generator, tools) far from Python's recursion limit.
MAX_TYPE_DEPTH = 100

# A type's text in a diagnostic (`str(t)`) stops after this many characters.
_SHOWN_CHARS = 2000

_DTYPE_RE = re.compile(r"(bool|int|uint|float|bfloat)(\d*)(?:x(\d+))?")
_DEFAULT_BITS = {"bool": 1, "int": 32, "uint": 32, "float": 32, "bfloat": 16}
# The bit widths of each kind that numpy, the interpreters and the code generator all handle
# (bfloat16, which numpy lacks, only in compiled code). TVM spells bool `uint1`.
DTYPE_WIDTHS = {"bool": (1,), "int": (8, 16, 32, 64), "uint": (8, 16, 32, 64), "float": (16, 32, 64),
                "bfloat": (16,)}
MAX_LANES = 65535   # a vector dtype `float32x4` has 1..65535 lanes, as in TVM
VALID_DTYPES = ", ".join(["bool"] + [f"{kind}{bits}" for kind, widths in DTYPE_WIDTHS.items() if kind != "bool"
                                     for bits in widths])


class Type:
    """Base of all Relay types; `str()` gives the Relay text syntax (cut short for huge types)."""

    __slots__ = ()

    # Leaves nest nothing and are complete; `CompoundType` computes both from its parts.
    depth = 0
    complete = True   # holds no `IncompleteType` (hole), however deep

    def __str__(self) -> str:
        text, whole = type_text_prefix(self, _SHOWN_CHARS)
        return text if whole else text + "..."


@dataclass(frozen=True, slots=True)
class Any:
    """An unknown (dynamic) dimension, printed `?`."""

    def __str__(self) -> str:
        return "?"


Dim = int | Any


@dataclass(frozen=True, slots=True)
class TensorType(Type):
    """A tensor of static or partly unknown shape; a 0-d tensor is a scalar and prints as its dtype."""

    shape: tuple[Dim, ...]
    dtype: str

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(frozen=True, slots=True)
class TypeVar(Type):
    """A type parameter of a polymorphic function or ADT; compared by name within its binder."""

    name: str


@dataclass(frozen=True, slots=True, eq=False)
class CompoundType(Type):
    """A type made of other types (`parts()`): tuple, function, ADT application, reference.

    Its depth (1 + the deepest part's) and completeness are set at construction, its hash on
    first use; `==` compares two DAGs pair of parts by pair of parts, each pair once.
    """

    depth: int = field(init=False, repr=False)
    complete: bool = field(init=False, repr=False)
    _hash: int | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        parts = self.parts()
        object.__setattr__(self, "depth", 1 + max((p.depth for p in parts), default=0))
        object.__setattr__(self, "complete", all(p.complete for p in parts))
        object.__setattr__(self, "_hash", None)

    def parts(self) -> tuple[Type, ...]:
        raise NotImplementedError

    def with_parts(self, parts: tuple[Type, ...]) -> CompoundType:
        """The same kind of type over other parts (in `parts()` order)."""
        raise NotImplementedError

    def head(self) -> object:
        """What besides the parts two types of this kind must share to be equal."""
        return ()

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not type(self):
            return NotImplemented
        return _equal(self, other)  # type: ignore[arg-type]

    def __hash__(self) -> int:
        h = self._hash
        return h if h is not None else _hash_dag(self)


@dataclass(frozen=True, slots=True, eq=False)
class TupleType(CompoundType):
    fields: tuple[Type, ...]

    def parts(self) -> tuple[Type, ...]:
        return self.fields

    def with_parts(self, parts: tuple[Type, ...]) -> TupleType:
        return TupleType(parts)


@dataclass(frozen=True, slots=True, eq=False)
class FuncType(CompoundType):
    arg_types: tuple[Type, ...]
    ret_type: Type
    type_params: tuple[TypeVar, ...] = ()

    def parts(self) -> tuple[Type, ...]:
        return (*self.arg_types, self.ret_type)

    def with_parts(self, parts: tuple[Type, ...]) -> FuncType:
        return FuncType(parts[:-1], parts[-1], self.type_params)

    def head(self) -> object:
        return self.type_params


@dataclass(frozen=True, slots=True, eq=False)
class TypeCall(CompoundType):
    """An ADT applied to type arguments, e.g. `List[float32]`; `name` is the ADT's global name."""

    name: str
    args: tuple[Type, ...] = ()

    def parts(self) -> tuple[Type, ...]:
        return self.args

    def with_parts(self, parts: tuple[Type, ...]) -> TypeCall:
        return TypeCall(self.name, parts)

    def head(self) -> object:
        return self.name


@dataclass(frozen=True, slots=True, eq=False)
class RefType(CompoundType):
    value: Type

    def parts(self) -> tuple[Type, ...]:
        return (self.value,)

    def with_parts(self, parts: tuple[Type, ...]) -> RefType:
        return RefType(parts[0])


@dataclass(frozen=True, slots=True, eq=False)
class IncompleteType(Type):
    """A hole to be filled by type inference (`_` in the text). Each hole is distinct."""

    tag: int = field(default=0, compare=False)

    complete = False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IncompleteType)

    def __hash__(self) -> int:
        return hash("IncompleteType")


def type_parts(t: Type) -> Iterator[Type]:
    """`t` and every type nested in it, each shared part once (types are DAGs: a doubling chain
    of tuples has 2^n leaves written out but n + 1 distinct nodes); iterative."""
    seen: set[int] = set()
    stack = [t]
    while stack:
        cur = stack.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        yield cur
        if isinstance(cur, CompoundType):
            stack.extend(cur.parts())


def _hash_dag(root: CompoundType) -> int:
    """Hash `root` and every compound part not hashed yet, children first, without recursion."""
    stack: list[CompoundType] = [root]
    while stack:
        t = stack[-1]
        if t._hash is not None:
            stack.pop()
            continue
        parts = t.parts()
        pending = [p for p in parts if isinstance(p, CompoundType) and p._hash is None]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        object.__setattr__(t, "_hash", hash((type(t).__name__, t.head(), tuple(hash(p) for p in parts))))
    assert root._hash is not None
    return root._hash


def _equal(a: CompoundType, b: CompoundType) -> bool:
    """Structural equality of two DAGs; each pair of parts is compared once."""
    stack: list[tuple[Type, Type]] = [(a, b)]
    seen: set[tuple[int, int]] = set()   # pairs reachable from a and b: their ids stay valid
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if type(x) is not type(y):
            return False
        if not isinstance(x, CompoundType):
            if x != y:
                return False
            continue
        assert isinstance(y, CompoundType)
        key = (id(x), id(y))
        if key in seen:
            continue
        seen.add(key)
        if x._hash is not None and y._hash is not None and x._hash != y._hash:
            return False
        px, py = x.parts(), y.parts()
        if len(px) != len(py) or x.head() != y.head():
            return False
        stack.extend(zip(px, py))
    return True


def scalar_type(dtype: str) -> TensorType:
    return TensorType((), dtype)


@lru_cache(maxsize=1024)
def parse_dtype(name: str) -> str | None:
    """Canonical dtype for a type name (TVM: `int` is int32, `float` float32, `int8x4` has 4 lanes,
    `uint1` is bool), or None when the name is not one of irtool's dtypes (`float33`, `int0`).

    The caller decides whether such a name is an error or a type variable / ADT.
    """
    m = _DTYPE_RE.fullmatch(name)
    if m is None:
        return None
    base, bits, lanes = m.group(1), m.group(2), m.group(3)
    if bits.startswith("0") or (lanes or "").startswith("0"):
        return None   # `int032`, `float32x04`: not how any dtype is written
    if base == "uint" and bits == "1":
        base, bits = "bool", ""
    width = int(bits) if bits else _DEFAULT_BITS[base]
    count = int(lanes) if lanes is not None else 1
    if width not in DTYPE_WIDTHS[base] or count > MAX_LANES:
        return None
    canonical = "bool" if base == "bool" else f"{base}{width}"
    return canonical + (f"x{count}" if count != 1 else "")


def unknown_dtype_message(name: str) -> str:
    return (f"unknown dtype `{name}`; the dtypes are {VALID_DTYPES}, "
            f"and vectors of them such as `float32x4` (at most {MAX_LANES} lanes)")


def type_arity_message(name: str, params: int, args: int) -> str | None:
    """Why `name[args...]` is not a type when the ADT `name` has `params` parameters (None: it is)."""
    if params == args:
        return None
    return f"type `{name}` takes {params} type argument{'' if params == 1 else 's'}, got {args}"


def dtype_bits(dtype: str) -> tuple[int, int]:
    """(bits per lane, lanes) of a canonical dtype."""
    m = _DTYPE_RE.fullmatch(dtype)
    if m is None:
        raise ValueError(f"not a dtype: {dtype!r}")
    bits = int(m.group(2)) if m.group(2) else _DEFAULT_BITS[m.group(1)]
    return bits, int(m.group(3) or 1)


def dtype_bytes(dtype: str) -> int:
    """Bytes per element as TVM's planner counts them: ceil(bits * lanes / 8) (bool takes one byte)."""
    bits, lanes = dtype_bits(dtype)
    return (bits * lanes + 7) // 8


def _tensor_text(t: TensorType) -> str:
    if not t.shape:
        return t.dtype
    return f"Tensor[({', '.join(str(d) for d in t.shape)}), {t.dtype}]"


def _text_pieces(root: Type) -> Iterator[str]:
    """The Relay text of a type, piece by piece, from an explicit stack (a shared part is written
    at each of its uses, as the text has no sharing)."""
    stack: list[Type | str] = [root]
    while stack:
        t = stack.pop()
        if type(t) is str:
            yield t
        elif type(t) is TensorType:
            yield _tensor_text(t)
        elif type(t) is TupleType:
            yield "("
            fields = t.fields
            if len(fields) == 1:
                stack += (",)", fields[0])
            else:
                stack.append(")")
                _push_list(stack, fields)
        elif type(t) is FuncType:
            yield "fn " + ("[" + ", ".join(p.name for p in t.type_params) + "]" if t.type_params else "") + "("
            stack += (t.ret_type, ") -> ")
            _push_list(stack, t.arg_types)
        elif type(t) is TypeVar:
            yield t.name
        elif type(t) is TypeCall:
            yield t.name
            if t.args:
                yield "["
                stack.append("]")
                _push_list(stack, t.args)
        elif type(t) is RefType:
            yield "ref("
            stack += (")", t.value)
        elif type(t) is IncompleteType:
            yield "_"
        else:
            raise TypeError(f"not a type: {t!r}")


def _push_list(stack: list[Type | str], items: tuple[Type, ...]) -> None:
    """Schedule `a, b, c` (popped left to right)."""
    for i in range(len(items) - 1, -1, -1):
        stack.append(items[i])
        if i:
            stack.append(", ")


def type_to_text(t: Type) -> str:
    """A type in Relay text syntax (`Tensor[(1, 3), float32]`, `(T1, T2)`, `fn (A) -> B`, ...)."""
    if type(t) is TensorType:
        return _tensor_text(t)
    return "".join(_text_pieces(t))


def type_text_prefix(t: Type, limit: int) -> tuple[str, bool]:
    """(the first `limit` characters of `type_to_text(t)`, whether that is the whole text), in time
    proportional to `limit` however long the whole text is."""
    if type(t) is TensorType:
        text = _tensor_text(t)
        return text[:limit], len(text) <= limit
    out: list[str] = []
    size = 0
    for piece in _text_pieces(t):
        out.append(piece)
        size += len(piece)
        if size > limit:
            return "".join(out)[:limit], False
    return "".join(out), True
