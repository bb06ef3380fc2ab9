"""Source locations carried by IR nodes so that any later error can point at the user's file."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A half-open source range; lines and columns are 1-based, as editors and MLIR count them."""

    source: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.col}"
