"""Compute rules of the data-dependent indexing operators (definitions/indexing.py).

Gathers are `Reduce` tensors: an element checks the index it read (an `assert`, the native
form of the reference's range error) before its load, and a consumer reading it at its own
index runs on that load. Scatters, top-k and the scans are `Scheduled` loop nests of their own:
a scatter copies data and then visits the updates in order (a reduction combines into a scratch
copy, so a fused epilogue never reads back its own output); top-k inserts each element of a row
into a sorted list of k; a scan carries its running value along the axis.
"""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.expr import Call
from irtool.ir.tir import Allocate, AssertStmt, BinaryOp, Buffer, BufferLoad, BufferStore, IfThenElse, PrimExpr, \
    PrimFunc, SeqStmt, Stmt, is_float, seq
from irtool.ir.types import Type
from irtool.lower.rules._rule import Attrs, out_tensor_type, rule, shape_of
from irtool.lower.schedules.tile import loop, nest
from irtool.lower.te import (Builder, Compute, Element, Idx, Reduce, Scheduled, Tensor, acc_load, acc_store, add,
                             all_of, cast, cmp, const, floordiv, floormod, imm, mul, select, sub, unravel)
from irtool.ops.definitions.indexing import parse_einsum, topk_count
from irtool.tir_transform.index_width import INT32_MAX

Store = Callable[[Idx, PrimExpr], Stmt]


def checked_position(raw: PrimExpr, n: int, message: str) -> tuple[Stmt, PrimExpr]:
    """(the assertion that `raw` lies in [-n, n), the position it names in [0, n)): negative
    indices count from the end, as the reference's."""
    wide = cast("int64", raw)
    check = AssertStmt(all_of([cmp("ge", wide, imm(-n, "int64")), cmp("lt", wide, imm(n, "int64"))]), message)  # type: ignore[arg-type]
    pos = select(cmp("lt", wide, imm(0, "int64")), BinaryOp("add", wide, imm(n, "int64")), wide)
    return check, pos if n > INT32_MAX else cast("int32", pos)


def _range_message(op: str, axis: int, n: int) -> str:
    return f"{op}: an index is out of range for axis {axis} of extent {n}"


# ------------------------------------------------------------------------------------ gathers

@rule("gather")
def _gather(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, indices = args
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    message = _range_message("gather", axis, x.shape[axis])

    def fbody(ctx: Element, idx: Idx) -> PrimExpr:
        check, pos = checked_position(ctx.load(indices, idx), x.shape[axis], message)
        ctx.prelude.append(check)
        return ctx.load(x, idx[:axis] + (pos,) + idx[axis + 1:])
    return Reduce(shape_of(out), x.dtype, fbody, "gather")


@rule("gather_nd")
def _gather_nd(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, indices = args
    b = int(attrs["batch_dims"])  # type: ignore[arg-type]
    m = indices.shape[0]
    lookups = indices.ndim - 1  # output: indices' axes 1.. (batch, then lookups), then data's rest

    def fbody(ctx: Element, idx: Idx) -> PrimExpr:
        where = list(idx[:b])
        for k in range(m):
            n = x.shape[b + k]
            check, pos = checked_position(ctx.load(indices, (const(k),) + idx[:lookups]), n,
                                          _range_message("gather_nd", b + k, n))
            ctx.prelude.append(check)
            where.append(pos)
        return ctx.load(x, tuple(where) + idx[lookups:])
    return Reduce(shape_of(out), x.dtype, fbody, "gather_nd")


# ----------------------------------------------------------------------------------- scatters

_COMBINE: dict[str, Callable[[PrimExpr, PrimExpr], PrimExpr]] = {
    "add": lambda a, b: BinaryOp("add", a, b), "mul": lambda a, b: BinaryOp("mul", a, b),
    "min": lambda a, b: BinaryOp("min", a, b), "max": lambda a, b: BinaryOp("max", a, b)}


def _scatter(x: Tensor, updates: Tensor, reduction: str, visit: Callable[[Builder, Idx], tuple[list[Stmt], Idx]],
             name: str) -> Scheduled:
    """data, then each update at the position `visit(builder, update index)` names (after its
    range checks); a reduction combines into a scratch copy that is stored at the end."""
    def emit(builder: Builder, store: Store) -> Stmt:
        data, upd = builder.buffer_of(x), builder.buffer_of(updates)

        def scatter_into(put: Callable[[Idx, PrimExpr], Stmt], old: Callable[[Idx], PrimExpr] | None) -> Stmt:
            def body(j: Idx) -> Stmt:
                checks, where = visit(builder, j)
                value = BufferLoad(upd, j)
                if old is not None:
                    value = _COMBINE[reduction](old(where), value)
                return seq([*checks, put(where, value)])
            return nest(updates.shape, "j", body)
        copy_in = nest(x.shape, "i", lambda i: store(i, BufferLoad(data, i)))
        if reduction == "update":   # `in_place_part` takes the second statement
            return seq([copy_in, scatter_into(store, None)])
        work = Buffer(f"{name}_work", x.shape, x.dtype)
        return Allocate(work, seq([
            nest(x.shape, "i", lambda i: BufferStore(work, i, BufferLoad(data, i))),
            scatter_into(lambda i, v: BufferStore(work, i, v), lambda i: BufferLoad(work, i)),
            nest(x.shape, "i", lambda i: store(i, BufferLoad(work, i)))]))
    return Scheduled(x.shape, x.dtype, emit, name)


# The PrimFunc attribute naming a kernel's in-place twin (`in_place_part`).
IN_PLACE = "in_place"


def in_place_part(fn_body: Call, func: PrimFunc) -> PrimFunc | None:
    """The in-place twin of the kernel `func` of a lone scatter with mode update (`fn_body`, the
    primitive function's body, over its parameters): only the writes of the updates, over every
    buffer but the data, for a caller whose output buffer already holds the data (the copy that
    `_scatter` emits first is then the caller's, or nothing when the data is dead after the call
    and the output is its buffer). None for any other kernel."""
    mode = {"scatter_nd": "mode", "scatter_elements": "reduction"}.get(getattr(fn_body.op, "name", ""))
    if mode is None or fn_body.attrs.get(mode, "update") != "update":
        return None
    body = func.body
    if not (isinstance(body, SeqStmt) and len(body.stmts) == 2 and len(func.params) == 4):
        return None
    return PrimFunc(func.params[1:], body.stmts[1], func.attrs, func.span)


@rule("scatter_elements")
def _scatter_elements(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, indices, updates = args
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    message = _range_message("scatter_elements", axis, x.shape[axis])

    def visit(builder: Builder, j: Idx) -> tuple[list[Stmt], Idx]:
        check, pos = checked_position(BufferLoad(builder.buffer_of(indices), j), x.shape[axis], message)
        return [check], j[:axis] + (pos,) + j[axis + 1:]
    return _scatter(x, updates, str(attrs["reduction"]), visit, "scatter_elements")


@rule("scatter_nd")
def _scatter_nd(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, indices, updates = args
    m = indices.shape[0]
    lookups = indices.ndim - 1

    def visit(builder: Builder, j: Idx) -> tuple[list[Stmt], Idx]:
        checks, where = [], []
        for k in range(m):
            check, pos = checked_position(BufferLoad(builder.buffer_of(indices), (const(k),) + j[:lookups]),
                                          x.shape[k], _range_message("scatter_nd", k, x.shape[k]))
            checks.append(check)
            where.append(pos)
        return checks, tuple(where) + j[lookups:]
    return _scatter(x, updates, str(attrs["mode"]), visit, "scatter_nd")


# ------------------------------------------------------------------------------------ one_hot

@rule("one_hot")
def _one_hot(args: list, attrs: Attrs, out: Type) -> Tensor:
    indices, on, off = args
    shape = shape_of(out)
    pos = int(attrs["axis"]) % len(shape)  # type: ignore[arg-type]
    dtype = out_tensor_type(out).dtype

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        hit = cmp("eq", cast("int64", ctx.load(indices, idx[:pos] + idx[pos + 1:])), cast("int64", idx[pos]))
        return select(hit, cast(dtype, ctx.load(on, ())), cast(dtype, ctx.load(off, ())))
    return Compute(shape, dtype, f, "one_hot")


# --------------------------------------------------------------------------------------- topk

def _better(ascending: bool, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """Whether `a` comes before `b` in top-k order; NaN ranks above every number (numpy's sort)."""
    if not is_float(a.dtype):
        return cmp("lt" if ascending else "gt", a, b)
    nan_a, nan_b = cmp("ne", a, a), cmp("ne", b, b)
    if ascending:
        return BinaryOp("or", cmp("lt", a, b), BinaryOp("and", BinaryOp("eq", nan_a, imm(0, "bool")), nan_b))
    return BinaryOp("or", cmp("gt", a, b), BinaryOp("and", nan_a, BinaryOp("eq", nan_b, imm(0, "bool"))))


def _topk_positions(x: Tensor, axis: int, k: int, ascending: bool, dtype: str) -> Scheduled:
    """The positions of each row's k best elements, best first, ties in index order: each
    element in turn is inserted after the kept ones it does not beat. Shaped (1, ...) so both
    outputs read it from one buffer rather than recomputing it as an epilogue."""
    n = x.shape[axis]
    outer, inner = x.shape[:axis], x.shape[axis + 1:]
    shape = (1,) + outer + (k,) + inner

    def emit(builder: Builder, store: Store) -> Stmt:
        data = builder.buffer_of(x)
        values, where = Buffer("topk_values", (k,), x.dtype), Buffer("topk_where", (k,), dtype)
        kept = Buffer("topk_kept", (1,), "int32", scope="local")
        slot = Buffer("topk_slot", (1,), "int32", scope="local")

        def row(o: Idx, i: Idx) -> Stmt:
            def element(e: PrimExpr) -> Stmt:
                v = BufferLoad(data, o + (e,) + i)
                filled = acc_load(kept)
                # The slot: how many kept entries v does not beat (they form a prefix).
                count = loop("s", k, lambda s: acc_store(slot, add(acc_load(slot), select(
                    BinaryOp("and", cmp("lt", s, filled), BinaryOp("eq", _better(ascending, v, BufferLoad(values, (s,))),
                                                                    imm(0, "bool"))), const(1), const(0)))))
                p = acc_load(slot)

                def shift(t: PrimExpr) -> Stmt:  # entries p.. move down one, from the end
                    s = sub(const(k - 1), t)
                    return IfThenElse(cmp("gt", s, p), seq([
                        BufferStore(values, (s,), BufferLoad(values, (sub(s, 1),))),
                        BufferStore(where, (s,), BufferLoad(where, (sub(s, 1),)))]))
                insert = IfThenElse(cmp("lt", p, k), seq([
                    loop("t", k - 1, shift),
                    BufferStore(values, (p,), v), BufferStore(where, (p,), cast(dtype, e)),
                    acc_store(kept, BinaryOp("min", add(filled, 1), const(k)))]))
                beats_last = BinaryOp("or", cmp("lt", filled, k), _better(ascending, v, BufferLoad(values, (const(k - 1),))))
                return IfThenElse(beats_last, seq([acc_store(slot, const(0)), count, insert]))
            return seq([acc_store(kept, const(0)), loop("e", n, element),
                        loop("r", k, lambda r: store((const(0),) + o + (r,) + i, BufferLoad(where, (r,))))])
        body = nest(outer, "o", lambda o: nest(inner, "in", lambda i: row(o, i)))
        for buf in (slot, kept, where, values):
            body = Allocate(buf, body)
        return body
    return Scheduled(shape, dtype, emit, "topk")


@rule("topk")
def _topk(args: list, attrs: Attrs, out: Type) -> tuple | Tensor:
    x = args[0]
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    k = topk_count(int(attrs["k"]), x.shape[axis])  # type: ignore[arg-type]
    dtype = str(attrs["dtype"])
    positions = _topk_positions(x, axis, k, bool(attrs["is_ascend"]), dtype)
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    indices = Compute(shape, dtype, lambda ctx, idx: ctx.load(positions, (const(0),) + idx), "topk_indices")

    def value(ctx: Element, idx: Idx) -> PrimExpr:
        pos = cast("int32", ctx.load(positions, (const(0),) + idx))
        return ctx.load(x, idx[:axis] + (pos,) + idx[axis + 1:])
    values = Compute(shape, x.dtype, value, "topk_values")
    return {"both": (values, indices), "values": values, "indices": indices}[str(attrs["ret_type"])]


# ---------------------------------------------------------------------------------- scans

def _scan_rule(name: str, combine: str, identity: int) -> None:
    @rule(name)
    def lower(args: list, attrs: Attrs, out: Type) -> Tensor:
        x = args[0]
        shape = shape_of(out)
        dtype = out_tensor_type(out).dtype
        flat = attrs["axis"] is None
        axis = 0 if flat else int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
        exclusive = bool(attrs["exclusive"])

        def emit(builder: Builder, store: Store) -> Stmt:
            data = builder.buffer_of(x)
            acc = Buffer(f"{name}_acc", (1,), dtype, scope="local")

            def line(o: Idx, i: Idx) -> Stmt:
                def step(e: PrimExpr) -> Stmt:
                    at = o + (e,) + i
                    v = cast(dtype, BufferLoad(data, unravel(e, x.shape) if flat else at))
                    update = acc_store(acc, BinaryOp(combine, acc_load(acc), v))
                    put = store(at, acc_load(acc))
                    return seq([put, update] if exclusive else [update, put])
                return seq([acc_store(acc, imm(identity, dtype)), loop("e", shape[axis], step)])
            return Allocate(acc, nest(shape[:axis], "o", lambda o: nest(shape[axis + 1:], "in", lambda i: line(o, i))))
        return Scheduled(shape, dtype, emit, name)


_scan_rule("cumsum", "add", 0)
_scan_rule("cumprod", "mul", 1)


# --------------------------------------------------------------- arange, trilu, reverse_sequence

@rule("arange")
def _arange(args: list, attrs: Attrs, out: Type) -> Tensor:
    dtype = out_tensor_type(out).dtype
    start, step = float(attrs["start"]), float(attrs["step"])  # type: ignore[arg-type]
    if not is_float(dtype):
        start, step = int(start), int(step)  # type: ignore[assignment]

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        return BinaryOp("add", imm(start, dtype), BinaryOp("mul", cast(dtype, idx[0]), imm(step, dtype)))
    return Compute(shape_of(out), dtype, f, "arange")


@rule("trilu")
def _trilu(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, k = args
    upper = bool(attrs["upper"])

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        diagonal = cast("int64", sub(idx[-1], idx[-2]))
        offset = cast("int64", ctx.load(k, ()))
        return select(cmp("ge" if upper else "le", diagonal, offset), ctx.load(x, idx), imm(0, x.dtype))
    return Compute(x.shape, x.dtype, f, "trilu")


@rule("reverse_sequence")
def _reverse_sequence(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, lengths = args
    seq_axis = int(attrs["seq_axis"]) % x.ndim  # type: ignore[arg-type]
    batch_axis = int(attrs["batch_axis"]) % x.ndim  # type: ignore[arg-type]
    n = x.shape[seq_axis]

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        raw = cast("int64", ctx.load(lengths, (idx[batch_axis],)))
        length = cast("int32", BinaryOp("min", BinaryOp("max", raw, imm(1, "int64")), imm(max(n, 1), "int64")))
        i = idx[seq_axis]
        src = select(cmp("lt", i, length), sub(sub(length, 1), i), i)
        return ctx.load(x, idx[:seq_axis] + (src,) + idx[seq_axis + 1:])
    return Compute(x.shape, x.dtype, f, "reverse_sequence")


# ------------------------------------------------------------------------------------- einsum

@rule("einsum")
def _einsum(args: list, attrs: Attrs, out: Type) -> Tensor:
    operands = list(args[0])
    subs, result = parse_einsum("einsum", str(attrs["equation"]), [t.ndim for t in operands])
    dtype = out_tensor_type(out).dtype
    extents: dict[str, int] = {}
    for term, t in zip(subs, operands):
        for c, d in zip(term, t.shape):
            extents[c] = max(extents.get(c, 1), d) if d != 0 else 0
    summed = sorted({c for term in subs for c in term} - set(result))

    def fbody(ctx: Element, idx: Idx) -> PrimExpr:
        acc = ctx.accumulator(dtype, imm(0, dtype), "einsum_acc")

        def body(r: Idx) -> Stmt:
            at = dict(zip(result, idx)) | dict(zip(summed, r))
            term: PrimExpr | None = None
            for labels, t in zip(subs, operands):
                load = cast(dtype, ctx.load(t, tuple(const(0) if d == 1 else at[c] for c, d in zip(labels, t.shape))))
                term = load if term is None else BinaryOp("mul", term, load)
            assert term is not None
            return acc_store(acc, BinaryOp("add", acc_load(acc), term))
        ctx.loop([extents[c] for c in summed], [f"k_{c.lstrip('.')}" for c in summed], body)
        return acc_load(acc)
    return Reduce(shape_of(out), dtype, fbody, "einsum")


# ------------------------------------------------------------------ depth_to_space, space_to_depth

@rule("nn.depth_to_space")
def _depth_to_space(args: list, attrs: Attrs, out: Type) -> Tensor:
    x = args[0]
    b = int(attrs["block_size"])  # type: ignore[arg-type]
    channels = shape_of(out)[1]
    dcr = attrs["mode"] == "DCR"

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        n, c, y, xx = idx
        block = add(mul(floormod(y, b), b), floormod(xx, b))
        ch = add(mul(block, channels), c) if dcr else add(mul(c, b * b), block)
        return ctx.load(x, (n, ch, floordiv(y, b), floordiv(xx, b)))
    return Compute(shape_of(out), x.dtype, f, "depth_to_space")


@rule("nn.space_to_depth")
def _space_to_depth(args: list, attrs: Attrs, out: Type) -> Tensor:
    x = args[0]
    b = int(attrs["block_size"])  # type: ignore[arg-type]
    channels = x.shape[1]
    dcr = attrs["mode"] == "DCR"

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        n, ch, y, xx = idx
        c, block = (floormod(ch, channels), floordiv(ch, channels)) if dcr else (floordiv(ch, b * b), floormod(ch, b * b))
        return ctx.load(x, (n, c, add(mul(y, b), floordiv(block, b)), add(mul(xx, b), floormod(block, b))))
    return Compute(shape_of(out), x.dtype, f, "space_to_depth")

