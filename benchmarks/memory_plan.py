"""Memory plans of the nine ONNX light model-zoo graphs: no-reuse, TVM's greedy, greedy-by-size,
greedy-best, the reuse options, and the liveness lower bound.

Each `onnx/backend/test/data/light/*.onnx` graph is imported (weights as parameters, not
planned), run through `simplify-inference,fuse-ops` (stage `fused`) and then `lower` (stage
`lowered`), and the liveness of its `main` is planned by every planner. Every plan is checked by
the independent checker (`check_plan`) before it is counted.

    python benchmarks/memory_plan.py [--models densenet121,inception_v2] [--stages fused,lowered] [--json OUT]

Columns: MiB and the ratio to the plain lower bound (max over steps of the bytes live, no
in-place reuse). `best+reuse` is greedy-best with in-place and concatenate-in-place, which may go
below that bound; after `lower` it changes nothing yet, because lowered kernels do not say which
Relay operators they run (element-wise? a concatenation?). Weights are ConstantOfShape in these
graphs and are imported as `full` steps computed at run time, so they are planned too: that is
most of the AlexNet/ZFNet/VGG-19 arenas, and why Inception v2 and DenseNet-121's bounds are a
little above the anchors' (3.91 vs 3.83 MiB, 7.00 vs 6.89 MiB). Anchors (reference/onnx-zoo-anchors.md, the same graphs fused TVM's way): TVM's
greedy is 1.29x the bound (geometric mean), 1.75x worst (Inception v2); greedy-by-size 1.11x on
DenseNet-121 and the bound elsewhere.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from irtool.analysis.liveness import compute_liveness
from irtool.analysis.memory_plan import plan_memory
from irtool.analysis.typecheck import infer_types
from irtool.frontend.onnx import import_file
from irtool.frontend.onnx_zoo import LIGHT_MODELS, light_model_path
from irtool.ir.module import IRModule
from irtool.passes import run
from irtool.passes.verify_memory_plan import check_plan

MIB = 1 << 20
# Stage name -> the passes that take the previous stage's module to it.
STAGES = {"fused": "simplify-inference,fuse-ops", "lowered": "lower"}
# Column key -> (title, algorithm, in-place and concat-in-place).
PLANS = {
    "tvm_greedy": ("tvm-greedy", "tvm-greedy", False),
    "greedy_by_size": ("greedy-by-size", "greedy-by-size", False),
    "greedy_best": ("greedy-best", "greedy-best", False),
    "best_reuse": ("best+reuse", "greedy-best", True),
}


def measure(model: str, stage: str, mod: IRModule, pipeline_s: float) -> dict[str, object]:
    """One row: the plans of `mod`'s `main`, each checked, in bytes."""
    live = compute_liveness(mod)
    lower = sum(live.lower_bound().values())
    row: dict[str, object] = {"model": model, "stage": stage, "steps": len(live.steps),
                              "tensors": len(live.planned()), "pipeline_s": round(pipeline_s, 3),
                              "no_reuse_bytes": live.no_reuse_bytes(), "lower_bound_bytes": lower}
    for key, (_, algorithm, reuse) in PLANS.items():
        started = time.perf_counter()
        plan = plan_memory(live, algorithm, 64, reuse, reuse)
        check_plan(live, plan)
        row[f"{key}_s"] = round(time.perf_counter() - started, 4)
        row[f"{key}_bytes"] = plan.workspace_bytes()
    for key in ("no_reuse", *PLANS):
        row[f"{key}_ratio"] = round(row[f"{key}_bytes"] / lower, 4) if lower else None
    return row


def model_rows(model: str, stages: list[str]) -> list[dict[str, object]]:
    started = time.perf_counter()
    mod = import_file(str(light_model_path(model)), embed_params=False).module
    rows = []
    for stage, passes in STAGES.items():  # every stage builds on the one before, so run them in order
        mod = run(mod, passes, verify_each=False)
        infer_types(mod)
        if stage in stages:
            rows.append(measure(model, stage, mod, time.perf_counter() - started))
        if stage == stages[-1]:
            break
    return rows


def print_table(rows: list[dict[str, object]]) -> None:
    columns = [("no_reuse", "no-reuse"), *((k, title) for k, (title, _, _) in PLANS.items())]
    print(f"{'model':<14}{'stage':<9}{'steps':>6}{'lower bound':>14}"
          + "".join(f"{title:>21}" for _, title in columns))
    for r in rows:
        cells = "".join(f"{r[f'{k}_bytes'] / MIB:>9.2f} MiB {r[f'{k}_ratio']:>6.3f}x" for k, _ in columns)
        print(f"{r['model']:<14}{r['stage']:<9}{r['steps']:>6}{r['lower_bound_bytes'] / MIB:>10.2f} MiB{cells}")
    print("(MiB and ratio to the plain lower bound; geometric mean / worst ratio per stage)")
    for stage in dict.fromkeys(r["stage"] for r in rows):
        mine = [r for r in rows if r["stage"] == stage]
        summary = []
        for key, title in columns[1:]:
            ratios = [r[f"{key}_ratio"] for r in mine]
            geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            summary.append(f"{title} {geo:.3f}/{max(ratios):.3f}")
        print(f"  {stage}: " + ", ".join(summary))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(LIGHT_MODELS),
                        help="comma-separated: " + ", ".join(LIGHT_MODELS))
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated: " + ", ".join(STAGES))
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    stages = [s for s in STAGES if s in args.stages.split(",")]
    unknown = [m for m in models if m not in LIGHT_MODELS] + \
        [s for s in args.stages.split(",") if s not in STAGES]
    if unknown or not stages:
        parser.error(f"unknown model or stage: {', '.join(unknown) or args.stages}")
    rows = [row for m in models for row in model_rows(m, stages)]
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
