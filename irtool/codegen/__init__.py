"""LLVM code generation: lowered modules (TIR kernels + an AOT `main`) to LLVM IR, assembly,
object code and shared libraries. docs/codegen.md describes the ABI and the options."""

from __future__ import annotations

from irtool.codegen.compile import DEFAULT_PIPELINE, compile_module, ensure_lowered, is_lowered
from irtool.codegen.entry import ABI, GeneratedModule, TensorSpec, generate_module
from irtool.target import TargetOptions

__all__ = ["ABI", "DEFAULT_PIPELINE", "GeneratedModule", "TargetOptions", "TensorSpec", "compile_module",
           "ensure_lowered", "generate_module", "is_lowered"]
