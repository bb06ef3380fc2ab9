"""The pass manager: pipeline strings, running passes, verification and instrumentation.

A pipeline is a flat comma list of pass names, each optionally followed by `{key=value ...}`
(MLIR/xDSL syntax): `inline,fuse-ops{max-depth=64,opt-level=2},dead-code`. Options are the pass
dataclass's fields with `_` written as `-`; the field's type annotation decides how a value parses.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import types
import typing
from collections.abc import Iterable, Sequence
from typing import NamedTuple, TextIO

from irtool.analysis.typecheck import infer_types
from irtool.analysis.wellformed import check_well_formed
from irtool.ir.module import IRModule, Program
from irtool.core.span import Span
from irtool.core.diagnostics import SOURCES, DiagnosticError, suggest
from irtool.passes.base import ModulePass
from irtool.passes.catalog import get_pass, pass_names

PIPELINE_SOURCE = "<pipeline>"


class PassOption(NamedTuple):
    """One option of a pass as `--list-passes` shows it."""

    name: str
    type: str
    default: object


# ---------------------------------------------------------------------------------------------
# Option types


def _option_types(cls: type[ModulePass]) -> dict[str, object]:
    return typing.get_type_hints(cls)


def _unwrap_optional(tp: object) -> tuple[object, bool]:
    """`X | None` → (X, True); anything else → (tp, False)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return tp, False


def _list_element(tp: object) -> object | None:
    """The element type of `tuple[X, ...]` / `list[X]`, or None when `tp` is not a sequence type."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    if origin is list and len(args) == 1:
        return args[0]
    return None


def type_text(tp: object) -> str:
    """How an option type reads in `--list-passes` (`int`, `bool`, `list of str`, ...)."""
    inner, optional = _unwrap_optional(tp)
    elem = _list_element(inner)
    text = f"list of {type_text(elem)}" if elem is not None else getattr(inner, "__name__", str(inner))
    return text + " (optional)" if optional else text


def _convert_scalar(text: str, tp: object) -> object:
    """Parse one scalar option value; raises ValueError with a user-facing reason."""
    if tp is bool:
        lowered = text.lower()
        if lowered in ("true", "1", "on", "yes"):
            return True
        if lowered in ("false", "0", "off", "no"):
            return False
        raise ValueError("expected true or false")
    if tp is int:
        try:
            return int(text, 0)
        except ValueError:
            raise ValueError("expected an integer") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError("expected a number") from None
    if tp is str:
        if len(text) >= 2 and text[0] == text[-1] == '"':
            return text[1:-1]
        return text
    raise ValueError(f"options of type {tp!r} are not supported")


def convert_option(values: list[str], tp: object) -> object:
    """Typed value of an option from its comma-separated pieces."""
    inner, optional = _unwrap_optional(tp)
    if optional and len(values) == 1 and values[0].lower() == "none":
        return None
    elem = _list_element(inner)
    if elem is not None:
        items = [_convert_scalar(v, elem) for v in values if v != ""]
        return tuple(items) if typing.get_origin(inner) is tuple else items
    if len(values) != 1:
        raise ValueError("expected a single value, not a list")
    return _convert_scalar(values[0], inner)


# ---------------------------------------------------------------------------------------------
# Pipeline text


class _PipelineText:
    """A tiny scanner over the pipeline string that produces located errors."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        SOURCES.add(PIPELINE_SOURCE, text)

    def span(self, start: int, end: int) -> Span:
        return Span(PIPELINE_SOURCE, 1, start + 1, 1, max(end, start + 1) + 1)

    def error(self, message: str, start: int, end: int) -> DiagnosticError:
        return DiagnosticError(message, self.span(start, end))

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def at_end(self) -> bool:
        self.skip_space()
        return self.pos >= len(self.text)

    def peek(self) -> str:
        self.skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def word(self, stops: str) -> tuple[str, int]:
        """Characters up to whitespace or one of `stops`; quoted strings are kept whole."""
        self.skip_space()
        start = self.pos
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == '"':
                close = self.text.find('"', self.pos + 1)
                if close < 0:
                    raise self.error("unterminated string in pass options", self.pos, len(self.text))
                self.pos = close + 1
                continue
            if ch.isspace() or ch in stops:
                break
            self.pos += 1
        return self.text[start:self.pos], start


def parse_pipeline(text: str) -> list[ModulePass]:
    """Pass instances for a pipeline string; errors point into the string (source `<pipeline>`)."""
    scanner = _PipelineText(text)
    passes: list[ModulePass] = []
    if scanner.at_end():
        return passes
    while True:
        name, start = scanner.word(",{}")
        if not name:
            raise scanner.error("expected a pass name", scanner.pos, scanner.pos + 1)
        cls = get_pass(name)
        if cls is None:
            raise scanner.error(_unknown_pass_message(name), start, start + len(name))
        options: dict[str, object] = {}
        if scanner.peek() == "{":
            scanner.pos += 1
            options = _parse_options(scanner, cls)
        passes.append(cls(**options))
        if scanner.at_end():
            return passes
        if scanner.peek() != ",":
            raise scanner.error("expected `,` between passes", scanner.pos, scanner.pos + 1)
        scanner.pos += 1


def _unknown_pass_message(name: str) -> str:
    hint = suggest(name, set(pass_names()))
    return f"unknown pass `{name}`" + (f"; did you mean `{hint}`?" if hint else "")


def _parse_options(scanner: _PipelineText, cls: type[ModulePass]) -> dict[str, object]:
    """`key=value` items up to the closing brace, separated by spaces or commas.

    A list option takes every following comma-separated piece that is not itself `key=value`
    (`keep-entries=main,other`), or a bracketed list (`keep-entries=[main, other]`).
    """
    fields = {f.name.replace("_", "-"): f for f in dataclasses.fields(cls) if f.init}
    hints = _option_types(cls)
    raw: dict[str, tuple[list[str], int, int]] = {}
    current: str | None = None
    while True:
        ch = scanner.peek()
        if ch == "":
            raise scanner.error(f"missing `}}` after the options of `{cls.name}`", len(scanner.text),
                                len(scanner.text))
        if ch == "}":
            scanner.pos += 1
            break
        if ch == ",":
            scanner.pos += 1
            continue
        item, start = scanner.word(",}[")
        if "=" not in item:
            if current is None or _list_element(_unwrap_optional(hints[fields[current].name])[0]) is None:
                raise scanner.error(f"expected `option=value` in the options of `{cls.name}`", start,
                                    start + max(len(item), 1))
            raw[current][0].append(item)
            continue
        key, _, value = item.partition("=")
        key = key.strip()
        if key not in fields:
            hint = suggest(key, set(fields))
            known = ", ".join(sorted(fields)) or "none"
            message = f"pass `{cls.name}` has no option `{key}`" + (
                f"; did you mean `{hint}`?" if hint else f" (options: {known})")
            raise scanner.error(message, start, start + len(key))
        if key in raw:
            raise scanner.error(f"option `{key}` given twice", start, start + len(key))
        pieces = [value] if value else []
        if not value and scanner.text[scanner.pos:scanner.pos + 1] == "[":
            pieces = _bracketed_list(scanner)
        raw[key] = (pieces, start, scanner.pos)
        current = key
    out: dict[str, object] = {}
    for key, (pieces, start, end) in raw.items():
        field = fields[key]
        try:
            out[field.name] = convert_option(pieces, hints[field.name])
        except ValueError as exc:
            raise scanner.error(f"bad value for option `{key}` of `{cls.name}`: {exc}", start, end) from None
    return out


def _bracketed_list(scanner: _PipelineText) -> list[str]:
    open_at = scanner.pos
    close = scanner.text.find("]", open_at)
    if close < 0:
        raise scanner.error("missing `]`", open_at, open_at + 1)
    scanner.pos = close + 1
    return [p.strip() for p in scanner.text[open_at + 1:close].split(",") if p.strip()]


def pipeline_text(passes: Iterable[ModulePass]) -> str:
    """The pipeline string that `parse_pipeline` turns back into `passes` (non-default options only)."""
    parts = []
    for p in passes:
        opts = []
        for f in dataclasses.fields(p):
            value = getattr(p, f.name)
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
            if value != default:
                opts.append(f"{f.name.replace('_', '-')}={option_value_text(value)}")
        parts.append(p.name + ("{" + " ".join(opts) + "}" if opts else ""))
    return ",".join(parts)


def option_value_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(option_value_text(v) for v in value) + "]"
    return str(value)


# ---------------------------------------------------------------------------------------------
# Running


def verify(prog: Program) -> None:
    """Raise `DiagnosticError` unless the program is well formed and type checks (which also
    records every expression's type), and a module's memory plan, if `main` has one, is valid.
    The one input check: `irtool-opt` and the pipeline's verify-each both use it."""
    check_well_formed(prog)
    infer_types(prog)
    if isinstance(prog, IRModule):
        from irtool.passes.verify_memory_plan import check_memory_plan
        check_memory_plan(prog)  # only when `main` carries a memory plan (plan-memory)


def list_passes() -> list[tuple[str, str, list[PassOption]]]:
    """(name, one-line description, options) of every registered pass, sorted by name."""
    out = []
    for name in pass_names():
        cls = get_pass(name)
        assert cls is not None
        hints = _option_types(cls)
        opts = [PassOption(f.name.replace("_", "-"), type_text(hints[f.name]),
                           f.default if f.default is not dataclasses.MISSING else None)
                for f in dataclasses.fields(cls) if f.init]
        out.append((name, cls.description, opts))
    return out


def check_pass_names(names: Iterable[str], flag: str) -> set[str]:
    """The pass names a `--print-ir-*` flag gives, each one a registered pass (else its located error)."""
    wanted = set(names)
    for name in sorted(wanted):
        if get_pass(name) is None:
            raise DiagnosticError(f"{flag}: {_unknown_pass_message(name)}")
    return wanted


def _dump(mod: IRModule, header: str, err: TextIO) -> None:
    from irtool.syntax.printer import print_program
    err.write(f"// -----// IR Dump {header} //----- //\n")
    text = print_program(mod)
    err.write(text if text.endswith("\n") else text + "\n")
    err.write("\n")


def run_pipeline(mod: IRModule, passes: Sequence[ModulePass], *, verify_each: bool = True,
                 print_ir_before: Iterable[str] = (), print_ir_after: Iterable[str] = (),
                 print_ir_after_all: bool = False, timing: bool = False,
                 err: TextIO | None = None) -> IRModule:
    """Apply `passes` in order and return the resulting module (the input is left unchanged).

    With `verify_each`, the input is verified first (its errors are the user's) and the module
    after every pass (an error there names the pass that broke it).
    """
    from irtool.analysis.typecheck import cyclic_gc_paused
    err = sys.stderr if err is None else err
    before = check_pass_names(print_ir_before, "--print-ir-before")
    after = check_pass_names(print_ir_after, "--print-ir-after")
    rows: list[tuple[str, float]] = []
    with cyclic_gc_paused():  # passes and verification build large acyclic graphs
        if verify_each:
            started = time.perf_counter()
            verify(mod)
            rows.append(("(verify input)", time.perf_counter() - started))
        for p in passes:
            if p.name in before:
                _dump(mod, f"Before {p.name}", err)
            started = time.perf_counter()
            mod = p.apply(mod)
            rows.append((p.name, time.perf_counter() - started))
            if verify_each:
                started = time.perf_counter()
                try:
                    verify(mod)
                except DiagnosticError as exc:
                    raise _blame(exc, p) from None
                rows.append((f"(verify after {p.name})", time.perf_counter() - started))
            if print_ir_after_all or p.name in after:
                _dump(mod, f"After {p.name}", err)
    if timing:
        err.write(timing_report(rows))
    return mod


def _blame(exc: DiagnosticError, p: ModulePass) -> DiagnosticError:
    first = exc.diagnostics[0]
    message = f"module is invalid after pass `{p.name}`: {first.message}"
    return DiagnosticError(message, first.span, notes=first.notes)


def timing_report(rows: Sequence[tuple[str, float]]) -> str:
    """An MLIR-style execution time report, one row per pass (and verification step)."""
    total = sum(t for _, t in rows) or 1e-12
    bar = "===" + "-" * 73 + "==="
    lines = [bar, "... Pass execution timing report ...".center(79).rstrip(), bar,
             f"  Total Execution Time: {total:.4f} seconds", "", "  ----Wall Time----  ----Name----"]
    for name, seconds in rows:
        lines.append(f"  {seconds:8.4f} ({100 * seconds / total:5.1f}%)  {name}")
    lines.append(f"  {total:8.4f} (100.0%)  Total")
    return "\n".join(lines) + "\n"
