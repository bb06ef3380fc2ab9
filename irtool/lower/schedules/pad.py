"""The zero padding of an NCHW convolution input as its own stage, written row by row with
vector copies and vector zero stores (the generic element-wise nest with a bounds `select`
and clamped loads per element cost more than a depthwise convolution itself)."""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import BufferLoad, For, PrimExpr, Stmt, Var, seq
from irtool.lower.schedules.tile import loop
from irtool.lower.schedules.tile import Store, chunks, splat, vec
from irtool.lower.te import INDEX, Builder, Scheduled, Tensor, add, const, imm, mul


def row_pieces(width: int, lanes: int, piece: Callable[[PrimExpr, int], Stmt]) -> list[Stmt]:
    """`piece(x0, n)` for the vectors covering `width` columns: a loop over the full vectors,
    then the short one."""
    out: list[Stmt] = []
    full = width // lanes
    if full > 1:
        xv = Var("xv", INDEX)
        out.append(For(xv, const(0), const(full), "serial", piece(mul(xv, lanes), lanes)))
    elif full == 1:
        out.append(piece(const(0), lanes))
    out += [piece(const(x0), n) for x0, n in chunks(width, lanes) if x0 >= full * lanes]
    return out


def cover(width: int, lanes: int, piece: Callable[[PrimExpr, int], Stmt]) -> list[Stmt]:
    """`piece(x0, n)` for vectors covering `width` columns, all of `lanes` or (narrower rows) of
    the widest power of two that fits, the last one ending at the last column and overlapping
    the one before: an output computed twice stores the same value twice. A 13- or 7-lane
    vector would be split by LLVM into 8 + 4 + 1 or 4 + 2 + 1 loads per tap (SqueezeNet's
    13-wide pool ran at 40 cycles per vector, znver5)."""
    if width == 0:
        return []
    n = lanes if width >= lanes else 1 << (width.bit_length() - 1)
    out = row_pieces(width - width % n, n, piece)
    if width % n:
        out.append(piece(const(width - n), n))
    return out


def pad_nchw(x: Tensor, pads: tuple[int, int, int, int], lanes: int, fill: float = 0.0) -> Scheduled:
    """`x` (NCHW) with `pads` = (top, left, bottom, right) rows/columns of `fill` around each
    plane (0 for convolution, -inf for max pooling)."""
    top, left, bottom, right = pads
    n, c, h, w = x.shape
    shape = (n, c, h + top + bottom, w + left + right)
    zero = imm(fill, x.dtype)

    def emit(builder: Builder, store: Store) -> Stmt:
        xb = builder.buffer_of(x)
        b, ch = Var("b", INDEX), Var("c", INDEX)

        def zeros(y: PrimExpr, first: int, width: int) -> list[Stmt]:
            return row_pieces(width, lanes, lambda x0, k: store((b, ch, y, vec(add(x0, first), k)), splat(zero, k)))

        def zero_rows(first: int, count: int) -> list[Stmt]:
            if count == 0:
                return []
            return [loop("py", count, lambda y: seq(zeros(add(y, first), 0, shape[3])))]
        y = Var("y", INDEX)
        copy = row_pieces(w, lanes, lambda x0, k: store(
            (b, ch, add(y, top), vec(add(x0, left), k)), BufferLoad(xb, (b, ch, y, vec(x0, k)))))
        interior = For(y, const(0), const(h), "serial", seq(
            (zeros(add(y, top), 0, left) if left else []) + copy
            + (zeros(add(y, top), left + w, right) if right else [])))
        plane = seq([*zero_rows(0, top), interior, *zero_rows(top + h, bottom)])
        return For(b, const(0), const(n), "serial", For(ch, const(0), const(c), "serial", plane))
    return Scheduled(shape, x.dtype, emit, "pad")
