"""Index maps of blocked weight layouts (`OIHW8o`, `NK16n`), shared by compute rules and schedules."""

from __future__ import annotations

from irtool.ir.tir import PrimExpr
from irtool.lower.te import Idx, floordiv, floormod
from irtool.ops.definitions.transform import parse_layout


def in_blocked(canonical_idx: Idx, canonical: str, layout: str) -> Idx:
    """An index written in `canonical` axis order (OIHW) located in a possibly blocked `layout`:
    in `OIHW8o`, output channel o is at (o // 8, i, h, w, o % 8)."""
    items = parse_layout(layout)
    factors = {a.upper(): f for a, f in items if f is not None}
    out: list[PrimExpr] = []
    for a, f in items:
        i = canonical_idx[canonical.index(a.upper())]
        if f is not None:
            out.append(floormod(i, f))
        else:
            out.append(floordiv(i, factors[a]) if a in factors else i)
    return tuple(out)


def output_blocked(layout: str, primal: str, canonical: str) -> int | None:
    """The block factor of `layout` when it is `canonical` with only the `primal` axis blocked,
    innermost (OIHW8o -> 8 for primal O); None for any other layout."""
    items = parse_layout(layout)
    plain = [(a, None) for a in canonical]
    if len(items) == len(canonical) + 1 and items[:-1] == plain and items[-1][0] == primal.lower():
        return items[-1][1]
    return None

