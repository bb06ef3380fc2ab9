"""The `onnx` package's light model-zoo graphs end to end: import, compile, run, against onnxruntime.

    python benchmarks/models.py [--models resnet50,squeezenet,...] [--repeat 15] [--warmup 2]
                                [--threads 1,2] [--json OUT] [--no-native]

One row per model and thread count: import seconds, native compile seconds (`irtool.build`),
irtool's and onnxruntime's latency, the planned workspace arena against the liveness lower bound
(`irtool.analysis.memory_report` on the lowered module), and the static pool that `_init` fills
once with what depends only on the weights (`pool_bytes`). `--threads N,M`: each count for both,
irtool's parallel loops (`threads=`) and onnxruntime's intra-op pool (one inter-op thread).
The two run alternately (`harness.alternate`: A/B/A/B, --repeat rounds after --warmup), so
load from other processes hits both alike (with threads, each timed run comes after 80 ms of
untimed runs of the same side: a serving loop's steady state, without the other runtime's
spinning workers); the latencies are medians, `ratio` is the median of
the per-round ratios irtool / onnxruntime and `ratio_min` that of the fastest runs; the table
ends with their geometric means per thread count and names the host (CPU, LLVM's CPU and ISA,
load average). Inputs are the ONNX test runner's ramp (`arange(n)/n`); each native result is
checked against onnxruntime's (logits by relative error) and a mismatch is reported in the
`check` column. A stage that fails (an operator the native path cannot lower yet) leaves its
columns empty and names the error.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from harness import LEAD_IN_MS, alternate, describe_host, geomean, load_average, median_ms, thread_counts, versus  # noqa: E402
from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.frontend.onnx_zoo import (LIGHT_MODELS, light_model_path, onnxruntime_session,  # noqa: E402
                                      relative_error, runner_input, with_logits_output)

SHORT = {"alexnet": "bvlc_alexnet", "zfnet": "zfnet512", "densenet": "densenet121"}
COLUMNS = ["model", "threads", "import_s", "compile_s", "irtool_ms", "onnxruntime_ms", "ratio", "ratio_min",
           "arena_bytes", "lower_bound_bytes", "pool_bytes", "check", "error"]


def bench_model(name: str, repeat: int, warmup: int, native: bool, threads: list[int]) -> list[dict[str, Any]]:
    """One row per thread count; the import and the memory report are shared by the rows."""
    import onnx
    model, logits = with_logits_output(onnx.load(str(light_model_path(name))))
    started = time.perf_counter()
    imported = import_model(model, embed_params=True, source=name)
    import_s = round(time.perf_counter() - started, 3)
    (input_name,) = imported.inputs
    shape = tuple(int(d) for d in imported.module["main"].params[0].type_annotation.shape)
    x = runner_input(shape)
    memory: dict[str, Any] = {"arena_bytes": None, "lower_bound_bytes": None}
    rows = []
    for count in threads:
        row: dict[str, Any] = {c: None for c in COLUMNS} | {"model": name, "threads": count, "import_s": import_s,
                                                            **memory}
        rows.append(row)
        session = onnxruntime_session(model, threads=count)
        feed = {session.get_inputs()[0].name: x}
        run_theirs = lambda: session.run(None, feed)  # noqa: E731
        if not native:
            row["onnxruntime_ms"] = round(median_ms(run_theirs, repeat, warmup=warmup), 3)
            continue
        try:
            import irtool
            started = time.perf_counter()
            built = irtool.build(imported.module, threads=count)
            row["compile_s"] = round(time.perf_counter() - started, 3)
            row["pool_bytes"] = built.abi.pool_bytes
            # With threads, each side's timed run follows 80 ms of untimed runs of its own, so
            # neither runs while the other's workers still spin (harness.alternate's `lead_in_ms`).
            times = alternate({"irtool": lambda: built(**{input_name: x}), "onnxruntime": run_theirs},
                              repeat, warmup=warmup, lead_in=1 if count > 1 else 0,
                              lead_in_ms=LEAD_IN_MS if count > 1 else 0.0)
            result = versus(times["irtool"], times["onnxruntime"])
            row.update(irtool_ms=round(result.ms, 3), onnxruntime_ms=round(result.baseline_ms, 3),
                       ratio=round(result.ratio, 3), ratio_min=round(result.ratio_min, 3))
            index = 1 if logits else 0
            error = relative_error(np.asarray(built(**{input_name: x})[index]), run_theirs()[index])
            row["check"] = (f"{'logits' if logits else 'output'} rel.err {error:.1e}"
                            + ("" if error < 1e-4 else " MISMATCH"))
            if memory["arena_bytes"] is None:
                from irtool.analysis.memory_report import memory_report
                from irtool.driver import ensure_lowered
                report = memory_report(ensure_lowered(imported.module))
                memory.update(arena_bytes=int(report["arena_bytes"]),  # type: ignore[call-overload]
                              lower_bound_bytes=int(report["lower_bound_bytes"]))  # type: ignore[call-overload]
                row.update(memory)
        except DiagnosticError as exc:
            row["error"] = str(exc).splitlines()[0]
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[int, dict[str, float | None]]:
    """Per thread count, the geometric means of both ratios over the rows that have one."""
    out: dict[int, dict[str, float | None]] = {}
    for count in dict.fromkeys(row["threads"] for row in rows):
        mine = [row for row in rows if row["threads"] == count and row["ratio"] is not None]
        out[count] = {"models": len(mine), "geomean_ratio": geomean(r["ratio"] for r in mine),
                      "geomean_ratio_min": geomean(r["ratio_min"] for r in mine)}
    return out


def format_table(rows: list[dict[str, Any]], means: dict[int, dict[str, float | None]], host_line: str) -> str:
    lines = [host_line, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join("" if row[c] is None else str(row[c]) for c in COLUMNS) + " |")
    for count, mean in means.items():
        if mean["geomean_ratio"] is not None:
            lines.append(f"| **geomean** ({mean['models']} models) | {count} | | | | | "
                         f"**{mean['geomean_ratio']:.3f}** | {mean['geomean_ratio_min']:.3f} |" + " |" * 5)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(LIGHT_MODELS),
                    help="comma-separated light model names (default: all nine)")
    ap.add_argument("--repeat", type=int, default=15, help="timed A/B rounds per measurement (default: 15)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default: 2)")
    ap.add_argument("--json", metavar="OUT", help="also write the host, rows and geometric means as JSON")
    ap.add_argument("--no-native", action="store_true", help="import and onnxruntime only")
    ap.add_argument("--threads", type=thread_counts, default=[1],
                    help="comma-separated thread counts for irtool's parallel loops and onnxruntime's "
                         "intra-op pool, e.g. 1,2 (default: 1)")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0:
        ap.error("--repeat must be at least 1 and --warmup at least 0")
    names = [SHORT.get(m.strip(), m.strip()) for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in LIGHT_MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(LIGHT_MODELS)}")
    host = describe_host()
    print(host.line(), file=sys.stderr, flush=True)
    rows: list[dict[str, Any]] = []
    for name in names:
        for row in bench_model(name, args.repeat, args.warmup, not args.no_native, args.threads):
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    means = summary(rows)
    load_end = load_average()
    print(format_table(rows, means, host.line(load_end)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"host": host.as_json() | {"load_average_end": load_end}, "rows": rows,
                       "geomean": {str(k): v for k, v in means.items()}}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
