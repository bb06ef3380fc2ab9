"""Fused groups over run-time rows: the group's shape function and the batch-1 specialisation.

Native code takes `?` on the *row prefix* of a tensor: leading axes that every operator of a
fused group treats independently (docs/native-relay.md, "Dynamic shapes"). The rows of a buffer
are its prefix flattened, so `Tensor[(?, ?, 64), float32]` through a dense is `n1 * n2` rows of 64
and `Tensor[(2, ?, 8), float32]` is `2 * n` rows of 8. Each operator's *shape function* says
how many leading axes of its result it maps row by row from the same axes of its operands (or
that it regroups rows of one size, as `reshape` does); the group walk then expresses every
result's prefix in terms of the inputs' `?` extents and lists the extents that must agree at run
time (each operator's rule: irtool/lower/shape_funcs.py). The group is lowered with every prefix made ones (the batch-1 kernel) and with its last
prefix axis made `BATCH_TILE` (the tile), which codegen runs over the run-time rows. An operator
without a shape function, or a `?` on an axis its operator does not treat row by row, is a
located error naming both.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from irtool.analysis.steps import flatten_type
from irtool.analysis.typecheck import infer_types
from irtool.core.diagnostics import DiagnosticError
from irtool.core.span import Span
from irtool.ir.signature import (BATCH_BUFFERS, BATCH_CHECKS, BATCH_DIMS, BATCH_TILE_KERNEL, BATCH_TILE_ROWS,
                                 Extent, extent_product, num_outputs)
from irtool.ir.tir import PrimFunc
from irtool.ir.expr import Attrs, AttrValue, Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from irtool.ir.types import Any, TensorType, TupleType, Type, type_parts
from irtool.ir.visitor import post_order
from irtool.lower.primitive import lower_primitive, type_of
from irtool.lower.shape_funcs import REGROUP, SHAPE_FUNCS, row_prefix, shape_func
from irtool.ops.registry import get_op

# Per tensor leaf of a node, the extent of each of its axes.
Extents = tuple[Extent, ...]


def is_batched(t: TensorType) -> bool:
    """A tensor of run-time rows: it has a `?`, and its row prefix runs to the last one."""
    return not t.is_static


def is_dynamic(fn: Function) -> bool:
    """Whether a fused group has a tensor of dynamic shape among its parameters or its result."""
    types = [type_of(p) for p in fn.params] + [type_of(fn.body)]
    return any(isinstance(part, TensorType) and not part.is_static for t in types for part in type_parts(t))


def at_batch(t: Type, rows: int, flat: int = 1) -> Type:
    """`t` with each dynamic tensor's row prefix made ones but its last axis, made `rows`, or
    with a prefix of `flat` axes made one axis of `rows` (iterative; a shared part is rebuilt
    once)."""
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
            k = row_prefix(cur)
            lead = (rows,) if flat > 1 else (*(1,) * (k - 1), rows)
            done[id(cur)] = TensorType((*lead, *cur.shape[k:]), cur.dtype)
        else:
            done[id(cur)] = cur
    return done[id(t)]


# Rows of the second kernel of a batched group, which runs `n // BATCH_TILE` times before the
# batch-1 kernel takes the rest: enough rows for the dense schedules to tile across them (with
# 8, a dense still takes its matrix-vector schedule; benchmarks/README.md, "Dynamic shapes").
BATCH_TILE = 32


# Operators whose only rank-dependent attribute is `axis` (an int or a list), on an axis after
# the row prefix: with the prefix flattened a non-negative one moves down, a negative one stays.
_AXIS_OPS = frozenset({"nn.bias_add", "nn.softmax", "nn.log_softmax", "nn.layer_norm", "nn.prelu",
                       "sum", "mean", "max", "min", "prod", "argmax", "argmin"})
# Operators whose operands after the first are parameters every row shares (weights, bias,
# scale), unaffected by the data's rank.
_SHARED_PARAMS = _AXIS_OPS | {"nn.dense"}


def flat_prefix(fn: Function) -> int:
    """The row prefix length k >= 2 of every dynamic tensor of a group whose kernels may take it
    flattened into one axis (`(?, ?, 64)` as `(rows, 64)`, so a dense is a matrix product and
    takes its tiled schedule), else 1 (kernels keep the prefix as ones). Only operators that
    treat every axis alike or read an `axis` after the prefix qualify, and a static operand
    must not reach into the prefix (it would keep the rank the flattening drops)."""
    nodes = [*fn.params, *post_order(fn.body)]
    prefixes = {row_prefix(t) for n in nodes if isinstance(n, (Var, Call))
                for t in flatten_type(type_of(n), None) if not t.is_static}
    if len(prefixes) != 1 or min(prefixes) < 2:
        return 1
    k = prefixes.pop()
    for node in nodes:
        if not isinstance(node, Call):
            continue
        if not isinstance(node.op, Op):
            return 1
        name = node.op.name
        if name not in _SHARED_PARAMS and (name in SHAPE_FUNCS or shape_func(name) is None):
            return 1   # neither plain (element-wise, broadcast without attributes) nor moved by `axis`
        out = max((t.ndim for t in flatten_type(type_of(node), None)), default=0)
        operands = [t for a in node.args if name not in _SHARED_PARAMS for t in flatten_type(type_of(a), None)]
        if any(t.is_static and t.ndim > out - k for t in operands):
            return 1
    return k


def _flat_attrs(call: Call, flat: int) -> Attrs:
    """A call's attributes with its non-negative `axis` moved down over a prefix of `flat` axes
    flattened into one."""
    name = call.op.name  # type: ignore[union-attr]
    axis = call.attrs.get("axis")
    if flat < 2 or name not in _AXIS_OPS or axis is None:
        return call.attrs
    moved = tuple(a - (flat - 1) if a >= 0 else a for a in axis) if isinstance(axis, tuple) \
        else int(axis) - (flat - 1) if int(axis) >= 0 else axis  # type: ignore[call-overload, operator]
    return Attrs({**call.attrs, "axis": moved})


def _static(t: TensorType) -> Extents:
    return tuple((int(d),) for d in t.shape)  # type: ignore[call-overload]


class _Rows:
    """The extents of a dynamic group's tensors in terms of its inputs' `?`s, and the pairs of
    extents that must agree at run time."""

    def __init__(self) -> None:
        self.extents: dict[int, list[Extents]] = {}
        self.checks: list[tuple[Extent, Extent]] = []
        # An input `?` already checked equal to another: products compare through it.
        self.alias: dict[tuple[int, ...], tuple[int, ...]] = {}

    def canonical(self, e: Extent) -> Extent:
        """`e` with each input dim replaced by the one it was checked equal to first."""
        syms = []
        for k in range(1, len(e), 2):
            sym = e[k:k + 2]
            while sym in self.alias:
                sym = self.alias[sym]
            syms.append((1, *sym))
        return extent_product([(e[0],), *syms])

    def of(self, node: Expr) -> list[Extents]:
        known = self.extents.get(id(node))
        return known if known is not None else [_static(t) for t in flatten_type(type_of(node), None)]

    def same(self, a: Extent, b: Extent, span: Span | None) -> None:
        """`a` and `b` must agree: a check at run time unless the checks so far imply it."""
        a, b = self.canonical(a), self.canonical(b)
        if a == b:
            return
        if len(a) == 1 and len(b) == 1:
            raise DiagnosticError(f"native code: row extents {a[0]} and {b[0]} must agree", span)
        pair = (a, b) if a < b else (b, a)
        self.checks.append(pair)
        single = [e[1:] for e in pair if e[0] == 1 and len(e) == 3]
        if len(single) == 2:
            self.alias[single[1]] = single[0]

    def call(self, call: Call) -> None:
        """The extents of an operator's result from its shape function, or a located error."""
        name = call.op.name  # type: ignore[union-attr]
        args = [leaf for a in call.args for leaf in flatten_type(type_of(a), None)]
        given = [e for a in call.args for e in self.of(a)]
        outs = flatten_type(type_of(call), None)
        dynamic = [k for k, a in enumerate(args) if not a.is_static]
        if not dynamic:
            if all(t.is_static for t in outs):
                return
            raise DiagnosticError(f"native code: no shape function for `{name}` with a dynamic result from static "
                                  "operands", call.span)
        first = args[dynamic[0]]
        where = f"`?` on axis {row_prefix(first) - 1} of {first}"
        rule = shape_func(name)
        if rule is None:
            raise DiagnosticError(f"native code: no shape function for `{name}` with a {where}", call.span)
        if len(outs) != 1:
            raise DiagnosticError(f"native code: no shape function for `{name}` with a {where} (its result "
                                  f"{type_of(call)} is not one tensor)", call.span)
        out = outs[0]
        op = get_op(name)
        kept = rule(args, out, op.full_attrs(call.attrs) if op is not None else {})
        if isinstance(kept, str):
            raise DiagnosticError(f"native code: no shape function for `{name}` with a {where} ({kept})", call.span)
        for t in [*(args[k] for k in dynamic), out] if kept != REGROUP else ():
            if row_prefix(t) > kept:
                rows = f"only axes 0..{kept - 1}" if kept else "no axis"
                raise DiagnosticError(f"native code: no shape function for `{name}` with a `?` on axis "
                                      f"{row_prefix(t) - 1} of {t} (it treats {rows} row by row)", call.span)
        if out.is_static:
            raise DiagnosticError(f"native code: no shape function for `{name}` with a {where} (its result "
                                  f"{out} does not keep the rows)", call.span)
        if kept == REGROUP:
            self.extents[id(call)] = [self.regroup(name, first, given[dynamic[0]], out, call.span)]
            return
        prefix = row_prefix(out)
        for k in dynamic:
            if row_prefix(args[k]) != prefix:
                raise DiagnosticError(f"native code: no shape function for `{name}` from {args[k]} to {out} (the "
                                      "last `?` of an operand and of the result must be on the same axis)", call.span)
        extents: list[Extent] = []
        for axis, d in enumerate(out.shape):
            e = given[dynamic[0]][axis] if axis < prefix and isinstance(d, Any) else (int(d),)  # type: ignore[call-overload]
            for k in dynamic if axis < prefix else ():
                self.same(given[k][axis], e, call.span)
            extents.append(e)
        self.extents[id(call)] = [tuple(extents)]

    def regroup(self, name: str, src: TensorType, given: Extents, out: TensorType, span: Span | None) -> Extents:
        """A result keeping the rows of `src` in order and size: the same prefix, or one `?`
        holding the product of the source's prefix over the static prefix dims."""
        k, prefix = row_prefix(src), row_prefix(out)
        if math.prod(src.shape[k:]) != math.prod(out.shape[prefix:]):  # type: ignore[arg-type]
            raise DiagnosticError(f"native code: no shape function for `{name}` from {src} to {out} (it changes "
                                  "the size of a row)", span)
        rest = _static(TensorType(out.shape[prefix:], out.dtype))
        if out.shape[:prefix] == src.shape[:k]:
            return given[:k] + rest
        unknown = [axis for axis in range(prefix) if isinstance(out.shape[axis], Any)]
        fixed = math.prod(int(d) for d in out.shape[:prefix] if isinstance(d, int))
        total = extent_product(given[:k])
        if len(unknown) != 1 or fixed == 0 or total[0] % fixed:
            raise DiagnosticError(f"native code: no shape function for `{name}` from {src} to {out} (its rows "
                                  "regroup into other than one `?` axis)", span)
        merged = (total[0] // fixed, *total[1:])
        return tuple(merged if axis == unknown[0] else (int(d),) for axis, d in  # type: ignore[call-overload]
                     enumerate(out.shape[:prefix])) + rest


def specialise_batch(fn: Function, rows: int = 1, flat: int = 1) -> tuple[Function, _Rows]:
    """A dynamic fused group with each row prefix made ones but its last axis, made `rows` (with
    `flat` > 1, each prefix of that many axes made one axis of `rows`: `flat_prefix`),
    type-checked, and the extents of its tensors (`?` on axis a of parameter leaf b is
    `(1, b, a)`); raises a located error for an operator without a shape function."""
    new: dict[int, Expr] = {}
    params: list[Var] = []
    found = _Rows()
    b = 0
    for p in fn.params:
        t = type_of(p)
        leaves = flatten_type(t, None)
        found.extents[id(p)] = [tuple((1, b + k, axis) if isinstance(d, Any) else (int(d),)  # type: ignore[call-overload]
                                      for axis, d in enumerate(leaf.shape)) for k, leaf in enumerate(leaves)]
        b += len(leaves)
        q = Var(p.name_hint, at_batch(t, rows, flat), p.span)
        params.append(q)
        new[id(p)] = q
    calls: list[tuple[Call, Call]] = []
    for node in post_order(fn.body):
        if id(node) in new or isinstance(node, (Op, Constant)):
            continue
        if isinstance(node, Call) and isinstance(node.op, Op):
            found.call(node)
            out = Call(node.op, [new.get(id(a), a) for a in node.args], _flat_attrs(node, flat), node.span)
            calls.append((node, out))
        elif isinstance(node, Tuple):
            found.extents[id(node)] = [e for f in node.fields for e in found.of(f)]
            out = Tuple([new.get(id(f), f) for f in node.fields], node.span)  # type: ignore[assignment]
        elif isinstance(node, TupleGetItem):
            fields = type_of(node.tuple_value)
            assert isinstance(fields, TupleType)
            at = sum(len(flatten_type(f, None)) for f in fields.fields[:node.index])
            found.extents[id(node)] = found.of(node.tuple_value)[at:at + len(flatten_type(fields.fields[node.index],
                                                                                          None))]
            out = TupleGetItem(new.get(id(node.tuple_value), node.tuple_value), node.index, node.span)  # type: ignore[assignment]
        else:
            raise DiagnosticError(f"native code: unsupported: a {type(node).__name__} in a fused group over "
                                  "run-time rows", node.span)
        new[id(node)] = out
    for leaf in flatten_type(type_of(fn.body), None):
        if leaf.is_static:
            raise DiagnosticError(f"native code: unsupported: a fused group with a result of type {leaf} over "
                                  "run-time rows (every result must keep the rows)", fn.body.span)
    one = Function(params, new.get(id(fn.body), fn.body), None, fn.type_params, fn.attrs, fn.span)
    infer_types(one)
    for old, call in calls:
        if call.checked_type != at_batch(type_of(old), rows, flat):
            raise DiagnosticError(f"native code: no shape function for `{old.op.name}` over run-time rows "  # type: ignore[union-attr]
                                  f"(at {rows} rows its result is {call.checked_type}, not {type_of(old)} with "
                                  f"its row prefix made {at_batch(type_of(old), rows, flat)})", old.span)
    return one, found


def _read_leaves(fn: Function) -> set[int]:
    """The parameter leaves the group reads: a field of a tuple parameter that only a projection
    of another field reaches (a loop's state next to its stacked outputs) is not one, and must
    not count among the buffers whose rows agree."""
    def count(e: Expr) -> int:
        return len(flatten_type(type_of(e), None))

    first: dict[int, int] = {}
    b = 0
    for p in fn.params:
        first[id(p)], b = b, b + count(p)
    read: set[int] = set(range(first[id(fn.body)], first[id(fn.body)] + count(fn.body))) if id(fn.body) in first else set()
    for node in post_order(fn.body):
        if isinstance(node, TupleGetItem) and id(node.tuple_value) in first:
            fields = type_of(node.tuple_value)
            assert isinstance(fields, TupleType)
            at = first[id(node.tuple_value)] + sum(len(flatten_type(f, None)) for f in fields.fields[:node.index])
            read.update(range(at, at + count(node)))
            continue
        operands = node.args if isinstance(node, Call) else node.fields if isinstance(node, Tuple) else []
        read.update(k for a in operands if id(a) in first for k in range(first[id(a)], first[id(a)] + count(a)))
    return read


def batch_facts(fn: Function, found: _Rows, func: PrimFunc, flat: int = 1) -> dict[str, AttrValue]:
    """`batch_buffers`, `batch_dims` and `batch_checks` of a kernel lowered from `fn`: each
    buffer's row prefix on the kernel (1 where `flat` made it one axis) and the extents of the
    group's prefix (none for the constants lowering added after the parameters), and the
    extents to compare, among them every buffer's row count with the first's."""
    outs = [(t, e) for t, e in zip(flatten_type(type_of(fn.body), None), found.of(fn.body))]
    params = [(t, e) for p in fn.params for t, e in zip(flatten_type(type_of(p), None), found.extents[id(p)])]
    constants = len(func.params) - len(params) - num_outputs(func)
    read = _read_leaves(fn)
    prefixes = ([e[:row_prefix(t)] if b in read else () for b, (t, e) in enumerate(params)] + [()] * constants
                + [e[:row_prefix(t)] for t, e in outs])
    rows = [extent_product(p) for p in prefixes if p]
    for count in rows[1:]:
        found.same(rows[0], count, fn.body.span)
    facts: dict[str, AttrValue] = {BATCH_BUFFERS: tuple(min(len(p), 1) if flat > 1 else len(p) for p in prefixes),
                                   BATCH_DIMS: tuple(prefixes)}
    if found.checks:
        facts[BATCH_CHECKS] = tuple(found.checks)
    return facts


def lower_batched(fn: Function, intern: Callable[[PrimFunc, list[str]], str]) -> tuple[Function, dict[str, AttrValue]]:
    """A dynamic fused group at batch 1 (which the caller lowers), and the attributes of its
    kernel: the row prefixes, their extents and checks, and the kernel of `BATCH_TILE` rows,
    lowered and named by `intern`. Both kernels see a flattened prefix where `flat_prefix`
    allows it."""
    flat = flat_prefix(fn)
    tile, _ = specialise_batch(fn, BATCH_TILE, flat)
    one, found = specialise_batch(fn, 1, flat)
    tiled = lower_primitive(tile)
    facts = batch_facts(fn, found, tiled.func, flat)
    name = intern(PrimFunc(tiled.func.params, tiled.func.body, tiled.func.attrs.with_items(**facts), tiled.func.span),
                  tiled.op_names)
    return one, {**facts, BATCH_TILE_KERNEL: name, BATCH_TILE_ROWS: BATCH_TILE}
