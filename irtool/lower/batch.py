"""Fused groups over a dynamic batch: shape functions per operator and the batch-1 specialisation.

Native code takes `?` as the leading (batch) axis of a tensor (docs/native-relay.md, "Dynamic
shapes"). A fused group whose operators all have a *shape function* here — each maps the batch
axis of its batched inputs to the batch axis of its result, row by row, and leaves every other
dimension static — is lowered once at batch 1 (every `?` becomes 1, the group is type-checked
again, and the existing compute rules and schedules build the kernel). Code generation runs that
kernel once per row of the run-time batch `n` and allocates the `(n, ...)` results; the shape
function of the whole group is therefore "the result's batch is the inputs' batch". An operator
without one is a located error naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from irtool.analysis.steps import flatten_type
from irtool.analysis.typecheck import infer_types
from irtool.core.diagnostics import DiagnosticError
from irtool.ir.signature import BATCH_BUFFERS, BATCH_TILE_KERNEL, BATCH_TILE_ROWS, num_outputs
from irtool.ir.tir import PrimFunc
from irtool.ir.expr import AttrValue, Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from irtool.ir.types import Any, TensorType, TupleType, Type, type_parts
from irtool.ir.visitor import post_order
from irtool.lower.primitive import lower_primitive, type_of
from irtool.ops.registry import OpPattern, get_op

Attrs = Mapping[str, object]
# A shape function: the reason the operator cannot map the batch through, or None when it does.
ShapeFunc = Callable[[list[TensorType], TensorType, Attrs], str | None]


def is_batched(t: TensorType) -> bool:
    """A tensor whose leading axis is the dynamic batch and whose other axes are static."""
    return bool(t.shape) and isinstance(t.shape[0], Any) and all(isinstance(d, int) for d in t.shape[1:])


def is_dynamic(fn: Function) -> bool:
    """Whether a fused group has a tensor of dynamic shape among its parameters or its result."""
    types = [type_of(p) for p in fn.params] + [type_of(fn.body)]
    return any(isinstance(part, TensorType) and not part.is_static for t in types for part in type_parts(t))


def at_batch(t: Type, rows: int) -> Type:
    """`t` with every `?` made `rows` (iterative; a shared part is rebuilt once)."""
    done: dict[int, Type] = {}
    stack: list[tuple[Type, bool]] = [(t, False)]
    while stack:
        cur, ready = stack.pop()
        if id(cur) in done:
            continue
        if isinstance(cur, TupleType) and not ready:
            stack.append((cur, True))
            stack.extend((f, False) for f in cur.fields)
        elif isinstance(cur, TupleType):
            done[id(cur)] = TupleType(tuple(done[id(f)] for f in cur.fields))
        elif isinstance(cur, TensorType) and not cur.is_static:
            done[id(cur)] = TensorType(tuple(rows if isinstance(d, Any) else d for d in cur.shape), cur.dtype)
        else:
            done[id(cur)] = cur
    return done[id(t)]


# Rows of the second kernel of a batched group, which runs `n // BATCH_TILE` times before the
# batch-1 kernel takes the rest: enough rows for the dense schedules to tile across them (with
# 8, a dense still takes its matrix-vector schedule; benchmarks/README.md, "Dynamic shapes").
BATCH_TILE = 32


def buffer_flags(param_flags: tuple[int, ...], func: PrimFunc) -> tuple[int, ...]:
    """The `batch_buffers` attribute of a batch-1 kernel: its parameters' flags, 0 for the
    constants lowering added after them, 1 for every output."""
    outs = num_outputs(func)
    return (*param_flags, *(0,) * (len(func.params) - len(param_flags) - outs), *(1,) * outs)


def _axis(axis: object, ndim: int) -> int:
    return int(axis) + ndim if int(axis) < 0 else int(axis)  # type: ignore[call-overload]


def _rows(args: list[TensorType], out: TensorType, attrs: Attrs) -> str | None:
    return None


def _broadcast(args: list[TensorType], out: TensorType, attrs: Attrs) -> str | None:
    for a in args:
        if is_batched(a) and a.ndim != out.ndim:
            return "a batched operand of lower rank than the result"
        if a.is_static and a.ndim == out.ndim and a.ndim and a.shape[0] != 1:
            return "a static operand spans the batch axis"
    return None


def _axis_not_batch(key: str, rank_of: Callable[[list[TensorType], TensorType], int]) -> ShapeFunc:
    def rule(args: list[TensorType], out: TensorType, attrs: Attrs) -> str | None:
        if _axis(attrs[key], rank_of(args, out)) == 0:
            return f"{key}=0 is the batch axis"
        return None
    return rule


def _reduce(args: list[TensorType], out: TensorType, attrs: Attrs) -> str | None:
    axes = attrs.get("axis")
    if axes is None or attrs.get("exclude"):
        return "a reduction over the batch axis"
    listed = axes if isinstance(axes, tuple) else (axes,)
    if any(_axis(a, args[0].ndim) == 0 for a in listed):
        return "a reduction over the batch axis"
    return None


def _reshape(args: list[TensorType], out: TensorType, attrs: Attrs) -> str | None:
    if math.prod(args[0].shape[1:]) != math.prod(out.shape[1:]):   # type: ignore[arg-type]
        return "the reshape changes the size of a row"
    return None


def _transpose(args: list[TensorType], out: TensorType, attrs: Attrs) -> str | None:
    axes = attrs.get("axes")
    if not axes or _axis(axes[0], args[0].ndim) != 0:  # type: ignore[index]
        return "the transpose moves the batch axis"
    return None


def _squeeze(args: list[TensorType], out: TensorType, attrs: Attrs) -> str | None:
    axes = attrs.get("axis")
    if axes is None or any(_axis(a, args[0].ndim) == 0 for a in axes):  # type: ignore[union-attr]
        return "the squeeze removes the batch axis"
    return None


def _pad(args: list[TensorType], out: TensorType, attrs: Attrs) -> str | None:
    widths = attrs.get("pad_width")
    if not widths or tuple(widths[0]) != (0, 0):  # type: ignore[index]
        return "the pad widens the batch axis"
    return None


def _layout(*keys: str) -> ShapeFunc:
    def rule(args: list[TensorType], out: TensorType, attrs: Attrs) -> str | None:
        for key in keys:
            layout = str(attrs.get(key) or "N")
            if not layout.startswith("N"):
                return f"{key}={layout} does not lead with the batch axis"
        return None
    return rule


def _first_rank(args: list[TensorType], out: TensorType) -> int:
    return args[0].ndim


def _out_rank(args: list[TensorType], out: TensorType) -> int:
    return out.ndim


SHAPE_FUNCS: dict[str, ShapeFunc] = {
    "nn.dense": _rows,
    "nn.batch_flatten": _rows,
    "nn.bias_add": _axis_not_batch("axis", _first_rank),
    "nn.softmax": _axis_not_batch("axis", _first_rank),
    "nn.log_softmax": _axis_not_batch("axis", _first_rank),
    "nn.layer_norm": _axis_not_batch("axis", _first_rank),
    "nn.prelu": _axis_not_batch("axis", _first_rank),
    "nn.batch_matmul": _broadcast,   # pairs of rows (a static operand's batch must be 1)
    "nn.pad": _pad,
    "concatenate": _axis_not_batch("axis", _out_rank),
    "expand_dims": _axis_not_batch("axis", _out_rank),
    "sum": _reduce, "mean": _reduce, "max": _reduce, "min": _reduce, "prod": _reduce,
    "argmax": _reduce, "argmin": _reduce,
    "reshape": _reshape,
    "transpose": _transpose,
    "squeeze": _squeeze,
    "nn.conv2d": _layout("data_layout"),
    "nn.max_pool2d": _layout("layout", "out_layout"),
    "nn.avg_pool2d": _layout("layout", "out_layout"),
    "nn.global_avg_pool2d": _layout("layout", "out_layout"),
    "nn.global_max_pool2d": _layout("layout", "out_layout"),
    "layout_transform": _layout("src_layout", "dst_layout"),
}


def shape_func(name: str) -> ShapeFunc | None:
    """The operator's batch shape function: its own, or the one its fusion pattern implies
    (element-wise operators map rows to rows; broadcasts without attributes align trailing axes)."""
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


def _check_call(call: Call) -> None:
    name = call.op.name  # type: ignore[union-attr]
    args = [leaf for a in call.args for leaf in flatten_type(type_of(a), None)]
    outs = flatten_type(type_of(call), None)
    for t in args + outs:
        if not t.is_static and not is_batched(t):
            raise DiagnosticError(f"native code: unsupported: `{name}` on {t}: only the leading axis may be dynamic "
                                  "(a batch)", call.span)
    if not any(is_batched(a) for a in args):
        if all(t.is_static for t in outs):
            return
        raise DiagnosticError(f"native code: no shape function for `{name}` with a dynamic result from static "
                              "operands", call.span)
    rule = shape_func(name)
    if rule is None:
        raise DiagnosticError(f"native code: no shape function for `{name}` with a dynamic batch", call.span)
    if len(outs) != 1 or not is_batched(outs[0]):
        raise DiagnosticError(f"native code: no shape function for `{name}` with a dynamic batch (its result "
                              f"{type_of(call)} does not keep the batch)", call.span)
    op = get_op(name)
    reason = rule(args, outs[0], op.full_attrs(call.attrs) if op is not None else {})
    if reason is not None:
        raise DiagnosticError(f"native code: no shape function for `{name}` with a dynamic batch ({reason})",
                              call.span)


def specialise_batch(fn: Function, rows: int = 1) -> tuple[Function, tuple[int, ...]]:
    """A dynamic fused group at batch `rows`, type-checked, and the batch flag of each parameter
    tensor; raises a located error for an operator without a shape function."""
    new: dict[int, Expr] = {}
    params: list[Var] = []
    flags: list[int] = []
    for p in fn.params:
        t = type_of(p)
        for leaf in flatten_type(t, None):
            if not leaf.is_static and not is_batched(leaf):
                raise DiagnosticError(f"native code: unsupported: a parameter of type {leaf}: only the leading "
                                      "axis may be dynamic (a batch)", p.span)
            flags.append(int(is_batched(leaf)))
        q = Var(p.name_hint, at_batch(t, rows), p.span)
        params.append(q)
        new[id(p)] = q
    calls: list[tuple[Call, Call]] = []
    for node in post_order(fn.body):
        if id(node) in new or isinstance(node, (Op, Constant)):
            continue
        if isinstance(node, Call) and isinstance(node.op, Op):
            _check_call(node)
            out = Call(node.op, [new.get(id(a), a) for a in node.args], node.attrs, node.span)
            calls.append((node, out))
        elif isinstance(node, Tuple):
            out = Tuple([new.get(id(f), f) for f in node.fields], node.span)  # type: ignore[assignment]
        elif isinstance(node, TupleGetItem):
            out = TupleGetItem(new.get(id(node.tuple_value), node.tuple_value), node.index, node.span)  # type: ignore[assignment]
        else:
            raise DiagnosticError(f"native code: unsupported: a {type(node).__name__} in a fused group over a "
                                  "dynamic batch", node.span)
        new[id(node)] = out
    for leaf in flatten_type(type_of(fn.body), None):
        if not is_batched(leaf):
            raise DiagnosticError(f"native code: unsupported: a fused group with a result of type {leaf} over a "
                                  "dynamic batch (every result must keep the batch)", fn.body.span)
    one = Function(params, new.get(id(fn.body), fn.body), None, fn.type_params, fn.attrs, fn.span)
    infer_types(one)
    for old, call in calls:
        if call.checked_type != at_batch(type_of(old), rows):
            raise DiagnosticError(f"native code: no shape function for `{old.op.name}` with a dynamic batch "  # type: ignore[union-attr]
                                  f"(at batch {rows} its result is {call.checked_type}, not {type_of(old)} with "
                                  f"? = {rows})", old.span)
    return one, tuple(flags)


def lower_batched(fn: Function, intern: Callable[[PrimFunc, list[str]], str]) -> tuple[Function, dict[str, AttrValue]]:
    """A dynamic fused group at batch 1 (which the caller lowers), and the attributes of its
    kernel: the batched buffers and the kernel of `BATCH_TILE` rows, lowered and named by `intern`."""
    tile, _ = specialise_batch(fn, BATCH_TILE)
    one, flags = specialise_batch(fn)
    tiled = lower_primitive(tile)
    facts: dict[str, AttrValue] = {BATCH_BUFFERS: buffer_flags(flags, tiled.func)}
    name = intern(PrimFunc(tiled.func.params, tiled.func.body, tiled.func.attrs.with_items(**facts), tiled.func.span),
                  tiled.op_names)
    return one, {**facts, BATCH_TILE_KERNEL: name, BATCH_TILE_ROWS: BATCH_TILE}
