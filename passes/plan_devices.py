"""`plan-devices`: give every value of `main` a device, from the program's device annotations.

`on_device`/`device_copy` fix some devices; `irtool.analysis.devices` spreads them (a kernel's
inputs and outputs share its device, a copy separates two devices) and reports conflicts at the
annotation that disagrees. The result is written back so it shows and re-parses: parameters get
`{virtual_device=d}` binder attributes and calls of fused functions `virtual_device=d`.
Values no annotation reaches stay on the default device and get no attribute. Calls of bare
operators (an unfused `main`) cannot carry the attribute; run `fuse-ops` first to see them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from irtool.analysis.devices import VIRTUAL_DEVICE, step_device
from irtool.analysis.liveness import compute_liveness
from irtool.analysis.steps import ALIAS
from irtool.analysis.typecheck import infer_types
from irtool.ir.expr import AttrValue, Call, Expr, Function, Op, Var
from irtool.ir.module import IRModule
from irtool.ir.visitor import ExprMutator
from irtool.passes.base import ModulePass


class _Place(ExprMutator):
    def __init__(self, params: dict[int, Var], devices: dict[int, AttrValue]) -> None:
        super().__init__()
        self.memo.update(params)
        self.devices = devices

    def rewrite_call(self, node: Call) -> Expr:
        new = super().rewrite_call(node)
        if id(node) in self.devices and isinstance(new, Call):
            attrs = new.attrs.with_items(**{VIRTUAL_DEVICE: self.devices[id(node)]})
            return Call(new.op, new.args, attrs, new.span, new.type_args)
        return new


@dataclass
class PlanDevicesPass(ModulePass):
    name: ClassVar[str] = "plan-devices"
    description: ClassVar[str] = "infer the device of every value of main from on_device/device_copy"

    entry: str = "main"

    def apply(self, mod: IRModule) -> IRModule:
        if self.entry not in mod.functions:
            return mod
        infer_types(mod)
        live = compute_liveness(mod, self.entry)
        func = live.func
        params: dict[int, Var] = {}
        for param, tids in zip(func.params, live.params):
            device = live.tensors[tids[0]].device if tids else None
            if device is not None and param.attrs.get(VIRTUAL_DEVICE) != device:
                new = Var(param.name_hint, param.type_annotation, param.span,
                          param.attrs.with_items(**{VIRTUAL_DEVICE: device}))
                params[id(param)] = new
        devices: dict[int, AttrValue] = {}
        for step in live.steps:
            device = step_device(live, step.index)
            if device is not None and step.kind != ALIAS and not isinstance(step.call.op, Op):
                devices[id(step.call)] = device
        if not params and not devices:
            return mod
        mutator = _Place(params, devices)
        body = mutator.visit(func.body)
        out = mod.copy()
        out.functions[self.entry] = Function([params.get(id(p), p) for p in func.params], body, func.ret_type,
                                             func.type_params, func.attrs, func.span)
        return out

