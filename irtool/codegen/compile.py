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
from collections.abc import Iterable, Iterator
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


def compile_chunks(texts: list[str], options: TargetOptions, cache_dir: str | os.PathLike[str] | None = None,
                   progress: Progress | None = None) -> list[bytes]:
    """Object code of each of the module `texts`: from the object cache in `cache_dir` when it
    holds them (`irtool.codegen.object_cache`), otherwise compiled (and then stored there)."""
    cache = ObjectCache(cache_dir, options) if cache_dir is not None else None
    objects = [cache.load(text) if cache is not None else None for text in texts]
    missing = [k for k, obj in enumerate(objects) if obj is None]
    compiled = list(_compile_parallel([texts[k] for k in missing], options, progress))
    for k, obj in zip(missing, compiled):
        objects[k] = obj
        if cache is not None:
            cache.store(texts[k], obj)
    return objects  # type: ignore[return-value]


def _compile_parallel(texts: list[str], options: TargetOptions, progress: Progress | None) -> Iterator[bytes]:
    """Each text optimised and compiled, in parallel worker processes: llvmlite runs every LLVM
    call under one lock, so threads would take turns. The workers are forked (started in
    milliseconds, LLVM already initialised); without `fork`, or when the caller runs other Python
    threads (forking them is unsafe), the texts compile one after the other."""
    if progress is not None:
        progress.start("compiling", len(texts))
    workers = min(len(texts), compile_threads())
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
        yield from _counted((_object_code(text, options) for text in texts), progress)
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        yield from _counted(pool.map(_object_code, texts, [options] * len(texts)), progress)


def _counted(objects: Iterable[bytes], progress: Progress | None) -> Iterator[bytes]:
    for obj in objects:
        if progress is not None:
            progress.advance()
        yield obj


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
