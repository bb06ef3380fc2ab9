"""The reference interpreter: Relay semantics on numpy values.

It is the oracle every transformation is checked against, so it favours plain, obviously correct
rules over speed. It runs as a machine over an explicit task stack (a CEK-style continuation
stack): neither deep IR nesting (a 200,000-deep `let` chain) nor deep recursion of the
interpreted program (a recursive function over a 10,000-element list) uses Python's stack.

Each function activation has one frame, a dict keyed by `id(node)`: bound variables map to
their values and evaluated nodes to their results. Within one activation every binder runs at
most once, so a node shared in the graph (a `%N = ...;` binding) is evaluated once and reused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from irtool.ir.adt import Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar
from irtool.ir.expr import (EMPTY_ATTRS, Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate,
                            RefRead, RefWrite, Tuple, TupleGetItem, Var)
from irtool.ir.module import IRModule
from irtool.core.span import Span
from irtool.ir.types import IncompleteType, TensorType, TupleType, Type, type_to_text
from irtool.ir.visitor import free_vars
from irtool.ops.registry import OpDef, get_op
from irtool.core.diagnostics import DiagnosticError
from irtool.eval.tir_interp import CompiledPrimFunc, array_shape, compile_primfunc
from irtool.eval.tir_interp import numpy_dtype as tir_numpy_dtype
from irtool.ir.tir import PrimFunc
from irtool.ir.signature import num_outputs
from irtool.eval.values import ADTValue, Closure, RefValue, Value, describe, flatten_value, numpy_dtype

__all__ = ["Interpreter", "bind_arguments", "evaluate", "flatten_value", "param_type", "run_function",
           "signature", "entry_function", "name_list"]

Frame = dict[int, Value]

# Task codes of the machine. `_EVAL` evaluates a node and pushes its value; the others are
# continuations that consume the values their sub-expressions pushed.
(_EVAL, _STORE, _RETURN, _CALL, _CALL_OP, _TUPLE, _GET_ITEM, _LET, _IF, _MATCH, _REF_CREATE, _REF_READ,
 _REF_WRITE) = range(13)
_MISSING = object()


class PrimFuncValue:
    """A TIR `primfn` as a function value: `call_lowered` calls it with the input tensors; it
    allocates the outputs (its last `num_outputs` buffers) and runs the TIR interpreter."""

    __slots__ = ("func", "name", "kernel")

    def __init__(self, func: PrimFunc, name: str) -> None:
        self.func = func
        self.name = name
        self.kernel: CompiledPrimFunc | None = None

    def __call__(self, *args: Value) -> Value:
        if self.kernel is None:
            self.kernel = compile_primfunc(self.func, self.name)
        k = num_outputs(self.func)
        outs = [np.zeros(array_shape(b), tir_numpy_dtype(b.dtype)) for b in self.func.params[len(self.func.params) - k:]]
        self.kernel([np.array(a) for a in args] + outs)  # copies: a kernel never sees the caller's arrays
        return outs[0] if k == 1 else tuple(outs)


class Interpreter:
    """Evaluates expressions of one module; reusable across many evaluations (fold-constant does)."""

    def __init__(self, mod: IRModule | None = None, max_call_depth: int = 500_000) -> None:
        self.mod = mod if mod is not None else IRModule()
        # Pending calls cost about 1 kB each; past this depth the program almost surely loops.
        self.max_call_depth = max_call_depth
        self._globals: dict[str, Closure | PrimFuncValue] = {}
        # Per-node caches keyed by id(); each entry keeps its node so a recycled id cannot match.
        self._captures: dict[int, tuple[Function, tuple[Var, ...]]] = {}
        self._attrs: dict[int, tuple[Call, dict[str, object]]] = {}
        self._ops: dict[str, tuple[OpDef, dict[str, object]]] = {}

    # ----------------------------------------------------------------------------------------
    # Public entry points

    def eval(self, expr: Expr, bindings: Mapping[Var, Value] | None = None) -> Value:
        """The value of `expr`; its free variables take their values from `bindings`."""
        frame: Frame = {id(var): value for var, value in (bindings or {}).items()}
        return self._run(expr, frame)

    def global_function(self, name: str, span: Span | None = None) -> Closure | PrimFuncValue:
        closure = self._globals.get(name)
        if closure is None:
            func = self.mod.functions.get(name)
            if func is None:
                raise DiagnosticError(f"undefined global function @{name}", span)
            if isinstance(func, PrimFunc):
                closure = self._globals[name] = PrimFuncValue(func, name)
            else:
                closure = self._globals[name] = Closure(func, {}, self.apply)
        return closure

    def apply(self, callee: Value, args: Sequence[Value]) -> Value:
        """Call a function value (closure, constructor or operator) on argument values."""
        call = Call(Var("callee"), [Var(f"arg{i}") for i in range(len(args))])
        frame: Frame = {id(call.op): callee}
        frame.update((id(a), v) for a, v in zip(call.args, args))
        return self._run(call, frame)

    # ----------------------------------------------------------------------------------------
    # The machine

    def _run(self, root: Expr, frame: Frame) -> Value:
        with np.errstate(all="ignore"):
            return self._loop(root, frame)

    def _loop(self, root: Expr, frame: Frame) -> Value:
        tasks: list[tuple[int, Expr, Frame]] = [(_EVAL, root, frame)]
        vals: list[Value] = []
        depth = 0
        push = tasks.append
        pop = tasks.pop
        while tasks:
            code, node, f = pop()
            if code == _EVAL:
                key = id(node)
                if key in f:
                    vals.append(f[key])
                    continue
                t = type(node)
                if t is Call:
                    args = node.args
                    if type(node.op) is Op:
                        # Fast path: arguments already known (A-normal form, let chains) need no tasks.
                        ready: list[Value] = []
                        for a in args:
                            value = a.data if type(a) is Constant else f.get(id(a), _MISSING)
                            if value is _MISSING:
                                break
                            ready.append(value)
                        else:
                            value = self._compute(node, ready)
                            f[key] = value
                            vals.append(value)
                            continue
                        push((_CALL_OP, node, f))
                        for a in reversed(args):
                            push((_EVAL, a, f))
                    else:
                        push((_CALL, node, f))
                        for a in reversed(args):
                            push((_EVAL, a, f))
                        push((_EVAL, node.op, f))
                elif t is Constant:
                    vals.append(node.data)
                elif t is Let:
                    push((_LET, node, f))
                    push((_EVAL, node.value, f))
                elif t is TupleGetItem:
                    push((_GET_ITEM, node, f))
                    push((_EVAL, node.tuple_value, f))
                elif t is Tuple:
                    push((_TUPLE, node, f))
                    for a in reversed(node.fields):
                        push((_EVAL, a, f))
                elif t is GlobalVar:
                    vals.append(self.global_function(node.name_hint, node.span))
                elif t is Function:
                    value = self._closure(node, f)
                    f[key] = value
                    vals.append(value)
                elif t is If:
                    push((_IF, node, f))
                    push((_EVAL, node.cond, f))
                elif t is Match:
                    push((_MATCH, node, f))
                    push((_EVAL, node.data, f))
                elif t is Constructor or t is Op:
                    vals.append(node)
                elif t is RefCreate:
                    push((_REF_CREATE, node, f))
                    push((_EVAL, node.value, f))
                elif t is RefRead:
                    push((_REF_READ, node, f))
                    push((_EVAL, node.ref, f))
                elif t is RefWrite:
                    push((_REF_WRITE, node, f))
                    push((_EVAL, node.value, f))
                    push((_EVAL, node.ref, f))
                elif t is Var:
                    raise DiagnosticError(f"variable %{node.name_hint} has no value here", node.span)
                else:
                    raise DiagnosticError(f"the interpreter cannot evaluate {type(node).__name__}", node.span)
            elif code == _STORE:
                f[id(node)] = vals[-1]
            elif code == _RETURN:
                f[id(node)] = vals[-1]
                depth -= 1
            elif code == _CALL_OP:
                n = len(node.args)
                if n:
                    args = vals[-n:]
                    del vals[-n:]
                else:
                    args = []
                value = self._compute(node, args)
                f[id(node)] = value
                vals.append(value)
            elif code == _CALL:
                n = len(node.args)
                start = len(vals) - n
                args = vals[start:]
                callee = vals[start - 1]
                del vals[start - 1:]
                if type(callee) is Closure:
                    func = callee.func
                    params = func.params
                    if len(params) != n:
                        raise DiagnosticError(
                            f"function of {len(params)} parameters called with {n} arguments", node.span)
                    depth += 1
                    if depth > self.max_call_depth:
                        raise DiagnosticError(f"more than {self.max_call_depth} nested calls; "
                                              "does the recursion terminate?", node.span)
                    new_frame = dict(callee.env) if callee.env else {}
                    for p, a in zip(params, args):
                        new_frame[id(p)] = a
                    push((_RETURN, node, f))
                    push((_EVAL, func.body, new_frame))
                    continue
                if type(callee) is Constructor:
                    if len(callee.inputs) != n:
                        raise DiagnosticError(
                            f"constructor {callee.name} takes {len(callee.inputs)} fields, got {n}", node.span)
                    value = ADTValue(callee, tuple(args))
                elif type(callee) is Op:
                    value = self._compute(node, args, callee)
                elif type(callee) is PrimFuncValue:  # `@kernel(args)`: the same as call_lowered
                    value = callee(*args)
                else:
                    raise DiagnosticError(f"cannot call {describe(callee)}", node.span)
                f[id(node)] = value
                vals.append(value)
            elif code == _LET:
                var = node.var
                value = vals.pop()
                f[id(var)] = value
                if type(value) is Closure and value.func is node.value:
                    # `let %f = fn (...) { ... %f ... }` refers to itself: tie the knot.
                    if any(v is var for v in self._capture_list(value.func)):
                        value.env[id(var)] = value
                push((_STORE, node, f))
                push((_EVAL, node.body, f))
            elif code == _GET_ITEM:
                tup = vals.pop()
                if type(tup) is not tuple or not 0 <= node.index < len(tup):
                    raise DiagnosticError(f"cannot take field {node.index} of {describe(tup)}", node.span)
                value = tup[node.index]
                f[id(node)] = value
                vals.append(value)
            elif code == _TUPLE:
                n = len(node.fields)
                if n:
                    value = tuple(vals[-n:])
                    del vals[-n:]
                else:
                    value = ()
                f[id(node)] = value
                vals.append(value)
            elif code == _IF:
                cond = vals.pop()
                push((_STORE, node, f))
                push((_EVAL, node.true_branch if _truth(cond, node) else node.false_branch, f))
            elif code == _MATCH:
                data = vals.pop()
                for clause in node.clauses:
                    bound = _match(clause.lhs, data)
                    if bound is not None:
                        for var, value in bound:
                            f[id(var)] = value
                        push((_STORE, node, f))
                        push((_EVAL, clause.rhs, f))
                        break
                else:
                    raise DiagnosticError(f"no clause of this match accepts {describe(data)}", node.span)
            elif code == _REF_CREATE:
                value = RefValue(vals.pop())
                f[id(node)] = value
                vals.append(value)
            elif code == _REF_READ:
                ref = vals.pop()
                if type(ref) is not RefValue:
                    raise DiagnosticError(f"ref_read of {describe(ref)}", node.span)
                value = ref.value
                f[id(node)] = value
                vals.append(value)
            else:  # _REF_WRITE
                value = vals.pop()
                ref = vals.pop()
                if type(ref) is not RefValue:
                    raise DiagnosticError(f"ref_write to {describe(ref)}", node.span)
                ref.value = value
                f[id(node)] = ()
                vals.append(())
        return vals.pop()

    # ----------------------------------------------------------------------------------------
    # Helpers of the machine

    def _capture_list(self, func: Function) -> tuple[Var, ...]:
        entry = self._captures.get(id(func))
        if entry is None or entry[0] is not func:
            entry = self._captures[id(func)] = (func, tuple(free_vars(func)))
        return entry[1]

    def _closure(self, func: Function, frame: Frame) -> Closure:
        """Capture the free variables' current values (a variable still unbound is the let-bound
        function itself in a recursive `let`; `_LET` fills it in)."""
        env = {id(v): frame[id(v)] for v in self._capture_list(func) if id(v) in frame}
        return Closure(func, env, self.apply)

    def _compute(self, call: Call, args: list[Value], callee: Op | None = None) -> Value:
        """Run an operator's reference implementation; failures are located at the call."""
        op = callee if callee is not None else call.op
        entry = self._ops.get(op.name)  # type: ignore[union-attr]
        if entry is None:
            entry = self._ops[op.name] = self._kernel(op.name, call)  # type: ignore[union-attr]
        opdef, defaults = entry
        if call.attrs:
            cached = self._attrs.get(id(call))
            if cached is None or cached[0] is not call:
                cached = self._attrs[id(call)] = (call, opdef.full_attrs(call.attrs))
            attrs = cached[1]
        else:
            attrs = defaults
        try:
            result = opdef.compute(args, attrs)  # type: ignore[misc]
        except DiagnosticError:
            raise
        except Exception as exc:  # a kernel rejecting its inputs is the user's program's fault
            raise DiagnosticError(f"{opdef.name} failed: {exc}", call.span) from exc
        if type(result) is np.ndarray:
            return result
        return _as_value(result)

    @staticmethod
    def _kernel(name: str, call: Call) -> tuple[OpDef, dict[str, object]]:
        """The operator and its default attributes (shared by every call without attributes)."""
        opdef = get_op(name)
        if opdef is None:
            raise DiagnosticError(f"unknown operator {name}", call.span)
        if opdef.compute is None:
            raise DiagnosticError(f"operator {name} has no reference implementation", call.span)
        return opdef, opdef.full_attrs(EMPTY_ATTRS)


def _as_value(result: object) -> Value:
    """Kernels may return numpy scalars or lists inside tuples; the interpreter wants arrays."""
    if isinstance(result, tuple):
        return tuple(_as_value(r) for r in result)
    return np.asarray(result)


def _truth(cond: Value, node: If) -> bool:
    if not isinstance(cond, np.ndarray) or cond.size != 1:
        raise DiagnosticError(f"the condition of `if` must be a scalar, got {describe(cond)}", node.cond.span)
    return bool(cond.reshape(()))


def _match(pattern: Pattern, value: Value) -> list[tuple[Var, Value]] | None:
    """The bindings a pattern makes on a value, or None when it does not match."""
    bound: list[tuple[Var, Value]] = []
    stack: list[tuple[Pattern, Value]] = [(pattern, value)]
    while stack:
        p, v = stack.pop()
        tp = type(p)
        if tp is PatternVar:
            bound.append((p.var, v))  # type: ignore[attr-defined]
        elif tp is PatternConstructor:
            ctor = p.constructor  # type: ignore[attr-defined]
            if type(v) is not ADTValue or (v.constructor is not ctor and v.constructor.name != ctor.name):
                return None
            stack.extend(zip(p.patterns, v.fields))  # type: ignore[attr-defined]
        elif tp is PatternTuple:
            if type(v) is not tuple or len(v) != len(p.patterns):  # type: ignore[attr-defined]
                return None
            stack.extend(zip(p.patterns, v))  # type: ignore[attr-defined]
        # PatternWildcard matches anything.
    return bound


# --------------------------------------------------------------------------------------------
# Running a module's function on numpy inputs


def param_type(param: Var) -> Type | None:
    """What a parameter must hold: its inferred type, else its annotation (None when unknown)."""
    for t in (param.checked_type, param.type_annotation):
        if t is not None and not isinstance(t, IncompleteType):
            return t
    return None


def signature(entry: str, func: Function) -> str:
    """`main expects %x: Tensor[(1, 3), float32], %y: float32` — what error messages show."""
    parts = []
    for p in func.params:
        t = param_type(p)
        parts.append(f"%{p.name_hint}: {type_to_text(t)}" if t is not None else f"%{p.name_hint}")
    return f"{entry} expects " + (", ".join(parts) if parts else "no inputs")


def _mismatch(value: Value, t: Type | None) -> str | None:
    """Why `value` cannot be passed where type `t` is expected (None when it can)."""
    if isinstance(t, TensorType):
        if not isinstance(value, np.ndarray):
            return f"is {describe(value)}, not a tensor"
        if value.ndim != len(t.shape) or any(
                isinstance(d, int) and d != s for d, s in zip(t.shape, value.shape)):
            return f"has shape {tuple(value.shape)}"
        if value.dtype != numpy_dtype(t.dtype):
            return f"has dtype {value.dtype}"
    elif isinstance(t, TupleType):
        if not isinstance(value, tuple) or len(value) != len(t.fields):
            return f"is {describe(value)}, not a tuple of {len(t.fields)} fields"
        for i, (v, ft) in enumerate(zip(value, t.fields)):
            why = _mismatch(v, ft)
            if why is not None:
                return f"field {i} {why}"
    return None


def name_list(what: str, names: Sequence[str]) -> str:
    """`missing input `x`` or `missing inputs `x`, `y``."""
    return what + ("s " if len(names) > 1 else " ") + ", ".join(f"`{n}`" for n in names)


def bind_arguments(entry: str, func: Function, args: Mapping[str, Value] | Sequence[Value]) -> list[Value]:
    """Arguments in parameter order, checked against the parameter types.

    `args` is positional, or a mapping from parameter names (with or without `%`). Any mismatch
    is a DiagnosticError that lists what the function expects.
    """
    params = func.params
    if isinstance(args, Mapping):
        given = {name.lstrip("%"): value for name, value in args.items()}
        names = [p.name_hint for p in params]
        extra = sorted(set(given) - set(names))
        if extra:
            raise DiagnosticError(f"{signature(entry, func)}; {name_list('unexpected input', extra)}")
        missing = [n for n in names if n not in given]
        if missing:
            raise DiagnosticError(f"{signature(entry, func)}; {name_list('missing input', missing)}")
        values = [given[n] for n in names]
    else:
        values = list(args)
        if len(values) != len(params):
            raise DiagnosticError(f"{signature(entry, func)}; got {len(values)} inputs")
    values = [np.asarray(v) if isinstance(v, (np.generic, float, int, bool)) else v for v in values]
    for p, v in zip(params, values):
        why = _mismatch(v, param_type(p))
        if why is not None:
            raise DiagnosticError(f"{signature(entry, func)}; input `{p.name_hint}` {why}")
    return values


def entry_function(mod: IRModule, entry: str) -> Function:
    func = mod.functions.get(entry)
    if func is None:
        known = ", ".join(f"@{n}" for n in mod.functions) or "none"
        raise DiagnosticError(f"no function @{entry} in the module (functions: {known})")
    return func


def run_function(mod: IRModule, args: Mapping[str, Value] | Sequence[Value] = (), entry: str = "main") -> Value:
    """Call global `@entry` of `mod` on the given inputs (checked against its parameter types)."""
    func = entry_function(mod, entry)
    interp = Interpreter(mod)
    return interp.apply(interp.global_function(entry), bind_arguments(entry, func, args))


def evaluate(program: IRModule | Expr, mod: IRModule | None = None,
             bindings: Mapping[Var, Value] | None = None) -> Value:
    """The value of an expression (globals from `mod`, free variables from `bindings`), or of a
    module's `@main` called without arguments."""
    if isinstance(program, IRModule):
        return run_function(program, (), "main")
    return Interpreter(mod).eval(program, bindings)
