"""Completion candidates at a cursor: operator names, and attribute keys inside an operator
call (`nn.conv2d(%x, %w, pad` offers `padding=`). Text-based, so it works while the file is
half-typed and does not parse."""

from __future__ import annotations

import re
from dataclasses import dataclass

from irtool.ops.registry import get_op, op_names

__all__ = ["Completion", "complete"]

_WORD = re.compile(r"[%@]?[A-Za-z_][A-Za-z0-9_./]*$|[%@]$")
_CALLEE = re.compile(r"([A-Za-z_][A-Za-z0-9_/]*(?:\.[A-Za-z_][A-Za-z0-9_/]*)*)\s*$")
_GIVEN_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)")
_LOOKBACK = 4000   # characters searched backwards for the enclosing call


@dataclass(frozen=True)
class Completion:
    label: str
    kind: str          # "operator" or "attribute"
    detail: str
    insert_text: str


def complete(text: str, line: int, col: int) -> list[Completion]:
    lines = text.split("\n")
    if not 0 <= line < len(lines):
        return []
    offset = sum(len(ln) + 1 for ln in lines[:line]) + min(col, len(lines[line]))
    before = lines[line][:col]
    match = _WORD.search(before)
    prefix = match.group(0) if match else ""
    if prefix.startswith(("%", "@")):
        return []
    out: list[Completion] = []
    callee, segment = _enclosing_call(text, offset - len(prefix))
    opdef = get_op(callee) if callee else None
    if opdef is not None and opdef.attrs and "." not in prefix:
        given = set(_GIVEN_KEY.findall(segment))
        for field in opdef.attrs:
            if field.name.startswith(prefix) and field.name not in given:
                out.append(Completion(field.name, "attribute", f"{field.kind}, default {field.default!r}",
                                      f"{field.name}="))
    for name in op_names():
        if name.startswith(prefix):
            opdef = get_op(name)
            out.append(Completion(name, "operator", opdef.description if opdef else "", name))
    return out


def _enclosing_call(text: str, offset: int) -> tuple[str | None, str]:
    """The callee name before the innermost unclosed `(` ending at `offset`, and the text of
    that call's arguments so far."""
    depth = 0
    start = max(0, offset - _LOOKBACK)
    for i in range(offset - 1, start - 1, -1):
        char = text[i]
        if char in ")]}":
            depth += 1
        elif char in "([{":
            if depth == 0:
                if char != "(":
                    return None, ""
                found = _CALLEE.search(text[max(0, i - 200):i])
                return (found.group(1) if found else None), text[i + 1:offset]
            depth -= 1
        elif char in ";" and depth == 0:
            return None, ""
    return None, ""
