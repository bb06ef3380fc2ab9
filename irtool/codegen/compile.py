"""From a lowered, planned IRModule to LLVM artifacts: generate IR, optimise, emit.

`compile_module` is the one path `irtool-llc` and the runtime share, so what a C user links and
what Python calls are the same code; `irtool.driver` prepares the module it takes.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import tempfile
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import llvmlite.binding as llvm

from irtool.codegen.entry import GeneratedModule, generate_module
from irtool.codegen.machine import parse_and_optimize, target_machine
from irtool.target import TargetOptions
from irtool.ir.module import IRModule
from irtool.core.diagnostics import DiagnosticError

@dataclass
class CompiledArtifacts:
    generated: GeneratedModule
    llvm_module: llvm.ModuleRef
    target: llvm.TargetMachine


def compile_module(mod: IRModule | GeneratedModule, prefix: str, options: TargetOptions,
                   jit: bool = False) -> CompiledArtifacts:
    """Generated (unless given already), parsed and optimised (not yet turned into machine code)."""
    generated = mod if isinstance(mod, GeneratedModule) else generate_module(mod, prefix, options)
    tm = target_machine(options, jit=jit)
    return CompiledArtifacts(generated, parse_and_optimize(generated.ir, options, tm), tm)


def _object_code(text: str, options: TargetOptions) -> bytes:
    tm = target_machine(options, jit=True)
    return tm.emit_object(parse_and_optimize(text, options, tm))


def compile_chunks(texts: list[str], options: TargetOptions) -> list[bytes]:
    """Object code of each of the module `texts`, optimised and compiled in parallel worker
    processes: llvmlite runs every LLVM call under one lock, so threads would take turns. The
    workers are forked (started in milliseconds, LLVM already initialised); without `fork`, or
    when the caller runs other Python threads (forking them is unsafe), the chunks compile one
    after the other."""
    workers = min(len(texts), compile_threads())
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
        return [_object_code(text, options) for text in texts]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(_object_code, texts, [options] * len(texts)))


def compile_threads() -> int:
    """Parallel compilations `irtool.build` runs: the CPUs this process may use."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def emit_llvm(art: CompiledArtifacts) -> str:
    return str(art.llvm_module)


def emit_asm(art: CompiledArtifacts) -> str:
    return art.target.emit_assembly(art.llvm_module)


def emit_object(art: CompiledArtifacts) -> bytes:
    return art.target.emit_object(art.llvm_module)


def link_shared(obj: bytes, path: str, cc: str | None = None) -> None:
    """A shared library from one object, linked by the system C compiler (with libm)."""
    compiler = cc or os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory(prefix="irtool-llc-") as tmp:
        obj_path = os.path.join(tmp, "module.o")
        with open(obj_path, "wb") as f:
            f.write(obj)
        try:
            proc = subprocess.run([compiler, "-shared", "-o", path, obj_path, "-lm"], capture_output=True, text=True,
                                  check=False)
        except OSError as exc:
            raise DiagnosticError(f"cannot run the C compiler `{compiler}` to link a shared library: {exc}") from None
        if proc.returncode != 0:
            raise DiagnosticError(f"`{compiler} -shared` failed: {proc.stderr.strip()}")
