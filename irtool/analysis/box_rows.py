"""Which calls read or replace rows of a box's static first axis: `take` of a scalar index or
of a vector of them (a reverse sequence reads its steps backwards) and `scatter_nd` of one row, on a tensor of type `(T, ?, ...)`. The row is not a row of the
box's row prefix, so no batched kernel computes it; fusion keeps such a call alone (opaque),
lowering leaves it as the operator and native code copies the row's slab (docs/native-relay.md,
"Dynamic shapes"). The ONNX recurrent layers over a symbolic batch read their input this way."""

from __future__ import annotations

from irtool.ir.expr import Call, Op
from irtool.ir.types import TensorType


def is_box_row(call: Call) -> bool:
    """`call` reads (`take`, one row or a vector of them) or replaces (`scatter_nd`) a row of a
    box's static first axis."""
    if not isinstance(call.op, Op) or call.op.name not in ("take", "scatter_nd") or len(call.args) < 2:
        return False
    data, index = (getattr(a, "checked_type", None) for a in call.args[:2])
    if not (isinstance(data, TensorType) and not data.is_static and isinstance(data.shape[0], int)
            and isinstance(index, TensorType)):
        return False
    if call.op.name == "take":
        return (index.ndim <= 1 and index.is_static and call.attrs.get("axis") == 0 and not call.attrs.get("batch_dims")
                and call.attrs.get("mode", "clip") in ("clip", "fast"))
    return index.shape == (1,) and call.attrs.get("mode", "update") == "update"
