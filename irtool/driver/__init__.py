"""The build driver: from any module to what code generation takes, and the entry points that
compile. `prepare` runs the lowering pipeline when needed, plans memory when `main` has no plan,
and applies the TIR passes the target asks for (parallel loops for more than one thread);
`irtool.build`, `irtool-llc` and `irtool-run --backend=native` all go through it."""

from __future__ import annotations

from irtool.driver.native import build, build_kernels, profile
from irtool.driver.prepare import DEFAULT_PIPELINE, ensure_lowered, parallelize_kernels, plan_if_missing, prepare

__all__ = ["DEFAULT_PIPELINE", "build", "build_kernels", "ensure_lowered", "parallelize_kernels", "plan_if_missing",
           "prepare", "profile"]
