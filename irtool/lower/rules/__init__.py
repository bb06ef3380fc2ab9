"""TIR compute rules, one module per operator family; importing this package attaches them to
the registry's `OpDef.tir_compute` (the registry imports it after the definitions)."""

import irtool.ops.definitions  # noqa: F401  (the operators must exist before rules attach to them)
from irtool.lower.rules import broadcast, elementwise, nn, reduce, transform

__all__ = ["broadcast", "elementwise", "nn", "reduce", "transform"]
