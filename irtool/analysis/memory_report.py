"""The memory report of `irtool-opt --memory-report[=text|json]`: a plan's numbers side by side.

Arena bytes of the plan on `main` (or, when `main` carries none, of a greedy-by-size plan made for
the report), the liveness lower bound, the no-reuse total, and one row per tensor with its live
range in execution steps of `main` (inclusive).
"""

from __future__ import annotations

import json

from irtool.analysis.steps import ALIAS, CALL, HOISTED, Liveness, device_key
from irtool.analysis.memory_plan import INPUT, MemoryPlan, plan_memory
from irtool.analysis.plan_attrs import plan_liveness, read_plan
from irtool.analysis.typecheck import infer_types
from irtool.ir.module import IRModule
from irtool.core.diagnostics import DiagnosticError

Report = dict[str, object]
MIB = 1 << 20


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
        "input_bytes": sum(t.nbytes for t in live.tensors if t.kind not in (CALL, HOISTED)),
        "hoisted_bytes": live.hoisted_bytes(),
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
    live = plan_liveness(mod, entry)
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
        f"  hoisted bytes:     {report['hoisted_bytes']:>12}  (computed once from constants, not planned)",
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


def timeline(report: Report) -> list[dict[str, object]]:
    """The plan as rectangles, one per tensor, for a picture of offset against step: x spans the
    tensor's steps (`first_step` to `last_step + 1`), y its bytes. Storages are stacked in id order
    (each starts where the one before ends, as code generation lays them out in one workspace)."""
    base: dict[int, int] = {}
    at = 0
    for s in report["storages"]:  # type: ignore[union-attr]
        if s["kind"] != INPUT:
            base[s["id"]] = at
            at += s["bytes"]
    rects: list[dict[str, object]] = []
    for t in report["tensors"]:  # type: ignore[union-attr]
        y0 = base[t["storage_id"]] + t["offset"]
        rects.append({"name": t["name"], "op": t["op"], "storage_id": t["storage_id"],
                      "x0": t["first_step"], "x1": t["last_step"] + 1, "y0": y0, "y1": y0 + t["bytes"]})
    return rects


def draw_timeline(report: Report, path: str, title: str = "") -> None:
    """A PNG of `timeline(report)` via matplotlib, which irtool does not depend on: a located-less
    `DiagnosticError` says so when it is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        raise DiagnosticError("the arena timeline needs matplotlib, which irtool does not depend on "
                              "(pip install matplotlib)") from None
    rects = timeline(report)
    fig, ax = plt.subplots(figsize=(12, 6))
    colors = plt.get_cmap("tab20").colors
    for k, r in enumerate(rects):
        ax.add_patch(Rectangle((r["x0"], r["y0"] / MIB), r["x1"] - r["x0"], (r["y1"] - r["y0"]) / MIB,  # type: ignore
                               facecolor=colors[k % len(colors)], edgecolor="black", linewidth=0.2))
    ax.axhline(report["arena_bytes"] / MIB, color="red", linewidth=0.8, label="arena")  # type: ignore[operator]
    ax.axhline(report["lower_bound_bytes"] / MIB, color="green", linestyle="--", linewidth=0.8,  # type: ignore
               label="lower bound")
    ax.set_xlim(0, max(report["steps"], 1))  # type: ignore[type-var]
    ax.set_ylim(0, max(r["y1"] for r in rects) / MIB * 1.05 if rects else 1)  # type: ignore[type-var]
    ax.set_xlabel("step of main")
    ax.set_ylabel("offset (MiB)")
    ax.set_title(title or f"memory plan: {report['algorithm']}")
    ax.legend(loc="upper right")
    fig.savefig(path, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
