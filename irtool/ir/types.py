"""Relay types. Types are small immutable values: equality and hashing are structural."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_DTYPE_RE = re.compile(r"(bool|int|uint|float|bfloat)(\d*)(?:x(\d+))?")
_DEFAULT_BITS = {"bool": 1, "int": 32, "uint": 32, "float": 32, "bfloat": 16}


class Type:
    """Base of all Relay types; `str()` gives the Relay text syntax."""

    __slots__ = ()

    def __str__(self) -> str:
        return type_to_text(self)


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
class TupleType(Type):
    fields: tuple[Type, ...]


@dataclass(frozen=True, slots=True)
class TypeVar(Type):
    """A type parameter of a polymorphic function or ADT; compared by name within its binder."""

    name: str


@dataclass(frozen=True, slots=True)
class FuncType(Type):
    arg_types: tuple[Type, ...]
    ret_type: Type
    type_params: tuple[TypeVar, ...] = ()


@dataclass(frozen=True, slots=True)
class TypeCall(Type):
    """An ADT applied to type arguments, e.g. `List[float32]`; `name` is the ADT's global name."""

    name: str
    args: tuple[Type, ...] = ()


@dataclass(frozen=True, slots=True)
class RefType(Type):
    value: Type


@dataclass(frozen=True, slots=True, eq=False)
class IncompleteType(Type):
    """A hole to be filled by type inference (`_` in the text). Each hole is distinct."""

    tag: int = field(default=0, compare=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IncompleteType)

    def __hash__(self) -> int:
        return hash("IncompleteType")


def scalar_type(dtype: str) -> TensorType:
    return TensorType((), dtype)


def parse_dtype(name: str) -> str | None:
    """Canonical dtype for a type name (TVM: `int` is int32, `float` float32, `int8x4` has 4 lanes).

    Returns None when the name is not a dtype, so the caller can treat it as a type variable or ADT.
    """
    m = _DTYPE_RE.fullmatch(name)
    if m is None:
        return None
    base, bits, lanes = m.group(1), m.group(2), m.group(3)
    if base == "bool" and bits not in ("", "1"):
        return None
    canonical = base + (bits or str(_DEFAULT_BITS[base])) if base != "bool" else "bool"
    return canonical + (f"x{lanes}" if lanes is not None and lanes != "1" else "")


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


def type_to_text(t: Type) -> str:
    """A type in Relay text syntax (`Tensor[(1, 3), float32]`, `(T1, T2)`, `fn (A) -> B`, ...)."""
    if isinstance(t, TensorType):
        if not t.shape:
            return t.dtype
        dims = ", ".join(str(d) for d in t.shape)
        return f"Tensor[({dims}), {t.dtype}]"
    if isinstance(t, TupleType):
        if len(t.fields) == 1:
            return f"({type_to_text(t.fields[0])},)"
        return "(" + ", ".join(type_to_text(f) for f in t.fields) + ")"
    if isinstance(t, FuncType):
        tparams = "[" + ", ".join(p.name for p in t.type_params) + "]" if t.type_params else ""
        args = ", ".join(type_to_text(a) for a in t.arg_types)
        return f"fn {tparams}({args}) -> {type_to_text(t.ret_type)}"
    if isinstance(t, TypeVar):
        return t.name
    if isinstance(t, TypeCall):
        return t.name + ("[" + ", ".join(type_to_text(a) for a in t.args) + "]" if t.args else "")
    if isinstance(t, RefType):
        return f"ref({type_to_text(t.value)})"
    if isinstance(t, IncompleteType):
        return "_"
    raise TypeError(f"not a type: {t!r}")
