"""A memory plan as IR attributes: `annotate` writes a `MemoryPlan` onto `main` and its step
calls, `read_plan` reads it back and checks it (`plan_check`), so a plan from text is held to
what the planner guarantees. Planning itself is `irtool.analysis.memory_plan`;
docs/memory-planning.md describes the attributes.
"""

from __future__ import annotations

from irtool.analysis.liveness import compute_liveness
from irtool.analysis.steps import ALIAS, CONSTANT, PARAM, Liveness
from irtool.analysis.memory_plan import ARENA, ARENA_PLANNERS, INPUT, PLANNERS, TOKEN, MemoryPlan, Storage
from irtool.analysis.plan_check import check_plan
from irtool.core.diagnostics import DiagnosticError
from irtool.core.span import Span
from irtool.ir.expr import Attrs, AttrValue, Call, Expr, Function, Op
from irtool.ir.module import IRModule
from irtool.ir.visitor import ExprMutator
from irtool.ops.registry import get_op


# On `main`.
PLAN_ALGORITHM = "memory_plan"
PLAN_FUNC_ATTRS = ("memory_plan", "alignment", "workspace_bytes", "storage_bytes", "storage_devices",
                   "param_storage_ids", "constant_storage_ids", "tvm_storage_sizes", "in_place", "concat_in_place",
                   "results_outside", "hoist_constants")
# Written `hoist_constants=false` on `main` when the plan was made without hoisting, so that readers
# recompute the same liveness (`plan_liveness`).
HOIST_CONSTANTS = "hoist_constants"
# On each call of `main` that writes tensors; a list when the call returns a tuple.
STORAGE_ID, STORAGE_OFFSET = "storage_id", "storage_offset"


def _one_or_list(values: list[int]) -> int | tuple[int, ...]:
    return values[0] if len(values) == 1 else tuple(values)


def can_carry_plan(call: Call) -> bool:
    """Calls of function values keep any keyword attributes; an operator call (such as
    `call_lowered`) only when its schema declares `storage_id` and `storage_offset`."""
    if not isinstance(call.op, Op):
        return True
    opdef = get_op(call.op.name)
    if opdef is None:
        return False
    if opdef.attrs is None:
        return True
    names = {f.name for f in opdef.attrs}
    return STORAGE_ID in names and STORAGE_OFFSET in names


def annotate(mod: IRModule, live: Liveness, plan: MemoryPlan, entry: str = "main") -> IRModule:
    """A copy of `mod` whose `entry` carries `plan` (any older plan is replaced)."""
    tensors = live.tensors
    func = live.func
    step_attrs: dict[int, dict[str, AttrValue]] = {}
    for step in live.steps:
        if step.kind == ALIAS or step.hoisted or not step.outputs:
            continue
        if not can_carry_plan(step.call):
            raise DiagnosticError("plan-memory: a memory plan is written on calls of fused functions; "
                                  "run fuse-ops first", step.call.span)
        placed = [plan.placement[t] for t in step.outputs]
        step_attrs[id(step.call)] = {STORAGE_ID: _one_or_list([p[0] for p in placed]),
                                     STORAGE_OFFSET: _one_or_list([p[1] for p in placed])}
    calls = {id(s.call) for s in live.steps}

    class _Annotate(ExprMutator):
        def rewrite_call(self, node: Call) -> Expr:
            new = super().rewrite_call(node)
            if id(node) not in calls or not isinstance(new, Call) or not can_carry_plan(node):
                return new
            attrs = new.attrs.without(STORAGE_ID, STORAGE_OFFSET)
            if id(node) in step_attrs:
                attrs = attrs.with_items(**step_attrs[id(node)])
            if isinstance(new.op, Op):
                opdef = get_op(new.op.name)
                attrs = opdef.normalize_attrs(attrs, new.span) if opdef is not None else attrs
            return Call(new.op, new.args, attrs, new.span, new.type_args)

    body = _Annotate().visit(func.body)
    fattrs: dict[str, AttrValue] = {k: v for k, v in func.attrs.items() if k not in PLAN_FUNC_ATTRS}
    fattrs.update({"memory_plan": plan.algorithm, "alignment": plan.alignment,
                   "workspace_bytes": plan.workspace_bytes(),
                   "storage_bytes": tuple(s.nbytes for s in plan.storages)})
    if any(s.device is not None for s in plan.storages):
        fattrs["storage_devices"] = tuple(s.device for s in plan.storages)
    params = [plan.placement[t.index][0] for t in tensors if t.kind == PARAM and t.index in plan.placement]
    consts = [plan.placement[t.index][0] for t in tensors if t.kind == CONSTANT and t.index in plan.placement]
    if params:
        fattrs["param_storage_ids"] = tuple(params)
    if consts:
        fattrs["constant_storage_ids"] = tuple(consts)
    if plan.algorithm == "tvm-greedy":
        fattrs["tvm_storage_sizes"] = tuple(s.first_bytes for s in plan.storages)
    if plan.in_place:
        fattrs["in_place"] = True
    if plan.concat_in_place:
        fattrs["concat_in_place"] = True
    if plan.results_outside:
        fattrs["results_outside"] = True
    if not live.hoist_constants:
        fattrs[HOIST_CONSTANTS] = False
    out = mod.copy()
    out.functions[entry] = Function(func.params, body, func.ret_type, func.type_params, Attrs(fattrs), func.span)
    return out


def _ints(value: AttrValue, what: str, span: Span | None) -> list[int]:
    items = list(value) if isinstance(value, tuple) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise DiagnosticError(f"memory plan: `{what}` must be an integer or a list of integers", span)
    return items  # type: ignore[return-value]


def plan_liveness(mod: IRModule, entry: str = "main") -> Liveness:
    """The liveness a plan on `entry` was made for: hoisting unless `main` says
    `hoist_constants=false` (readers of a plan use this, so they see the steps the planner saw)."""
    return compute_liveness(mod, entry, hoist_constants=mod.functions[entry].attrs.get(HOIST_CONSTANTS) is not False)


def _flag(attrs: Attrs, name: str, default: bool, span: Span | None) -> bool:
    value = attrs.get(name, default)
    if not isinstance(value, bool):
        raise DiagnosticError(f"memory plan: `{name}` must be true or false", span)
    return value


def read_plan(live: Liveness) -> MemoryPlan | None:
    """The plan written on `live.func` by `annotate`, or None when it carries no plan; a plan that
    is inconsistent with itself or with the IR is a located `DiagnosticError`."""
    func = live.func
    attrs = func.attrs
    algorithm = attrs.get(PLAN_ALGORITHM)
    if algorithm is None:
        return None
    span = func.span
    if not isinstance(algorithm, str) or algorithm not in PLANNERS:
        raise DiagnosticError(f"memory plan: unknown algorithm {algorithm!r}", span)
    alignment = _ints(attrs.get("alignment", 1), "alignment", span)
    if len(alignment) != 1 or alignment[0] < 1 or alignment[0] & (alignment[0] - 1):
        raise DiagnosticError(f"memory plan: `alignment` must be a power of two, got {attrs.get('alignment')}",
                              span)
    sizes = _ints(attrs.get("storage_bytes", ()), "storage_bytes", span)
    if any(n < 0 for n in sizes):
        raise DiagnosticError("memory plan: `storage_bytes` must not be negative", span)
    devices_attr = attrs.get("storage_devices")
    devices = list(devices_attr) if isinstance(devices_attr, tuple) else [None] * len(sizes)
    if len(devices) != len(sizes):
        raise DiagnosticError("memory plan: `storage_devices` and `storage_bytes` differ in length", span)
    inputs = {"param_storage_ids": [t.index for t in live.tensors if t.kind == PARAM],
              "constant_storage_ids": [t.index for t in live.tensors if t.kind == CONSTANT]}
    plan = MemoryPlan(algorithm, alignment[0], in_place=_flag(attrs, "in_place", False, span),
                      concat_in_place=_flag(attrs, "concat_in_place", False, span),
                      results_outside=_flag(attrs, "results_outside", False, span))
    _flag(attrs, HOIST_CONSTANTS, True, span)  # `plan_liveness` read it already; only its type is checked
    kind = ARENA if algorithm in ARENA_PLANNERS else TOKEN
    plan.storages = [Storage(i, d, n, kind, n) for i, (n, d) in enumerate(zip(sizes, devices))]
    for name, tids in inputs.items():
        if name not in attrs:
            continue
        sids = _ints(attrs[name], name, span)
        if len(sids) != len(tids):
            raise DiagnosticError(f"memory plan: `{name}` lists {len(sids)} storages for {len(tids)} tensors", span)
        for t, sid in zip(tids, sids):
            plan.placement[t] = (sid, 0)
            if 0 <= sid < len(plan.storages):
                plan.storages[sid].kind = INPUT
    for step in live.steps:
        if step.kind == ALIAS or step.hoisted or not step.outputs:
            continue  # a hoisted step's storage attributes (from a plan without hoisting) are not used
        call = step.call
        if STORAGE_ID not in call.attrs or STORAGE_OFFSET not in call.attrs:
            raise DiagnosticError("memory plan: this call has no `storage_id`/`storage_offset`", call.span)
        sids = _ints(call.attrs[STORAGE_ID], STORAGE_ID, call.span)
        offsets = _ints(call.attrs[STORAGE_OFFSET], STORAGE_OFFSET, call.span)
        if len(sids) != len(step.outputs) or len(offsets) != len(step.outputs):
            raise DiagnosticError(f"memory plan: this call writes {len(step.outputs)} tensors but its "
                                  f"storage attributes name {len(sids)} storages and {len(offsets)} offsets",
                                  call.span)
        for t, sid, offset in zip(step.outputs, sids, offsets):
            plan.placement[t] = (sid, offset)
    check_plan(live, plan)
    _check_totals(attrs, plan, span)
    return plan


def _check_totals(attrs: Attrs, plan: MemoryPlan, span: Span | None) -> None:
    """The summaries `annotate` writes beside the storages must agree with them."""
    workspace = attrs.get("workspace_bytes")
    if workspace is not None and _ints(workspace, "workspace_bytes", span) != [plan.workspace_bytes()]:
        raise DiagnosticError(f"memory plan: `workspace_bytes` is {workspace}, but its workspace storages "
                              f"hold {plan.workspace_bytes()} bytes", span)
    firsts = attrs.get("tvm_storage_sizes")
    if firsts is not None:
        values = _ints(firsts, "tvm_storage_sizes", span)
        if len(values) != len(plan.storages) or any(not 0 <= v <= s.nbytes for v, s in zip(values, plan.storages)):
            raise DiagnosticError("memory plan: `tvm_storage_sizes` must give, for each storage, the size of its "
                                  "first tensor (at most the storage's bytes)", span)
