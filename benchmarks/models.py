"""The `onnx` package's light model-zoo graphs end to end: import, compile, run, against onnxruntime.

    python benchmarks/models.py [--models resnet50,squeezenet,...] [--repeat 5] [--json OUT]
                                [--no-native] [--threads N]

One row per model: import seconds, native compile seconds (`irtool.build`), irtool native latency
(median of --repeat after a warm-up), onnxruntime latency with one intra-op thread measured in
the same run (`--threads N`: N threads for both, irtool's parallel loops and onnxruntime's pool),
their ratio, the planned workspace arena against the liveness lower bound
(`irtool.analysis.memory_report` on the lowered module), and the static pool that `_init` fills
once with what depends only on the weights (`pool_bytes`: the zoo's `full` weights and their
repacked forms). Inputs are the ONNX test runner's ramp (`arange(n)/n`); each native result is
checked against onnxruntime's (logits by relative error) and a mismatch is reported in the
`check` column. A stage that fails (an operator the native
path cannot lower yet) leaves its columns empty and names the error.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from irtool.frontend.onnx import import_model
from irtool.frontend.onnx_zoo import (LIGHT_MODELS, light_model_path, onnxruntime_session,
                                      relative_error, runner_input, with_logits_output)
from irtool.core.diagnostics import DiagnosticError

SHORT = {"alexnet": "bvlc_alexnet", "zfnet": "zfnet512", "densenet": "densenet121"}


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def bench_model(name: str, repeat: int, native: bool, threads: int = 1) -> dict[str, Any]:
    import onnx
    row: dict[str, Any] = {"model": name, "import_s": None, "compile_s": None, "irtool_ms": None,
                           "onnxruntime_ms": None, "ratio": None, "arena_bytes": None,
                           "lower_bound_bytes": None, "pool_bytes": None, "check": None, "error": None}
    model, logits = with_logits_output(onnx.load(str(light_model_path(name))))
    started = time.perf_counter()
    imported = import_model(model, embed_params=True, source=name)
    row["import_s"] = round(time.perf_counter() - started, 3)
    (input_name,) = imported.inputs
    shape = tuple(int(d) for d in imported.module["main"].params[0].type_annotation.shape)
    x = runner_input(shape)
    session = onnxruntime_session(model, threads=threads)
    feed = {session.get_inputs()[0].name: x}
    row["onnxruntime_ms"] = round(median_ms(lambda: session.run(None, feed), repeat), 3)
    if not native:
        return row
    try:
        import irtool
        from irtool.analysis.memory_report import memory_report
        from irtool.driver import ensure_lowered
        started = time.perf_counter()
        built = irtool.build(imported.module, threads=threads)
        row["compile_s"] = round(time.perf_counter() - started, 3)
        row["pool_bytes"] = built.abi.pool_bytes
        ours = built(**{input_name: x})
        row["irtool_ms"] = round(median_ms(lambda: built(**{input_name: x}), repeat), 3)
        row["ratio"] = round(row["irtool_ms"] / row["onnxruntime_ms"], 2)
        theirs = session.run(None, feed)
        index = 1 if logits else 0
        error = relative_error(np.asarray(ours[index]), theirs[index])
        row["check"] = f"{'logits' if logits else 'output'} rel.err {error:.1e}" + ("" if error < 1e-4 else " MISMATCH")
        report = memory_report(ensure_lowered(imported.module))
        row["arena_bytes"] = int(report["arena_bytes"])  # type: ignore[call-overload]
        row["lower_bound_bytes"] = int(report["lower_bound_bytes"])  # type: ignore[call-overload]
    except DiagnosticError as exc:
        row["error"] = str(exc).splitlines()[0]
    return row


def format_table(rows: list[dict[str, Any]]) -> str:
    columns = ["model", "import_s", "compile_s", "irtool_ms", "onnxruntime_ms", "ratio", "arena_bytes",
               "lower_bound_bytes", "pool_bytes", "check", "error"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join("" if row[c] is None else str(row[c]) for c in columns) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(LIGHT_MODELS),
                    help="comma-separated light model names (default: all nine)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per measurement (median)")
    ap.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    ap.add_argument("--no-native", action="store_true", help="import and onnxruntime only")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads for irtool's parallel loops and onnxruntime's intra-op pool (default: 1)")
    args = ap.parse_args(argv)
    names = [SHORT.get(m.strip(), m.strip()) for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in LIGHT_MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(LIGHT_MODELS)}")
    rows = []
    for name in names:
        rows.append(bench_model(name, args.repeat, not args.no_native, args.threads))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(format_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
