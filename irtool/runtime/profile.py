"""Per-kernel timing of a compiled `main`, as TVM's debug executor reports it.

The module is compiled with its kernels exported (`generate_module(..., export_kernels=True)`);
the profiler then runs `main`'s steps itself, one ctypes call per kernel, on numpy buffers placed
exactly as `<prefix>_run` places them (`entry.layout_main`: the same workspace offsets, the same
pool for hoisted tensors), and times every call. A step's time is the median over `repeat`
passes through all steps in order (so caches see what they see in `_run`); the whole `_run` of
the same engine is timed alongside, so the sum of the steps can be checked against it. Hoisted
steps (what `_init` computes once) are timed once and listed apart. FLOP counts come from the
kernels' TIR (`kernel_flops`), so they hold for any schedule or layout. They count what a kernel
executes, not the operator's textbook count: a split reduction's final lane sums are work the
core does (a batch-1 dense adds 2 x lanes - 1 per output on top of 2K), and GFLOP/s is the
kernel's arithmetic rate.
"""

from __future__ import annotations

import ctypes
import functools
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from irtool.analysis.steps import COPY, Step
from irtool.codegen.entry import CONSTANTS, INPUTS, OUTPUTS, WORKSPACE, MainLayout, step_kernel
from irtool.ir import tir
from irtool.ops.registry import op_names
from irtool.runtime.buffers import aligned_empty, describe_status
from irtool.core.diagnostics import DiagnosticError

if TYPE_CHECKING:   # `NativeModule.profile` imports this module: no import back at run time
    from irtool.runtime.native import NativeModule

_FLOAT_ARITH = frozenset({"add", "sub", "mul", "div", "min", "max"})


def kernel_flops(func: tir.PrimFunc) -> int | None:
    """Floating-point operations one call of `func` performs: every float `+ - * / min max` and
    intrinsic, once per lane and per iteration of the loops around it (`fma` counts 2). Both
    sides of a `select` count; of an `if`, the larger. None when a loop's extent is not constant."""
    return _stmt_flops(func.body)


def _stmt_flops(body: tir.Stmt) -> int | None:
    total = 0
    stack: list[tuple[tir.Stmt, int]] = [(body, 1)]   # a statement, iterations of the loops around it
    while stack:
        node, times = stack.pop()
        if isinstance(node, tir.For):
            if not (isinstance(node.begin, tir.IntImm) and isinstance(node.end, tir.IntImm)):
                return None
            stack.append((node.body, times * max(node.end.value - node.begin.value, 0)))
        elif isinstance(node, tir.SeqStmt):
            stack.extend((s, times) for s in node.stmts)
        elif isinstance(node, tir.Allocate):
            stack.append((node.body, times))
        elif isinstance(node, tir.LetStmt):
            total += times * _expr_flops(node.value)
            stack.append((node.body, times))
        elif isinstance(node, tir.IfThenElse):
            # Branches nest only as deep as the kernel's own `if`s: recursion depth stays small.
            branches = [_stmt_flops(b) for b in (node.then_body, node.else_body) if b is not None]
            if any(b is None for b in branches):
                return None
            total += times * (_expr_flops(node.cond) + max(b for b in branches if b is not None))
        elif isinstance(node, (tir.BufferStore, tir.Evaluate)):
            total += times * _expr_flops(node.value)
    return total


def _expr_flops(expr: tir.PrimExpr) -> int:
    count = 0
    stack: list[tir.Node] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, tir.BinaryOp) and node.op in _FLOAT_ARITH and tir.is_float(node.dtype):
            count += tir.lanes_of(node.dtype)
        elif isinstance(node, tir.Call) and tir.is_float(node.dtype):
            count += tir.lanes_of(node.dtype) * (2 if node.name == "fma" else 1)
        if not isinstance(node, tir.BufferLoad):  # indices are integer arithmetic
            stack.extend(tir.children(node))
    return count


@dataclass
class StepTime:
    """One step of `main`: what it runs and how long one call takes (median, milliseconds)."""

    step: int
    kernel: str           # the primfn, or `copy`
    operators: str        # the fused operators, from the kernel's name
    shape: tuple[int, ...]
    ms: float
    flops: int | None = None

    @property
    def gflops(self) -> float | None:
        return self.flops / self.ms / 1e6 if self.flops and self.ms > 0 else None


@dataclass
class Profile:
    steps: list[StepTime]       # the steps of `_run`, in execution order
    init: list[StepTime]        # the hoisted steps `_init` runs once
    run_ms: float               # median of the whole `_run` (same engine, same inputs)
    outputs: list[np.ndarray] = field(default_factory=list)  # main's flattened results, step by step

    @property
    def total_ms(self) -> float:
        return sum(s.ms for s in self.steps)

    def table(self, top: int | None = None) -> str:
        """The steps slowest first (`top` of them), with their share of the sum, then the sums."""
        rows = sorted(self.steps, key=lambda s: -s.ms)
        total = self.total_ms or 1.0
        lines = [f"{'step':>5}  {'ms':>9}  {'%':>5}  {'GFLOP/s':>8}  {'shape':<22}  kernel  operators"]
        for s in rows[:top] if top else rows:
            rate = f"{s.gflops:8.1f}" if s.gflops is not None else f"{'':>8}"
            shape = "x".join(map(str, s.shape)) or "scalar"
            lines.append(f"{s.step:>5}  {s.ms:9.3f}  {100 * s.ms / total:5.1f}  {rate}  {shape:<22}  "
                         f"{s.kernel}  {s.operators}")
        if top and len(rows) > top:
            rest = sum(s.ms for s in rows[top:])
            lines.append(f"{'':>5}  {rest:9.3f}  {100 * rest / total:5.1f}  {'':>8}  {'':<22}  "
                         f"... {len(rows) - top} more steps")
        flops = sum(s.flops or 0 for s in self.steps)
        lines.append(f"sum of {len(self.steps)} steps {self.total_ms:.3f} ms ({flops / 1e9:.2f} GFLOP, "
                     f"{flops / max(self.total_ms, 1e-9) / 1e6:.1f} GFLOP/s); whole _run {self.run_ms:.3f} ms")
        if self.init:
            lines.append(f"_init (once): {len(self.init)} hoisted steps, {sum(s.ms for s in self.init):.3f} ms")
        return "\n".join(lines)


@functools.cache
def _op_spellings() -> dict[str, str]:
    """Registered operators by the way kernel names spell them (`nn.conv2d` → `nn_conv2d`)."""
    return {name.replace(".", "_"): name for name in op_names()}


def operators_of(kernel: str) -> str:
    """The operators a lowered kernel fuses, read back from its name (`fused_nn_conv2d_add_1` →
    `nn.conv2d+add`): longest registered spelling first; a name cut short ends in `...`."""
    text = re.sub(r"_\d+$", "", kernel.removeprefix("fused_"))
    spellings = _op_spellings()
    longest = max(map(len, spellings), default=0)
    found: list[str] = []
    at = 0
    while at < len(text):
        for end in range(min(len(text), at + longest), at, -1):
            if text[at:end] in spellings and (end == len(text) or text[end] == "_"):
                found.append(spellings[text[at:end]])
                at = end + 1
                break
        else:
            found.append(text[at:] + "...")
            break
    return "+".join(found)


class _StepRunner:
    """The buffers of one `_run` (inputs, outputs, workspace, pool, constants) and a ready-made
    call for each step."""

    def __init__(self, native: NativeModule, arrays: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        layout: MainLayout | None = native.layout
        if layout is None:
            raise DiagnosticError("irtool profile: per-kernel times are measured for a dataflow `main` (the AOT "
                                  "path); this `main` has control flow or calls (docs/native-relay.md)",
                                  getattr(native.mod.functions.get("main"), "span", None))
        self.layout = layout
        live = layout.live
        self.workspace = aligned_empty((max(layout.workspace_bytes, 1),), np.uint8)
        self.pool = aligned_empty((max(layout.pool_bytes, 1),), np.uint8)
        self.constants: dict[int, np.ndarray] = {}
        for t, const in live.constants.items():
            held = aligned_empty(const.data.shape, const.data.dtype)
            held[...] = const.data
            self.constants[t] = held
        self.arrays, self.outputs = arrays, outputs
        self.native = native

    def address(self, t: int) -> int:
        loc = self.layout.locations[t]
        if loc.region == INPUTS:
            base = self.arrays[loc.index]
        elif loc.region == OUTPUTS:
            base = self.outputs[loc.index]
        elif loc.region == CONSTANTS:
            base = self.constants[loc.index]
        else:
            base = self.workspace if loc.region == WORKSPACE else self.pool
        return int(base.ctypes.data) + loc.offset

    def call(self, step: Step) -> Callable[[], int]:
        if step.kind == COPY:
            live = self.layout.live
            pairs = [(self.address(d), self.address(s), live.tensors[d].nbytes)
                     for s, d in zip(step.inputs, step.outputs)]

            def copy() -> int:
                for dst, src, n in pairs:
                    ctypes.memmove(dst, src, n)
                return 0
            return copy
        name, _ = step_kernel(self.native.mod, step)
        fn = self.native.kernel(name)
        addresses = [self.address(t) for t in list(step.inputs) + list(step.outputs)]
        return lambda: int(fn(*addresses))

    def finish(self) -> None:
        """The copies `_run` does at its end: results that no kernel wrote in place."""
        live = self.layout.live
        for k, t in self.layout.copied_results():
            ctypes.memmove(self.outputs[k].ctypes.data, self.address(t), live.tensors[t].nbytes)


def _timed(fn: Callable[[], int], native: NativeModule) -> float:
    started = time.perf_counter()
    status = fn()
    elapsed = (time.perf_counter() - started) * 1e3
    if status != 0:
        raise DiagnosticError(f"native kernel failed: {describe_status(status, native.abi)}")
    return elapsed


def profile_native(native: NativeModule, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None,
                   repeat: int = 10) -> Profile:
    """Times every step of `native` (built with `export_kernels=True`) on the given inputs."""
    if repeat < 1:
        raise DiagnosticError(f"the repeat count must be at least 1, got {repeat}")
    arrays = native.bind_inputs(tuple(args), kwargs or {})
    outputs = [aligned_empty(spec.shape, spec.dtype) for spec in native.abi.outputs]
    runner = _StepRunner(native, arrays, outputs)
    layout, mod = runner.layout, native.mod
    live = layout.live

    def describe(step: Step, ms: float) -> StepTime:
        shape = tuple(int(d) for d in live.tensors[step.outputs[0]].ttype.shape) if step.outputs else ()
        if step.kind == COPY:
            return StepTime(step.index, "copy", "device_copy", shape, ms, None)
        name, func = step_kernel(mod, step)
        return StepTime(step.index, name, operators_of(name), shape, ms, kernel_flops(func))

    init = [describe(s, _timed(runner.call(s), native)) for s in layout.init_steps()]
    steps = layout.run_steps()
    calls = [runner.call(s) for s in steps]
    times: list[list[float]] = [[] for _ in steps]
    for rnd in range(repeat + 1):    # the first pass warms up and is not counted
        for k, fn in enumerate(calls):
            elapsed = _timed(fn, native)
            if rnd:
                times[k].append(elapsed)
    runner.finish()
    run_outputs = [aligned_empty(spec.shape, spec.dtype) for spec in native.abi.outputs]
    native.run_into(run_outputs, *args, **(kwargs or {}))
    run_times = []
    for _ in range(repeat):
        started = time.perf_counter()
        native.run_into(run_outputs, *args, **(kwargs or {}))
        run_times.append((time.perf_counter() - started) * 1e3)
    return Profile([describe(s, statistics.median(t)) for s, t in zip(steps, times)], init,
                   statistics.median(run_times), outputs)
