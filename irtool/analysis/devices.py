"""Device inference over the steps of `main` (the seeds' GraphPlanMemory device collection).

Some values have a device because the program says so: `on_device(%x, virtual_device=d)`,
`device_copy(%x, src_virtual_device=a, dst_virtual_device=b)` (its input is on `a`, its result on
`b`), a `virtual_device=d` attribute on a step call or a parameter binder (what `plan-devices`
writes). A kernel runs on one device, so all tensors a kernel step reads and writes share a
device; aliases are the same tensor. Union-find over the tensors with those equalities spreads
each annotation upward from a copy to the previous copy and downward from the last copy, as the
seeds describe. Two different devices meeting in one class is a located error; classes without
any annotation stay on the default device (None).
"""

from __future__ import annotations

from irtool.ir.expr import Op
from irtool.core.span import Span
from irtool.analysis.steps import ALIAS, KERNEL, Device, Liveness, device_key
from irtool.analysis.union_find import UnionFind
from irtool.core.diagnostics import Diagnostic, DiagnosticError

VIRTUAL_DEVICE = "virtual_device"


def _show(device: Device) -> str:
    return repr(device) if isinstance(device, str) else str(device)


def assign_devices(live: Liveness) -> None:
    """Set `device` on every tensor of `live`; raises `DiagnosticError` on a conflict."""
    uf = UnionFind(len(live.tensors))
    constraints: list[tuple[int, Device, Span | None]] = []
    for param, tids in zip(live.func.params, live.params):
        if param.attrs.get(VIRTUAL_DEVICE) is not None:
            constraints.extend((t, param.attrs[VIRTUAL_DEVICE], param.span) for t in tids)
    for step in live.steps:
        call = step.call
        if step.kind == KERNEL:
            members = step.inputs + step.outputs
            for t in members[1:]:
                uf.union(members[0], t)
        if step.device_annotation is not None:
            name, attrs = step.device_annotation
            if name == "on_device" and attrs.get(VIRTUAL_DEVICE) is not None:
                constraints.extend((t, attrs[VIRTUAL_DEVICE], call.span) for t in step.inputs)
            elif name == "device_copy":
                if attrs.get("src_virtual_device") is not None:
                    constraints.extend((t, attrs["src_virtual_device"], call.span) for t in step.inputs)
                if attrs.get("dst_virtual_device") is not None:
                    constraints.extend((t, attrs["dst_virtual_device"], call.span) for t in step.outputs)
        if not isinstance(call.op, Op) and call.attrs.get(VIRTUAL_DEVICE) is not None and step.kind != ALIAS:
            constraints.extend((t, call.attrs[VIRTUAL_DEVICE], call.span) for t in step.outputs)
    chosen: dict[int, tuple[Device, Span | None]] = {}
    for t, device, span in constraints:
        root = uf.find(t)
        if root not in chosen:
            chosen[root] = (device, span)
            continue
        first, first_span = chosen[root]
        if device_key(first) != device_key(device):
            raise DiagnosticError(
                f"conflicting devices: this value must be on device {_show(device)}, but it is computed "
                f"together with a value on device {_show(first)}", span,
                notes=[Diagnostic("note", f"device {_show(first)} was required here", first_span)])
    for tensor in live.tensors:
        tensor.device = chosen.get(uf.find(tensor.index), (None, None))[0]


def step_device(live: Liveness, index: int) -> Device:
    """Where a step runs: the device of what it writes (a copy writes on its destination)."""
    step = live.steps[index]
    tids = step.outputs or step.inputs
    return live.tensors[tids[0]].device if tids else None

