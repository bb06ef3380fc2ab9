"""Running `main` under its memory plan: every intermediate tensor lives in a shared byte arena.

Each step reads its arguments back from the arena at their planned offsets and writes its
results there, so two tensors a plan wrongly overlaps corrupt each other and the outputs differ
from the plain interpreter's. Kernels are the reference interpreter's. Hoisted steps (computed
from constants only) run like the others but keep their results outside the arenas, as the plan
does not place them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from irtool.analysis.liveness import step_arguments
from irtool.analysis.steps import ALIAS, CALL, PlannedTensor, flatten_type
from irtool.analysis.memory_plan import MemoryPlan
from irtool.analysis.plan_attrs import plan_liveness, read_plan
from irtool.analysis.typecheck import infer_types
from irtool.eval.interpreter import Interpreter, bind_arguments
from irtool.ir.expr import Call, Expr, Op, Tuple, Var
from irtool.ir.module import IRModule
from irtool.ir.types import TupleType, Type
from irtool.ops.registry import Value
from irtool.core.diagnostics import DiagnosticError


def _flatten(value: Value) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    stack: list[Value] = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, tuple):
            stack.extend(reversed(v))
        else:
            out.append(np.asarray(v))
    return out


def _unflatten(t: Type | None, leaves: list[np.ndarray]) -> Value:
    """Rebuild a (nested) tuple value of type `t` from its tensors in order, each in its own shape
    (a reshape-only alias shares its source's bytes, not its shape)."""
    it = iter(leaves)
    results: list[Value] = []
    stack: list[tuple[Type | None, bool]] = [(t, False)]
    while stack:
        cur, finish = stack.pop()
        if finish:
            n = len(cur.fields)  # type: ignore[union-attr]
            items = tuple(results[len(results) - n:])
            del results[len(results) - n:]
            results.append(items)
        elif isinstance(cur, TupleType):
            stack.append((cur, True))
            stack.extend((f, False) for f in reversed(cur.fields))
        else:
            shape = tuple(int(d) for d in cur.shape)  # type: ignore[union-attr]
            results.append(next(it).reshape(shape))
    return results[0]


class _Arena:
    def __init__(self, plan: MemoryPlan) -> None:
        self.plan = plan
        self.buffers = [np.zeros(max(s.nbytes, 1), dtype=np.uint8) for s in plan.storages]

    def view(self, t: PlannedTensor) -> np.ndarray:
        sid, offset = self.plan.placement[t.index]
        raw = self.buffers[sid][offset:offset + t.nbytes]
        dtype = np.dtype("bool") if t.ttype.dtype == "bool" else np.dtype(t.ttype.dtype)
        return raw.view(dtype).reshape(tuple(int(d) for d in t.ttype.shape))

    def write(self, t: PlannedTensor, value: np.ndarray) -> None:
        self.view(t)[...] = value

    def read(self, t: PlannedTensor) -> np.ndarray:
        return self.view(t).copy()


def run_with_plan(mod: IRModule, args: Mapping[str, Value] | Sequence[Value] = (), entry: str = "main",
                  plan: MemoryPlan | None = None) -> Value:
    """`main`'s result computed with every intermediate tensor stored where `plan` (default: the
    plan written on `main`) puts it."""
    infer_types(mod)
    live = plan_liveness(mod, entry)
    plan = plan if plan is not None else read_plan(live)
    if plan is None:
        raise DiagnosticError(f"@{entry} carries no memory plan (run plan-memory first)", live.func.span)
    func = live.func
    arena = _Arena(plan)
    interp = Interpreter(mod)
    inputs: dict[int, np.ndarray] = {}  # parameters, constants and hoisted tensors: outside the arenas
    for tids, value in zip(live.params, bind_arguments(entry, func, args)):
        for t, leaf in zip(tids, _flatten(value)):
            inputs[t] = np.asarray(leaf)
    for t, node in live.constants.items():
        inputs[t] = node.data

    def value_of(t: int) -> np.ndarray:
        tensor = live.tensors[t]
        if tensor.kind == CALL:
            return arena.read(tensor)
        return inputs[t]

    for step in live.steps:
        if step.kind == ALIAS:
            continue
        call = step.call
        values = [value_of(t) for t in step.inputs]
        pos = 0
        bindings: dict[Var, Value] = {}
        new_args: list[Expr] = []
        for i, arg in enumerate(step_arguments(call)):
            n = len(_leaf_types(arg))
            var = Var(f"arg{i}")
            bindings[var] = _unflatten(arg.checked_type, values[pos:pos + n])
            pos += n
            new_args.append(var)
        if isinstance(call.op, Op) and call.op.name == "call_lowered":
            runnable = Call(call.op, [call.args[0], Tuple(new_args)], call.attrs, call.span)
        else:
            runnable = Call(call.op, new_args, call.attrs, call.span)
        result = interp.eval(runnable, bindings)
        for t, leaf in zip(step.outputs, _flatten(result)):
            if step.hoisted:
                inputs[t] = np.asarray(leaf)
            else:
                arena.write(live.tensors[t], leaf)
    return _unflatten(func.body.checked_type, [value_of(t) for t in live.outputs])


def _leaf_types(expr: Expr) -> list[Type]:
    return flatten_type(expr.checked_type, expr.span)  # type: ignore[return-value]

