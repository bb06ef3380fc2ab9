"""The window functions (HannWindow, HammingWindow, BlackmanWindow): generalised cosine windows
a0 − a1·cos(2πn/N) + a2·cos(4πn/N) over n = 0 … size − 1.

The size fixes the output's shape, so it must be known at import time (the ONNX backend binds
it from the value `run` is given). The window is computed as ONNX's function body computes it
(`arange`, `cos`, ...), in float32 unless float64 is asked for, then cast to `output_datatype`.
"""

from __future__ import annotations

import math

import numpy as np

from irtool.frontend.onnx_values import Builder, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import converter, onnx_dtype, required, scalar

# (a0, a1, a2) of each window.
_COEFFICIENTS: dict[str, tuple[float, float, float]] = {
    "HannWindow": (0.5, 0.5, 0.0),
    "HammingWindow": (25 / 46, 21 / 46, 0.0),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


@converter(*_COEFFICIENTS)
def _window(b: Builder, node: Node) -> list[Value | None]:
    size_in = required(node, 0, "size")
    if size_in.ndim:
        raise Unsupported(f"size must be a scalar, not a {size_in.tensor} tensor")
    size = int(np.asarray(b.static(size_in, "size")))
    if size < 0:
        raise Unsupported(f"a negative size ({size})")
    dtype = onnx_dtype(int(node.attr("output_datatype", 1)), "output_datatype")  # type: ignore[call-overload]
    if dtype == "bool":
        raise Unsupported("output_datatype bool")
    # N is the period: the size for a periodic window, one less for a symmetric one.
    period = size if int(node.attr("periodic", 1)) else size - 1  # type: ignore[call-overload]
    wide = "float64" if dtype == "float64" else "float32"
    a0, a1, a2 = _COEFFICIENTS[node.op_type]
    n = b.call("arange", [], start=0.0, stop=float(size), step=1.0, dtype=wide)
    angle = b.call("multiply", [n, scalar(b, 2 * math.pi / period if period else math.inf, wide)])
    out = b.call("subtract", [scalar(b, a0, wide), b.call("multiply", [scalar(b, a1, wide), b.call("cos", [angle])])])
    if a2:
        double = b.call("multiply", [angle, scalar(b, 2.0, wide)])
        out = b.call("add", [out, b.call("multiply", [scalar(b, a2, wide), b.call("cos", [double])])])
    return [out if dtype == wide else b.call("cast", [out], dtype=dtype)]
