"""The memory report of `irtool-opt --memory-report[=text|json]`: a plan's numbers side by side.

Arena bytes of the plan on `main` (or, when `main` carries none, of a greedy-by-size plan made for
the report), the liveness lower bound, the no-reuse total, and one row per tensor with its live
range in execution steps of `main` (inclusive).
"""

from __future__ import annotations

import json

from irtool.analysis.liveness import ALIAS, CALL, Liveness, compute_liveness, device_key
from irtool.analysis.memory_plan import INPUT, MemoryPlan, plan_memory, read_plan
from irtool.analysis.typecheck import infer_types
from irtool.ir.module import IRModule
from irtool.syntax.diagnostics import DiagnosticError

Report = dict[str, object]


def _device_json(device: object) -> object:
    return device if device is None or isinstance(device, (int, str)) else str(device)


def build_report(live: Liveness, plan: MemoryPlan) -> Report:
    """The report as one JSON-ready object."""
    lower = live.lower_bound()
    devices = []
    for device in live.devices():
        key = device_key(device)
        devices.append({
            "device": _device_json(device),
            "arena_bytes": sum(s.nbytes for s in plan.storages
                               if s.kind != INPUT and device_key(s.device) == key),
            "lower_bound_bytes": lower.get(key, 0),
        })
    tensors = []
    for t in live.planned():
        if t.step >= 0 and live.steps[t.step].kind == ALIAS:
            continue
        sid, offset = plan.placement[t.index]
        tensors.append({"name": t.name, "op": live.steps[t.step].label, "bytes": t.nbytes, "offset": offset,
                        "storage_id": sid, "device": _device_json(t.device),
                        "first_step": t.first, "last_step": t.last})
    return {
        "algorithm": plan.algorithm,
        "alignment": plan.alignment,
        "steps": len(live.steps),
        "arena_bytes": plan.workspace_bytes(),
        "lower_bound_bytes": sum(lower.values()),
        "no_reuse_bytes": live.no_reuse_bytes(),
        "input_bytes": sum(t.nbytes for t in live.tensors if t.kind != CALL),
        "storages": [{"id": s.index, "bytes": s.nbytes, "kind": s.kind, "device": _device_json(s.device)}
                     for s in plan.storages],
        "devices": devices,
        "tensors": tensors,
    }


def memory_report(mod: IRModule, entry: str = "main") -> Report:
    """The report for `entry`'s plan, or for a fresh greedy-by-size plan when it has none."""
    if entry not in mod.functions:
        raise DiagnosticError(f"--memory-report: no function @{entry}")
    infer_types(mod)
    live = compute_liveness(mod, entry)
    plan = read_plan(live) or plan_memory(live)
    return build_report(live, plan)


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.3f}x" if b else "-"


def format_text(report: Report) -> str:
    """A human-readable table of the report."""
    arena, lower, none = report["arena_bytes"], report["lower_bound_bytes"], report["no_reuse_bytes"]
    lines = [
        f"memory plan: {report['algorithm']} (alignment {report['alignment']}, {report['steps']} steps)",
        f"  arena bytes:       {arena:>12}  ({_ratio(arena, lower)} the lower bound)",  # type: ignore[arg-type]
        f"  lower bound bytes: {lower:>12}",
        f"  no-reuse bytes:    {none:>12}  ({_ratio(none, lower)} the lower bound)",  # type: ignore[arg-type]
        f"  input bytes:       {report['input_bytes']:>12}  (parameters and constants, not planned)",
    ]
    devices = report["devices"]
    if len(devices) > 1 or (devices and devices[0]["device"] is not None):  # type: ignore[index,arg-type]
        for d in devices:  # type: ignore[union-attr]
            lines.append(f"  device {d['device']}: arena {d['arena_bytes']} bytes, "
                         f"lower bound {d['lower_bound_bytes']} bytes")
    lines.append("")
    lines.append(f"  {'tensor':<10} {'op':<28} {'bytes':>10} {'storage':>7} {'offset':>10} {'steps':>13}")
    for t in report["tensors"]:  # type: ignore[union-attr]
        op = t["op"] if len(t["op"]) <= 28 else t["op"][:25] + "..."
        lines.append(f"  {t['name']:<10} {op:<28} {t['bytes']:>10} {t['storage_id']:>7} {t['offset']:>10} "
                     f"{t['first_step']:>6}-{t['last_step']:<6}")
    return "\n".join(lines) + "\n"


def format_report(report: Report, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(report, indent=None, sort_keys=False) + "\n"
    if fmt == "text":
        return format_text(report)
    raise DiagnosticError(f"--memory-report: unknown format `{fmt}` (text or json)")
