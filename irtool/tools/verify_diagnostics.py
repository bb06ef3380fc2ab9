"""`--verify-diagnostics`: compare the diagnostics a run produced with `expected-*` annotations.

MLIR's convention: a comment `// expected-error {{text}}` expects an error on its own line whose
message contains `text`; `@+N` / `@-N` move the expected line, `@above` / `@below` mean the line
before / after, and `@unknown` an error without a location. `warning`, `note` and `remark` work
the same way. Mismatches become new diagnostics, located at the annotation (for an expected
diagnostic that never came) or at the diagnostic itself (for one nobody expected).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from irtool.core.span import Span
from irtool.core.diagnostics import Diagnostic

SEVERITIES = ("error", "warning", "note", "remark")

_MENTION = re.compile(r"expected-(?:error|warning|note|remark)\b")
# A mention right after `//` is meant as an annotation; elsewhere it may be prose about one.
_MEANT = re.compile(r"//[ \t]*$")
_ANNOTATION = re.compile(
    r"expected-(?P<severity>error|warning|note|remark)"
    r"[ \t]*(?:@(?P<where>[+-]\d+|above|below|unknown))?"
    r"[ \t]*\{\{(?P<text>.*?)\}\}")


@dataclass
class Expectation:
    severity: str
    text: str
    line: int | None  # None: `@unknown`, a diagnostic without a location
    annotation: Span  # where the `expected-...` comment is, for reporting


def parse_expectations(text: str, source: str, line_offset: int = 0) -> tuple[list[Expectation], list[Diagnostic]]:
    """The annotations in `text` (whose first line is line `line_offset + 1` of `source`),
    and errors for malformed ones (an `expected-...` right after `//` that does not parse)."""
    expected: list[Expectation] = []
    malformed: list[Diagnostic] = []
    for index, line_text in enumerate(text.split("\n")):
        line = line_offset + index + 1
        for mention in _MENTION.finditer(line_text):
            col = mention.start() + 1
            span = Span(source, line, col, line, mention.end() + 1)
            match = _ANNOTATION.match(line_text, mention.start())
            if match is not None:
                expected.append(Expectation(match["severity"], match["text"], _target_line(match["where"], line), span))
            elif _MEANT.search(line_text, 0, mention.start()):
                malformed.append(Diagnostic(
                    "error", f"malformed `{mention.group()}` annotation: expected `{{{{message}}}}`, "
                             "optionally after `@+N`, `@-N`, `@above`, `@below` or `@unknown`", span))
    return expected, malformed


def _target_line(where: str | None, line: int) -> int | None:
    if where is None:
        return line
    if where == "unknown":
        return None
    if where == "above":
        return line - 1
    if where == "below":
        return line + 1
    return line + int(where)


def flatten(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Every diagnostic with its notes, in report order."""
    out: list[Diagnostic] = []
    stack = list(reversed(diagnostics))
    while stack:
        d = stack.pop()
        out.append(d)
        stack.extend(reversed(d.notes))
    return out


def check(expected: list[Expectation], produced: list[Diagnostic], source: str) -> list[Diagnostic]:
    """Mismatches between what was expected and what was produced (empty when they agree)."""
    pending = list(expected)
    problems: list[Diagnostic] = []
    for diag in flatten(produced):
        line = diag.span.line if diag.span is not None and diag.span.source == source else None
        if diag.span is not None and line is None:
            match = None  # located in another source (e.g. the pipeline string): never expected
        else:
            match = next((e for e in pending if e.severity == diag.severity and e.line == line
                          and e.text in diag.message), None)
        if match is None:
            problems.append(Diagnostic("error", f"unexpected {diag.severity}: {diag.message}", diag.span))
        else:
            pending.remove(match)
    for e in pending:
        problems.append(Diagnostic("error", f"expected {e.severity} \"{e.text}\" was not produced", e.annotation))
    return problems
