"""What one parallel loop costs on top of its work: a kernel whose only loop is `parallel(0, 64)`
over a one-add body, compiled for 1 thread (serial code) and for N, called through ctypes.

    python benchmarks/parallel_launch.py [--threads 2] [--calls 200] [--repeat 30]

A round times --calls calls of each build in turn (`harness.alternate`, A/B/A/B); the rows give
microseconds per call, median and minimum over --repeat rounds, and the difference to the
serial build, which is the cost of handing a loop to the pool (waking or reaching the workers,
waiting for the last chunk). Before the persistent pool it was a thread start per loop.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from harness import alternate, describe_host, load_average
from irtool.driver import build_kernels
from irtool.runtime import aligned_empty
from irtool.syntax.parser import parse_module

KERNEL = """#[version = "0.0.5"]
primfn @f(%a: Buffer[(64), float32], %out: Buffer[(64), float32]) {
  for %i in parallel(0, 64) {
    %out[%i] = %a[%i] + 1f;
  }
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="threads of the parallel build (default: 2)")
    parser.add_argument("--calls", type=int, default=200, help="kernel calls per timed round (default: 200)")
    parser.add_argument("--repeat", type=int, default=30, help="timed rounds (default: 30)")
    args = parser.parse_args()
    host = describe_host()
    mod = parse_module(KERNEL, "launch.tir")
    a, out = aligned_empty((64,), np.float32), aligned_empty((64,), np.float32)
    a[...] = 1
    kernels = {f"threads={t}": build_kernels(mod, 2, threads=t)["f"] for t in (1, args.threads)}

    def batch(kernel: object) -> object:
        return lambda: [kernel(a, out) for _ in range(args.calls)]  # type: ignore[operator]

    times = alternate({label: batch(k) for label, k in kernels.items()}, args.repeat, warmup=2)
    per_call = {label: [ms * 1e3 / args.calls for ms in t] for label, t in times.items()}
    serial = per_call["threads=1"]
    print(host.line(load_average()))
    print("| build | median µs per call | min µs per call | loop cost, median / min µs |")
    print("|---|---|---|---|")
    for label, us in per_call.items():
        cost = f"{statistics.median(us) - statistics.median(serial):.1f} / {min(us) - min(serial):.1f}"
        print(f"| {label} | {statistics.median(us):.1f} | {min(us):.1f} | {cost} |")


if __name__ == "__main__":
    main()
