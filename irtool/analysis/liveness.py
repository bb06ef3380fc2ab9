"""Liveness of the tensors of a dataflow `main`, the input of memory planning.

`main` is read as a sequence of *steps*: its calls in execution (post-)order. A step's callee may
be a fused `Primitive=1` function literal, a global, an operator, or `call_lowered(@f, (args))`;
tuples, projections and `let` only route tensors between steps. Every tensor a step produces is
live from that step to the last step that reads it (inclusive); `main`'s results stay live to the
last step. Parameters and constants exist before the first step and are not planned.
Reshape-only steps and `on_device` annotations produce no tensor: their result *is* their input
(an alias), so their readers extend the input's live range.

A kernel step that reads only constants and outputs of such steps (or nothing, like the zoo's
`full` weights) is *hoisted*: its results are the same on every run, so they are computed once,
kept outside the arenas (kind `HOISTED`) and not planned.
"""

from __future__ import annotations

from dataclasses import dataclass

from irtool.analysis.devices import assign_devices
from irtool.analysis.dominators import is_opaque_function
from irtool.analysis.steps import (ALIAS, CALL, CONSTANT, COPY, HOISTED, KERNEL, PARAM, Liveness, PlannedTensor, Step,
                                   flatten_type, tensor_bytes)
from irtool.ir.expr import (AttrValue, Call, Constant, Expr, Function, GlobalVar, Let, Op, Tuple,
                            TupleGetItem, Var)
from irtool.ir.module import IRModule
from irtool.core.span import Span
from irtool.ir.tir import PrimFunc
from irtool.ir.types import TensorType, TupleType
from irtool.ir.visitor import post_order
from irtool.ops.registry import OpPattern, get_op
from irtool.core.diagnostics import DiagnosticError

# ---------------------------------------------------------------------------------------------
# Callee adapters: what a step runs, whatever form main is in.


def callee_function(call: Call, mod: IRModule | None) -> Function | PrimFunc | GlobalVar | Op | None:
    """The function a step runs: the literal, the global's definition, or the operator.

    `call_lowered(@f, (args))` runs `@f` (a Relay function or a PrimFunc of `mod`); when `mod`
    does not define `@f`, the global itself is returned.
    """
    target: Expr = call.op
    if isinstance(target, Op) and target.name == "call_lowered" and call.args:
        target = call.args[0]
    if isinstance(target, GlobalVar):
        if mod is not None and target.name_hint in mod.functions:
            return mod.functions[target.name_hint]
        return target
    if isinstance(target, (Function, Op)):
        return target
    return None


def step_arguments(call: Call) -> tuple[Expr, ...]:
    """The value arguments of a step (`call_lowered`'s argument tuple is unpacked)."""
    if isinstance(call.op, Op) and call.op.name == "call_lowered" and len(call.args) == 2:
        packed = call.args[1]
        return packed.fields if isinstance(packed, Tuple) else (packed,)
    return call.args


@dataclass
class _CalleeFacts:
    kind: str
    label: str
    elementwise: bool
    device_annotation: tuple[str, dict[str, AttrValue]] | None
    concat_axis: int | None = None


# The operator whose result is its inputs laid side by side (concatenate-in-place looks for it).
CONCAT_OP = "concatenate"


def _concat_axis(fn: Function) -> int | None:
    """The axis when `fn` is exactly `concatenate` of its parameters in order, else None."""
    body = fn.body
    if not (isinstance(body, Call) and isinstance(body.op, Op) and body.op.name == CONCAT_OP and len(body.args) == 1):
        return None
    arg = body.args[0]
    fields = arg.fields if isinstance(arg, Tuple) else (arg,)
    if len(fields) != len(fn.params) or any(f is not p for f, p in zip(fields, fn.params)):
        return None
    opdef = get_op(CONCAT_OP)
    axis = opdef.full_attrs(body.attrs)["axis"] if opdef is not None else None
    return axis if isinstance(axis, int) else None


# PrimFunc attributes `lower` writes (`kernel_facts`), so that a lowered `main` plans as its fused
# form does: the kernel is element-wise (in-place reuse), or only concatenates (concat-in-place).
ELEMENTWISE, CONCAT_AXIS = "elementwise", "concat_axis"


def kernel_facts(fn: Function) -> dict[str, AttrValue]:
    """The planning facts of a primitive function, for its lowered PrimFunc's attributes: only
    those that hold (`elementwise=True`, `concat_axis=k`), so most kernels get none."""
    facts = _ops_facts([(c.op.name, c) for c in _op_calls(fn)])  # type: ignore[union-attr]
    out: dict[str, AttrValue] = {}
    if facts.kind == KERNEL and facts.elementwise:
        out[ELEMENTWISE] = True
    axis = _concat_axis(fn)
    if axis is not None:
        out[CONCAT_AXIS] = axis
    return out


def _op_calls(fn: Function) -> list[Call]:
    return [n for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op)]


def _callee_facts(callee: Function | PrimFunc | GlobalVar | Op | None, call: Call) -> _CalleeFacts:
    if isinstance(callee, Op):
        return _ops_facts([(callee.name, call)])
    if isinstance(callee, Function):
        facts = _ops_facts([(c.op.name, c) for c in _op_calls(callee)])  # type: ignore[union-attr]
        facts.concat_axis = _concat_axis(callee)
        if callee.attrs.get("relay.reshape_only"):
            facts.kind = ALIAS
        # A wrapped device op counts only when it is the whole body, applied to the parameter.
        if facts.device_annotation is not None:
            body = callee.body
            if not (isinstance(body, Call) and len(callee.params) == 1 and body.args
                    and body.args[0] is callee.params[0]):
                raise DiagnosticError("memory planning: a device annotation must be a step of its own "
                                      "(fuse-ops keeps them apart)", call.span)
        return facts
    # A global (e.g. a lowered `primfn`): name the step after it; a PrimFunc says what `lower` knew.
    target = call.args[0] if isinstance(call.op, Op) and call.op.name == "call_lowered" and call.args else call.op
    name = target.name_hint if isinstance(target, GlobalVar) else "?"
    if isinstance(callee, PrimFunc):
        axis = callee.attrs.get(CONCAT_AXIS)
        return _CalleeFacts(KERNEL, name, callee.attrs.get(ELEMENTWISE) is True, None,
                            axis if isinstance(axis, int) and not isinstance(axis, bool) else None)
    return _CalleeFacts(KERNEL, name, False, None)


def _ops_facts(ops: list[tuple[str, Call]]) -> _CalleeFacts:
    names = [name for name, _ in ops]
    defs = [get_op(name) for name in names]
    device = [(n, c) for n, c in ops if n in DEVICE_OPS]
    annotation = None
    if device:
        name, dcall = device[0]
        opdef = get_op(name)
        annotation = (name, opdef.full_attrs(dcall.attrs) if opdef is not None else dict(dcall.attrs))
    if annotation is not None and annotation[0] == "on_device":
        kind = ALIAS
    elif annotation is not None:
        kind = COPY
    elif defs and all(d is not None and d.extra.get("reshape_only") for d in defs):
        kind = ALIAS
    else:
        kind = KERNEL
    elementwise = bool(defs) and all(d is not None and d.pattern <= OpPattern.BROADCAST for d in defs)
    return _CalleeFacts(kind, "+".join(names) or "fn", elementwise, annotation)


DEVICE_OPS = ("on_device", "device_copy")


# ---------------------------------------------------------------------------------------------
# Building the table


class _Bind:
    """A marker in the execution order: the `let` variable's value is now known."""

    __slots__ = ("let",)

    def __init__(self, let: Let) -> None:
        self.let = let


def _main_nodes(func: Function) -> list[Expr | _Bind]:
    """Nodes of `main` in execution order, callee function literals not entered."""
    # A fresh `_Bind` is never in post_order's seen set, so each is emitted where its `let` puts it.
    return post_order(func.body, _step_children)  # type: ignore[arg-type, return-value]


def _step_children(node: Expr | _Bind) -> tuple[Expr | _Bind, ...]:
    """What must run before `node`, in execution order; rejects what planning cannot handle."""
    if isinstance(node, _Bind):
        return ()
    if isinstance(node, Call):
        children: tuple[Expr | _Bind, ...] = step_arguments(node)
        if not isinstance(node.op, (Function, Op, GlobalVar)):
            children = (node.op, *children)
        return children
    if isinstance(node, Let):
        return (node.value, _Bind(node), node.body)
    if isinstance(node, (Tuple, TupleGetItem)):
        return node.children()
    if isinstance(node, Function) and not is_opaque_function(node):
        raise DiagnosticError("memory planning handles dataflow `main` only: a closure would read "
                              "tensors its calls do not pass", node.span)
    if isinstance(node, (Var, Constant, Function, GlobalVar, Op)):
        return ()
    raise DiagnosticError(f"memory planning handles dataflow `main` only, not "
                          f"`{type(node).__name__}`", node.span)


class _Builder:
    def __init__(self, mod: IRModule, func: Function, hoist: bool) -> None:
        self.mod = mod
        self.func = func
        self.hoist = hoist
        self.tensors: list[PlannedTensor] = []
        self.steps: list[Step] = []
        self.tokens: dict[int, list[int]] = {}
        self.facts: dict[object, _CalleeFacts] = {}
        self.constants: dict[int, Constant] = {}

    def new_tensor(self, kind: str, ttype: TensorType, step: int, name: str, span: Span | None) -> int:
        first = max(step, 0)
        t = PlannedTensor(len(self.tensors), kind, ttype, tensor_bytes(ttype, span), step, first, first,
                          name, span=span)
        self.tensors.append(t)
        return t.index

    def run(self, entry: str) -> Liveness:
        tokens = self.tokens
        params: list[list[int]] = []
        for param in self.func.params:
            types = flatten_type(param.checked_type or param.type_annotation, param.span)
            many = len(types) > 1
            tokens[id(param)] = [self.new_tensor(PARAM, ty, -1, f"%{param.name_hint}" + (f".{i}" if many else ""),
                                                 param.span) for i, ty in enumerate(types)]
            params.append(tokens[id(param)])
        for node in _main_nodes(self.func):
            if isinstance(node, _Bind):
                tokens[id(node.let.var)] = tokens[id(node.let.value)]
            elif isinstance(node, Var):
                if id(node) not in tokens:
                    raise DiagnosticError(f"memory planning: `%{node.name_hint}` is not bound in `{entry}`",
                                          node.span)
            elif isinstance(node, Constant):
                ttype = TensorType(tuple(int(d) for d in node.data.shape), str(node.data.dtype))
                tokens[id(node)] = [self.new_tensor(CONSTANT, ttype, -1, f"const{len(self.tensors)}", node.span)]
                self.constants[len(self.tensors) - 1] = node
            elif isinstance(node, Tuple):
                tokens[id(node)] = [t for f in node.fields for t in tokens[id(f)]]
            elif isinstance(node, TupleGetItem):
                tokens[id(node)] = _project(node, tokens[id(node.tuple_value)])
            elif isinstance(node, Let):
                tokens[id(node)] = tokens[id(node.body)]
            elif isinstance(node, Call):
                tokens[id(node)] = self.add_step(node)
            else:  # callee literals, globals, operators: no tensors
                tokens[id(node)] = []
        outputs = tokens[id(self.func.body)]
        end = max(len(self.steps) - 1, 0)
        for t in outputs:
            if self.tensors[t].kind == CALL:
                self.tensors[t].last = end
        return Liveness(self.func, self.steps, self.tensors, list(outputs), params, self.constants, self.hoist)

    def concat_offsets(self, out: TensorType, axis: int, inputs: list[int]) -> list[int] | None:
        if not _contiguous_slices(out, axis):
            return None
        offsets, at = [], 0
        for t in inputs:
            offsets.append(at)
            at += self.tensors[t].nbytes
        return offsets

    def add_step(self, call: Call) -> list[int]:
        callee = callee_function(call, self.mod)
        # Operators' facts depend on their attributes (device annotations); functions' on themselves.
        key: object = (callee.name, call.attrs) if isinstance(callee, Op) else id(callee)
        facts = self.facts.get(key)
        if facts is None:
            facts = _callee_facts(callee, call)
            self.facts[key] = facts
        index = len(self.steps)
        inputs = [t for a in step_arguments(call) for t in self.tokens[id(a)]]
        step = Step(index, call, facts.kind, facts.label, inputs, [], facts.elementwise, facts.device_annotation)
        for t in inputs:
            tensor = self.tensors[t]
            if tensor.kind in (CALL, HOISTED):
                tensor.last = max(tensor.last, index)
        if facts.kind == ALIAS:
            out_types = flatten_type(call.checked_type, call.span)
            if len(inputs) != 1 or len(out_types) != 1 or \
                    tensor_bytes(out_types[0], call.span) != self.tensors[inputs[0]].nbytes:
                step.kind = KERNEL  # not a pure view after all: give it storage of its own
            else:
                step.outputs = list(inputs)
        if step.kind != ALIAS:
            types = flatten_type(call.checked_type, call.span)
            many = len(types) > 1
            step.outputs = [self.new_tensor(CALL, ty, index, f"s{index}" + (f".{i}" if many else ""), call.span)
                            for i, ty in enumerate(types)]
            if facts.concat_axis is not None and len(types) == 1:
                step.concat_offsets = self.concat_offsets(types[0], facts.concat_axis, inputs)
        if self.hoist and step.kind == KERNEL and all(self.tensors[t].kind in (CONSTANT, HOISTED) for t in inputs):
            step.hoisted = True
            for t in step.outputs:
                self.tensors[t].kind = HOISTED
        self.steps.append(step)
        return list(step.outputs)


def _contiguous_slices(out: TensorType, axis: int) -> bool:
    """Concatenating along `axis` lays the inputs one after another when every outer axis is 1."""
    axis = axis + len(out.shape) if axis < 0 else axis
    return 0 <= axis < len(out.shape) and all(d == 1 for d in out.shape[:axis])


def compute_liveness(mod: IRModule, entry: str = "main", hoist_constants: bool = True) -> Liveness:
    """The step/tensor table of `entry` with devices assigned; `mod` must be type checked.
    `hoist_constants=False` plans the outputs of constant-only steps like any other."""
    live = _Builder(mod, mod.functions[entry], hoist_constants).run(entry)
    assign_devices(live)
    return live


def _project(node: TupleGetItem, fields: list[int]) -> list[int]:
    t = node.tuple_value.checked_type
    if not isinstance(t, TupleType):
        raise DiagnosticError("memory planning: projection of a non-tuple", node.span)
    start = sum(len(flatten_type(f, node.span)) for f in t.fields[:node.index])
    return fields[start:start + len(flatten_type(t.fields[node.index], node.span))]
