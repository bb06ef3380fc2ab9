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
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass

import llvmlite.binding as llvm

from irtool.codegen.entry import GeneratedModule, generate_module
from irtool.codegen.machine import parse_and_optimize, target_machine
from irtool.codegen.object_cache import ObjectCache
from irtool.core.progress import Progress
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


class ChunkCompiler:
    """Object code of module texts handed in one by one (`submit`, `generate_module`'s `sink`),
    each compiled as it arrives: the build generates the remaining kernels meanwhile. Texts the
    object cache in `cache_dir` holds are read from it (`irtool.codegen.object_cache`), the
    others compiled (and then stored there). The compilations run in worker processes forked at
    the first text: llvmlite runs every LLVM call under one lock, so threads would take turns;
    forked workers start in milliseconds with LLVM initialised. Without `fork`, on one CPU, or
    when the caller runs other Python threads (forking them is unsafe), `objects` compiles the
    texts one after the other."""

    def __init__(self, options: TargetOptions, cache_dir: str | os.PathLike[str] | None = None,
                 progress: Progress | None = None) -> None:
        self.options, self.progress = options, progress
        self.cache = ObjectCache(cache_dir, options) if cache_dir is not None else None
        self.texts: list[str] = []
        self.pending: list[bytes | Future[bytes] | None] = []   # cached, compiling, or still to compile
        workers = compile_threads()
        parallel = workers > 1 and "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) if parallel else None

    def close(self) -> None:
        """Stops the workers (a compilation still running finishes first)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def submit(self, text: str) -> None:
        obj = self.cache.load(text) if self.cache is not None else None
        if obj is None and self.pool is not None:
            self.pending.append(self.pool.submit(_object_code, text, self.options))
        else:
            self.pending.append(obj)
        self.texts.append(text)

    def objects(self) -> list[bytes]:
        """The object of every text submitted, in order (waiting for the workers)."""
        if self.progress is not None:
            self.progress.start("compiling", len(self.texts))
        out: list[bytes] = []
        for text, pending in zip(self.texts, self.pending):
            if isinstance(pending, bytes):
                obj = pending
            else:
                obj = _object_code(text, self.options) if pending is None else pending.result()
                if self.cache is not None:
                    self.cache.store(text, obj)
            out.append(obj)
            if self.progress is not None:
                self.progress.advance()
        return out


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
