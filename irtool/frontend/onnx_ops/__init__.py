"""ONNX operator converters, one module per family, all registered in `CONVERTERS`."""

from irtool.frontend.onnx_ops import activations, conv, elementwise, math, nn, reduce, tensor  # noqa: F401  (they register)
from irtool.frontend.onnx_ops import indexing, normalization, resample  # noqa: F401
from irtool.frontend.onnx_ops import attention, linalg, loss, quantize, windows  # noqa: F401
from irtool.frontend.onnx_ops import control, recurrent  # noqa: F401
from irtool.frontend.onnx_ops.common import CONVERTERS

__all__ = ["CONVERTERS"]
