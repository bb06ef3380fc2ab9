"""Calling compiled modules from Python: `irtool.build(mod)` → a callable over numpy arrays."""

from __future__ import annotations

from irtool.runtime.native import KernelLibrary, NativeModule, aligned_empty, build, build_kernels

__all__ = ["KernelLibrary", "NativeModule", "aligned_empty", "build", "build_kernels"]
