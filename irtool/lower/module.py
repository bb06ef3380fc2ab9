"""Lowering a fused module: primitive calls become `call_lowered(@fused_..., (args))` of PrimFuncs.

docs/lowering.md describes the resulting form. The Relay functions of the module are walked
iteratively (callee function literals are lowered separately, not entered); PrimFuncs are
deduplicated by structural hash and equality, as TVM's compile-engine cache does. Equal fused
groups (ResNet-50 calls 165 groups of 56 kinds) are lowered once: a group equal to one lowered
before, with parameters of the same types, reuses its kernel.
"""

from __future__ import annotations

from irtool.analysis.liveness import kernel_facts
from irtool.analysis.box_rows import is_box_row
from irtool.analysis.typecheck import infer_types
from irtool.ir.adt import Constructor
from irtool.ir.equality import structural_equal, structural_hash
from irtool.ir.expr import (AttrValue, Attrs, Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, RefRead,
                            RefWrite, Tuple, TupleGetItem, Var)
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.ir.tir_equality import canonical_form
from irtool.ir.types import TensorType, TupleType
from irtool.ir.visitor import post_order
from irtool.lower.batch import is_batched, is_dynamic, lower_batched
from irtool.lower.rules import compute_rule
from irtool.lower.rules.indexing import IN_PLACE, in_place_part
from irtool.lower.primitive import LoweredPrimitive, flatten_type, lower_primitive, type_of
from irtool.ops.definitions.data_dependent import is_data_dependent
from irtool.ops.registry import get_op
from irtool.core.diagnostics import DiagnosticError

CALL_LOWERED = Op("call_lowered")
PLAN_ATTRS = ("storage_id", "storage_offset")
MAX_NAME = 80


# Operators a lowered function may still call directly (everything else is a kernel).
_LOWERED_OPS = frozenset({"call_lowered", "reshape", "device_copy", "on_device", "memory.kill"})


def is_lowered(mod: IRModule) -> bool:
    """True when no Relay function calls an operator other than kernels, views, copies,
    `memory.kill` and operators with data-dependent extents (native routines of their own), and
    no fused primitive function is left (or there is no Relay function): the form code
    generation takes. Globals marked `Primitive=1` are fused groups themselves: they are
    not looked into, and a function that still refers to one is not lowered (its calls lower to
    kernels)."""
    for func in mod.functions.values():
        if isinstance(func, PrimFunc):
            continue
        if not isinstance(func, Function):
            return False
        if func.is_primitive:
            continue
        for node in post_order(func.body):
            if isinstance(node, Call) and isinstance(node.op, Op) and node.op.name not in _LOWERED_OPS \
                    and not is_data_dependent(node.op.name) \
                    and not is_box_row(node):
                return False
            if isinstance(node, Function) and node.is_primitive:
                return False
            if isinstance(node, GlobalVar) and _is_primitive_global(mod, node):
                return False
    return True


def _is_primitive_global(mod: IRModule, var: GlobalVar) -> bool:
    func = mod.functions.get(var.name_hint)
    return isinstance(func, Function) and func.is_primitive


def is_kernel_op(name: str) -> bool:
    """Operators with a TIR compute rule become kernels; the others (device placement and
    copies, memory operators) stay Relay calls in the lowered `main`."""
    return compute_rule(name) is not None


class ModuleLowering:
    """Lowers the Relay functions of one module, sharing one cache of PrimFuncs."""

    def __init__(self, mod: IRModule) -> None:
        self.mod = mod
        self.out = mod.copy()
        self.by_form: dict[tuple[object, ...], str] = {}
        # Fused groups lowered so far, by Relay structural hash and parameter types.
        self.by_group: dict[tuple[object, ...], list[tuple[Function, str, LoweredPrimitive]]] = {}
        self.used_names: set[str] = set(mod.functions)

    def run(self) -> IRModule:
        infer_types(self.mod)
        for name, fn in self.mod.functions.items():
            if isinstance(fn, Function) and not fn.is_primitive:   # a primitive global lowers where called
                self.out.functions[name] = self.lower_function(fn)
        return self.out

    # -- PrimFunc cache -----------------------------------------------------------------------------
    def intern(self, func: PrimFunc, op_names: list[str]) -> str:
        """The global name of `func`, reusing an equal PrimFunc lowered before (equal canonical
        forms, each computed once)."""
        form = canonical_form(func)
        known = self.by_form.get(form)
        if known is not None:
            return known
        base = ("fused_" + "_".join(n.replace(".", "_") for n in op_names))[:MAX_NAME] if op_names else "fused_copy"
        name, k = base, 0
        while name in self.used_names:
            k += 1
            name = f"{base}_{k}"
        self.used_names.add(name)
        self.by_form[form] = name
        self.out.functions[name] = func  # type: ignore[assignment]
        self.out.def_spans[name] = func.span
        return name

    # -- Relay functions ----------------------------------------------------------------------------
    def lower_function(self, fn: Function) -> Function:
        from irtool.lower.control import lower_with_control_flow, needs_control_lowering  # builds on this module
        if needs_control_lowering(fn):
            return lower_with_control_flow(self, fn)
        for p in fn.params:
            flatten_type(type_of(p), p)
        new: dict[int, Expr] = {}
        for node in _dataflow_order(fn.body):
            new[id(node)] = self.rewrite(node, new)
        body = new[id(fn.body)]
        return Function(fn.params, body, fn.ret_type, fn.type_params, fn.attrs, fn.span)

    def rewrite(self, node: Expr, new: dict[int, Expr]) -> Expr:
        if isinstance(node, (Var, Constant)):
            return node
        if isinstance(node, Tuple):
            return _typed(Tuple([new[id(f)] for f in node.fields], node.span), node)
        if isinstance(node, TupleGetItem):
            return _typed(TupleGetItem(new[id(node.tuple_value)], node.index, node.span), node)
        if isinstance(node, Let):
            return Let(node.var, new[id(node.value)], new[id(node.body)], node.span)
        if isinstance(node, Call):
            return self.rewrite_call(node, [new[id(a)] for a in node.args])
        raise DiagnosticError(f"lower: {_describe(node)} cannot be lowered (only dataflow of primitive "
                              "calls, tuples and lets can)", node.span)

    def rewrite_call(self, call: Call, args: list[Expr]) -> Expr:
        op = call.op
        if isinstance(op, Op):
            if not is_kernel_op(op.name):
                return _typed(Call(op, args, call.attrs, call.span, call.type_args), call)
            # An operator outside any fused group lowers as a group of its own.
            params = [Var(f"p{k}", type_of(a)) for k, a in enumerate(call.args)]
            inner = _typed(Call(op, params, call.attrs, call.span, call.type_args), call)
            return self.lower_primitive_call(Function(params, inner, type_of(call), span=call.span), args, call)
        if isinstance(op, Function):
            if not op.attrs.get("Primitive"):
                if not any(isinstance(n, Call) and isinstance(n.op, Op) for n in post_order(op.body)):
                    return _substitute(op, args)
                raise DiagnosticError("lower: a call of a non-primitive function literal (a closure) cannot be "
                                      "lowered; run fuse-ops first", call.span)
            return self.lower_primitive_call(op, args, call)
        if isinstance(op, GlobalVar):
            raise DiagnosticError(f"lower: the call of Relay function @{op.name_hint} cannot be lowered "
                                  "(inline it first)", call.span)
        if isinstance(op, Constructor):
            raise DiagnosticError(f"lower: ADT constructor {op.name} cannot be lowered", call.span)
        raise DiagnosticError("lower: a call of a computed function (a closure) cannot be lowered", call.span)

    def lower_primitive_call(self, fn: Function, args: list[Expr], call: Call) -> Expr:
        fn = _inline_literal_calls(fn)
        ops = [n for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op)]
        if not ops:  # only tuples and projections: routing, no kernel
            return _substitute(fn, args)
        view = self.as_view(fn, ops, args, call)
        if view is not None:
            return view
        if len(ops) == 1 and (not is_kernel_op(ops[0].op.name) or is_box_row(ops[0])):  # type: ignore[union-attr]
            return _typed(_substitute(fn, args), call)
        fn, args = _bind_scalar_constants(fn, args)
        name, lowered = self.lower_group(fn)
        flat: list[Expr] = []
        for a, p in zip(args, fn.params):
            flat.extend(_fields(a, type_of(p)))
        flat.extend(lowered.constants)
        # A memory plan made before lowering stays valid: the step keeps its storage.
        plan = Attrs({k: call.attrs[k] for k in PLAN_ATTRS if k in call.attrs})
        return _typed(Call(CALL_LOWERED, [GlobalVar(name), Tuple(flat)], plan, span=call.span), call)

    def lower_group(self, fn: Function) -> tuple[str, LoweredPrimitive]:
        """The kernel of a fused group and its lowering, shared with an equal group lowered
        before (dynamic groups, rare, are lowered each time)."""
        if is_dynamic(fn):   # over a dynamic batch: lowered at batch 1 and at a tile of rows
            fn, facts = lower_batched(fn, self.intern)
            return self.kernel_of(fn, facts)
        key = (structural_hash(fn), tuple(type_of(p) for p in fn.params), type_of(fn.body))
        group = self.by_group.setdefault(key, [])
        for seen, name, lowered in group:
            if structural_equal(seen, fn):
                return name, lowered
        name, lowered = self.kernel_of(fn, {})
        group.append((fn, name, lowered))
        return name, lowered

    def kernel_of(self, fn: Function, facts: dict[str, AttrValue]) -> tuple[str, LoweredPrimitive]:
        lowered = lower_primitive(fn)
        # What memory planning must still know of the group (element-wise? a concatenation?).
        facts.update(kernel_facts(fn))
        twin = in_place_part(fn.body, lowered.func) if isinstance(fn.body, Call) and not lowered.constants else None
        if twin is not None:   # native loops update a buffer they own in place (docs/native-relay.md)
            facts[IN_PLACE] = self.intern(twin, [*lowered.op_names, "in_place"])
        func = lowered.func if not facts else PrimFunc(lowered.func.params, lowered.func.body,
                                                       lowered.func.attrs.with_items(**facts), lowered.func.span)
        return self.intern(func, lowered.op_names), lowered

    def as_view(self, fn: Function, ops: list[Call], args: list[Expr], call: Call) -> Expr | None:
        """A group of reshape-only operators on one tensor: one `reshape` to the static shape."""
        if len(args) != 1 or not all((d := get_op(c.op.name)) is not None  # type: ignore[union-attr]
                                     and d.extra.get("reshape_only") for c in ops):
            return None
        out, src = type_of(call), type_of(args[0])
        if not (isinstance(out, TensorType) and isinstance(src, TensorType)):
            return None
        if out.is_static or not is_batched(out) or not is_batched(src):
            flatten_type(out, call)
        return _typed(Call(Op("reshape"), [args[0]], _reshape_attrs(out, ops), call.span), call)


def _reshape_attrs(out: TensorType, ops: list[Call]) -> object:
    """`newshape` of a view to `out`: static dims as they are, a `?` the source's extent on the
    same axis (0) where the one `reshape` of the group copies it with nothing but copies and
    static dims before, and the element count over the others (-1) for the one `?` left.
    Native code sizes the view's box by these (docs/native-relay.md, "Dynamic shapes"); more
    than one `?` left is a located error."""
    reshape = get_op("reshape")
    assert reshape is not None
    given: tuple[int, ...] = ()
    if len(ops) == 1 and ops[0].op.name == "reshape":  # type: ignore[union-attr]
        given = tuple(reshape.full_attrs(ops[0].attrs)["newshape"])  # type: ignore[arg-type]
        given = given[:next((k for k, d in enumerate(given) if d < 0), len(given))]
    copied = [isinstance(d, int) or (axis < len(given) and given[axis] == 0) for axis, d in enumerate(out.shape)]
    if copied.count(False) > 1:
        raise DiagnosticError(f"native code: unsupported: `{ops[0].op.name}` to {out} with several `?` it does not "  # type: ignore[union-attr]
                              "copy (a `reshape` keeps a `?` of its operand with newshape 0, after nothing but "
                              "copies and static dims; one `?` may take the rest)", ops[0].span)
    if copied.count(False) == 0 and sum(not isinstance(d, int) for d in out.shape) == 1:
        copied = [isinstance(d, int) for d in out.shape]   # one `?`: the rest, as before
    return reshape.normalize_attrs({"newshape": tuple(d if isinstance(d, int) else 0 if keep else -1
                                                      for d, keep in zip(out.shape, copied))})


def _fields(arg: Expr, t: object) -> list[Expr]:
    """The tensors of an argument, a tuple one projected field by field."""
    out: list[Expr] = []
    stack: list[tuple[Expr, object]] = [(arg, t)]
    while stack:
        e, ty = stack.pop()
        if isinstance(ty, TupleType):
            parts = [(e.fields[i] if isinstance(e, Tuple) else _typed(TupleGetItem(e, i, e.span), None, f), f)
                     for i, f in enumerate(ty.fields)]
            stack.extend(reversed(parts))
        else:
            out.append(e)
    return out


def _substitute(fn: Function, args: list[Expr]) -> Expr:
    """The body of a call-free function with its parameters replaced by the arguments."""
    env: dict[int, Expr] = {id(p): a for p, a in zip(fn.params, args)}
    for node in post_order(fn.body):
        if id(node) in env:
            continue
        if isinstance(node, Tuple):
            env[id(node)] = _typed(Tuple([env.get(id(f), f) for f in node.fields], node.span), node)
        elif isinstance(node, TupleGetItem):
            env[id(node)] = _typed(TupleGetItem(env.get(id(node.tuple_value), node.tuple_value), node.index,
                                                node.span), node)
        elif isinstance(node, Call):
            env[id(node)] = _typed(Call(node.op, [env.get(id(a), a) for a in node.args], node.attrs, node.span,
                                        node.type_args), node)
        elif not isinstance(node, (Constant, Op)):
            raise DiagnosticError(f"lower: {_describe(node)} inside a primitive function cannot be lowered",
                                  node.span)
    return env.get(id(fn.body), fn.body)


def _bind_scalar_constants(fn: Function, args: list[Expr]) -> tuple[Function, list[Expr]]:
    """The function with its single-element constant arguments bound in place of their
    parameters, and the arguments left. Exporters share scalars such as GELU's 0.5 and 3 between
    layers, so fusion leaves them outside the groups; bound, they lower to immediates (codegen then
    sees `pow(x, 3)`'s exponent) instead of being loaded from 0-d buffers."""
    bound = [isinstance(a, Constant) and isinstance(type_of(p), TensorType) and a.data.size == 1
             for p, a in zip(fn.params, args)]
    if not any(bound):
        return fn, args
    body = _substitute(fn, [a if b else p for p, a, b in zip(fn.params, args, bound)])
    params = [p for p, b in zip(fn.params, bound) if not b]
    return (Function(params, body, fn.ret_type, fn.type_params, fn.attrs, fn.span),
            [a for a, b in zip(args, bound) if not b])


def _inline_literal_calls(fn: Function) -> Function:
    """A primitive function whose body calls function literals in place (TVM's `Composite`
    functions of a partitioned function, global or inlined) with those calls replaced by the
    literals' bodies: one fused group."""
    new: dict[int, Expr] = {}
    changed = False
    for node in _dataflow_order(fn.body):
        if not isinstance(node, (Call, Tuple, TupleGetItem)):
            continue
        if isinstance(node, Call):
            args = [new.get(id(a), a) for a in node.args]
            if isinstance(node.op, Function):
                new[id(node)] = _typed(_substitute(node.op, args), node)
                changed = True
            else:
                new[id(node)] = _typed(Call(node.op, args, node.attrs, node.span, node.type_args), node)
        elif isinstance(node, Tuple):
            new[id(node)] = _typed(Tuple([new.get(id(f), f) for f in node.fields], node.span), node)
        else:
            new[id(node)] = _typed(TupleGetItem(new.get(id(node.tuple_value), node.tuple_value), node.index,
                                                node.span), node)
    if not changed:
        return fn
    return Function(fn.params, new.get(id(fn.body), fn.body), fn.ret_type, fn.type_params, fn.attrs, fn.span)


def _typed(expr: Expr, like: Expr | None, ty: object = None) -> Expr:
    expr.checked_type = like.checked_type if like is not None else ty  # type: ignore[assignment]
    return expr


def _describe(node: Expr) -> str:
    return {Function: "a function literal (closure)", If: "`if`", Match: "`match`", RefCreate: "a reference",
            RefRead: "a reference read", RefWrite: "a reference write", GlobalVar: "a global function value",
            Constructor: "an ADT constructor"}.get(type(node), type(node).__name__)  # type: ignore[arg-type]


def _dataflow_order(root: Expr) -> list[Expr]:
    """Post-order of a function body without entering callee function literals or op nodes."""
    return post_order(root, _dataflow_children)


def _dataflow_children(node: Expr) -> tuple[Expr, ...]:
    if isinstance(node, Call):
        kids: tuple[Expr, ...] = tuple(node.args)
        if not isinstance(node.op, (Op, Function, GlobalVar, Constructor)):
            kids = (node.op, *kids)
        return kids
    if isinstance(node, (Function, If, Match, RefCreate, RefRead, RefWrite, GlobalVar, Constructor)):
        return ()  # rejected by `rewrite`, located at the node itself
    return tuple(node.children())


def lower_module(mod: IRModule) -> IRModule:
    """Every Relay function's primitive calls lowered to PrimFuncs (docs/lowering.md)."""
    return ModuleLowering(mod).run()
