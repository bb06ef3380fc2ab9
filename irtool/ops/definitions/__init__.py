"""Operator declarations, one module per family; importing this package registers them all."""

from irtool.ops.definitions import bitwise, broadcast, device, elementwise, math, nn, reduce, transform

__all__ = ["bitwise", "broadcast", "device", "elementwise", "math", "nn", "reduce", "transform"]
