"""Text building shared by the Relay and TIR printers: nested entry lists flattened to indented
lines, attribute values and float literals as the text formats write them."""

from __future__ import annotations

import numpy as np

from irtool.ir.expr import Attrs, AttrValue, MetaRef

Entries = list  # list[str | Entries]: lines, and nested blocks indented by two spaces


def flatten_entries(entries: Entries, out: list[str]) -> None:
    """Nested entry lists to indented lines, iteratively."""
    stack: list[tuple[Entries, int, str]] = [(entries, 0, "")]
    append = out.append
    while stack:
        block, i, indent = stack.pop()
        n = len(block)
        while i < n:
            entry = block[i]
            i += 1
            if type(entry) is str:
                append(indent + entry if entry else entry)
            else:
                stack.append((block, i, indent))
                stack.append((entry, 0, indent + "  "))
                break


def format_attr_value(value: AttrValue) -> str:
    """An attribute value as the text writes it (`True`, `2`, `1e-05f`, `"NCHW"`, `[1, 1]`, `None`)."""
    t = type(value)
    if t is bool:
        return "True" if value else "False"
    if t is int:
        return str(value)
    if t is float:
        return repr(value) + "f"
    if t is str:
        return '"' + value + '"'  # type: ignore[operator]
    if t is tuple:
        return "[" + ", ".join(format_attr_value(v) for v in value) + "]"  # type: ignore[union-attr]
    if value is None:
        return "None"
    if t is MetaRef:
        return repr(value)
    if isinstance(value, np.generic):
        return format_attr_value(value.item())
    raise TypeError(f"cannot print attribute value {value!r}")


def format_attrs(attrs: Attrs) -> str:
    parts = []
    # The underlying dict: `Mapping.items()` would go through `__getitem__` once per key.
    for key, value in attrs._items.items():
        if type(value) is tuple and all(type(v) is int for v in value):
            parts.append(f"{key}=[{', '.join(map(str, value))}]")  # the common `[1, 1]`, fast
        else:
            parts.append(f"{key}={format_attr_value(value)}")
    return ", ".join(parts)


def float_text(value: np.floating) -> str:
    """The shortest decimal that reads back to exactly `value` in its own dtype (`1e-05`, `3`, `inf`).

    Positional or scientific as C's `%g` would choose (`100000`, `1e+11`, `0.0001`, `1e-05`), but
    with as many digits as the value needs; no `.0` (`3f`, as TVM writes it).
    """
    if np.isnan(value):
        return "nan"
    if np.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "-0" if np.signbit(value) else "0"
    text = np.format_float_scientific(value, unique=True, trim="-")
    mantissa, exponent = text.split("e")
    digits = len(mantissa) - mantissa.count(".") - mantissa.count("-")
    if -4 <= int(exponent) < max(6, digits):
        return np.format_float_positional(value, unique=True, trim="-")
    if abs(float(text)) > float(np.finfo(value.dtype).max):
        # Near the top of the range the shortest digits can exceed the maximum, which TVM's
        # parser rejects as out of range (irtool's accepts what rounds to a finite value); the
        # exact double value is within it.
        return repr(float(value))
    return text
