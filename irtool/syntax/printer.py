"""The Relay printer: IR back to TVM's text format (v0.0.5), in graph-normal form.

Layout follows TVM's `astext()`: atoms (variables, constants, operators, globals, constructors)
print inline; any other sub-expression used as an operand, or used more than once, is hoisted to
a `%N = ...;` line (N counts across the whole print); the final expression of a scope and a
`let` value used once print in place. Output is deterministic and re-parses to a structurally
equal program, so `print(parse(print(m))) == print(m)`.

A hoisted node is written where it is first printed, as TVM does; the parser's `%N` table is
global to the file, so later uses anywhere see it. The memo of hoisted nodes is per definition: a
node shared by two definitions prints in each (names and `%N` numbers stay unique per file).

Everything walks with explicit stacks: 200,000-deep let chains and graph chains print under the
default recursion limit. Text is built as nested entry lists (a `str` is a line, a `list` is a
block indented two more spaces) and flattened once at the end, so nesting costs no re-indenting.
"""

from __future__ import annotations

import base64
import json
import re

import numpy as np

from irtool.ir.adt import Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, TypeData
from irtool.ir.expr import (Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, RefRead,
                            RefWrite, Tuple, TupleGetItem, Var)
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.core.diagnostics import DiagnosticError
from irtool.core.span import Span
from irtool.ir.types import IncompleteType, Type, type_text_prefix
from irtool.ir.visitor import free_vars
from irtool.syntax.text_format import Entries, flatten_entries, float_text, format_attrs
from irtool.syntax.tir_printer import primfunc_entries

VERSION_HEADER = '#[version = "0.0.5"]'

# Constants with at most this many elements list their values in the metadata JSON; larger ones
# store raw little-endian bytes as base64 (docs/architecture.md pins this).
MAX_LISTED_ELEMENTS = 64

# The longest type text the printer writes. Text has no sharing, so a type whose parts are shared
# (the type of a chain of `(%a, %a)` tuples) is written out exponentially longer than it is; such a
# type is refused, at the value it belongs to, rather than printed for hours.
MAX_TYPE_TEXT = 1 << 20

# Nodes that always print in place (TVM's `AlwaysInline`).
_ATOMS = frozenset({Var, Constant, Op, GlobalVar, Constructor})

# Scalar dtypes with a literal form; every other constant goes to the metadata table.
_LITERAL_SUFFIX = {"int32": "", "int64": "i64", "int16": "i16",
                   "float32": "f", "float16": "f16", "float64": "f64"}

_NON_IDENT = re.compile(r"[^A-Za-z0-9_/]")
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_/]*")  # printed as is; others are sanitised

# Task codes of the printing loop.
_VISIT, _BUILD, _LET_LINE, _LET_CHAIN, _BEGIN, _END, _CLAUSE = range(7)
_MARK = object()  # on the dataflow stack: "the node below has its operands printed"

Text = str | Entries  # a one-line text, or the entries of a multi-line one (first/last are lines)


def print_type(ty: Type) -> str:
    """A type's text for display (hover, graph labels): cut short with `...` after
    `MAX_TYPE_TEXT` characters, since a type with shared parts can be exponentially long."""
    text, whole = type_text_prefix(ty, MAX_TYPE_TEXT)
    return text if whole else text + "..."


def print_program(prog: IRModule | Expr, show_types: bool = False,
                  metadata: dict[str, list[object]] | None = None) -> str:
    """A module (with header) or a lone expression (with `free_var` lines, no header).

    `metadata` supplies non-constant `#[metadata]` entries (e.g. `VirtualDevice`) for a lone
    expression; a module carries its own in `IRModule.metadata`.
    """
    if isinstance(prog, IRModule):
        return print_module(prog, show_types)
    return print_expr(prog, show_types, metadata)


def print_module(mod: IRModule, show_types: bool = False) -> str:
    printer = _Printer(show_types)
    entries: Entries = [VERSION_HEADER]
    first = True
    for name in sorted(mod.type_defs):
        if not first:
            entries.append("")
        first = False
        entries.extend(printer.type_def_entries(mod.type_defs[name]))
    for name in sorted(mod.functions):
        if not first:
            entries.append("")
        first = False
        func = mod.functions[name]
        entries.extend(primfunc_entries(name, func) if isinstance(func, PrimFunc) else printer.definition(name, func))
    return _finish(entries, printer, mod.metadata)


def print_expr(expr: Expr, show_types: bool = False,
               metadata: dict[str, list[object]] | None = None) -> str:
    printer = _Printer(show_types)
    entries: Entries = []
    for var in free_vars(expr):
        entries.append(f"free_var {printer.binder(var)};")
    entries.extend(printer.scope(expr))
    return _finish(entries, printer, metadata or {})


def _finish(entries: Entries, printer: _Printer, metadata: dict[str, list[object]]) -> str:
    lines: list[str] = []
    flatten_entries(entries, lines)
    meta = printer.metadata_section(metadata)
    if meta:
        lines.append(meta)
    lines.append("")
    return "\n".join(lines)


def scalar_literal(data: np.ndarray) -> str | None:
    """Literal text of a 0-d constant (`42`, `42i64`, `3f`, `True`), or None when it needs metadata."""
    if data.ndim != 0:
        return None
    dtype = data.dtype.name
    if dtype == "bool":
        return "True" if bool(data) else "False"
    suffix = _LITERAL_SUFFIX.get(dtype)
    if suffix is None:
        return None
    if data.dtype.kind == "i":
        return f"{int(data)}{suffix}"
    value = data[()]
    if not np.isfinite(value) and (dtype != "float32" or np.isnan(value)):
        return None  # the text has `inff` (float32) only; NaNs and wider infinities keep exact bytes
    return f"{float_text(value)}{suffix}"


def _pattern_text(printer: _Printer, pattern: Pattern) -> str:
    """`Cons(%h, Cons(_, %t))`, `(%a, %b)`, `_`; binders are named left to right (iteratively)."""
    out: list[str] = []
    stack: list[Pattern | str] = [pattern]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, PatternVar):
            out.append(printer.binder(item.var))
        elif isinstance(item, PatternConstructor):
            out.append(item.constructor.name)
            if item.patterns:
                stack.append(")")
                _push_sequence(stack, item.patterns)
                stack.append("(")
        elif isinstance(item, PatternTuple):
            stack.append(")")
            _push_sequence(stack, item.patterns)
            stack.append("(")
        else:
            out.append("_")
    return "".join(out)


def _push_sequence(stack: list[Pattern | str], patterns: tuple[Pattern, ...]) -> None:
    for i in range(len(patterns) - 1, -1, -1):
        stack.append(patterns[i])
        if i:
            stack.append(", ")


def _close_scope(scopes: list[Entries], vals: list[Text]) -> Entries:
    """The innermost scope's bindings followed by its result expression, which ends the scope."""
    block = scopes.pop()
    final = vals.pop()
    if type(final) is str:
        block.append(final)
    else:
        block.extend(final)
    return block


def _count_uses(root: Expr) -> dict[int, int]:
    """Operand edges into each non-atomic node (the root counts one), for the inline-or-hoist choice.

    Variables are counted only when unnamed: an unnamed `let` variable nobody reads is printed as
    sequencing (`a; b`). Binder positions (parameters, `let` and pattern variables) are not uses.
    """
    counts: dict[int, int] = {}
    get = counts.get
    stack: list[Expr] = [root]
    push = stack.append
    atoms = _ATOMS
    while stack:
        node = stack.pop()
        k = id(node)
        c = get(k)
        if c is not None:
            counts[k] = c + 1
            continue
        counts[k] = 1
        t = type(node)
        if t is Call:
            op = node.op  # type: ignore[attr-defined]
            if type(op) not in atoms:
                push(op)
            for a in node.args:  # type: ignore[attr-defined]
                ta = type(a)
                if ta not in atoms or (ta is Var and not a.name_hint):
                    push(a)
        elif t in atoms:
            continue
        elif t is Let:
            push(node.value)  # type: ignore[attr-defined]
            push(node.body)  # type: ignore[attr-defined]
        elif t is Match:
            push(node.data)  # type: ignore[attr-defined]
            stack.extend(c.rhs for c in node.clauses)  # type: ignore[attr-defined]
        elif t is Function:
            push(node.body)  # type: ignore[attr-defined]
        else:
            stack.extend(node.children())
    return counts


class _Printer:
    """State shared by one print: unique names, the `%N` counter and the metadata table."""

    def __init__(self, show_types: bool) -> None:
        self.show_types = show_types
        self.names: dict[str, int] = {}
        self.counter = 0
        self.constants: list[np.ndarray] = []
        self.constant_index: dict[tuple, int] = {}
        # Per definition: the text of atoms and hoisted nodes, keyed by node id.
        self.memo: dict[int, str] = {}
        self.counts: dict[int, int] = {}
        # Call attributes and types by identity/value: models repeat the same few.
        self.attr_texts: dict[int, str] = {}
        self.type_texts: dict[Type, str] = {}
        self.type_ids: dict[int, str] = {}  # a first lookup by identity: type hashing is slow
        self.where: Span | None = None  # the definition being printed: where a node without a span is
        self.literals: dict[tuple[str, bytes], str] = {}  # "" = no literal form

    # --- names and atoms -------------------------------------------------------------------------

    def unique(self, name: str) -> str:
        """TVM's scheme: the first `%x` keeps its name, later ones become `%x1`, `%x2`, ..."""
        names = self.names
        n = names.get(name)
        if n is not None:
            while True:
                n += 1
                candidate = f"{name}{n}"
                if candidate not in names:
                    names[name] = n
                    name = candidate
                    break
        names[name] = 0
        return name

    def var_name(self, var: Var) -> str:
        name = var.name_hint
        if _VAR_NAME.fullmatch(name) is None:
            name = _NON_IDENT.sub("_", name)
            if not name or not (name[0].isalpha() or name[0] == "_"):
                name = "v" + name
        text = "%" + name
        if text in self.names:
            text = self.unique(text)
        else:
            self.names[text] = 0
        self.memo[id(var)] = text
        return text

    def binder(self, var: Var) -> str:
        """A binding occurrence: `%x {virtual_device=...}: T`; names the variable for later uses."""
        text = self.var_name(var)
        if var.attrs:
            text += " {" + format_attrs(var.attrs) + "}"
        if var.type_annotation is not None:
            text += ": " + self.type_text(var.type_annotation, var.span)
        if self.show_types and var.checked_type is not None:
            text += f" /* ty={self.type_text(var.checked_type, var.span)} */"
        return text

    def type_text(self, ty: Type, at: Span | None) -> str:
        """The text of a type (the IR holds the type, so its id is stable while printing); a
        located error when it is longer than `MAX_TYPE_TEXT`."""
        text = self.type_ids.get(id(ty))
        if text is None:
            text = self.type_texts.get(ty)
            if text is None:
                text, whole = type_text_prefix(ty, MAX_TYPE_TEXT)
                if not whole:
                    raise DiagnosticError(f"type too long to print: more than {MAX_TYPE_TEXT} characters written "
                                          "out (a part shared in the type is written at each use)", at or self.where)
                self.type_texts[ty] = text
            self.type_ids[id(ty)] = text
        return text

    def type_def_entries(self, data: TypeData) -> Entries:
        tparams = "[" + ", ".join(tv.name for tv in data.type_params) + "]" if data.type_params else ""
        if data.extern:
            return [f"extern type {data.name}{tparams}"]
        ctors: Entries = []
        for ctor in data.constructors:
            args = "(" + ", ".join(self.type_text(t, ctor.span) for t in ctor.inputs) + ")" if ctor.inputs else ""
            ctors.append(f"{ctor.name}{args},")
        return [f"type {data.name}{tparams} {{", ctors, "}"]

    def atom(self, node: Expr) -> str:
        t = type(node)
        if t is Var:
            return self.var_name(node)  # type: ignore[arg-type]  # free in its definition
        if t is Constant:
            data = node.data  # type: ignore[attr-defined]
            text = None
            if data.ndim == 0:
                # Literal texts by value: the parser makes one Constant per `1f` a model repeats.
                key = (data.dtype.str, data.tobytes())
                text = self.literals.get(key)
                if text is None:
                    text = self.literals[key] = scalar_literal(data) or ""
            if not text:
                text = f"meta[relay.Constant][{self.constant_slot(data)}]"
            if self.show_types and node.checked_type is not None:
                text += f" /* ty={self.type_text(node.checked_type, node.span)} */"
        elif t is GlobalVar:
            text = "@" + node.name_hint  # type: ignore[attr-defined]
        elif t is Op:
            text = node.name  # type: ignore[attr-defined]
        else:
            text = node.name  # type: ignore[attr-defined]  # Constructor
        self.memo[id(node)] = text
        return text

    def constant_slot(self, data: np.ndarray) -> int:
        """Index in the metadata table; equal constants share one entry, so re-printing is stable."""
        key = (data.dtype.str, data.shape, data.tobytes())
        index = self.constant_index.get(key)
        if index is None:
            index = self.constant_index[key] = len(self.constants)
            self.constants.append(data)
        return index

    # --- definitions and scopes ------------------------------------------------------------------

    def definition(self, name: str, func: Function) -> Entries:
        self.memo = {}
        self.where = func.span
        params = self.params_text(func)
        block = self.scope(func.body)
        return [self.fn_header(f"def @{name}", func, params), block, "}"]

    def params_text(self, func: Function) -> str:
        parts = [self.binder(p) for p in func.params]
        if func.attrs:
            parts.append(format_attrs(func.attrs))
        return ", ".join(parts)

    def fn_header(self, prefix: str, func: Function, params: str) -> str:
        tparams = "[" + ", ".join(tv.name for tv in func.type_params) + "]" if func.type_params else ""
        ret = f"-> {self.type_text(func.ret_type, func.span)} " if func.ret_type is not None else ""
        return f"{prefix}{tparams}({params}) {ret}{{"

    def scope(self, root: Expr) -> Entries:
        """The lines of a top-level scope: hoisted bindings, then the root expression."""
        if not self.show_types:
            block = self.dataflow_scope(root)
            if block is not None:
                return block
        self.counts = _count_uses(root)
        scopes: list[Entries] = [[]]
        vals: list[Text] = []
        self.run([(_VISIT, root, 2)], scopes, vals)
        return _close_scope(scopes, vals)

    def dataflow_scope(self, root: Expr) -> Entries | None:
        """The fast path for pure dataflow (calls, tuples, projections over atoms): the shape of
        real models. Every non-atom but the root is hoisted, so no use counts are needed. Returns
        None, with the printer's state untouched, when `root` holds anything else."""
        memo = self.memo
        memo_get = memo.get
        atom = self.atom
        atoms = _ATOMS
        # The memo holds just the parameters here; names are untouched (a free variable bails out).
        saved = (dict(memo), len(self.constants), self.counter)
        counter = self.counter
        lines: Entries = []
        append = lines.append
        mark = _MARK
        if type(root) in atoms and (type(root) is not Var or id(root) in memo):
            return [memo_get(id(root)) or atom(root)]
        stack: list[Expr | object] = [root]
        push = stack.append
        pop = stack.pop
        while stack:
            node = pop()
            if node is mark:
                node = pop()
            else:
                if id(node) in memo:
                    continue
                t = type(node)
                if t is Call:
                    kids = node.args  # type: ignore[union-attr]
                    op = node.op  # type: ignore[union-attr]
                    if type(op) not in atoms or type(op) is Var:
                        kids = (*kids, op)  # the callee prints after the arguments, as TVM does
                elif t is Tuple:
                    kids = node.fields  # type: ignore[union-attr]
                elif t is TupleGetItem:
                    kids = (node.tuple_value,)  # type: ignore[union-attr]
                elif t in atoms and t is not Var:
                    continue
                else:  # a scope, or a variable free in its definition
                    self.restore(saved)
                    return None
                pending = None
                for kid in kids:
                    if id(kid) not in memo and (type(kid) not in atoms or type(kid) is Var):
                        if pending is None:
                            pending = [kid]
                        else:
                            pending.append(kid)
                if pending is not None:
                    push(node)
                    push(mark)
                    pending.reverse()
                    stack.extend(pending)
                    continue
            t = type(node)
            if t is Call:
                text = self.call_text(node)  # type: ignore[arg-type]
            elif t is Tuple:
                fields = [memo_get(id(f)) or atom(f) for f in node.fields]  # type: ignore[union-attr]
                text = "(" + fields[0] + ",)" if len(fields) == 1 else "(" + ", ".join(fields) + ")"
            else:
                text = self.projection(node)  # type: ignore[arg-type]
            if node is root:
                append(text)
                break
            name = f"%{counter}"
            counter += 1
            append(f"{name} = {text};")
            memo[id(node)] = name
        self.counter = counter
        return lines

    def restore(self, saved: tuple) -> None:
        memo, n_constants, counter = saved
        self.memo.clear()
        self.memo.update(memo)
        self.counter = counter
        del self.constants[n_constants:]
        self.constant_index = {k: i for k, i in self.constant_index.items() if i < n_constants}

    # --- the printing loop -----------------------------------------------------------------------

    def run(self, tasks: list[tuple], scopes: list[Entries], vals: list[Text]) -> None:
        """Post-order over the DAG with explicit tasks.

        A `_VISIT` in mode 0 (an operand) leaves the node's text in `memo` (atoms and hoisted
        `%N`); in mode 1 (a `let` value) or 2 (the final expression of a scope) it pushes the text
        on `vals`, in place when the node has a single use. Scope-opening nodes push `_BEGIN` /
        `_END` around their bodies; `_END` turns the scope's lines into a block on `vals`.
        """
        memo = self.memo
        counts = self.counts
        atoms = _ATOMS
        push = tasks.append
        while tasks:
            task = tasks.pop()
            code = task[0]
            if code == _VISIT:
                node, mode = task[1], task[2]
                text = memo.get(id(node))
                if text is not None:
                    if mode:
                        vals.append(text)
                    continue
                t = type(node)
                if t in atoms:
                    text = self.atom(node)
                    if mode:
                        vals.append(text)
                    continue
                if t is Call:
                    push((_BUILD, node, mode))
                    op = node.op
                    if type(op) not in atoms and id(op) not in memo:
                        push((_VISIT, op, 0))  # printed after the arguments, as TVM does
                    args = node.args
                    for i in range(len(args) - 1, -1, -1):
                        a = args[i]
                        if type(a) not in atoms and id(a) not in memo:
                            push((_VISIT, a, 0))
                elif t is Let:
                    if mode == 2 and counts[id(node)] == 1:
                        push((_LET_CHAIN, node))  # a scope's tail: lines in this scope
                    else:
                        push((_BUILD, node, mode))  # elsewhere: `( let ...; body )`
                        push((_END,))
                        push((_LET_CHAIN, node))
                        push((_BEGIN,))
                elif t is Function:
                    push((_BUILD, node, mode, self.params_text(node)))
                    push((_END,))
                    push((_VISIT, node.body, 2))
                    push((_BEGIN,))
                elif t is If:
                    push((_BUILD, node, mode))
                    for branch in (node.false_branch, node.true_branch):
                        push((_END,))
                        push((_VISIT, branch, 2))
                        push((_BEGIN,))
                    push((_VISIT, node.cond, 0))
                elif t is Match:
                    push((_BUILD, node, mode))
                    for clause in reversed(node.clauses):
                        push((_END,))
                        push((_VISIT, clause.rhs, 2))
                        push((_CLAUSE, clause))
                    push((_VISIT, node.data, 0))
                else:  # Tuple, TupleGetItem, RefCreate, RefRead, RefWrite: operands in order
                    push((_BUILD, node, mode))
                    kids = node.children()
                    for i in range(len(kids) - 1, -1, -1):
                        push((_VISIT, kids[i], 0))
            elif code == _BUILD:
                node = task[1]
                if type(node) is not Call or self.show_types:
                    self.build(task, scopes, vals)
                    continue
                text = self.call_text(node)  # the hot path: no annotation to add
                mode = task[2]
                if mode and counts[id(node)] == 1:
                    vals.append(text)
                    continue
                name = f"%{self.counter}"
                self.counter += 1
                scopes[-1].append(f"{name} = {text};")
                memo[id(node)] = name
                if mode:
                    vals.append(name)
            elif code == _LET_CHAIN:
                node = task[1]
                scope = scopes[-1]
                while True:
                    # Named before its value: a `let`-bound function may call itself.
                    prefix = self.let_prefix(node.var)
                    text = self.ready_text(node.value)
                    if text is None:
                        push((_VISIT, node.body, 2))
                        push((_LET_LINE, prefix))
                        push((_VISIT, node.value, 1))
                        break
                    scope.append(f"{prefix}{text};")  # the common ANF line, without tasks
                    body = node.body
                    if type(body) is not Let or counts[id(body)] != 1:
                        push((_VISIT, body, 2))
                        break
                    node = body
            elif code == _LET_LINE:
                prefix = task[1]
                value = vals.pop()
                if type(value) is str:
                    scopes[-1].append(f"{prefix}{value};")
                else:
                    value[0] = prefix + value[0]
                    value[-1] += ";"
                    scopes[-1].extend(value)
            elif code == _BEGIN:
                scopes.append([])
            elif code == _END:
                vals.append(_close_scope(scopes, vals))
            else:  # _CLAUSE
                vals.append(_pattern_text(self, task[1].lhs))
                scopes.append([])

    def operand(self, node: Expr) -> str:
        text = self.memo.get(id(node))
        return text if text is not None else self.atom(node)

    def call_text(self, node: Call) -> str:
        """`op(args, attrs)`; every operand is an atom or already hoisted."""
        memo_get = self.memo.get
        op = node.op
        args = node.args
        if not args and type(op) is Constructor and not op.inputs:
            return memo_get(id(op)) or self.atom(op)  # `Nil`: the parser makes this call of it
        texts = [memo_get(id(a)) or self.atom(a) for a in args]
        attrs = node.attrs
        if attrs:
            attr_text = self.attr_texts.get(id(attrs))
            if attr_text is None:
                attr_text = self.attr_texts[id(attrs)] = format_attrs(attrs)
            texts.append(attr_text)
        callee = op.name if type(op) is Op else memo_get(id(op)) or self.atom(op)
        return f"{callee}({', '.join(texts)})"

    def ready_text(self, value: Expr) -> str | None:
        """The in-place text of a `let` value that needs no hoisting (an atom, a printed node, or
        a call used once over such operands), or None: then it goes through the task loop."""
        memo = self.memo
        text = memo.get(id(value))
        if text is not None:
            return text
        t = type(value)
        if t in _ATOMS:
            return self.atom(value)
        if t is not Call or self.show_types or self.counts[id(value)] != 1:
            return None
        for operand in (value.op, *value.args):  # type: ignore[attr-defined]
            if type(operand) not in _ATOMS and id(operand) not in memo:
                return None
        return self.call_text(value)  # type: ignore[arg-type]

    def projection(self, node: TupleGetItem) -> str:
        value = node.tuple_value
        text = self.operand(value)
        if type(value) is Constant:
            return f"({text}).{node.index}"  # `1.0` would read as a number
        return f"{text}.{node.index}"

    def build(self, task: tuple, scopes: list[Entries], vals: list[Text]) -> None:
        node, mode = task[1], task[2]
        t = type(node)
        text: Text
        if t is Call:
            text = self.call_text(node)
        elif t is Tuple:
            fields = [self.operand(f) for f in node.fields]
            text = "(" + fields[0] + ",)" if len(fields) == 1 else "(" + ", ".join(fields) + ")"
        elif t is TupleGetItem:
            text = self.projection(node)
        elif t is Function:
            text = [self.fn_header("fn ", node, task[3]), vals.pop(), "}"]
        elif t is If:
            false_block = vals.pop()
            true_block = vals.pop()
            text = [f"if ({self.operand(node.cond)}) {{", true_block, "} else {", false_block, "}"]
        elif t is Let:
            text = ["(", vals.pop(), ")"]
        elif t is Match:
            clauses: Entries = []
            parts = vals[len(vals) - 2 * len(node.clauses):]
            del vals[len(vals) - 2 * len(node.clauses):]
            for i in range(0, len(parts), 2):
                clauses.extend((f"{parts[i]} => {{", parts[i + 1], "},"))
            head = f"match{'' if node.complete else '?'} ({self.operand(node.data)}) {{"
            if mode == 2 and self.counts[id(node)] == 1:
                text = [head, clauses, "}"]
            else:  # `match` is a statement in TVM's grammar: parenthesise it as an operand
                text = ["(" + head, clauses, "})"]
        elif t is RefCreate:
            text = f"ref({self.operand(node.value)})"
        elif t is RefRead:
            text = f"ref_read({self.operand(node.ref)})"
        elif t is RefWrite:
            text = f"ref_write({self.operand(node.ref)}, {self.operand(node.value)})"
        else:
            raise TypeError(f"cannot print {type(node).__name__}")
        if self.show_types and node.checked_type is not None:
            annotation = f" /* ty={self.type_text(node.checked_type, node.span)} */"
            if type(text) is str:
                text += annotation
            else:
                text[-1] += annotation
        if mode and self.counts[id(node)] == 1:
            vals.append(text)
            return
        name = f"%{self.counter}"
        self.counter += 1
        scope = scopes[-1]
        if type(text) is str:
            scope.append(f"{name} = {text};")
        else:
            text[0] = f"{name} = {text[0]}"
            text[-1] += ";"
            scope.extend(text)
        self.memo[id(node)] = name
        if mode:
            vals.append(name)

    def let_prefix(self, var: Var) -> str:
        """`let %x: T = `, or nothing for sequencing `a; b` (TVM's parser makes exactly that Let)."""
        if (not var.name_hint and isinstance(var.type_annotation, IncompleteType)
                and id(var) not in self.counts and not var.attrs):
            return ""
        return f"let {self.binder(var)} = "

    # --- metadata --------------------------------------------------------------------------------

    def metadata_section(self, extra: dict[str, list[object]]) -> str:
        """`#[metadata]` and its JSON object, or "" when nothing refers to metadata."""
        kinds: list[tuple[str, list[str]]] = []
        if self.constants:
            kinds.append(("relay.Constant", [_constant_json(c) for c in self.constants]))
        for kind, items in extra.items():
            if kind != "relay.Constant" and items:
                kinds.append((kind, [json.dumps(item) for item in items]))
        if not kinds:
            return ""
        lines = ["#[metadata]", "{"]
        for k, (kind, items) in enumerate(kinds):
            lines.append(f"  {json.dumps(kind)}: [")
            lines.extend(f"    {item}," if i + 1 < len(items) else f"    {item}" for i, item in enumerate(items))
            lines.append("  ]," if k + 1 < len(kinds) else "  ]")
        lines.append("}")
        return "\n".join(lines)


def _constant_json(data: np.ndarray) -> str:
    head = f'{{"dtype": "{data.dtype.name}", "shape": {json.dumps(list(data.shape))}, '
    flat = data.reshape(-1)
    if flat.size <= MAX_LISTED_ELEMENTS and _listable(flat):
        if data.dtype.kind == "f":
            items = [_json_float(v) for v in flat]
        elif data.dtype.kind == "b":
            items = ["true" if v else "false" for v in flat.tolist()]
        else:
            items = [str(v) for v in flat.tolist()]
        return head + '"data": [' + ", ".join(items) + "]}"
    raw = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<")).tobytes()
    return head + '"base64": "' + base64.b64encode(raw).decode("ascii") + '"}'


def _listable(flat: np.ndarray) -> bool:
    """Whether a decimal list restores the exact bytes (not for odd NaNs or exotic dtypes)."""
    if flat.dtype.kind not in "fiub" or flat.dtype.kind == "f" and flat.dtype.itemsize > 8:
        return False
    if flat.dtype.kind == "f":
        nans = flat[np.isnan(flat)]
        return nans.tobytes() == np.full(nans.shape, np.nan, dtype=flat.dtype).tobytes()
    return True


def _json_float(value: np.floating) -> str:
    text = float_text(value)
    if text in ("nan", "inf", "-inf"):
        return f'"{text}"'
    # A JSON number without `.` or exponent reads back as an integer, and `-0` as plain 0.
    return text if "." in text or "e" in text else text + ".0"
