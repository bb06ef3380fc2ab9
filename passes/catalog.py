"""Every built-in pass by name, and the module that defines it: an explicit table read lazily
(as xDSL's `get_all_passes`), so parsing a pipeline imports only the passes it names and no
pass registers itself as a side effect of being imported."""

from __future__ import annotations

import importlib

from irtool.passes.base import ModulePass

# pass name -> (module of `irtool.passes`, class)
BUILTIN: dict[str, tuple[str, str]] = {
    "alter-layout": ("alter_layout", "AlterLayoutPass"),
    "bind-params": ("bind_params", "BindParamsPass"),
    "dead-code": ("dead_code", "DeadCodePass"),
    "eliminate-common-subexpr": ("eliminate_common_subexpr", "EliminateCommonSubexprPass"),
    "fold-constant": ("fold_constant", "FoldConstantPass"),
    "fuse-ops": ("fuse_ops", "FuseOpsPass"),
    "infer-type": ("infer_type", "InferTypePass"),
    "inline": ("inline", "InlinePass"),
    "lower": ("lower", "LowerPass"),
    "plan-devices": ("plan_devices", "PlanDevicesPass"),
    "plan-memory": ("plan_memory", "PlanMemoryPass"),
    "simplify-inference": ("simplify_inference", "SimplifyInferencePass"),
    "tir-flatten-buffers": ("tir_flatten_buffers", "TirFlattenBuffersPass"),
    "tir-parallelize": ("tir_loops", "TirParallelizePass"),
    "tir-reorder": ("tir_loops", "TirReorderPass"),
    "tir-simplify": ("tir_simplify", "TirSimplifyPass"),
    "tir-split": ("tir_loops", "TirSplitPass"),
    "tir-unroll": ("tir_loops", "TirUnrollPass"),
    "tir-vectorize": ("tir_loops", "TirVectorizePass"),
    "to-a-normal-form": ("normal_form", "ToANormalFormPass"),
    "to-graph-normal-form": ("normal_form", "ToGraphNormalFormPass"),
    "verify-memory-plan": ("verify_memory_plan", "VerifyMemoryPlanPass"),
}

# Passes added at run time by `register_pass` (out-of-tree passes, tests' own).
PASS_REGISTRY: dict[str, type[ModulePass]] = {}


def register_pass(cls: type[ModulePass]) -> type[ModulePass]:
    """Make an out-of-tree pass available by its `name` in pipelines (call it explicitly, or use
    it as a class decorator in the module that defines the pass)."""
    if cls.name in PASS_REGISTRY or cls.name in BUILTIN:
        raise ValueError(f"pass {cls.name} registered twice")
    PASS_REGISTRY[cls.name] = cls
    return cls


def pass_names() -> list[str]:
    """The names of every pass, built-in or registered, sorted."""
    return sorted({*BUILTIN, *PASS_REGISTRY})


def get_pass(name: str) -> type[ModulePass] | None:
    """The pass class called `name` (its module imported on first use), or None."""
    cls = PASS_REGISTRY.get(name)
    if cls is None and name in BUILTIN:
        module, attr = BUILTIN[name]
        cls = getattr(importlib.import_module(f"irtool.passes.{module}"), attr)
    return cls
