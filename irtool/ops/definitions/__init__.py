"""Operator declarations, one module per family; importing this package registers them all."""

from irtool.ops.definitions import bitwise, broadcast, device, elementwise, math, nn, reduce, transform
from irtool.ops.definitions import data_dependent, indexing, normalization, quantize, resample

__all__ = ["bitwise", "broadcast", "data_dependent", "device", "elementwise", "indexing", "math", "nn", "normalization", "quantize", "reduce",
           "resample", "transform"]
