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
