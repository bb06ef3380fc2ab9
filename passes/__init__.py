"""Named passes and the pass manager (installed as `irtool.passes`).

`catalog.BUILTIN` names every built-in pass and its module; a pass's module is imported when a
pipeline first names it (or `--list-passes` lists them all).
"""

from __future__ import annotations

from irtool.ir.module import IRModule
from irtool.passes.base import ModulePass
from irtool.passes.catalog import PASS_REGISTRY, get_pass, pass_names, register_pass
from irtool.passes.manager import list_passes, parse_pipeline, run_pipeline, verify


def run(mod: IRModule, pipeline: str, **kw: object) -> IRModule:
    """Run a pipeline string on a module: `run(mod, "inline,fuse-ops{max-depth=64}")`.

    Keyword arguments are those of `run_pipeline` (`verify_each`, `timing`, `err`, ...).
    """
    return run_pipeline(mod, parse_pipeline(pipeline), **kw)  # type: ignore[arg-type]


__all__ = ["PASS_REGISTRY", "ModulePass", "get_pass", "list_passes", "parse_pipeline", "pass_names", "register_pass",
           "run", "run_pipeline", "verify"]
