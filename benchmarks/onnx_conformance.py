"""The ONNX conformance node cases through irtool (interpreter and native) and onnxruntime, in one run.

    python benchmarks/onnx_conformance.py [--only OPTYPE,...] [--no-native] [--json OUT] [--quiet]

Every case `onnx.backend.test.case.node.collect_testcases` generates (`--only Conv,Pad`: those
with a node of one of these types) runs through irtool's `InterpreterBackend` and `NativeBackend`
and through onnxruntime's own ONNX backend (`onnxruntime.backend`, CPU), each compared with the
case's expected outputs by ONNX's runner (`Runner.assert_similar_outputs`: shape, dtype, values
within the case's rtol/atol). Per runner a case is `pass`, `fail` (a wrong answer),
`unsupported` (irtool: the importer's refusal; onnxruntime: `prepare` fails, e.g. a missing
kernel), or `crash` (any other exception). One row per case, then a
summary: the counts per runner and irtool's passes as a percentage of onnxruntime's. `--json`
writes the rows (with each non-pass's message) and the summary.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

RUNNERS = ("interpreter", "native", "onnxruntime")
STATUSES = ("pass", "fail", "unsupported", "crash")


def _array(value: Any) -> np.ndarray:
    import onnx
    from onnx import numpy_helper
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def compare(case: Any, run: Callable[[list[Any]], Sequence[Any]]) -> tuple[str, str]:
    """(status, message) of `run` over the case's data sets; an exception is the caller's to sort."""
    from onnx.backend.test.runner import Runner
    for inputs, expected in case.data_sets:
        got = run([_array(v) if not isinstance(v, list) else v for v in inputs])
        try:
            Runner.assert_similar_outputs([_array(v) if not isinstance(v, list) else v for v in expected], got,
                                          rtol=case.rtol, atol=case.atol)
        except AssertionError as exc:
            return "fail", " ".join(str(exc).split())[:200]
    return "pass", ""


def run_irtool(backend: Any, case: Any) -> tuple[str, str]:
    from irtool.core.diagnostics import DiagnosticError
    from irtool.frontend.onnx import ImportFailure
    try:
        rep = backend.prepare(case.model)
        return compare(case, rep.run)
    except ImportFailure as exc:  # at prepare, or at run for inputs bound as constants
        return "unsupported", " ".join(str(exc).split("\n", 1)[-1].split())[:200]
    except DiagnosticError as exc:
        return "crash", f"DiagnosticError: {exc}"[:200]
    except Exception as exc:  # noqa: BLE001 -- the benchmark records every failure
        return "crash", f"{type(exc).__name__}: {exc}"[:200]


def run_onnxruntime(case: Any) -> tuple[str, str]:
    import onnxruntime.backend
    try:
        rep = onnxruntime.backend.prepare(case.model, "CPU")
    except Exception as exc:  # noqa: BLE001 -- onnxruntime raises its own types
        return "unsupported", " ".join(str(exc).split())[:200]
    try:
        return compare(case, rep.run)
    except Exception as exc:  # noqa: BLE001
        return "crash", f"{type(exc).__name__}: {exc}"[:200]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="only cases with a node of these op types (comma-separated)")
    ap.add_argument("--no-native", action="store_true", help="skip the native backend (the slow column)")
    ap.add_argument("--json", metavar="OUT", help="write the rows and the summary as JSON")
    ap.add_argument("--quiet", action="store_true", help="print the summary only")
    args = ap.parse_args(argv)

    import onnxruntime
    from onnx.backend.test.case.node import collect_testcases
    from irtool.frontend.onnx_backend import InterpreterBackend, NativeBackend
    onnxruntime.set_default_logger_severity(3)  # its warnings about missing kernels would fill the table
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    only = set(args.only.split(",")) if args.only else None
    if only is not None:
        cases = [c for c in cases if only & {n.op_type for n in c.model.graph.node}]
    runners: dict[str, Callable[[Any], tuple[str, str]]] = {
        "interpreter": lambda c: run_irtool(InterpreterBackend, c),
        "native": lambda c: run_irtool(NativeBackend, c),
        "onnxruntime": run_onnxruntime,
    }
    if args.no_native:
        del runners["native"]
    rows: list[dict[str, Any]] = []
    seconds: Counter[str] = Counter()
    if not args.quiet:
        print(f"{'case':<70} " + " ".join(f"{r:<12}" for r in runners))
    for case in sorted(cases, key=lambda c: c.name):
        row: dict[str, Any] = {"case": case.name, "op_types": sorted({n.op_type for n in case.model.graph.node})}
        for name, runner in runners.items():
            started = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                status, message = runner(case)
            seconds[name] += time.perf_counter() - started
            row[name] = status
            if message:
                row[f"{name}_message"] = message
        rows.append(row)
        if not args.quiet:
            print(f"{case.name:<70} " + " ".join(f"{row[r]:<12}" for r in runners), flush=True)
    counts = {r: {s: sum(row[r] == s for row in rows) for s in STATUSES} for r in runners}
    reference = counts["onnxruntime"]["pass"]
    summary = {"cases": len(rows), "counts": counts, "seconds": {r: round(seconds[r], 1) for r in runners},
               "percent_of_onnxruntime": {r: round(100 * counts[r]["pass"] / reference, 1) if reference else None
                                          for r in runners if r != "onnxruntime"}}
    parts = [f"{r} " + ", ".join(f"{counts[r][s]} {s}" for s in STATUSES) for r in runners]
    ratios = ", ".join(f"{r} {p} %" for r, p in summary["percent_of_onnxruntime"].items())
    print(f"summary: {len(rows)} cases; " + "; ".join(parts) + f"; irtool passes as a share of onnxruntime's: {ratios}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
