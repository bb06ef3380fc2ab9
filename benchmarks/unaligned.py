"""What unaligned caller buffers cost: one compiled zoo model, run on 64-byte-aligned input and
output buffers and on buffers 4 bytes past a 64-byte boundary (what `malloc` plus a float gives),
A/B alternated in one process.

    python benchmarks/unaligned.py [--models squeezenet,resnet50,shufflenet] [--repeat 15]

The C ABI asks only for element alignment, so the kernels reading the input and writing the
output use unaligned vector moves whatever the pointers are; this measures what misaligned data
costs on top (cache-line splits). Per model: the median and the minimum CPU time of `run_into`
(`time.process_time`: time the process waits for a shared core does not count) for each layout,
--repeat calls each, alternated ABAB after one warm-up call of each; the cost from the medians
and from the minima; and a check that both layouts give bit-identical outputs.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np

from harness import alternate, describe_host
from irtool.frontend.onnx import import_model
from irtool.frontend.onnx_zoo import light_model_path, runner_input, with_logits_output
from irtool.runtime import aligned_empty

SHORT = {"alexnet": "bvlc_alexnet", "zfnet": "zfnet512", "densenet": "densenet121"}


def offset_empty(shape: tuple[int, ...], dtype: str, offset: int) -> np.ndarray:
    """An uninitialised C-contiguous array starting `offset` bytes past a 64-byte boundary."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    raw = aligned_empty((nbytes + 64,), np.uint8)
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def bench_model(name: str, repeat: int) -> dict[str, Any]:
    import onnx
    import irtool
    model, _ = with_logits_output(onnx.load(str(light_model_path(name))))
    imported = import_model(model, embed_params=True, source=name)
    (input_name,) = imported.inputs
    built = irtool.build(imported.module)
    spec = built.abi.inputs[0]
    layouts = {}
    for label, offset in (("aligned", 0), ("offset4", 4)):
        x = offset_empty(spec.shape, spec.dtype, offset)
        x[...] = runner_input(spec.shape, spec.dtype)
        outs = [offset_empty(o.shape, o.dtype, offset) for o in built.abi.outputs]
        assert (x.ctypes.data % 64, outs[0].ctypes.data % 64) == (offset, offset)
        layouts[label] = (x, outs)
    times = alternate({label: lambda x=x, outs=outs: built.run_into(outs, **{input_name: x})
                       for label, (x, outs) in layouts.items()}, repeat, clock=time.process_time)
    same = all(np.array_equal(a, b) for a, b in zip(layouts["aligned"][1], layouts["offset4"][1]))
    aligned, offset4 = (statistics.median(times[k]) for k in ("aligned", "offset4"))
    best_aligned, best_offset4 = (min(times[k]) for k in ("aligned", "offset4"))
    return {"model": name, "aligned_ms": round(aligned, 3), "offset4_ms": round(offset4, 3),
            "cost": f"{(offset4 / aligned - 1) * 100:+.1f} %", "min_aligned_ms": round(best_aligned, 3),
            "min_offset4_ms": round(best_offset4, 3), "min_cost": f"{(best_offset4 / best_aligned - 1) * 100:+.1f} %",
            "identical": same}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="squeezenet,resnet50,shufflenet")
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args(argv)
    host = describe_host()
    rows = [bench_model(SHORT.get(m, m), args.repeat) for m in args.models.split(",") if m]
    print(host.line())
    print("| model | aligned ms (median / min) | offset by 4 ms (median / min) | cost (median / min) "
          "| outputs identical |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['aligned_ms']} / {r['min_aligned_ms']} | {r['offset4_ms']} / "
              f"{r['min_offset4_ms']} | {r['cost']} / {r['min_cost']} | {r['identical']} |")
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
