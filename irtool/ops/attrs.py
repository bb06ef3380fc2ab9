"""Validation and canonicalisation of operator call attributes against the op's schema.

A call's attributes are checked once, where the call is built (parser, frontends, passes), so a
wrong attribute is reported at the call's span and every later consumer can trust the values.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from irtool.ir.expr import Attrs, AttrValue, MetaRef, attrs_key
from irtool.core.span import Span
from irtool.ir.types import parse_dtype
from irtool.core.diagnostics import DiagnosticError, suggest

if TYPE_CHECKING:
    from irtool.ops.registry import AttrField, OpDef


class AttrKindError(ValueError):
    """A value that does not have the kind a schema field asks for (message: what was expected)."""


def _is_int(v: object) -> bool:
    """Python or numpy integers (frontends hand over numpy scalars), but not booleans."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _is_number(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _int(v: AttrValue) -> int:
    if not _is_int(v):
        raise AttrKindError("an integer")
    return int(v)  # type: ignore[arg-type]


def _float(v: AttrValue) -> float:
    if not _is_number(v):
        raise AttrKindError("a number")
    return float(v)  # type: ignore[arg-type]


def _bool(v: AttrValue) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if _is_int(v) and v in (0, 1):
        return bool(v)
    raise AttrKindError("a boolean (True or False)")


def _str(v: AttrValue) -> str:
    if not isinstance(v, str):
        raise AttrKindError("a string")
    return v


def _dtype(v: AttrValue) -> str:
    if not isinstance(v, str):
        raise AttrKindError("a dtype string such as \"float32\"")
    if v == "":
        return v
    canonical = parse_dtype(v)
    if canonical is None:
        raise AttrKindError("a dtype string such as \"float32\"")
    return canonical


def _int_list(v: AttrValue) -> tuple:
    if not isinstance(v, tuple) or not all(_is_int(x) for x in v):
        raise AttrKindError("a list of integers")
    return tuple(int(x) for x in v)  # type: ignore[arg-type]


def _float_list(v: AttrValue) -> tuple:
    if not isinstance(v, tuple) or not all(_is_number(x) for x in v):
        raise AttrKindError("a list of numbers")
    return tuple(float(x) for x in v)


def _int_or_list(v: AttrValue) -> AttrValue:
    if _is_int(v):
        return int(v)  # type: ignore[arg-type]
    if isinstance(v, tuple) and all(_is_int(x) for x in v):
        return tuple(int(x) for x in v)  # type: ignore[arg-type]
    raise AttrKindError("an integer or a list of integers")


def _int_list_list(v: AttrValue) -> tuple:
    if not isinstance(v, tuple) or not all(
            isinstance(row, tuple) and all(_is_int(x) for x in row) for row in v):
        raise AttrKindError("a list of lists of integers")
    return tuple(tuple(int(x) for x in row) for row in v)  # type: ignore[union-attr]


def _meta(v: AttrValue) -> MetaRef:
    if not isinstance(v, MetaRef):
        raise AttrKindError("a metadata reference such as meta[VirtualDevice][0]")
    return v


def _device(v: AttrValue) -> AttrValue:
    if isinstance(v, (MetaRef, str)):
        return v
    if _is_int(v):
        return int(v)  # type: ignore[arg-type]
    raise AttrKindError("a device: meta[VirtualDevice][i], a device number or a name")


# Each kind converts a value to its canonical form or raises AttrKindError.
KINDS: dict[str, Callable[[AttrValue], AttrValue]] = {
    "int": _int,
    "float": _float,
    "bool": _bool,
    "str": _str,
    "dtype": _dtype,
    "int_list": _int_list,
    "float_list": _float_list,
    "int_or_list": _int_or_list,
    "int_list_list": _int_list_list,
    "meta": _meta,
    "device": _device,
    "any": lambda v: v,
}


def show_value(v: AttrValue) -> str:
    """An attribute value the way the text writes it (for error messages)."""
    if isinstance(v, tuple):
        return "[" + ", ".join(show_value(x) for x in v) + "]"
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, float):
        return repr(v) + "f"
    return str(v)


def convert(op_name: str, f: AttrField, value: AttrValue) -> AttrValue:
    """The canonical form of one attribute value; AttrKindError/ValueError carry the complaint."""
    if value is None:
        if f.optional or (f.default is None and not f.required):
            return None
        raise ValueError(f"{op_name}: attribute `{f.name}` cannot be None")
    try:
        out = KINDS[f.kind](value)
    except AttrKindError as e:
        raise ValueError(
            f"{op_name}: attribute `{f.name}` expects {e}, got {show_value(value)}") from None
    if f.check is not None:
        problem = f.check(out)
        if problem:
            raise ValueError(
                f"{op_name}: attribute `{f.name}` {problem}, got {show_value(value)}")
    return out


def normalize(op: OpDef, given: Mapping[str, AttrValue], span: Span | None) -> Attrs:
    if op.attrs is None:
        return Attrs(given)
    fields = {f.name: f for f in op.attrs}
    for key in given:
        if key not in fields:
            hint = suggest(key, set(fields))
            extra = f"; did you mean `{hint}`?" if hint else ""
            raise DiagnosticError(f"{op.name} has no attribute `{key}`{extra}", span)
    kept: dict[str, AttrValue] = {}
    for f in op.attrs:
        if f.name not in given:
            if f.required:
                raise DiagnosticError(f"{op.name}: missing required attribute `{f.name}`", span)
            continue
        value = Attrs({"v": given[f.name]})["v"]
        try:
            value = convert(op.name, f, value)
        except ValueError as e:
            raise DiagnosticError(str(e), span) from None
        if f.required or attrs_key({"v": value}) != attrs_key({"v": f.default}):
            kept[f.name] = value
    return Attrs(kept)


# Reusable `AttrField.check` predicates.

def positive(v: AttrValue) -> str | None:
    """Every integer (or list entry) must be >= 1."""
    values = v if isinstance(v, tuple) else (v,)
    return None if all(x >= 1 for x in values) else "must be positive"


def non_negative(v: AttrValue) -> str | None:
    values = v if isinstance(v, tuple) else (v,)
    return None if all(x >= 0 for x in values) else "must not be negative"


def lengths(*allowed: int, positive_entries: bool = False,
            non_negative_entries: bool = False) -> Callable[[AttrValue], str | None]:
    """A list attribute with one of the allowed lengths (an integer counts as length 1)."""
    def check(v: AttrValue) -> str | None:
        n = len(v) if isinstance(v, tuple) else 1
        if n not in allowed:
            forms = ", ".join(str(a) for a in allowed[:-1])
            forms = f"{forms} or {allowed[-1]}" if forms else str(allowed[-1])
            return f"must have {forms} values"
        if positive_entries:
            return positive(v)
        if non_negative_entries:
            return non_negative(v)
        return None
    return check


def one_of(*choices: str) -> Callable[[AttrValue], str | None]:
    def check(v: AttrValue) -> str | None:
        if v in choices:
            return None
        return "must be one of " + ", ".join(f'"{c}"' for c in choices)
    return check
