"""Operator declarations, one module per family; importing this package registers them all."""

from irtool.ops.definitions import broadcast, device, elementwise, nn, reduce, transform
from irtool.ops.definitions import quantize

__all__ = ["broadcast", "device", "elementwise", "nn", "reduce", "transform"]
