"""Shape functions over run-time rows: for each operator, how many leading axes of its result
it maps row by row from the same axes of its operands (docs/native-relay.md, "Dynamic shapes").

A fused group may take `?` on its tensors' *row prefix* (the leading axes up to the last `?`)
when every operator in it keeps that prefix: irtool/lower/batch.py walks the group with these
rules. Each rule returns the number of leading result axes it keeps (axis i of the result reads
axis i of its row operands), `REGROUP` for an operator that keeps rows of one size in order but
may regroup the prefix (a reshape), or the reason it keeps none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from irtool.ir.types import Any, TensorType
from irtool.ops.registry import OpPattern, get_op

Attrs = Mapping[str, object]
# A shape function: how many leading axes of the result the operator maps row by row from the
# same axes of its operands (`REGROUP`: it keeps rows of one size in order but may regroup the
# prefix, as a reshape), or the reason it maps none.
ShapeFunc = Callable[[list[TensorType], TensorType, Attrs], int | str]
REGROUP = -1


def row_prefix(t: TensorType) -> int:
    """How many leading axes are a tensor's row prefix: up to its last `?` (0 when static)."""
    return max((axis + 1 for axis, d in enumerate(t.shape) if isinstance(d, Any)), default=0)


def _axis(axis: object, ndim: int) -> int:
    return int(axis) + ndim if int(axis) < 0 else int(axis)  # type: ignore[call-overload]


def _rows(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
    return out.ndim


def _broadcast(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
    """Trailing axes aligned: a dynamic operand must have the result's rank, a static one must be
    1 on every prefix axis it reaches."""
    prefix = row_prefix(out)
    for a in args:
        if not a.is_static and a.ndim != out.ndim:
            return f"a dynamic operand {a} of lower rank than the result"
        lead = out.ndim - a.ndim
        if a.is_static and any(a.shape[axis - lead] != 1 for axis in range(max(lead, 0), prefix)):
            return f"the static operand {a} spans the row prefix"
    return out.ndim


def _first(rule: ShapeFunc) -> ShapeFunc:
    """`rule` for an operator whose first operand holds the rows and whose others (weights, bias,
    scale) every row shares: those must be static."""
    def checked(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
        for k, a in enumerate(args[1:], 1):
            if not a.is_static:
                return f"operand {k} ({a}) is shared by every row and must be static"
        return rule(args, out, attrs)
    return checked


def _before(key: str, of_result: bool = False) -> ShapeFunc:
    """The axes before the one the attribute `key` names (of the first operand, or the result)."""
    def rule(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
        return _axis(attrs[key], out.ndim if of_result else args[0].ndim)
    return rule


def _all_but_last(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
    return out.ndim - 1


def _batch_matmul(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
    """Pairs of matrices: with a dynamic right operand its batch axis pairs with the left's (axis
    0); a static right operand (batch 1) is shared, every row of the left is a row."""
    if not args[1].is_static:
        return 1
    if args[1].shape[0] != 1:
        return f"the static operand {args[1]} spans the row prefix"
    return out.ndim - 1


def _reduce(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
    axes = attrs.get("axis")
    if axes is None or attrs.get("exclude"):
        return 0
    listed = axes if isinstance(axes, tuple) else (axes,)
    return min((_axis(a, args[0].ndim) for a in listed), default=0)


def _regroup(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
    return REGROUP


def _transpose(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
    axes = attrs.get("axes")
    if not axes:
        return 0
    kept = 0
    while kept < len(axes) and _axis(axes[kept], args[0].ndim) == kept:  # type: ignore[arg-type, index]
        kept += 1
    return kept


def _squeeze(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
    axes = attrs.get("axis")
    if axes is None:
        return next((axis for axis, d in enumerate(args[0].shape) if d == 1), args[0].ndim)
    return min((_axis(a, args[0].ndim) for a in axes), default=args[0].ndim)  # type: ignore[union-attr]


def _strided_slice(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
    """The axes before the first one the slice does not take whole."""
    begin, end = list(attrs["begin"]), list(attrs["end"])  # type: ignore[call-overload]
    strides = list(attrs.get("strides") or ())  # type: ignore[call-overload]
    listed = [_axis(a, args[0].ndim) for a in attrs.get("axes") or range(len(begin))]  # type: ignore[union-attr]
    cut = []
    for k, axis in enumerate(listed):
        extent = args[0].shape[axis]
        stop = end[k] if k < len(end) else None
        whole_end = stop is None or stop >= 2**62 or (isinstance(extent, int) and stop >= extent)
        if attrs.get("slice_mode") == "size" or begin[k] not in (0, None) or (strides + [1] * len(listed))[k] != 1 \
                or not whole_end:
            cut.append(axis)
    return min(cut, default=args[0].ndim)


def _take(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
    if attrs.get("axis") is None or attrs.get("batch_dims"):
        return 0
    return _axis(attrs["axis"], args[0].ndim)


def _pad(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
    widths = attrs.get("pad_width") or ()
    kept = 0
    while kept < len(widths) and tuple(widths[kept]) == (0, 0):  # type: ignore[arg-type, index]
        kept += 1
    return kept


def _layout(*keys: str) -> ShapeFunc:
    """Axis 0 when the layouts lead with the batch (`N`)."""
    def rule(args: list[TensorType], out: TensorType, attrs: Attrs) -> int | str:
        for key in keys:
            layout = str(attrs.get(key) or "N")
            if not layout.startswith("N"):
                return f"{key}={layout} does not lead with the batch axis"
        return 1
    return rule


# Each operator's rows, by the axes it keeps: see each rule.
SHAPE_FUNCS: dict[str, ShapeFunc] = {
    "nn.dense": _first(_all_but_last),                 # every axis of the data but the contracted one
    "nn.batch_flatten": _regroup,                      # (n, ...) to (n, size): rows of one size
    "nn.bias_add": _first(_before("axis")),            # the axes before the bias's
    "nn.softmax": _first(_before("axis")),             # the axes before the normalised one
    "nn.log_softmax": _first(_before("axis")),
    "nn.layer_norm": _first(_before("axis")),
    "nn.prelu": _first(_before("axis")),
    "nn.batch_matmul": _batch_matmul,
    "nn.pad": _first(_pad),                            # the leading axes padded by (0, 0)
    "concatenate": _before("axis", of_result=True),    # the axes before the joined one
    "expand_dims": _regroup,                           # a new axis of 1 moves no element
    "sum": _reduce, "mean": _reduce, "max": _reduce, "min": _reduce, "prod": _reduce,
    "argmax": _reduce, "argmin": _reduce,              # the axes before the first reduced one
    "reshape": _regroup,                               # keeping the size of a row
    "transpose": _transpose,                           # the leading axes it leaves in place
    "squeeze": _squeeze,                               # the axes before the first removed one
    "strided_slice": _strided_slice,                   # the axes before the first one cut
    "take": _first(_take),                             # the axes before the gathered one
    "nn.conv2d": _first(_layout("data_layout")),
    "nn.max_pool2d": _layout("layout", "out_layout"),
    "nn.avg_pool2d": _layout("layout", "out_layout"),
    "nn.global_avg_pool2d": _layout("layout", "out_layout"),
    "nn.global_max_pool2d": _layout("layout", "out_layout"),
    "layout_transform": _layout("src_layout", "dst_layout"),
}


def shape_func(name: str) -> ShapeFunc | None:
    """The operator's row shape function: its own, or the one its fusion pattern implies
    (element-wise operators keep every axis; broadcasts without attributes align trailing axes)."""
    rule = SHAPE_FUNCS.get(name)
    if rule is not None:
        return rule
    op = get_op(name)
    if op is None:
        return None
    if op.pattern == OpPattern.ELEMWISE:
        return _rows
    if op.pattern == OpPattern.BROADCAST and op.attrs is not None and not op.attrs:
        return _broadcast
    return None
