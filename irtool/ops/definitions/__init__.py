"""Operator declarations, one module per family; importing this package registers them all."""

from irtool.ops.definitions import broadcast, device, elementwise, nn, reduce, transform
from irtool.ops.definitions import indexing, normalization, resample

__all__ = ["broadcast", "device", "elementwise", "indexing", "nn", "normalization", "reduce", "resample", "transform"]
