"""Named passes and the pass manager (installed as `irtool.passes`).

Every module in this package other than `base` and `manager` defines passes; importing the
package imports them all so that `@register_pass` has filled the registry.
"""

from __future__ import annotations

import importlib
import pkgutil

from irtool.ir.module import IRModule
from irtool.passes.base import PASS_REGISTRY, ModulePass, register_pass
from irtool.passes.manager import list_passes, parse_pipeline, run_pipeline, verify

for _info in pkgutil.iter_modules(__path__):
    if _info.name not in ("base", "manager"):
        importlib.import_module(f"{__name__}.{_info.name}")


def run(mod: IRModule, pipeline: str, **kw: object) -> IRModule:
    """Run a pipeline string on a module: `run(mod, "inline,fuse-ops{max-depth=64}")`.

    Keyword arguments are those of `run_pipeline` (`verify_each`, `timing`, `err`, ...).
    """
    return run_pipeline(mod, parse_pipeline(pipeline), **kw)  # type: ignore[arg-type]


__all__ = ["PASS_REGISTRY", "ModulePass", "list_passes", "parse_pipeline", "register_pass", "run",
           "run_pipeline", "verify"]
