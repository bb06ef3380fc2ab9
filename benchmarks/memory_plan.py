"""Memory plans of the nine ONNX light model-zoo graphs: no-reuse, TVM's greedy, greedy-by-size,
greedy-best, greedy-best with the reuse options, against the liveness lower bound.

Each `onnx/backend/test/data/light/*.onnx` graph is imported (initializers as parameters, not
planned), run through `simplify-inference,fuse-ops` (stage `fused`) and then `lower` (stage
`lowered`), and the liveness of its `main` is planned by every planner, with the steps that
compute only from constants hoisted (`hoist=on`: the zoo's ConstantOfShape weights, imported as
`full`, run once outside the arena) and without (`hoist=off`: they are planned like activations).
Every plan is checked by the independent checker (`check_plan`) before it is counted.

    python benchmarks/memory_plan.py [--models densenet121,inception_v2] [--stages fused,lowered]
                                     [--hoist on,off] [--json OUT] [--timeline FILE.png]

Columns: MiB and the ratio to the plain lower bound (max over steps of the bytes live, no in-place
reuse). `best+reuse` is greedy-best with in-place and concatenate-in-place (each used only where
it pays); `reuse bound` is the lower bound of the buffers those options make, which no placement
of them can beat: it shows whether the peak step holds any reusable tensor. `hoisted` is the MiB
of tensors computed once from constants. `--timeline` draws each model's greedy-by-size plan
(fused, hoisted) as a PNG when matplotlib is importable (it is not a dependency); the model name
is inserted before the suffix when several models are drawn.

Anchors (measured when the planner was written: activations only, the same graphs fused TVM's way, which is
what hoisting gives): TVM's greedy 1.285x the bound (geometric mean), 1.745x worst (Inception v2);
greedy-by-size 1.111x on DenseNet-121 and the bound elsewhere.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from irtool.analysis.liveness import compute_liveness
from irtool.analysis.memory_plan import buffers_bound, plan_buffers, plan_memory
from irtool.analysis.memory_report import build_report, draw_timeline
from irtool.analysis.typecheck import infer_types
from irtool.frontend.onnx import import_file
from irtool.frontend.onnx_zoo import LIGHT_MODELS, light_model_path
from irtool.ir.module import IRModule
from irtool.passes import run
from irtool.analysis.plan_check import check_plan
from irtool.core.diagnostics import DiagnosticError

MIB = 1 << 20
ALIGNMENT = 64
# Stage name -> the passes that take the previous stage's module to it.
STAGES = {"fused": "simplify-inference,fuse-ops", "lowered": "lower"}
HOIST = {"on": True, "off": False}
# Column key -> (title, algorithm, in-place and concat-in-place).
PLANS = {
    "tvm_greedy": ("tvm-greedy", "tvm-greedy", False),
    "greedy_by_size": ("greedy-by-size", "greedy-by-size", False),
    "greedy_best": ("greedy-best", "greedy-best", False),
    "best_reuse": ("best+reuse", "greedy-best", True),
}


def measure(model: str, stage: str, mod: IRModule, hoist: bool) -> dict[str, object]:
    """One row: the plans of `mod`'s `main`, each checked, in bytes (and seconds to plan)."""
    live = compute_liveness(mod, hoist_constants=hoist)
    lower = sum(live.lower_bound().values())
    reuse = plan_buffers(live, ALIGNMENT, in_place=True, concat_in_place=True)
    row: dict[str, object] = {"model": model, "stage": stage, "hoist": hoist, "steps": len(live.steps),
                              "tensors": len(live.planned()), "no_reuse_bytes": live.no_reuse_bytes(),
                              "lower_bound_bytes": lower, "hoisted_bytes": live.hoisted_bytes(),
                              "reuse_bound_bytes": sum(buffers_bound(reuse, len(live.steps)).values())}
    for key, (_, algorithm, both) in PLANS.items():
        started = time.perf_counter()
        plan = plan_memory(live, algorithm, ALIGNMENT, both, both)
        row[f"{key}_s"] = round(time.perf_counter() - started, 4)
        check_plan(live, plan)
        row[f"{key}_bytes"] = plan.workspace_bytes()
    for key in ("no_reuse", "reuse_bound", *PLANS):
        row[f"{key}_ratio"] = round(row[f"{key}_bytes"] / lower, 4) if lower else None  # type: ignore[operator]
    return row


def model_rows(model: str, stages: list[str], hoists: list[bool],
               timeline: Path | None) -> list[dict[str, object]]:
    mod = import_file(str(light_model_path(model)), embed_params=False).module
    rows = []
    for stage, passes in STAGES.items():  # every stage builds on the one before, so run them in order
        mod = run(mod, passes, verify_each=False)
        infer_types(mod)
        if stage in stages:
            rows.extend(measure(model, stage, mod, hoist) for hoist in hoists)
        if timeline is not None and stage == "fused":
            live = compute_liveness(mod)
            draw_timeline(build_report(live, plan_memory(live)), str(timeline),
                          f"{model}: greedy-by-size, constants hoisted")
        if stage == stages[-1]:
            break
    return rows


def timeline_path(base: Path, model: str, several: bool) -> Path:
    """`base` itself for one model; with several, the model's name before the suffix."""
    return base.with_name(f"{base.stem}-{model}{base.suffix or '.png'}") if several else base


def print_table(rows: list[dict[str, object]]) -> None:
    columns = [("no_reuse", "no-reuse"), *((k, title) for k, (title, _, _) in PLANS.items()),
               ("reuse_bound", "reuse bound")]
    print(f"{'model':<14}{'stage':<9}{'hoist':<6}{'steps':>6}{'lower bound':>14}"
          + "".join(f"{title:>21}" for _, title in columns) + f"{'hoisted':>13}{'gbs s':>7}")
    for r in rows:
        cells = "".join(f"{r[f'{k}_bytes'] / MIB:>9.2f} MiB {r[f'{k}_ratio']:>6.3f}x"  # type: ignore[operator]
                        for k, _ in columns)
        print(f"{r['model']:<14}{r['stage']:<9}{'on' if r['hoist'] else 'off':<6}{r['steps']:>6}"
              f"{r['lower_bound_bytes'] / MIB:>10.2f} MiB{cells}"  # type: ignore[operator]
              f"{r['hoisted_bytes'] / MIB:>9.2f} MiB{r['greedy_by_size_s']:>7.2f}")  # type: ignore[operator]
    print("(MiB and ratio to the plain lower bound; geometric mean / worst ratio per stage and hoisting)")
    for stage, hoist in dict.fromkeys((r["stage"], r["hoist"]) for r in rows):
        mine = [r for r in rows if r["stage"] == stage and r["hoist"] == hoist]
        summary = []
        for key, title in columns[1:]:
            ratios = [r[f"{key}_ratio"] for r in mine]
            geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))  # type: ignore[arg-type]
            summary.append(f"{title} {geo:.3f}/{max(ratios):.3f}")  # type: ignore[type-var]
        print(f"  {stage}, hoist {'on' if hoist else 'off'}: " + ", ".join(summary))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(LIGHT_MODELS),
                        help="comma-separated: " + ", ".join(LIGHT_MODELS))
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated: " + ", ".join(STAGES))
    parser.add_argument("--hoist", default="on,off", help="comma-separated: on, off (hoist constant-only steps)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--timeline", type=Path, metavar="FILE.png",
                        help="draw each model's greedy-by-size arena (needs matplotlib)")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    stages = [s for s in STAGES if s in args.stages.split(",")]
    hoists = [HOIST[h] for h in dict.fromkeys(args.hoist.split(",")) if h in HOIST]
    unknown = [m for m in models if m not in LIGHT_MODELS] + [s for s in args.stages.split(",") if s not in STAGES] \
        + [h for h in args.hoist.split(",") if h not in HOIST]
    if unknown or not stages or not hoists:
        parser.error(f"unknown model, stage or hoist value: {', '.join(unknown) or args.stages}")
    timeline = args.timeline
    if timeline is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("--timeline skipped: matplotlib is not installed (it is not a dependency of irtool; "
                  "pip install matplotlib)", file=sys.stderr)
            timeline = None
    rows = []
    for m in models:
        path = timeline_path(timeline, m, len(models) > 1) if timeline is not None else None
        try:
            rows.extend(model_rows(m, stages, hoists, path))
        except DiagnosticError as err:
            print(f"{m}: {err}", file=sys.stderr)
            return 1
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
