"""TIR to text (`primfn @f(...) { ... }`), the inverse of `tir_builder`: printing and re-parsing
gives a structurally equal PrimFunc, and printing is deterministic.

Names: each buffer and variable prints under its own name unless another binder of the function
already took it; then it gets a `_1`, `_2`, ... suffix, so that every name the text uses resolves
to the same binder the IR has. Statements and expressions are walked with explicit stacks
(long `let` chains and deeply nested fused expressions are common in lowered code).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

import numpy as np

from irtool.ir.tir import (INFIX_SYMBOLS, Allocate, AssertStmt, BinaryOp, Broadcast, Buffer, BufferLoad,
                           BufferStore, Call, Cast, Evaluate, FloatImm, For, IfExpr, IfThenElse, IntImm, LetStmt, Not,
                           PrimExpr, PrimFunc, Ramp, Select, SeqStmt, Stmt, Var, children)
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.text_format import Entries, flatten_entries, float_text, format_attr_value, format_attrs
from irtool.syntax.tir_layout import Doc, call, chain, flat, layout

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_/]*")
_INT_SUFFIX = {"int32": "", "int64": "i64", "int16": "i16", "int8": "i8"}
_FLOAT_SUFFIX = {"float32": "f", "float64": "f64", "float16": "f16"}
# Binding strength of infix operators (higher binds tighter); atoms are 4.
_PREC = {"eq": 0, "ne": 0, "lt": 1, "le": 1, "gt": 1, "ge": 1, "add": 2, "sub": 2, "mul": 3, "div": 3}
_ATOM = 4
_KIND_TEXT = {"serial": "range", "parallel": "parallel", "vectorized": "vectorized", "unrolled": "unrolled"}


def print_primfunc(name: str, func: PrimFunc) -> str:
    """One `primfn` definition as text (a module prints its PrimFuncs through `primfunc_entries`)."""
    lines: list[str] = []
    flatten_entries(primfunc_entries(name, func), lines)
    return "\n".join(lines) + "\n"


def primfunc_entries(name: str, func: PrimFunc) -> Entries:
    """The definition as the Relay printer's entries: lines, and nested lists for indented blocks."""
    return _TirPrinter().function(name, func)


class _TirPrinter:
    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.used: set[str] = set()

    def name(self, node: Var | Buffer) -> str:
        """The printed name of a binder (made unique on first sight)."""
        text = self.names.get(id(node))
        if text is None:
            base = node.name if _NAME.fullmatch(node.name) else (re.sub(r"[^A-Za-z0-9_/]", "_", node.name) or "v")
            if not _NAME.fullmatch(base):
                base = "v" + base
            text, n = base, 0
            while text in self.used:
                n += 1
                text = f"{base}_{n}"
            self.used.add(text)
            self.names[id(node)] = text
        return "%" + text

    def buffer_decl(self, buf: Buffer) -> str:
        dims = ", ".join(map(str, buf.shape))
        options: list[str] = []
        if buf.strides is not None:
            options.append(f"strides={format_attr_value(buf.strides)}")
        if buf.align:
            options.append(f"align={buf.align}")
        if buf.scope != "global":
            options.append(f"scope={format_attr_value(buf.scope)}")
        extra = "".join(", " + o for o in options)
        return f"{self.name(buf)}: Buffer[({dims}), {buf.dtype}{extra}]"

    def function(self, name: str, func: PrimFunc) -> Entries:
        params: list[Doc] = [self.buffer_decl(p) for p in func.params]
        if func.attrs:
            params.append(format_attrs(func.attrs))
        body: Entries = []
        self.block(func.body, body, 1)
        return [*layout(call(f"primfn @{name}(", params, ") {"), 0), body, "}"]

    def block(self, root: Stmt, out: Entries, depth: int) -> None:
        """Appends the statements of `root` (a block's contents, at `depth`) to `out`."""
        stack: list[tuple[Stmt, Entries, int, bool]] = [(root, out, depth, False)]
        while stack:
            stmt, target, depth, wrap = stack.pop()
            if wrap:
                # A let scopes over the rest of its block; braces keep the statements after it outside.
                inner: Entries = []
                target.extend(["{", inner, "}"])
                target, depth = inner, depth + 1
            if isinstance(stmt, SeqStmt):
                items = stmt.stmts
                last = len(items) - 1
                stack.extend((items[i], target, depth, type(items[i]) is LetStmt and i < last)
                             for i in range(last, -1, -1))
            elif isinstance(stmt, LetStmt):
                target.extend(layout(chain(f"let {self.name(stmt.var)}: {stmt.var.dtype}", "=",
                                           self.expr(stmt.value)), depth, suffix=";"))
                stack.append((stmt.body, target, depth, False))
            elif isinstance(stmt, For):
                body: Entries = []
                target.extend([f"for {self.name(stmt.var)} in {_KIND_TEXT[stmt.kind]}({self.text(stmt.begin)}, "
                               f"{self.text(stmt.end)}) {{", body, "}"])
                stack.append((stmt.body, body, depth + 1, False))
            elif isinstance(stmt, Allocate):
                body = []
                target.extend([f"allocate {self.buffer_decl(stmt.buffer)} {{", body, "}"])
                stack.append((stmt.body, body, depth + 1, False))
            elif isinstance(stmt, IfThenElse):
                then_body: Entries = []
                target.extend([*layout(call("if (", [self.expr(stmt.cond)], ") {"), depth), then_body])
                if stmt.else_body is not None:
                    else_body: Entries = []
                    target.extend(["} else {", else_body])
                    stack.append((stmt.else_body, else_body, depth + 1, False))
                target.append("}")
                stack.append((stmt.then_body, then_body, depth + 1, False))
            elif isinstance(stmt, BufferStore):
                access = call(f"{self.name(stmt.buffer)}[", [self.expr(i) for i in stmt.indices], "]")
                target.extend(layout(chain(access, "=", self.expr(stmt.value)), depth, suffix=";"))
            elif isinstance(stmt, Evaluate):
                target.extend(layout(call("evaluate(", [self.expr(stmt.value)], ");"), depth))
            elif isinstance(stmt, AssertStmt):
                target.extend(layout(call("assert(", [self.expr(stmt.cond), format_attr_value(stmt.message)], ");"),
                                     depth))
            else:
                raise TypeError(f"not a TIR statement: {stmt!r}")

    def text(self, root: PrimExpr) -> str:
        return flat(self.expr(root))

    def expr(self, root: PrimExpr) -> Doc:
        """Expression text with the fewest parentheses that re-parse to the same tree, as a
        `Group` that `layout` may break."""
        results: list[tuple[Doc, int]] = []
        todo: list[tuple[PrimExpr, tuple | None]] = [(root, None)]
        while todo:
            node, kids = todo.pop()
            if kids is None:
                kids = children(node)
                if kids:
                    todo.append((node, kids))
                    todo.extend((kid, None) for kid in reversed(kids))  # type: ignore[misc]
                    continue
            n = len(kids)
            args = results[len(results) - n:]
            del results[len(results) - n:]
            results.append(self.combine(node, args))
        return results[0][0]

    def combine(self, node: PrimExpr, args: list[tuple[Doc, int]]) -> tuple[Doc, int]:
        if isinstance(node, Var):
            return self.name(node), _ATOM
        if isinstance(node, IntImm):
            return _int_text(node), _ATOM
        if isinstance(node, FloatImm):
            return _float_text(node), _ATOM
        docs = [doc for doc, _ in args]
        if isinstance(node, BinaryOp):
            op = node.op
            prec = _PREC.get(op)
            if prec is None:
                return call(f"{op}(", docs), _ATOM
            (lhs, lp), (rhs, rp) = args
            lhs = lhs if lp >= prec else call("(", [lhs])
            rhs = rhs if rp > prec else call("(", [rhs])
            return chain(lhs, INFIX_SYMBOLS[op], rhs), prec
        if isinstance(node, BufferLoad):
            return call(f"{self.name(node.buffer)}[", docs, "]"), _ATOM
        if isinstance(node, Cast):
            return call(f"{node.dtype}(", docs), _ATOM
        if isinstance(node, Not):
            return call("not(", docs), _ATOM
        if isinstance(node, Select):
            return call("select(", docs), _ATOM
        if isinstance(node, IfExpr):
            return call("if_then_else(", docs), _ATOM
        if isinstance(node, (Ramp, Broadcast)):
            return call(f"{type(node).__name__.lower()}(", [*docs, str(node.lanes)]), _ATOM
        if isinstance(node, Call):
            return call(f"{node.name}(", docs), _ATOM
        raise TypeError(f"not a TIR expression: {node!r}")


def _int_text(node: IntImm) -> str:
    if node.dtype == "bool":
        return "True" if node.value else "False"
    suffix = _INT_SUFFIX.get(node.dtype)
    if suffix is None:
        return f"{node.dtype}({node.value})"   # uint8(7): a literal of a dtype without a suffix
    return f"{node.value}{suffix}"


def _float_text(node: FloatImm) -> str:
    if math.isnan(node.value):
        raise DiagnosticError("a NaN literal has no text form", node.span)
    return _float_literal(node.value, math.copysign(1.0, node.value), node.dtype)


@lru_cache(maxsize=4096)
def _float_literal(value: float, sign: float, dtype: str) -> str:
    """Cached on (value, sign, dtype): `-0.0 == 0.0`, so the sign is part of the key."""
    suffix = _FLOAT_SUFFIX.get(dtype)
    if suffix is None or math.isinf(value) and dtype != "float32":
        inner = ("-inff" if value < 0 else "inff") if math.isinf(value) else f"{repr(value)}f64"
        return f"{dtype}({inner})"
    if math.isinf(value):
        return "inff" if value > 0 else "-inff"
    return float_text(np.dtype(dtype).type(value)) + suffix
