"""LLVM code generation: lowered, planned modules (TIR kernels + an AOT `main`) to LLVM IR,
assembly, object code and shared libraries. It only emits: `irtool.driver` runs the passes, the
memory planning and the TIR passes first. docs/codegen.md describes the ABI and the options."""

from __future__ import annotations

from irtool.codegen.compile import compile_module
from irtool.codegen.entry import ABI, GeneratedModule, TensorSpec, generate_module
from irtool.target import TargetOptions

__all__ = ["ABI", "GeneratedModule", "TargetOptions", "TensorSpec", "compile_module", "generate_module"]
