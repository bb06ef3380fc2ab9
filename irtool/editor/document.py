"""What the language server knows about one open file: its diagnostics, where every name is
defined and used, the types under the cursor, and its outline. Independent of the LSP library,
so it is tested directly; positions are 0-based (line, column) pairs, as LSP counts them.

The index is built from the real tokenizer's tokens and the parsed IR's spans: a `%local`
token at a binder's span start is its definition, any other resolves to the innermost binder of
that name whose scope (function, let body, match clause) contains it. Globals, graph variables
`%N`, constructors and type names are unique per file and resolve by name.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

from irtool.analysis.typecheck import infer_types
from irtool.analysis.wellformed import check_well_formed
from irtool.ir.adt import Constructor, TypeData
from irtool.ir.expr import Call, Expr, Function, GlobalVar, Let, Match, Op, Var
from irtool.ir.module import IRModule
from irtool.core.span import Span
from irtool.ir.types import FuncType, IncompleteType, Type, TypeCall
from irtool.ir.visitor import post_order
from irtool.ops.registry import get_op
from irtool.core.diagnostics import Diagnostic, DiagnosticError
from irtool.editor.fmt import too_deep
from irtool.syntax.lexer import SourceText, Token, tokenize
from irtool.syntax.parser import _grammar, parse
from irtool.syntax.printer import print_type
from irtool.syntax.text_format import format_attr_value

__all__ = ["Document", "Occurrence", "Outline", "Pos", "Range", "op_signature", "span_range"]

Pos = tuple[int, int]
Range = tuple[Pos, Pos]   # start inclusive, end exclusive
# ("local", id(var)), ("global", name), ("graph", n), ("ctor", name), ("type", name) or ("op", name)
Key = tuple[str, object]

# Top-level definitions start a line; a broken file is cut at these to recover.
_UNIT = re.compile(r"^(?:(def|primfn)[ \t]+(@[A-Za-z_][A-Za-z0-9_/]*)|(?:extern[ \t]+)?(type)[ \t]+([A-Za-z_]\w*))",
                   re.MULTILINE)
_MAX_RECOVERIES = 32


def span_range(span: Span) -> Range:
    return (span.line - 1, span.col - 1), (span.end_line - 1, span.end_col - 1)


@dataclass
class Occurrence:
    """A name in the text: what it refers to, whether this is its definition, and the IR node
    (Var, Expr, Constructor, TypeData) hover describes."""

    range: Range
    key: Key
    is_definition: bool
    node: object = None


@dataclass
class Outline:
    """A document symbol: a definition, its whole range, and the range of its name."""

    name: str
    kind: str   # "function", "primfn", "type", "constructor"
    range: Range
    selection: Range
    children: list[Outline] = field(default_factory=list)


class Document:
    """Analyses `text` once (parse with recovery, well-formedness, types, index)."""

    def __init__(self, text: str, name: str) -> None:
        self.text = text
        self.name = name
        self.diagnostics: list[Diagnostic] = []
        self.occurrences: list[Occurrence] = []
        self.program: IRModule | Expr | None = None
        self.outline = _outline(text)
        prog, indexed_text = self._parse_recovering()
        if prog is not None:
            self.program = prog
            try:
                self._check(prog)
                self._index(prog, indexed_text)
                self._add_constructors(prog)
            except RecursionError:
                # Some analysis below the parser still recursed on the program's nesting: report
                # it where the nesting is deepest, and answer from what was indexed so far.
                self.diagnostics.append(too_deep(text, name, "analyse"))
        self._starts = [occ.range[0] for occ in self.occurrences]

    # -- diagnostics
    def _parse_recovering(self) -> tuple[IRModule | Expr | None, str]:
        """Parse; on an error inside a top-level definition, blank that definition out (keeping
        every other position) and parse again, so each broken definition reports its own error.
        Returns the program of what still parses (None if nothing does) and the text it came from."""
        current = self.text
        src = SourceText(current, self.name)
        blanked: set[str] = set()
        for _ in range(_MAX_RECOVERIES):
            try:
                return parse(current, self.name), current
            except DiagnosticError as err:
                first = err.diagnostics[0]
                # An error about a name defined in a blanked definition is a consequence of the
                # recovery, not of its own: its definition is blanked too, silently.
                if not any(f"`{name}`" in first.message for name in blanked):
                    self.diagnostics.extend(err.diagnostics)
                if first.span is None:
                    break
                offset = src.line_starts[first.span.line - 1] + first.span.col - 1
                unit = _unit_around(current, offset)
                if unit is None:
                    break
                start, end, unit_name = unit
                blanked.add(unit_name)
                if not unit_name.startswith("@"):   # a type: its constructors go with it
                    blanked.update(re.findall(r"\b[A-Z][A-Za-z0-9_]*", current[start:end]))
                current = current[:start] + re.sub(r"[^\n]", " ", current[start:end]) + current[end:]
        return None, current

    def _check(self, prog: IRModule | Expr) -> None:
        """Well-formedness and type errors; after an error in one `def`, check the definitions
        that do not depend on it again, so each independent definition reports its first error
        (and gets its types for hover)."""
        if not isinstance(prog, IRModule):
            try:
                check_well_formed(prog)
                infer_types(prog)
            except DiagnosticError as err:
                self.diagnostics.extend(err.diagnostics)
            return
        mod = prog
        while mod.functions:
            try:
                check_well_formed(mod)
                infer_types(mod)
                return
            except DiagnosticError as err:
                self.diagnostics.extend(err.diagnostics)
                failing = _def_containing(mod, err.span)
                if failing is None:
                    return
                mod = _without(mod, failing)

    # -- the index
    def _index(self, prog: IRModule | Expr, text: str) -> None:
        src = SourceText(text, self.name)
        try:
            tokens = [token for chunk in tokenize(src, _grammar()[1]) for token in chunk]
        except DiagnosticError:
            return
        roots = [f for f in prog.functions.values() if isinstance(f, Function)] if isinstance(prog, IRModule) \
            else [prog]
        binders, scopes, at_start = _walk(roots)
        mod = prog if isinstance(prog, IRModule) else IRModule()
        ctor_defs = {(c.span.line - 1, c.span.col - 1): c for c in mod.constructors.values() if c.span}
        type_defs = {data.name: data for data in mod.type_defs.values()}
        graph_values: dict[int, Expr | None] = {}
        tir = _TirScopes(text)
        for i, (kind, word, start, end) in enumerate(tokens):
            rng = _token_range(src, start, end)
            before = tokens[i - 1][1] if i else ""
            if kind == "GLOBAL":
                self._add(rng, ("global", word[1:]), before in ("def", "primfn"),
                          mod.functions.get(word[1:]) if isinstance(prog, IRModule) else None)
            elif kind == "GRAPH":
                number = int(word[1:])
                defines = i + 2 < len(tokens) and tokens[i + 1][1] == "="
                if defines:
                    graph_values[number] = at_start.get(_token_range(src, *tokens[i + 2][2:])[0])
                self._add(rng, ("graph", number), defines, graph_values.get(number))
            elif kind == "LOCAL" and tir.inside(start):
                tir.add(self, tokens, i, rng)
            elif kind == "LOCAL":
                var = binders.get(rng[0])
                if var is not None and var.name_hint == word[1:]:
                    self._add(rng, ("local", id(var)), True, var)
                else:
                    var = _resolve(scopes.get(word[1:], []), rng[0])
                    if var is not None:
                        self._add(rng, ("local", id(var)), False, var)
            elif kind == "NAME" and word in mod.constructors:
                ctor = mod.constructors[word]
                self._add(rng, ("ctor", word), ctor_defs.get(rng[0]) is ctor, ctor)
            elif word in type_defs:
                self._add(rng, ("type", word), before == "type", type_defs[word])
            elif kind == "NAME":
                node = at_start.get(rng[0])
                if (isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == word) or \
                        (isinstance(node, Op) and node.name == word):
                    self._add(rng, ("op", word), False, node)
        self.occurrences.sort(key=lambda occ: occ.range[0])

    def _add_constructors(self, prog: IRModule | Expr) -> None:
        """Constructors as children of their type in the outline (known once the file parses)."""
        if not isinstance(prog, IRModule):
            return
        for item in self.outline:
            data = prog.type_defs.get(item.name) if item.kind == "type" else None
            for ctor in data.constructors if data is not None else ():
                if ctor.span is not None:
                    start = span_range(ctor.span)[0]
                    name_range = (start, (start[0], start[1] + len(ctor.name)))
                    item.children.append(Outline(ctor.name, "constructor", span_range(ctor.span), name_range))

    def _add(self, rng: Range, key: Key, is_definition: bool, node: object) -> None:
        self.occurrences.append(Occurrence(rng, key, is_definition, node))

    # -- queries
    def at(self, pos: Pos) -> Occurrence | None:
        """The name occurrence under `pos` (the cursor may also sit just after the name)."""
        i = bisect_right(self._starts, pos) - 1
        if i >= 0 and self.occurrences[i].range[0] <= pos <= self.occurrences[i].range[1]:
            return self.occurrences[i]
        return None

    def definition(self, pos: Pos) -> Range | None:
        occ = self.at(pos)
        if occ is None:
            return None
        return next((o.range for o in self.occurrences if o.key == occ.key and o.is_definition), None)

    def references(self, pos: Pos, include_declaration: bool = True) -> list[Range]:
        occ = self.at(pos)
        if occ is None or occ.key[0] == "op":
            return []
        return [o.range for o in self.occurrences
                if o.key == occ.key and (include_declaration or not o.is_definition)]

    def hover(self, pos: Pos) -> str | None:
        """Markdown for the name under `pos`: its type (inferred where known), or an operator's
        signature with attribute defaults."""
        occ = self.at(pos)
        if occ is None:
            return None
        kind, node = occ.key[0], occ.node
        if kind == "op":
            call = node if isinstance(node, Call) else None
            text = op_signature(str(occ.key[1]))
            if call is not None and call.checked_type is not None:
                text += f"\n\nresult: `{print_type(call.checked_type)}`"
            return text
        if kind == "local" and isinstance(node, Var):
            return _code(f"%{node.name_hint}: {_type_text(node.checked_type or node.type_annotation)}")
        if kind == "graph":
            ty = node.checked_type if isinstance(node, Expr) else None
            return _code(f"%{occ.key[1]}: {_type_text(ty)}")
        if kind == "global":
            ty = node.checked_type if isinstance(node, Function) else None
            return _code(f"@{occ.key[1]}: {_type_text(ty)}")
        if kind == "ctor" and isinstance(node, Constructor):
            return _code(f"{node.name}: {_type_text(_ctor_type(node))}")
        if kind == "type" and isinstance(node, TypeData):
            return _code(_type_data_text(node))
        if kind == "tir" and isinstance(node, str):
            return _code(node)
        return None


class _TirScopes:
    """`%names` inside `primfn`s, resolved on tokens: a name after `for`/`allocate`/`let` or a
    parameter is a definition; a use refers to the latest definition of its name in the same
    primfn (TIR binds each name once per function, docs/tir.md)."""

    def __init__(self, text: str) -> None:
        found = list(_UNIT.finditer(text))
        self.ranges = [(m.start(), found[i + 1].start() if i + 1 < len(found) else len(text))
                       for i, m in enumerate(found) if m.group(1) == "primfn"]
        self.defs: dict[tuple[int, str], tuple[tuple[str, object], str]] = {}

    def inside(self, offset: int) -> bool:
        return any(start <= offset < end for start, end in self.ranges)

    def add(self, doc: Document, tokens: list[Token], i: int, rng: Range) -> None:
        word, start = tokens[i][1], tokens[i][2]
        unit = next(s for s, e in self.ranges if s <= start < e)
        before = tokens[i - 1][1] if i else ""
        after = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if before in ("for", "allocate", "let") or (before in ("(", ",") and after == ":"):
            key = ("tir", (unit, word, start))
            self.defs[(unit, word)] = (key, _tir_declaration(tokens, i))
            doc._add(rng, key, True, self.defs[(unit, word)][1])
        elif (unit, word) in self.defs:
            key, text = self.defs[(unit, word)]
            doc._add(rng, key, False, text)


def _tir_declaration(tokens: list[Token], i: int) -> str:
    """Hover text for a TIR binder from its tokens: `%A: Buffer[(64), float32]`,
    `%i: loop variable (parallel)`, `%x: int32`."""
    word = tokens[i][1]
    if tokens[i - 1][1] == "for":
        kind = tokens[i + 2][1] if i + 2 < len(tokens) else "?"
        return f"{word}: loop variable ({'serial' if kind == 'range' else kind})"
    if i + 1 >= len(tokens) or tokens[i + 1][1] != ":":
        return f"{word}: (type of its value)"
    parts: list[str] = []
    depth = 0
    for _, text, _, _ in tokens[i + 2:]:
        if depth == 0 and text in (",", ")", "=", "{", ";"):
            break
        if text in ("(", "["):
            depth += 1
        elif text in (")", "]"):
            depth -= 1
        parts.append(text)
    type_text = "".join(p + " " if p == "," else p for p in parts)
    return f"{word}: {type_text}"


# ---- Helpers ----------------------------------------------------------------------------------

def op_signature(name: str) -> str:
    """An operator's call form with its attribute defaults, and its description."""
    opdef = get_op(name)
    if opdef is None:
        return _code(name)
    args = [f"%arg{i}" for i in range(opdef.num_inputs)] if opdef.num_inputs is not None else ["%args..."]
    attrs = [f"{f.name}={format_attr_value(f.default)}" if not f.required else f"{f.name}=<required>"
             for f in opdef.attrs or ()]
    if opdef.attrs is None:
        attrs.append("<any attributes>")
    text = _code(f"{name}({', '.join(args + attrs)})")
    details = [f"fusion pattern: {opdef.pattern.name}"]
    if opdef.description:
        details.insert(0, opdef.description)
    return text + "\n\n" + "\n\n".join(details)


def _code(text: str) -> str:
    return f"```relay\n{text}\n```"


def _type_text(ty: Type | None) -> str:
    if ty is None or isinstance(ty, IncompleteType):
        return "?"
    try:
        return print_type(ty)
    except RecursionError:
        return "(a type nested too deeply to print)"


def _ctor_type(ctor: Constructor) -> Type:
    return ctor.checked_type or FuncType(tuple(ctor.inputs), TypeCall(ctor.belong_to, ()), ())


def _type_data_text(data: TypeData) -> str:
    params = "[" + ", ".join(tv.name for tv in data.type_params) + "]" if data.type_params else ""
    if data.extern:
        return f"extern type {data.name}{params}"
    ctors = ", ".join(c.name + ("(" + ", ".join(print_type(t) for t in c.inputs) + ")" if c.inputs else "")
                      for c in data.constructors)
    return f"type {data.name}{params} {{ {ctors} }}"


def _token_range(src: SourceText, start: int, end: int) -> Range:
    return span_range(src.span(start, end))


def _walk(roots: list[Expr]) -> tuple[dict[Pos, Var], dict[str, list[tuple[Pos, Pos, Var]]], dict[Pos, Expr]]:
    """Binders by the position of their name, each name's scopes (start, end, var), and the
    widest expression starting at each position (for hovering a call or a graph binding)."""
    binders: dict[Pos, Var] = {}
    scopes: dict[str, list[tuple[Pos, Pos, Var]]] = {}
    at_start: dict[Pos, Expr] = {}
    widest: dict[Pos, Pos] = {}

    def bind(var: Var, scope: Span | None, start: Pos | None = None) -> None:
        if not var.name_hint or var.span is None or scope is None:
            return
        binders[span_range(var.span)[0]] = var
        lo, hi = span_range(scope)
        scopes.setdefault(var.name_hint, []).append((start or lo, hi, var))

    seen: set[int] = set()
    for root in roots:
        for node in post_order(root):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.span is not None:
                lo, hi = span_range(node.span)
                if lo not in widest or hi > widest[lo]:
                    widest[lo], at_start[lo] = hi, node
            if isinstance(node, Function):
                for param in node.params:
                    bind(param, node.span)
            elif isinstance(node, Let):
                value_end = span_range(node.value.span)[1] if node.value.span else None
                let_range = span_range(node.span) if node.span else None
                inside = value_end is not None and let_range is not None and let_range[0] <= value_end <= let_range[1]
                bind(node.var, node.span, value_end if inside else None)
            elif isinstance(node, Match):
                for clause in node.clauses:
                    for var in clause.lhs.bound_vars():
                        if clause.lhs.span is not None:
                            bind(var, node.span, span_range(clause.lhs.span)[0])
    return binders, scopes, at_start


def _resolve(candidates: list[tuple[Pos, Pos, Var]], pos: Pos) -> Var | None:
    """The innermost binder whose scope contains `pos`."""
    best: tuple[Pos, Var] | None = None
    for lo, hi, var in candidates:
        if lo <= pos < hi and (best is None or lo > best[0]):
            best = (lo, var)
    return best[1] if best else None


def _without(mod: IRModule, name: str) -> IRModule:
    """`mod` minus the definition `name` and everything that calls it, directly or not."""
    calls = {caller: {node.name_hint for node in post_order(func) if isinstance(node, GlobalVar)}
             for caller, func in mod.functions.items() if isinstance(func, Function)}
    removed = {name}
    changed = True
    while changed:
        dependents = {caller for caller, callees in calls.items() if callees & removed} - removed
        removed |= dependents
        changed = bool(dependents)
    out = mod.copy()
    for gone in removed:
        out.functions.pop(gone, None)
        out.def_spans.pop(gone, None)
    return out


def _def_containing(mod: IRModule, span: Span | None) -> str | None:
    if span is None:
        return None
    for name, def_span in mod.def_spans.items():
        if def_span is not None and (def_span.line, def_span.col) <= (span.line, span.col) <= \
                (def_span.end_line, def_span.end_col):
            return name
    return None


def _unit_around(text: str, offset: int) -> tuple[int, int, str] | None:
    """(start, end, name) of the top-level definition holding `offset`."""
    starts = [(m.start(), m.group(2) or m.group(4)) for m in _UNIT.finditer(text)]
    for i, (start, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(text)
        if start <= offset < end or (i + 1 == len(starts) and offset == end):
            return start, end, name
    return None


def _outline(text: str) -> list[Outline]:
    """Definitions found by a line scan, so the outline survives syntax errors."""
    src = SourceText(text, "")
    found = list(_UNIT.finditer(text))
    out: list[Outline] = []
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        body = text[m.start():end].rstrip()
        name_group = 2 if m.group(2) else 4
        kind = {"def": "function", "primfn": "primfn"}.get(m.group(1) or "", "type")
        item = Outline(m.group(name_group), kind, _token_range(src, m.start(), m.start() + len(body)),
                       _token_range(src, m.start(name_group), m.end(name_group)))
        out.append(item)
    return out

