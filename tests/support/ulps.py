"""Float32 results compared in units in the last place."""

from __future__ import annotations

import numpy as np


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in representable float32 values (across zero and the subnormals too)."""
    def ordered(v: np.ndarray) -> np.ndarray:
        bits = v.view(np.int32).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)
    return np.abs(ordered(got) - ordered(want))
