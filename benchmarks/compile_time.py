"""How long `irtool.build` takes from an imported ONNX model to a loaded native module (#16's
compile-time targets), split into the Python side and LLVM.

    python benchmarks/compile_time.py [--models resnet50,densenet121] [--threads 1,2] [--repeat 3]
                                      [--cache DIR] [--llvm]

Per model and thread count, `--repeat` builds, each cold, in a forked child process; each
reports its wall time and its CPU time (the child plus its forked compile workers, `getrusage`), and the CPU time of `prepare`
alone (lowering, memory planning, parallel loops: the Python side) measured in a separate call
before it. Wall time on a loaded 2-core host says more about the load than the code, so the
load average is printed with each row and CPU seconds are the figure to compare across runs;
the minimum over the repeats is reported. With `--cache DIR` each configuration is built once
cold (into an empty DIR/<model>-<threads>) and then `--repeat` times warm from that cache.

`--llvm` instead splits LLVM's share per kernel chunk (the modules `irtool.build` compiles in
parallel workers, `entry.CHUNK_BYTES` of IR text each): the IR text's size and the CPU seconds of parsing, `-O3` and code generation,
each the minimum over `--repeat` runs in this process, one chunk after the other.
"""

from __future__ import annotations

import argparse
import os
import resource
import struct
import sys
import tempfile
import time
from pathlib import Path

from harness import describe_host, load_average, thread_counts
import irtool
from irtool.codegen.entry import generate_module
from irtool.codegen.machine import optimize, parse, target_machine
from irtool.driver.prepare import prepare
from irtool.frontend.onnx import import_model
from irtool.ir.module import IRModule
from irtool.frontend.onnx_zoo import LIGHT_MODELS, light_model_path, with_logits_output
from irtool.target import TargetOptions


def cpu_seconds() -> float:
    """User + system time of this process and of its waited-for children (the compile workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed_build(module: IRModule, threads: int, cache: Path | None) -> tuple[float, float]:
    """Wall and CPU seconds of one `irtool.build`, in a forked child: a process keeps the engines
    it built by their IR, so a second build of the same module in this process would be a cache
    hit, not a build."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: build, report, and leave without running any teardown
        status = 1
        try:
            os.close(read)
            cpu, started = cpu_seconds(), time.perf_counter()
            irtool.build(module, threads=threads, cache_dir=cache)
            os.write(write, struct.pack("dd", time.perf_counter() - started, cpu_seconds() - cpu))
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or len(data) != 16:
        raise SystemExit(f"compile_time: the build of a child process failed (wait status {status})")
    wall, cpu = struct.unpack("dd", data)
    return wall, cpu


def prepare_cpu(module: IRModule, threads: int) -> float:
    started = time.process_time()
    prepare(module, TargetOptions(threads=threads))
    return time.process_time() - started


def llvm_rows(name: str, module: IRModule, threads: int, repeat: int) -> None:
    """Per kernel chunk of `module` as `irtool.build` splits it: IR bytes and the minimum CPU
    seconds of parse, optimisation and object code."""
    options = TargetOptions(threads=threads)
    generated = generate_module(prepare(module, options), "irtool", options, embed_constants=False, split=True)
    tm = target_machine(options, jit=True)
    for k, text in enumerate(generated.chunk_irs[1:], 1):
        times: list[tuple[float, float, float]] = []
        for _ in range(repeat):
            started = time.process_time()
            mod = parse(text, tm)
            parsed = time.process_time()
            optimize(mod, options, tm)
            optimized = time.process_time()
            tm.emit_object(mod)
            times.append((parsed - started, optimized - parsed, time.process_time() - optimized))
        parse_s, opt_s, codegen_s = (min(t[i] for t in times) for i in range(3))
        print(f"| {name} | {threads} | {k} | {len(text)} | {parse_s:.2f} | {opt_s:.2f} | {codegen_s:.2f} | "
              f"{load_average():.1f} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet50,densenet121", help="light zoo models (comma-separated)")
    ap.add_argument("--threads", type=thread_counts, default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", metavar="DIR", help="also build warm from an on-disk cache under DIR")
    ap.add_argument("--llvm", action="store_true", help="LLVM's CPU time per kernel chunk instead of builds")
    args = ap.parse_args()
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in LIGHT_MODELS]
    if unknown or args.repeat < 1:
        ap.error(f"unknown model(s) {', '.join(unknown)}" if unknown else "--repeat must be at least 1")
    import onnx
    print(describe_host().line())
    if args.llvm:
        print("| model | threads | chunk | IR bytes | parse CPU s | opt CPU s | codegen CPU s | load |")
        print("|---|---|---|---|---|---|---|---|")
    else:
        print("| model | threads | build | wall s (min) | CPU s (min) | prepare CPU s (min) | load |")
        print("|---|---|---|---|---|---|---|")
    for name in names:
        model, _ = with_logits_output(onnx.load(str(light_model_path(name))))
        module = import_model(model, embed_params=True, source=name).module
        for threads in args.threads:
            if args.llvm:
                llvm_rows(name, module, threads, args.repeat)
                continue
            kinds: list[tuple[str, Path | None]] = [("cold", None)]
            if args.cache:
                Path(args.cache).mkdir(parents=True, exist_ok=True)
                cache = Path(tempfile.mkdtemp(prefix=f"{name}-{threads}-", dir=args.cache))
                timed_build(module, threads, cache)   # fills it
                kinds.append(("warm (cache)", cache))
            for kind, cache in kinds:
                runs = [timed_build(module, threads, cache) for _ in range(args.repeat)]
                python = min(prepare_cpu(module, threads) for _ in range(args.repeat))
                print(f"| {name} | {threads} | {kind} | {min(w for w, _ in runs):.2f} | "
                      f"{min(c for _, c in runs):.2f} | {python:.2f} | {load_average():.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
