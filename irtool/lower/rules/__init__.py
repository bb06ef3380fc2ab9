"""TIR compute rules, one module per operator family; importing this package attaches them to
the registry's `OpDef.tir_compute` (the registry imports it after the definitions)."""

from irtool.lower.rules import broadcast, elementwise, nn, reduce, transform

__all__ = ["broadcast", "elementwise", "nn", "reduce", "transform"]
