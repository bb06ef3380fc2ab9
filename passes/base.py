"""What a pass is: a small named class whose dataclass fields are its typed options."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from irtool.ir.module import IRModule


@dataclasses.dataclass
class ModulePass:
    """A module-to-module transformation.

    Subclasses are dataclasses; each field is an option, written in pipelines with dashes
    (`fuse-ops{max-depth=64}` sets the field `max_depth`).
    """

    name: ClassVar[str]
    description: ClassVar[str]

    def apply(self, mod: IRModule) -> IRModule:
        raise NotImplementedError

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return list(dataclasses.fields(cls))


# Passes added at run time by `register_pass` (out-of-tree passes, tests' own). The built-in
# passes are not here: `irtool.passes.catalog` names them and imports each when first asked for.
PASS_REGISTRY: dict[str, type[ModulePass]] = {}


def register_pass(cls: type[ModulePass]) -> type[ModulePass]:
    """Make an out-of-tree pass available by its `name` in pipelines (call it explicitly, or use
    it as a class decorator in the module that defines the pass)."""
    from irtool.passes.catalog import BUILTIN
    if cls.name in PASS_REGISTRY or cls.name in BUILTIN:
        raise ValueError(f"pass {cls.name} registered twice")
    PASS_REGISTRY[cls.name] = cls
    return cls
