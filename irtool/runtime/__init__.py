"""Calling compiled modules from Python: `NativeModule` (a prepared module's `main` as a callable
over numpy arrays), `KernelLibrary` (its primfns one by one), the per-kernel profiler. Building
one from any module is `irtool.build` (`irtool.driver`)."""

from __future__ import annotations

from irtool.runtime.buffers import aligned_empty
from irtool.runtime.native import KernelLibrary, NativeModule

__all__ = ["KernelLibrary", "NativeModule", "aligned_empty"]
