"""The independent check of a memory plan: every reader of a plan (the checker pass, code
generation, the arena interpreter, the report) gets one only through `read_plan`, which runs it,
so a plan written by a buggy planner and one edited by hand are refused the same way.

It takes liveness recomputed from the IR and the plan read back from the attributes: every tensor
has a storage on its own device, fits in it at an aligned offset, inputs keep storages of their
own, and no two tensors live at the same step share a byte. Two overlaps are allowed, each only
when `main` declares it (`in_place=True`, `concat_in_place=True`) and re-derived here from the IR:
an element-wise step writing its result exactly over a same-typed input that dies at that step
(in-place reuse), and the inputs of a concatenation placed exactly at their slices of its result
(concatenate-in-place).
"""

from __future__ import annotations

from irtool.analysis.memory_plan import INPUT, MemoryPlan, concat_parents, results_outside
from irtool.analysis.steps import ALIAS, CALL, Liveness, PlannedTensor, device_key
from irtool.core.diagnostics import Diagnostic, DiagnosticError


def _describe(t: PlannedTensor, placed: tuple[int, int]) -> str:
    return f"{t.name} ({t.nbytes} bytes at offset {placed[1]} of storage {placed[0]})"


def _in_place_inputs(live: Liveness, plan: MemoryPlan) -> dict[int, int]:
    """Tensor -> the step whose result legitimately overwrites it (exactly, as it dies)."""
    out: dict[int, int] = {}
    if not plan.in_place:
        return out
    outputs = set(live.outputs)
    for step in live.steps:
        if not step.elementwise or step.kind == ALIAS or len(step.outputs) != 1:
            continue
        o = live.tensors[step.outputs[0]]
        for t in step.inputs:
            src = live.tensors[t]
            if (src.kind == CALL and src.last == step.index and t not in outputs and src.ttype == o.ttype
                    and plan.placement.get(t) == plan.placement.get(o.index)):
                out[t] = step.index
    return out


def _sizes(live: Liveness, plan: MemoryPlan) -> list[int]:
    """The bytes each tensor takes in its storage: none for a result the caller holds."""
    outside = results_outside(live) if plan.results_outside else set()
    return [0 if t.index in outside else t.nbytes for t in live.tensors]


def check_plan(live: Liveness, plan: MemoryPlan) -> None:
    """Raise a located `DiagnosticError` at the first violation of the plan."""
    tensors = live.tensors
    alignment = plan.alignment
    if alignment < 1:
        raise DiagnosticError(f"memory plan: alignment must be positive, got {alignment}", live.func.span)
    users: dict[int, int] = {}
    nbytes = _sizes(live, plan)
    for t in tensors:
        placed = plan.placement.get(t.index)
        if placed is None:
            if t.kind == CALL and not (t.step >= 0 and live.steps[t.step].kind == ALIAS):
                raise DiagnosticError(f"memory plan: {t.name} has no storage", t.span)
            continue
        sid, offset = placed
        if not 0 <= sid < len(plan.storages):
            raise DiagnosticError(f"memory plan: {t.name} names storage {sid}, but there are "
                                  f"{len(plan.storages)}", t.span)
        storage = plan.storages[sid]
        if offset < 0 or offset % alignment:
            raise DiagnosticError(f"memory plan: {_describe(t, placed)} is not aligned to {alignment} bytes", t.span)
        if offset + nbytes[t.index] > storage.nbytes:
            raise DiagnosticError(f"memory plan: {_describe(t, placed)} does not fit: storage {sid} has "
                                  f"{storage.nbytes} bytes", t.span)
        if device_key(storage.device) != device_key(t.device):
            raise DiagnosticError(f"memory plan: {t.name} lives on device {t.device} but storage {sid} is on "
                                  f"device {storage.device}", t.span)
        if (t.kind == CALL) == (storage.kind == INPUT):
            raise DiagnosticError(f"memory plan: {t.name} is {'an intermediate' if t.kind == CALL else 'an input'}"
                                  f" but storage {sid} is {'an input' if storage.kind == INPUT else 'a workspace'}"
                                  " storage", t.span)
        if storage.kind == INPUT:
            if sid in users:
                raise DiagnosticError(f"memory plan: inputs {tensors[users[sid]].name} and {t.name} share "
                                      f"storage {sid}", t.span)
            users[sid] = t.index
    _check_overlaps(live, plan, nbytes)


def _contains(parent: dict[int, int], outer: int, inner: int) -> bool:
    while inner in parent:
        inner = parent[inner]
        if inner == outer:
            return True
    return False


def _check_overlaps(live: Liveness, plan: MemoryPlan, nbytes: list[int]) -> None:
    tensors = live.tensors
    dies_early = _in_place_inputs(live, plan)
    parent = concat_parents(live, plan)
    live_at: list[list[int]] = [[] for _ in range(len(live.steps))]
    for t in live.planned():
        if t.index not in plan.placement:
            continue
        last = dies_early[t.index] - 1 if t.index in dies_early else t.last
        for s in range(t.first, last + 1):
            live_at[s].append(t.index)
    for step, members in enumerate(live_at):
        ranges = sorted((plan.placement[t], nbytes[t], t) for t in members)
        active: list[tuple[int, int, int]] = []  # (storage, end, tensor) of ranges still open
        for (sid, offset), size, t in ranges:
            if size == 0:
                continue
            active = [a for a in active if a[0] == sid and a[1] > offset]
            for _, _, other in active:
                if _contains(parent, other, t) or _contains(parent, t, other):
                    continue
                o = tensors[other]
                raise DiagnosticError(
                    f"memory plan: {_describe(tensors[t], (sid, offset))} overlaps "
                    f"{_describe(o, plan.placement[other])}; both are live at step {step}",
                    tensors[t].span, notes=[Diagnostic("note", f"{o.name} is computed here", o.span)])
            active.append((sid, offset + size, t))
