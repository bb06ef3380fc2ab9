"""Located diagnostics: `file:line:col: error: message`, the source line, and a caret.

Every error irtool reports to a user goes through `DiagnosticError`, so the tools can print it and
exit with status 1 instead of showing a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from irtool.core.span import Span


@dataclass
class Diagnostic:
    severity: str  # "error", "warning", "note", "remark"
    message: str
    span: Span | None
    notes: list[Diagnostic] = field(default_factory=list)


class DiagnosticError(Exception):
    """One or more diagnostics; the first is the primary error."""

    def __init__(self, message: str, span: Span | None = None, notes: list[Diagnostic] | None = None,
                 diagnostics: list[Diagnostic] | None = None) -> None:
        self.diagnostics = diagnostics or [Diagnostic("error", message, span, notes or [])]
        super().__init__(self.diagnostics[0].message)

    @property
    def span(self) -> Span | None:
        return self.diagnostics[0].span


class SourceMap:
    """The text of every file a diagnostic may point into, for quoting the offending line."""

    def __init__(self) -> None:
        self.sources: dict[str, list[str]] = {}

    def add(self, name: str, text: str) -> None:
        self.sources[name] = text.split("\n")

    def line(self, name: str, line: int) -> str | None:
        lines = self.sources.get(name)
        if lines is None or not 1 <= line <= len(lines):
            return None
        return lines[line - 1].rstrip("\r")


SOURCES = SourceMap()


def render(diag: Diagnostic, sources: SourceMap = SOURCES) -> str:
    """MLIR/clang style text for one diagnostic and its notes."""
    out: list[str] = []
    stack = [diag]
    while stack:
        d = stack.pop(0)
        if d.span is None:
            out.append(f"{d.severity}: {d.message}")
        else:
            out.append(f"{d.span.source}:{d.span.line}:{d.span.col}: {d.severity}: {d.message}")
            text = sources.line(d.span.source, d.span.line)
            if text is not None:
                width = d.span.end_col - d.span.col if d.span.end_line == d.span.line else len(text) - d.span.col + 1
                out.append(text.expandtabs(1))
                out.append(" " * (d.span.col - 1) + "^" + "~" * max(0, width - 1))
        stack[0:0] = d.notes
    return "\n".join(out)


def render_error(err: DiagnosticError, sources: SourceMap = SOURCES) -> str:
    return "\n".join(render(d, sources) for d in err.diagnostics)


def suggest(name: str, candidates: list[str] | set[str]) -> str | None:
    """The closest candidate name, for "did you mean" hints."""
    import difflib
    matches = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None
