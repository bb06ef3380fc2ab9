"""What every benchmark that times irtool against a baseline shares: the alternating loop, the
ratio statistics, and a description of the host the figures come from.

Timing all baseline runs and then all irtool runs lets a shared host's load drift land on one
side only (the same model once measured 0.67× and 1.53× within an hour). `alternate` instead
calls each contender once per round, A/B/A/B after a warm-up, so each round's times were taken
under the same conditions; `versus` then reports the median of the per-round ratios and the ratio
of the fastest runs, which two honest estimates agree on when the host is quiet. `Host` names the
CPU (`lscpu`) and what LLVM generates code for on it (CPU name and the vector ISA features that
decide the kernels' tiles), since a ratio measured on an AVX2 core says little about an AVX-512
one.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# LLVM feature name -> how the tables print it, in the order they print; the features that
# change which kernels irtool and onnxruntime run.
ISA_FEATURES = {
    "fma": "FMA", "avx2": "AVX2", "avx512f": "AVX-512F", "avx512bw": "AVX-512BW",
    "avx512vl": "AVX-512VL", "avx512vnni": "AVX-512 VNNI", "avxvnni": "AVX-VNNI",
    "avx512bf16": "AVX-512 BF16", "avx512fp16": "AVX-512 FP16", "amx-tile": "AMX",
}


# How long each side's untimed lead-in lasts with threads (`alternate`'s `lead_in_ms`): longer
# than the 40-50 ms onnxruntime's idle workers were seen spinning after a series of runs.
LEAD_IN_MS = 80.0


def alternate(calls: Mapping[str, Callable[[], object]], rounds: int, *, warmup: int = 1, lead_in: int = 0,
              lead_in_ms: float = 0.0, clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Milliseconds of each call in each of `rounds` rounds; a round calls every entry once, in
    the mapping's order, after `warmup` untimed rounds (the first call of a native module also
    runs its `_init`).

    `lead_in` untimed calls of an entry come right before each of its timed calls. A threaded
    contender can leave its workers busy after it returns (onnxruntime's intra-op threads spin
    for a while by default) and so slow whoever runs next; the lead-in absorbs that tail, so each
    timed call starts on a machine its own previous call left, as it would in a serving loop.
    `lead_in_ms` extends each lead-in with more untimed calls until it has lasted that long:
    onnxruntime's workers spin on for 40-50 ms after a series of runs (about 10 ms after a single
    one; measured on a 2-CPU Zen 5 host), longer than a small model's call, so a lead-in of one
    call would leave the timed call sharing a core with that spinning thread. A pause instead would let the machine go idle, and the first runs
    after 30 ms idle took up to 1.6x as long (CPU frequency, caches), for either runtime."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    if lead_in < 0:
        raise ValueError(f"lead_in must be at least 0, got {lead_in}")
    if lead_in_ms < 0:
        raise ValueError(f"lead_in_ms must be at least 0, got {lead_in_ms}")
    for _ in range(warmup):
        for call in calls.values():
            call()
    times: dict[str, list[float]] = {label: [] for label in calls}
    for _ in range(rounds):
        for label, call in calls.items():
            began = clock()
            for _ in range(lead_in):
                call()
            while (clock() - began) * 1e3 < lead_in_ms:
                call()
            started = clock()
            call()
            times[label].append((clock() - started) * 1e3)
    return times


def medians(times: Mapping[str, list[float]]) -> dict[str, float]:
    """The median of each entry of `alternate`'s result."""
    return {label: statistics.median(values) for label, values in times.items()}


def median_ms(call: Callable[[], object], rounds: int, *, warmup: int = 1) -> float:
    """The median time of one call on its own (a stage that has no baseline to alternate with)."""
    return statistics.median(alternate({"call": call}, rounds, warmup=warmup)["call"])


@dataclass(frozen=True)
class Versus:
    """One contender's times against the baseline's, round by round (`alternate`'s lists)."""

    ms: float              # median of the contender's times
    baseline_ms: float     # median of the baseline's
    min_ms: float
    baseline_min_ms: float
    ratio: float           # median over rounds of contender / baseline (> 1: the contender is slower)
    ratio_min: float       # fastest contender run / fastest baseline run
    rounds: int


def versus(times: list[float], baseline: list[float]) -> Versus:
    if len(times) != len(baseline) or not times:
        raise ValueError(f"need the same non-zero number of rounds, got {len(times)} and {len(baseline)}")
    return Versus(ms=statistics.median(times), baseline_ms=statistics.median(baseline),
                  min_ms=min(times), baseline_min_ms=min(baseline),
                  ratio=statistics.median(t / b for t, b in zip(times, baseline)),
                  ratio_min=min(times) / min(baseline), rounds=len(times))


def geomean(values: Iterable[float]) -> float | None:
    """The geometric mean (None for no values): the mean of ratios that treats 2× and 0.5× alike."""
    items = list(values)
    if not items:
        return None
    return math.exp(sum(math.log(v) for v in items) / len(items))


def thread_counts(text: str) -> list[int]:
    """`--threads 1,2` as an argparse type: distinct counts ≥ 1, in the order given."""
    counts: list[int] = []
    for item in text.split(","):
        try:
            count = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated thread counts, got '{text}'") from None
        if count < 1:
            raise argparse.ArgumentTypeError(f"a thread count must be at least 1, got {count}")
        if count not in counts:
            counts.append(count)
    return counts


def lscpu_model_name(text: str) -> str | None:
    """The `Model name:` of `lscpu`'s output (or `model name` of /proc/cpuinfo)."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "model name" and value.strip():
            return value.strip()
    return None


def isa_labels(features: str) -> list[str]:
    """The enabled vector features of an LLVM feature string (`+avx2,-avx512f,...`), as labels."""
    enabled = {flag[1:] for flag in features.split(",") if flag.startswith("+")}
    return [label for name, label in ISA_FEATURES.items() if name in enabled]


def _cpu_model_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30,
                             env={**os.environ, "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    name = lscpu_model_name(out)
    if name is None:
        try:
            name = lscpu_model_name(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
        except OSError:
            name = None
    return name or platform.processor() or "unknown CPU"


@dataclass(frozen=True)
class Host:
    """The machine a table was measured on."""

    cpu: str                # lscpu's model name
    llvm_cpu: str           # what LLVM calls the host CPU (the schedules' target)
    isa: tuple[str, ...]    # labels of ISA_FEATURES the host has
    cpus: int               # logical CPUs
    load_average: float     # 1-minute load average when the run started

    def line(self, load_at_end: float | None = None) -> str:
        load = f"load average {self.load_average:.2f}"
        if load_at_end is not None:
            load += f" at the start, {load_at_end:.2f} at the end"
        return (f"host: {self.cpu} (lscpu), LLVM host CPU {self.llvm_cpu}: {', '.join(self.isa) or 'no AVX'}; "
                f"{self.cpus} CPUs; {load}")

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "isa": list(self.isa)}


def load_average() -> float:
    return os.getloadavg()[0]


def describe_host() -> Host:
    from irtool.target import TargetOptions
    _, cpu, features = TargetOptions().resolved()
    return Host(cpu=_cpu_model_name(), llvm_cpu=cpu, isa=tuple(isa_labels(features)),
                cpus=os.cpu_count() or 1, load_average=load_average())
