"""Which calls read or replace rows of a box's static first axis: `take` of a scalar index or
of a vector of them (a reverse sequence reads its steps backwards) and `scatter_nd` of one row, on a tensor of type `(T, ?, ...)`. The row is not a row of the
box's row prefix, so no batched kernel computes it; fusion keeps such a call alone (opaque),
lowering leaves it as the operator and native code copies the row's slab (docs/native-relay.md,
"Dynamic shapes"). The ONNX recurrent layers over a symbolic batch read their input this way."""

from __future__ import annotations

from irtool.ir.expr import Call, Op
from irtool.ir.types import TensorType, TupleType


def is_box_join(call: Call) -> bool:
    """`call` is a `concatenate` on a `?` axis or one before a `?` of an operand (a
    bidirectional layer's two directions joined on the direction axis of `(T, 1, ?, H)`): the
    joined slabs are not rows of the prefix, so native code copies them."""
    if not isinstance(call.op, Op) or call.op.name != "concatenate" or not call.args:
        return False
    fields = getattr(call.args[0], "checked_type", None)
    if not isinstance(fields, TupleType) or not all(isinstance(f, TensorType) for f in fields.fields):
        return False
    ndim = fields.fields[0].ndim  # type: ignore[union-attr]
    axis = int(call.attrs.get("axis", 0))  # type: ignore[call-overload]
    axis = axis + ndim if axis < 0 else axis
    return any(not isinstance(d, int) for f in fields.fields for d in f.shape[axis:])  # type: ignore[union-attr]


def is_box_row(call: Call) -> bool:
    """`call` reads (`take`, one row or a vector of them) or replaces (`scatter_nd`) a row of a
    box's static first axis."""
    if is_box_join(call):
        return True
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
