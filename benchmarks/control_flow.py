"""Control flow compiled natively (docs/native-relay.md): the cost per call against the
interpreter and against a dataflow-only twin on the AOT path, recursion depth, and the heap over
10,000 calls. Times are CPU time of the process (all its threads): on a loaded host wall time
mostly measures how long a new thread waits for a core.

    python benchmarks/control_flow.py [--repeat N] [--json OUT]

- per call: `<prefix>_run` called through ctypes on prepared buffers (no Python-side checks; the
  ctypes call itself is the `empty` row), median of `--repeat` batches of 200 calls. The twin of
  a program computes the same thing without control flow (the loop unrolled, the branch taken,
  the call inlined), so it runs on the AOT path;
- recursion depth: `sum_to(n)` (non-tail recursion: `_run` reruns on a thread with a 1 GiB stack
  once the caller's 512 KiB budget is exceeded) and `step(n)` (tail recursion: a loop), native
  (median of 3 calls) and interpreted (one call, up to n = 100,000);
- heap: bytes in use (glibc `mallinfo2`) after 10,000 calls of a program that builds a list,
  closures and references, minus before.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import irtool
from irtool.eval.interpreter import run_function
from irtool.runtime.native import NativeModule
from irtool.syntax.parser import parse

HEADER = '#[version = "0.0.5"]\n'
CELL = "tanh(add(nn.dense({h}, %w), %x))"
ARGS = "%x: Tensor[(1, 64), float32], %w: Tensor[(64, 64), float32], %h: Tensor[(1, 64), float32]"
RET = "Tensor[(1, 64), float32]"
STEPS = 16

PROGRAMS: dict[str, tuple[str, str | None]] = {
    # name: (program, its dataflow twin or None)
    "empty": (f"def @main(%x: float32) -> float32 {{ %x }}", None),
    f"rnn loop, {STEPS} steps": (
        f"def @loop(%i: int32, %h: {RET}, %x: {RET}, %w: Tensor[(64, 64), float32]) -> {RET} {{\n"
        f"  if (%i == 0) {{ %h }} else {{ @loop(%i - 1, {CELL.format(h='%h')}, %x, %w) }}\n}}\n"
        f"def @main({ARGS}) -> {RET} {{ @loop({STEPS}, %h, %x, %w) }}",
        f"def @main({ARGS}) -> {RET} {{ " + "".join(f"let %s{k} = {CELL.format(h='%h' if k == 0 else f'%s{k - 1}')}; "
                                                      for k in range(STEPS)) + f"%s{STEPS - 1} }}"),
    "if between two cells": (
        f"def @main({ARGS}, %c: bool) -> {RET} {{ if (%c) {{ {CELL.format(h='%h')} }} else {{ %h }} }}",
        f"def @main({ARGS}, %c: bool) -> {RET} {{ {CELL.format(h='%h')} }}"),
    "two calls of a cell": (
        f"def @cell({ARGS}) -> {RET} {{ {CELL.format(h='%h')} }}\n"
        f"def @main({ARGS}) -> {RET} {{ @cell(%x, %w, @cell(%x, %w, %h)) }}",
        f"def @main({ARGS}) -> {RET} {{ let %s = {CELL.format(h='%h')}; {CELL.format(h='%s')} }}"),
    f"list of {STEPS} cells, folded by a closure": (
        "type List[A] { Cons(A, List[A]), Nil }\n"
        f"def @build(%n: int32, %acc: List[{RET}], %x: {RET}) -> List[{RET}] {{\n"
        f"  if (%n == 0) {{ %acc }} else {{ @build(%n - 1, Cons(%x, %acc), %x) }}\n}}\n"
        f"def @fold(%f: fn ({RET}, {RET}) -> {RET}, %l: List[{RET}], %acc: {RET}) -> {RET} {{\n"
        "  match (%l) { Cons(%hd, %tl) => @fold(%f, %tl, %f(%acc, %hd)), Nil => %acc }\n}\n"
        f"def @main({ARGS}) -> {RET} {{\n"
        f"  @fold(fn (%a: {RET}, %b: {RET}) -> {RET} {{ {CELL.format(h='add(%a, %b)')} }}, @build({STEPS}, Nil, %x), %h)\n}}",
        None),
}

SUM_TO = ("def @sum_to(%n: int32) -> int32 { if (%n == 0) { 0 } else { %n + @sum_to(%n - 1) } }\n"
          "def @main(%n: int32) -> int32 { @sum_to(%n) }")
# s <- s * s + i stepped n times (wrapping int32): a loop LLVM can neither unroll into a closed
# form nor fold (a linear recurrence `s * a + c` it folds eight steps at a time).
LOOP = ("def @step(%i: int32, %s: int32) -> int32 {\n"
        "  if (%i == 0) { %s } else { @step(%i - 1, %s * %s + %i) }\n}\n"
        "def @main(%n: int32) -> int32 { @step(%n, 7) }")


def _loop(n: int) -> int:
    s = 7
    for i in range(n, 0, -1):
        s = (s * s + i) % 2**32
    return int(np.array(s, np.uint32).view(np.int32))


def _inputs(mod: Any) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out: dict[str, np.ndarray] = {}
    for p in mod["main"].params:
        t = p.type_annotation
        shape = tuple(int(d) for d in t.shape)
        out[p.name_hint] = (np.array(True) if t.dtype == "bool" else
                            (rng.standard_normal(shape) * (0.1 if p.name_hint == "w" else 1)).astype(t.dtype))
    return out


def _raw_call(native: NativeModule, inputs: dict[str, np.ndarray]) -> Callable[[], int]:
    """`_run` through ctypes on buffers bound once (what a C caller pays, plus the ctypes call)."""
    arrays = native.bind_inputs((), inputs)
    outs = [np.empty(s.shape, s.dtype) for s in native.abi.outputs]
    ins = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
    out = (ctypes.c_void_p * max(len(outs), 1))(*[o.ctypes.data for o in outs])
    ws = native._workspace.ctypes.data
    keep = (arrays, outs, ins, out)

    def call() -> int:
        return native._run(ctypes.addressof(keep[2]), ctypes.addressof(keep[3]), ws)
    return call


def _per_call_us(fn: Callable[[], Any], repeat: int, batch: int = 200) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(batch):
            fn()
        times.append((time.process_time() - t0) / batch * 1e6)
    return statistics.median(times)


def _once_ms(fn: Callable[[], Any], runs: int = 1) -> float:
    """The median CPU time of `runs` calls, in ms."""
    times = []
    for _ in range(runs):
        t0 = time.process_time()
        fn()
        times.append((time.process_time() - t0) * 1e3)
    return statistics.median(times)


def per_call(repeat: int) -> list[dict[str, Any]]:
    rows = []
    for name, (text, twin) in PROGRAMS.items():
        mod = parse(HEADER + text, "bench.relay")
        inputs = _inputs(mod)
        native = irtool.build(mod)
        row: dict[str, Any] = {"program": name, "native_us": _per_call_us(_raw_call(native, inputs), repeat)}
        row["interp_us"] = _per_call_us(lambda: run_function(mod, inputs), max(3, repeat // 4), batch=5)
        if twin is not None:
            twin_mod = parse(HEADER + twin, "twin.relay")
            twin_native = irtool.build(twin_mod)
            assert "_fn_main" not in twin_native.ir   # the twin is on the AOT path
            np.testing.assert_allclose(twin_native(**inputs), native(**inputs), rtol=1e-5, atol=1e-6)
            row["twin_us"] = _per_call_us(_raw_call(twin_native, inputs), repeat)
        rows.append(row)
    return rows


def recursion() -> list[dict[str, Any]]:
    sum_to = parse(HEADER + SUM_TO, "sum_to.relay")
    step = parse(HEADER + LOOP, "step.relay")
    native_sum, native_step = irtool.build(sum_to), irtool.build(step)
    rows = []
    for n in (10, 1_000, 10_000, 100_000, 1_000_000):
        arg = np.array(n, np.int32)
        row: dict[str, Any] = {"n": n, "sum_to_native_ms": _once_ms(lambda: native_sum(arg), 3),
                               "step_native_ms": _once_ms(lambda: native_step(arg), 3)}
        assert int(native_sum(arg)) == np.array(n * (n + 1) // 2 % 2**32, np.uint32).view(np.int32)
        assert int(native_step(arg)) == _loop(n)
        if n <= 100_000:
            row["sum_to_interp_ms"] = _once_ms(lambda: run_function(sum_to, [arg]))
            row["step_interp_ms"] = _once_ms(lambda: run_function(step, [arg]))
        rows.append(row)
    return rows


def heap_growth() -> int | None:
    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = MallInfo2
    except (AttributeError, OSError):
        return None

    def in_use() -> int:
        info = libc.mallinfo2()
        return int(info.uordblks + info.hblkhd)
    name = f"list of {STEPS} cells, folded by a closure"
    mod = parse(HEADER + PROGRAMS[name][0], "bench.relay")
    call = _raw_call(irtool.build(mod), _inputs(mod))
    call()
    before = in_use()
    for _ in range(10_000):
        assert call() == 0
    return in_use() - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    calls = per_call(args.repeat)
    print("| program | interpreter µs | native µs | dataflow twin (AOT) µs |   (CPU time per call)")
    print("|---|---|---|---|")
    for r in calls:
        twin = f"{r['twin_us']:.2f}" if "twin_us" in r else "—"
        print(f"| {r['program']} | {r['interp_us']:.0f} | {r['native_us']:.2f} | {twin} |")
    depth = recursion()
    print("\n| n | sum_to native ms | sum_to interpreter ms | step native ms | step interpreter ms |")
    print("|---|---|---|---|---|")
    for r in depth:
        print(f"| {r['n']:,} | {r['sum_to_native_ms']:.3f} | {r.get('sum_to_interp_ms', float('nan')):.1f} | "
              f"{r['step_native_ms']:.3f} | {r.get('step_interp_ms', float('nan')):.1f} |")
    growth = heap_growth()
    print(f"\nheap growth over 10,000 calls: {growth} bytes")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"per_call": calls, "recursion": depth, "heap_growth": growth}, f, indent=1)


if __name__ == "__main__":
    main()
