"""The entry points that compile in process: `build` (`irtool.build`), `build_kernels` and
`profile`, each preparing the module first (`irtool.driver.prepare`)."""

from __future__ import annotations

import os
from typing import Any, TextIO

from irtool.core.progress import Progress
from irtool.driver.prepare import DEFAULT_PIPELINE, parallelize_kernels, prepare
from irtool.ir.module import IRModule
from irtool.runtime.native import KernelLibrary, NativeModule
from irtool.runtime.profile import Profile, profile_native
from irtool.target import TargetOptions


def build(mod: IRModule, opt_level: int = 3, *, cpu: str = "native", triple: str | None = None,
          features: str | None = None, fast_math: bool = False,
          pipeline: str | None = DEFAULT_PIPELINE, threads: int = 1, cache_dir: str | os.PathLike[str] | None = None,
          progress: TextIO | None = None) -> NativeModule:
    """Compile `mod`'s `main` (lowering it with `pipeline` first when it is not lowered); `threads`
    > 1 runs each kernel's outermost safe loop on that many threads. `cache_dir`: keep compiled
    kernels there and reuse them (`irtool.codegen.object_cache`). A build that takes more than a
    second reports its stages on `progress` (stderr by default) when that is a terminal."""
    options = TargetOptions(cpu=cpu, triple=triple, features=features, opt_level=opt_level, fast_math=fast_math,
                            threads=threads)
    report = Progress(progress)
    try:
        report.start("lowering")
        prepared = prepare(mod, options, pipeline)
        return NativeModule(prepared, options, cache_dir=None if cache_dir is None else os.fspath(cache_dir),
                            progress=report)
    finally:
        report.close()


def build_kernels(mod: IRModule, opt_level: int = 3, *, fast_math: bool = False, threads: int = 1) -> KernelLibrary:
    """The primfns of `mod` compiled one by one (for testing kernels against the TIR interpreter)."""
    return KernelLibrary(parallelize_kernels(mod, threads),
                         TargetOptions(opt_level=opt_level, fast_math=fast_math, threads=threads))


def profile(mod: IRModule, *args: Any, repeat: int = 10, opt_level: int = 3, fast_math: bool = False,
            pipeline: str | None = DEFAULT_PIPELINE, threads: int = 1, **kwargs: Any) -> Profile:
    """Compiles `mod` (lowering it first when needed) with its kernels exported and profiles it
    on inputs given like `NativeModule.run`'s."""
    options = TargetOptions(opt_level=opt_level, fast_math=fast_math, threads=threads)
    native = NativeModule(prepare(mod, options, pipeline), options, export_kernels=True)
    return profile_native(native, args, kwargs, repeat)
