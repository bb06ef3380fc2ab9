"""Type inference: fills `checked_type` on every expression of a module or a lone expression.

Hindley-Milner style: every expression gets a type term, unannotated binders and `_` get fresh
holes, and constraints are solved by unification (`unify.py`) as the walk goes. Polymorphic
globals, constructors and function literals are instantiated with fresh holes at each call.
All definitions of a module share one solver, so a global's unannotated parameter is solved by
its callers; definitions are walked callees first so polymorphic schemes are settled before use.
Operator calls apply the operator's type relation once their argument types are fully known;
until then they wait, and are retried until nothing changes (TVM's solver does the same).

The walk uses an explicit stack and visits each shared node once: its cost is linear in the
number of distinct nodes, and its depth is not limited by Python's recursion limit. Types are
DAGs too (`(%a, %a)` holds the type of `%a` twice) and the solver walks each shared part once, so
a chain of such tuples checks in linear time although its types are exponentially long written
out. Annotations are kind-checked (each ADT applied to as many arguments as it has parameters),
and no type may nest deeper than `MAX_TYPE_DEPTH`: a deeper one is reported at the first
expression (or binder) found to have it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from irtool.analysis.unify import Mismatch, Solver, TooDeep
from irtool.ir.adt import Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar
from irtool.ir.expr import (Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, RefRead,
                            RefWrite, Tuple, TupleGetItem, Var)
from irtool.ir.module import IRModule
from irtool.core.span import Span
from irtool.ir.tir import PrimFunc
from irtool.ir.types import (MAX_TYPE_DEPTH, CompoundType, FuncType, IncompleteType, RefType, TensorType, TupleType,
                             Type, TypeCall, scalar_type, type_arity_message)
from irtool.ir.visitor import post_order
from irtool.ir.signature import primfunc_type
from irtool.ops.registry import OpDef, TypeRelError, get_op
from irtool.core.diagnostics import DiagnosticError

_BOOL = scalar_type("bool")
_UNIT = TupleType(())


def infer_types(prog: IRModule | Expr, mod: IRModule | None = None) -> None:
    """Type-check `prog` and set `checked_type` on each of its expressions.

    A lone expression may refer to the globals and constructors of `mod`. Raises a located
    `DiagnosticError` on the first type error, or when some type cannot be determined.
    """
    with cyclic_gc_paused():
        if isinstance(prog, IRModule):
            _Inferencer(prog).run_module()
        else:
            _Inferencer(mod or IRModule()).run_expr(prog)


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Suspend the cyclic garbage collector (restored on exit, even on errors).

    Whole-program walks allocate many long-lived, acyclic objects; the collector's full passes
    over them only cost time (about a seventh of a verified pipeline run).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def infer_expr_type(expr: Expr, mod: IRModule | None = None) -> Type:
    """The checked type of a lone expression (its sub-expressions are annotated too)."""
    infer_types(expr, mod)
    assert expr.checked_type is not None
    return expr.checked_type


def describe(node: Expr) -> str:
    """How an error message names an expression."""
    if isinstance(node, Var):
        return f"%{node.name_hint}" if node.name_hint else "a sequenced expression"
    if isinstance(node, GlobalVar):
        return f"@{node.name_hint}"
    if isinstance(node, Call):
        callee = node.op
        if isinstance(callee, Op):
            return f"call to {callee.name}"
        if isinstance(callee, Constructor):
            return f"call to {callee.name}"
        if isinstance(callee, (GlobalVar, Var)):
            return f"call to {describe(callee)}"
        return "call"
    return {Function: "function", Let: "let", If: "if", Tuple: "tuple", TupleGetItem: "tuple projection",
            RefCreate: "ref", RefRead: "ref_read", RefWrite: "ref_write", Match: "match",
            Constant: "constant", Constructor: "constructor"}.get(type(node), type(node).__name__)


@dataclass(eq=False)
class _Waiting:
    """An operator call (or, with `op` None, a tuple projection) whose argument types are incomplete yet."""

    node: Call | TupleGetItem
    op: OpDef | None
    args: list[Type]
    result: IncompleteType


class _Inferencer:
    def __init__(self, mod: IRModule) -> None:
        self.mod = mod
        self.solver = Solver()
        self.terms: dict[int, Type] = {}
        self.order: list[Expr] = []
        self.started: set[int] = set()
        self.var_types: dict[int, Type] = {}
        self.ret_types: dict[int, Type] = {}
        self.global_types: dict[str, FuncType] = {}
        self.pending: list[_Waiting] = []
        self.checked_annotations: set[int] = set()   # ids of compound annotations (alive in the IR)
        # Programs hold many constants of few shapes: one (shared) type per (shape, dtype).
        self.constant_types: dict[tuple[tuple[int, ...], np.dtype], TensorType] = {}

    # -- entry points ------------------------------------------------------------------------------------
    def run_module(self) -> None:
        for name, func in self.mod.functions.items():
            self.global_types[name] = (primfunc_type(func) if isinstance(func, PrimFunc)
                                       else self.function_type(func))
        for name in _callees_first(self.mod):
            if not isinstance(self.mod.functions[name], PrimFunc):
                self.visit(self.mod.functions[name])
        self.finish()

    def run_expr(self, expr: Expr) -> None:
        for name, func in self.mod.functions.items():
            if isinstance(func, PrimFunc):
                self.global_types[name] = primfunc_type(func)
                continue
            # The module's own inference (if it ran) knows the unannotated parts of the signature.
            known = func.checked_type
            self.global_types[name] = known if isinstance(known, FuncType) else self.function_type(func)
        self.visit(expr)
        self.finish()

    # -- terms of binders --------------------------------------------------------------------------------
    def var_type(self, var: Var) -> Type:
        t = self.var_types.get(id(var))
        if t is None:
            ann = var.type_annotation
            t = self.solver.fresh() if ann is None else self.annotation(ann, var)
            self.var_types[id(var)] = t
        return t

    def ret_type(self, func: Function) -> Type:
        t = self.ret_types.get(id(func))
        if t is None:
            t = self.solver.fresh() if func.ret_type is None else self.annotation(func.ret_type, func)
            self.ret_types[id(func)] = t
        return t

    def annotation(self, ann: Type, at: Expr) -> Type:
        """A written type as the solver sees it, once its ADT applications and depth are checked."""
        if isinstance(ann, CompoundType) and id(ann) not in self.checked_annotations:
            self.check_kinds(ann, at)
        return self.solver.import_type(ann)

    def check_kinds(self, ann: CompoundType, at: Expr) -> None:
        if ann.depth > MAX_TYPE_DEPTH:
            self.fail(f"type annotation nested too deeply (limit {MAX_TYPE_DEPTH})", at)
        stack: list[Type] = [ann]
        checked = self.checked_annotations
        while stack:
            t = stack.pop()
            if not isinstance(t, CompoundType) or id(t) in checked:
                continue
            checked.add(id(t))
            if isinstance(t, TypeCall):
                data = self.mod.type_defs.get(t.name)
                if data is None:
                    self.fail(f"undefined type `{t.name}`", at)
                message = type_arity_message(t.name, len(data.type_params), len(t.args))
                if message is not None:
                    self.fail(message, at)
            stack.extend(t.parts())

    def function_type(self, func: Function) -> FuncType:
        return FuncType(tuple(self.var_type(p) for p in func.params), self.ret_type(func),
                        tuple(func.type_params))

    # -- the walk ------------------------------------------------------------------------------------------
    def visit(self, root: Expr) -> None:
        """Post-order over the DAG, with a mid-node step for `let` (after the value) and `match` (after the data)."""
        stack: list[tuple[Expr, int]] = [(root, 0)]
        push, started, terms, order = stack.append, self.started, self.terms, self.order  # hot loop
        while stack:
            node, phase = stack.pop()
            if phase == 1:
                self.bind(node)
                continue
            if phase == 2:
                t = terms[id(node)] = self.infer(node)
                if t.depth > MAX_TYPE_DEPTH:   # a hole only hides depth: this is too deep already
                    self.too_deep(node)
                order.append(node)
                continue
            if id(node) in started:
                continue
            started.add(id(node))
            push((node, 2))
            if isinstance(node, Let):
                stack += [(node.body, 0), (node, 1), (node.value, 0), (node.var, 0)]
            elif isinstance(node, Match):
                stack.extend((c.rhs, 0) for c in reversed(node.clauses))
                push((node, 1))
                stack.extend((v, 0) for c in reversed(node.clauses) for v in reversed(c.lhs.bound_vars()))
                push((node.data, 0))
            else:
                # An operator is not typed as a value; a child typed already needs no entry.
                children = node.args if isinstance(node, Call) and isinstance(node.op, Op) else node.children()
                for child in reversed(children):
                    if id(child) not in started:
                        push((child, 0))

    def term(self, node: Expr) -> Type:
        return self.terms[id(node)]

    def unify(self, expected: Type, found: Type, at: Expr, what: str = "type mismatch") -> None:
        try:
            self.solver.unify(expected, found)
        except Mismatch:
            self.fail(f"{what}: expected {self.show(expected)}, found {self.show(found)}", at)
        except TooDeep:
            self.too_deep(at)

    def show(self, t: Type) -> str:
        return str(self.solver.resolve(t))

    def too_deep(self, node: Expr) -> NoReturn:
        """The first expression found whose type nests too deeply, located at its first character."""
        span = node.span
        if span is not None:
            span = Span(span.source, span.line, span.col, span.line, span.col + 1)
        raise DiagnosticError(f"type of {describe(node)} nested too deeply (limit {MAX_TYPE_DEPTH})", span)

    def fail(self, message: str, at: Expr | Pattern | None, fallback: Span | None = None) -> NoReturn:
        span = at.span if at is not None and at.span is not None else fallback
        raise DiagnosticError(message, span)

    def bind(self, node: Expr) -> None:
        if isinstance(node, Let):
            self.unify(self.var_type(node.var), self.term(node.value), node.value)
        elif isinstance(node, Match):
            data_t = self.term(node.data)
            for clause in node.clauses:
                self.bind_pattern(clause.lhs, data_t, node)

    def bind_pattern(self, root: Pattern, data_t: Type, match: Match) -> None:
        stack: list[tuple[Pattern, Type]] = [(root, data_t)]
        while stack:
            pat, expected = stack.pop()
            if isinstance(pat, PatternVar):
                self.unify(self.var_type(pat.var), expected, pat.var)
            elif isinstance(pat, PatternTuple):
                fields = tuple(self.solver.fresh() for _ in pat.patterns)
                self.pattern_unify(TupleType(fields), expected, pat, match)
                stack.extend(zip(pat.patterns, fields))
            elif isinstance(pat, PatternConstructor):
                ctor_t = self.solver.instantiate(self.constructor_type(pat.constructor, pat, match))
                self.pattern_unify(ctor_t.ret_type, expected, pat, match)
                if len(pat.patterns) != len(ctor_t.arg_types):
                    self.fail(f"constructor {pat.constructor.name} takes {len(ctor_t.arg_types)} fields, "
                              f"pattern has {len(pat.patterns)}", pat, match.span)
                stack.extend(zip(pat.patterns, ctor_t.arg_types))

    def pattern_unify(self, pattern_t: Type, data_t: Type, pat: Pattern, match: Match) -> None:
        try:
            self.solver.unify(pattern_t, data_t)
        except Mismatch:
            self.fail(f"pattern of type {self.show(pattern_t)} cannot match a value of type {self.show(data_t)}",
                      pat, match.span)
        except TooDeep:
            self.too_deep(match)

    def constructor_type(self, ctor: Constructor, at: Expr | Pattern, match: Match | None = None) -> FuncType:
        data = self.mod.type_defs.get(ctor.belong_to)
        if data is None or ctor not in data.constructors:
            self.fail(f"constructor {ctor.name} does not belong to a defined type", at,
                      match.span if match is not None else None)
        return FuncType(tuple(ctor.inputs), TypeCall(data.name, tuple(data.type_params)), tuple(data.type_params))

    # -- one rule per node kind ------------------------------------------------------------------------
    def infer(self, node: Expr) -> Type:
        if isinstance(node, Var):
            return self.var_type(node)
        if isinstance(node, Constant):
            return self.constant_type(node.data)
        if isinstance(node, Call):
            return self.infer_call(node)
        if isinstance(node, Tuple):
            return TupleType(tuple(self.term(f) for f in node.fields))
        if isinstance(node, TupleGetItem):
            return self.infer_projection(node)
        if isinstance(node, Let):
            return self.term(node.body)
        if isinstance(node, Function):
            ret = self.ret_type(node)
            self.unify(ret, self.term(node.body), node.body)
            return self.function_type(node)
        if isinstance(node, If):
            self.unify(_BOOL, self.term(node.cond), node.cond, "if condition must be a bool scalar")
            then_t = self.term(node.true_branch)
            self.unify(then_t, self.term(node.false_branch), node.false_branch, "if branches differ")
            return then_t
        if isinstance(node, Match):
            if not node.clauses:
                return self.solver.fresh()
            first = self.term(node.clauses[0].rhs)
            for clause in node.clauses[1:]:
                self.unify(first, self.term(clause.rhs), clause.rhs, "match clauses differ")
            return first
        if isinstance(node, GlobalVar):
            t = self.global_types.get(node.name_hint)
            if t is None:
                self.fail(f"undefined global @{node.name_hint}", node)
            return t
        if isinstance(node, Constructor):
            return self.constructor_type(node, node)
        if isinstance(node, RefCreate):
            return RefType(self.term(node.value))
        if isinstance(node, RefRead):
            inner = self.solver.fresh()
            self.unify(RefType(inner), self.term(node.ref), node.ref)
            return inner
        if isinstance(node, RefWrite):
            self.unify(RefType(self.term(node.value)), self.term(node.ref), node.ref)
            return _UNIT
        if isinstance(node, Op):
            self.fail(f"operator {node.name} used as a value: only calls of operators have a type", node)
        self.fail(f"cannot type {type(node).__name__} expressions", node)

    def infer_projection(self, node: TupleGetItem) -> Type:
        t = self.solver.find(self.term(node.tuple_value))
        if isinstance(t, IncompleteType):
            # Unknown yet: the projection needs the tuple's arity, so wait like an operator relation.
            result = self.solver.fresh()
            self.pending.append(_Waiting(node, None, [t], result))
            return result
        return self.project(node, t)

    def project(self, node: TupleGetItem, t: Type) -> Type:
        if not isinstance(t, TupleType):
            self.fail(f"cannot project field {node.index} from a value of type {self.show(t)}", node)
        if not 0 <= node.index < len(t.fields):
            self.fail(f"tuple index {node.index} out of range for {self.show(t)}", node)
        return t.fields[node.index]

    def infer_call(self, node: Call) -> Type:
        if isinstance(node.op, Op):
            return self.infer_op_call(node, node.op)
        callee_t = self.solver.find(self.term(node.op))
        args = [self.term(a) for a in node.args]
        if isinstance(callee_t, IncompleteType):
            ret = self.solver.fresh()
            self.unify(callee_t, FuncType(tuple(args), ret), node.op)
            return ret
        if not isinstance(callee_t, FuncType):
            name = describe(node.op) if isinstance(node.op, (Var, GlobalVar)) else "this expression"
            self.fail(f"cannot call {name}: it has type {self.show(callee_t)}, not a function", node)
        if node.type_args and len(node.type_args) != len(callee_t.type_params):
            self.fail(f"{describe(node.op)} takes {len(callee_t.type_params)} type arguments, "
                      f"got {len(node.type_args)}", node)
        fn_t = self.solver.instantiate(callee_t, tuple(self.annotation(t, node) for t in node.type_args))
        if len(fn_t.arg_types) != len(args):
            self.fail(f"wrong number of arguments: {describe(node.op)} takes {len(fn_t.arg_types)}, "
                      f"got {len(args)}", node)
        for param_t, arg, arg_t in zip(fn_t.arg_types, node.args, args):
            self.unify(param_t, arg_t, arg)
        return fn_t.ret_type

    def infer_op_call(self, node: Call, op: Op) -> Type:
        opdef = get_op(op.name)
        if opdef is None:
            self.fail(f"unknown operator {op.name}", op, node.span)
        if opdef.type_rel is None:
            self.fail(f"no type relation for operator {op.name}", node)
        if opdef.num_inputs is not None and opdef.num_inputs != len(node.args):
            self.fail(f"{op.name} takes {opdef.num_inputs} arguments, got {len(node.args)}", node)
        args = [self.solver.resolve(self.term(a)) for a in node.args]
        if all(t.complete for t in args):
            return self.apply_relation(node, opdef, args)
        waiting = _Waiting(node, opdef, args, self.solver.fresh())
        self.pending.append(waiting)
        return waiting.result

    def apply_relation(self, node: Call, opdef: OpDef, args: list[Type]) -> Type:
        assert opdef.type_rel is not None
        try:
            return opdef.type_rel(args, opdef.full_attrs(node.attrs))
        except TypeRelError as err:
            msg = str(err)
            self.fail(msg if msg.startswith(f"{opdef.name}:") else f"{opdef.name}: {msg}", node)

    def constant_type(self, data: np.ndarray) -> TensorType:
        key = (data.shape, data.dtype)
        t = self.constant_types.get(key)
        if t is None:
            t = self.constant_types[key] = TensorType(tuple(int(d) for d in data.shape), str(data.dtype))
        return t

    def settle(self) -> None:
        """Apply waiting relations whose inputs became complete, until nothing changes."""
        progress = True
        while self.pending and progress:
            waiting, self.pending = self.pending, []
            progress = False
            for p in waiting:
                if self.try_apply(p):
                    progress = True
                else:
                    self.pending.append(p)

    def speculate(self, p: _Waiting) -> bool:
        """Offer a relation its incomplete inputs; True if it answered (and the answer was unified)."""
        assert p.op is not None and p.op.type_rel is not None and isinstance(p.node, Call)
        try:
            out = p.op.type_rel([self.solver.resolve(t) for t in p.args], p.op.full_attrs(p.node.attrs))
        except Exception:  # noqa: BLE001 - a probe: any failure means "needs its inputs", decided strictly later
            return False
        self.unify(p.result, out, p.node)
        return True

    def try_apply(self, p: _Waiting) -> bool:
        """Apply a waiting relation if its inputs are known now; False if it must wait longer."""
        if p.op is None:
            assert isinstance(p.node, TupleGetItem)
            t = self.solver.find(p.args[0])
            if isinstance(t, IncompleteType):
                return False
            self.unify(p.result, self.project(p.node, t), p.node)
            return True
        assert isinstance(p.node, Call)
        args = [self.solver.resolve(t) for t in p.args]
        if not all(t.complete for t in args):
            return False
        self.unify(p.result, self.apply_relation(p.node, p.op, args), p.node)
        return True

    def finish(self) -> None:
        """Solve the waiting relations, then require every type to be fully known.

        Strict rounds apply relations whose inputs are complete, to a fixpoint. When stuck, one
        speculative round offers each waiting relation its partial inputs: one that does not need
        the unknown parts (an identity such as `on_device`) answers, and its answer lets types
        flow backwards from the result, as TVM's two-way relations do. Speculative answers are
        re-checked strictly once everything is known.
        """
        rechecks: list[_Waiting] = []
        while True:
            self.settle()
            speculated = [p for p in self.pending if p.op is not None and self.speculate(p)]
            if not speculated:
                break
            rechecks += speculated
            answered = {id(p) for p in speculated}
            self.pending = [p for p in self.pending if id(p) not in answered]
        for p in self.pending + rechecks:
            inputs = p.node.args if isinstance(p.node, Call) else (p.node.tuple_value,)
            for arg, t in zip(inputs, p.args):
                if self.solver.has_hole(t):
                    self.fail(f"cannot infer type of {describe(arg)}", arg, p.node.span)
        for p in rechecks:
            assert self.try_apply(p)
        resolved: list[tuple[Expr, Type]] = []
        for node in self.order:
            t = self.solver.resolve(self.terms[id(node)])
            if not t.complete:
                self.fail(f"cannot infer type of {describe(node)} (only {t} is known)", node)
            if t.depth > MAX_TYPE_DEPTH:
                self.too_deep(node)
            resolved.append((node, t))
        for node, t in resolved:
            node.checked_type = t


def _callees_first(mod: IRModule) -> list[str]:
    """Function names in reverse topological order of the global call graph (iteratively)."""
    if len(mod.functions) <= 1:
        return list(mod.functions)  # nothing to order: skip walking the (typically huge) function
    refs: dict[str, list[str]] = {}
    for name, func in mod.functions.items():
        if isinstance(func, PrimFunc):  # TIR: checked by `tir_verify`, calls no Relay global
            refs[name] = []
            continue
        seen: dict[str, None] = {}  # ordered set: `main` may call thousands of globals
        for node in post_order(func):
            if isinstance(node, GlobalVar) and node.name_hint in mod.functions:
                seen[node.name_hint] = None
        refs[name] = list(seen)
    order: list[str] = []
    done: set[str] = set()
    for root in mod.functions:
        if root in done:
            continue
        done.add(root)
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            name, i = stack.pop()
            if i < len(refs[name]):
                stack.append((name, i + 1))
                callee = refs[name][i]
                if callee not in done:
                    done.add(callee)
                    stack.append((callee, 0))
            else:
                order.append(name)
    return order
