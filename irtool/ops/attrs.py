"""Validation and canonicalisation of operator call attributes against the op's schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from irtool.ir.expr import Attrs, AttrValue, attrs_key
from irtool.ir.span import Span
from irtool.syntax.diagnostics import DiagnosticError, suggest

if TYPE_CHECKING:
    from irtool.ops.registry import OpDef


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
        if f.name in given:
            value = Attrs({"v": given[f.name]})["v"]
            if attrs_key({"v": value}) != attrs_key({"v": f.default}):
                kept[f.name] = value
    return Attrs(kept)
