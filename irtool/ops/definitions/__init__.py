"""Operator declarations, one module per family; importing this package registers them all."""

from irtool.ops.definitions import broadcast, device, elementwise, nn, reduce, transform

__all__ = ["broadcast", "device", "elementwise", "nn", "reduce", "transform"]
