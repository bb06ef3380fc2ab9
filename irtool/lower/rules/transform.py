"""Compute rules of the injective operators (definitions/transform.py, nn.pad, nn.batch_flatten):
index arithmetic only, inlined into the consumer's loop nest."""

from __future__ import annotations

import numpy as np

from irtool.ir.tir import BinaryOp, PrimExpr
from irtool.ir.types import Type
from irtool.lower.rules._rule import Attrs, Rule, out_tensor_type, rule, shape_of
from irtool.lower.te import (Compute, Concat, Element, Idx, Tensor, add, all_of, cast, clamp, cmp, const, floordiv,
                             floormod, imm, in_range, mul, ravel, select, sub, unravel)
from irtool.ops.definitions.transform import _factors, _layouts, _primals, _slices, _transpose_axes
from irtool.tir_transform.index_width import INT32_MAX


@rule("reshape", "squeeze", "expand_dims", "nn.batch_flatten")
def reshape_like(args: list, attrs: Attrs, out: Type) -> Tensor:
    """Row-major order is kept: the element at flat position f of the output is input's f."""
    x = args[0]
    shape = shape_of(out)
    if shape == x.shape:
        return x

    groups = axis_groups(shape, x.shape)

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        if groups is None:
            return ctx.load(x, unravel(ravel(idx, shape), x.shape))
        src: list[PrimExpr] = []
        for (a0, a1), (b0, b1) in groups:
            if a1 - a0 == 1 and b1 - b0 == 1:
                src.append(idx[a0])
            else:
                src.extend(unravel(ravel(idx[a0:a1], shape[a0:a1]), x.shape[b0:b1]))
        return ctx.load(x, src)
    return Compute(shape, x.dtype, f, "reshape")


Span2 = tuple[tuple[int, int], tuple[int, int]]


def axis_groups(out: tuple[int, ...], src: tuple[int, ...]) -> list[Span2] | None:
    """The shortest runs of output and input axes with equal element counts, in order: a
    reshape only splits or merges axes inside a run, so each run maps on its own and the index
    arithmetic stays local (a channel shuffle's H and W axes stay plain loop variables instead
    of digits of one flat index). None when a dimension is 0 (no elements to map)."""
    if 0 in out or 0 in src:
        return None
    groups: list[Span2] = []
    i = j = 0
    while i < len(out) or j < len(src):
        i0, j0, pa, pb = i, j, 1, 1
        if i < len(out):
            pa, i = out[i], i + 1
        if j < len(src):
            pb, j = src[j], j + 1
        while pa != pb:
            if pa < pb and i < len(out):
                pa, i = pa * out[i], i + 1
            elif pb < pa and j < len(src):
                pb, j = pb * src[j], j + 1
            else:
                return None
        groups.append(((i0, i), (j0, j)))
    return groups


@rule("transpose")
def _transpose(args: list, attrs: Attrs, out: Type) -> Tensor:
    x = args[0]
    perm = _transpose_axes("transpose", x.ndim, attrs["axes"])

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        src: list[PrimExpr] = [const(0)] * x.ndim
        for k, p in enumerate(perm):
            src[p] = idx[k]
        return ctx.load(x, tuple(src))
    return Compute(shape_of(out), x.dtype, f, "transpose")


@rule("concatenate")
def _concatenate(args: list, attrs: Attrs, out: Type) -> Tensor:
    parts = list(args[0])
    shape = shape_of(out)
    axis = int(attrs["axis"]) % len(shape)

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        i = idx[axis]
        value: PrimExpr | None = None
        offsets, start = [], 0
        for t in parts:
            offsets.append(start)
            start += t.shape[axis]
        # Later parts first, so the select chain reads `i < end_0 ? p0 : (i < end_1 ? p1 : ...)`.
        for t, off in reversed(list(zip(parts, offsets))):
            if t.shape[axis] == 0:
                continue
            local = clamp(sub(i, off), 0, t.shape[axis] - 1)
            load = ctx.load(t, idx[:axis] + (local,) + idx[axis + 1:])
            value = load if value is None else select(cmp("lt", i, off + t.shape[axis]), load, value)
        assert value is not None
        return value
    return Concat(shape, out_tensor_type(out).dtype, f, parts, axis)


def _slice_tensor(x: Tensor, axis: int, start: int, step: int, shape: tuple[int, ...], name: str) -> Tensor:
    def f(ctx: Element, idx: Idx) -> PrimExpr:
        return ctx.load(x, idx[:axis] + (add(mul(idx[axis], step), start),) + idx[axis + 1:])
    return Compute(shape, x.dtype, f, name)


@rule("split")
def _split(args: list, attrs: Attrs, out: Type) -> tuple:
    x = args[0]
    axis = int(attrs["axis"]) % x.ndim
    pieces = []
    start = 0
    for field in out.fields:  # type: ignore[attr-defined]
        shape = tuple(int(d) for d in field.shape)
        pieces.append(_slice_tensor(x, axis, start, 1, shape, "split"))
        start += shape[axis]
    return tuple(pieces)


@rule("strided_slice")
def _strided_slice(args: list, attrs: Attrs, out: Type) -> Tensor:
    x = args[0]
    sls = _slices("strided_slice", x.shape, attrs)
    ranges = [range(d) if s is None else range(*slice(*s).indices(d)) for d, s in zip(x.shape, sls)]

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        return ctx.load(x, tuple(add(mul(i, r.step), r.start) for i, r in zip(idx, ranges)))
    return Compute(shape_of(out), x.dtype, f, "strided_slice")


@rule("take")
def _take(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, indices = args
    flat = attrs["axis"] is None
    data_shape = (int(np.prod(x.shape)),) if flat else x.shape
    axis = 0 if flat else int(attrs["axis"]) % x.ndim
    b = 0 if flat else int(attrs["batch_dims"])
    b = b + indices.ndim if b < 0 else b
    n = data_shape[axis]
    wrap = attrs["mode"] == "wrap"

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        # out = data[:axis] + indices[b:] + data[axis+1:]; the first b axes are shared.
        k = indices.ndim - b
        ind_idx = idx[:b] + idx[axis:axis + k]
        raw = cast("int64", ctx.load(indices, ind_idx))
        pos = (BinaryOp("floormod", raw, imm(n, "int64")) if wrap
               else BinaryOp("min", BinaryOp("max", raw, imm(0, "int64")), imm(n - 1, "int64")))
        # An int32 index, unless the axis is too long for one (the position then stays int64,
        # and the kernel's other indices are widened to match, `tir_transform.index_width`).
        where = pos if n > INT32_MAX else cast("int32", pos)
        src = idx[:axis] + (where,) + idx[axis + k:]
        return ctx.load(x, unravel(src[0], x.shape) if flat else src)
    return Compute(shape_of(out), x.dtype, f, "take")


def _constant_fill(value: int) -> Rule:
    def lower(args: list, attrs: Attrs, out: Type) -> Tensor:
        dtype = out_tensor_type(out).dtype
        return Compute(shape_of(out), dtype, lambda ctx, idx: imm(value, dtype), "fill")
    return lower


rule("zeros", "zeros_like")(_constant_fill(0))
rule("ones", "ones_like")(_constant_fill(1))


def _scalar_fill(position: int) -> Rule:
    def lower(args: list, attrs: Attrs, out: Type) -> Tensor:
        dtype = out_tensor_type(out).dtype
        scalar = args[position]
        return Compute(shape_of(out), dtype, lambda ctx, idx: cast(dtype, ctx.load(scalar, ())), "fill")
    return lower


rule("full")(_scalar_fill(0))
rule("full_like")(_scalar_fill(1))


@rule("layout_transform")
def _layout_transform(args: list, attrs: Attrs, out: Type) -> Tensor:
    x = args[0]
    src, dst = _layouts("layout_transform", attrs, x.ndim)
    src_names = [a for a, _ in src]
    dst_names = [a for a, _ in dst]
    src_f, dst_f = _factors(src), _factors(dst)

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        src_idx: list[PrimExpr] = [const(0)] * x.ndim
        for a in _primals(src):
            full = idx[dst_names.index(a)]
            if a in dst_f:
                full = add(mul(full, dst_f[a]), idx[dst_names.index(a.lower())])
            if a in src_f:
                src_idx[src_names.index(a)] = floordiv(full, src_f[a])
                src_idx[src_names.index(a.lower())] = floormod(full, src_f[a])
            else:
                src_idx[src_names.index(a)] = full
        return ctx.load(x, tuple(src_idx))
    return Compute(shape_of(out), x.dtype, f, "layout_transform")


@rule("nn.pad")
def _pad(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, value = args
    if x.ndim == 0:
        return x
    width = [tuple(row) for row in attrs["pad_width"]]  # type: ignore[union-attr]
    mode = str(attrs["pad_mode"])
    return pad_tensor(x, width, mode, value, shape_of(out))


def pad_tensor(x: Tensor, width: list, mode: str, value: Tensor | PrimExpr, shape: tuple[int, ...],
               stage: bool = False) -> Compute:
    """x padded by `width` [(before, after), ...]: constant (`value`), edge or reflect (numpy)."""
    def f(ctx: Element, idx: Idx) -> PrimExpr:
        src: list[PrimExpr] = []
        inside: list[PrimExpr] = []
        for i, (before, _), n in zip(idx, width, x.shape):
            j = sub(i, before)
            if mode == "constant":
                if before or shape[len(src)] != n:
                    inside += in_range(j, 0, n)
                    j = clamp(j, 0, n - 1)
            elif mode == "edge":
                j = clamp(j, 0, n - 1)
            else:  # reflect about the edges, without repeating them
                if n > 1:
                    j = select(cmp("lt", j, 0), sub(const(0), j), j)
                    j = select(cmp("ge", j, n), sub(const(2 * (n - 1)), j), j)
                else:
                    j = const(0)
            src.append(j)
        v = ctx.load(x, tuple(src))
        if mode != "constant" or not inside:
            return v
        fill = value if not isinstance(value, Tensor) else cast(x.dtype, ctx.load(value, ()))
        return select(all_of(inside), v, fill)
    return Compute(shape, x.dtype, f, "pad", stage=stage)
