"""A 1x1 `nn.conv2d` over a plane narrower than a vector, as a matrix product over the
flattened plane: output[o, p] = sum over c of weight[o, c] * input[c, p], p = y * W + x.

The channel tile (conv_channels.py) needs its weights in blocks of one vector of output channels;
when the count is not a multiple of the vector (SqueezeNet's 1000 classes) `alter-layout` leaves
OIHW and the tile packed all the weights at every call: 0.3 of 1.3 ms for SqueezeNet's
512 -> 1000 at 13x13 (znver5). Here the vectors run along the pixels and each weight is one
broadcast scalar, read as given. Pixels are only consecutive in memory across row ends, and an
index may not leave its dimension, so the input planes are first copied into a scratch of
(channel, pixel) rows and the products are stored to another, whose rows are then stored into
the NCHW output row by row (the fused epilogue is applied there). The copies move the
activations once each; the weights, much larger, are never copied.
"""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import Allocate, Buffer, BufferLoad, BufferStore, For, PrimExpr, Stmt, Var, seq
from irtool.lower.schedules.layout import in_blocked
from irtool.lower.schedules.pad import cover
from irtool.lower.schedules.tile import RegisterTile, Store, column_blocks, loop, register_tiles, vec
from irtool.lower.te import INDEX, Builder, Idx, Scheduled, Tensor, add, const, mul


def conv2d_1x1_flat(data: Tensor, w: Tensor, kernel_layout: str, out_shape: tuple[int, ...],
                    tile: RegisterTile, groups: int = 1) -> Scheduled | None:
    """The unit-stride float32 1x1 conv of `data` (NCHW, unpadded) by `w` (OIHW or blocked) as
    `tile.rows` output channels x `tile.vectors` pixel vectors per register tile, channel tiles
    outermost (a tile's weights stay in cache across the plane; the plane's input panel is in
    the next level), group by group (ShuffleNet's 1x1 convs have 34, 68 or 136 channels per
    group); None outside that case."""
    n_ext, o_ext, oh, ow = out_shape
    c_ext = data.shape[1]
    if not (data.dtype == w.dtype == "float32" and min(out_shape) > 0 and data.shape[2:] == (oh, ow)
            and c_ext % groups == 0 and o_ext % groups == 0):
        return None
    cg, og = c_ext // groups, o_ext // groups
    pixels, lanes, rows = oh * ow, tile.lanes, tile.rows

    def emit(builder: Builder, store: Store) -> Stmt:
        db, wb = builder.buffer_of(data), builder.buffer_of(w)
        flat_in = Buffer("flat_in", (c_ext, pixels), "float32")
        flat_out = Buffer("flat_out", (o_ext, pixels), "float32")
        b = Var("b", INDEX)

        def rows_of(plane: int, body: Callable[[PrimExpr, PrimExpr, PrimExpr, int], Stmt]) -> Stmt:
            """`body(channel, y, x0, n)` over the vectors covering every row of `plane` planes."""
            ch, y = Var("ch", INDEX), Var("y", INDEX)
            return For(ch, const(0), const(plane), "serial", For(y, const(0), const(oh), "serial", seq(
                cover(ow, lanes, lambda x0, n: body(ch, y, x0, n)))))

        def flat(y: PrimExpr, x0: PrimExpr, n: int) -> PrimExpr:
            return vec(add(mul(y, ow), x0), n)
        copy_in = rows_of(c_ext, lambda ch, y, x0, n: BufferStore(
            flat_in, (ch, flat(y, x0, n)), BufferLoad(db, (b, ch, y, vec(x0, n)))))
        copy_out = rows_of(o_ext, lambda ch, y, x0, n: store(
            (b, ch, y, vec(x0, n)), BufferLoad(flat_out, (ch, flat(y, x0, n)))))

        def weight(o: PrimExpr, red: Idx) -> PrimExpr:
            return BufferLoad(wb, in_blocked((o, red[0], const(0), const(0)), "OIHW", kernel_layout))

        g: PrimExpr = Var("g", INDEX) if groups > 1 else const(0)

        def pixel_vector(nt: PrimExpr, p0: PrimExpr, c: PrimExpr, n: int, red: Idx) -> PrimExpr:
            return BufferLoad(flat_in, (add(mul(g, cg), red[0]), vec(add(p0, mul(c, lanes)), n)))

        def at(o: PrimExpr, cols: PrimExpr) -> Idx:
            return (o, cols)

        def into_flat(idx: Idx, value: PrimExpr) -> Stmt:
            return BufferStore(flat_out, idx, value)

        def channel_block(first: PrimExpr, size: int) -> Stmt:
            return seq([register_tiles((add(mul(g, og), first), 1, size), nb, lanes, "float32", (cg,),  # type: ignore[arg-type]
                                       weight, pixel_vector, at, into_flat)
                        for nb in column_blocks(pixels, lanes * tile.vectors, lanes)])
        tiles: Stmt = seq([loop("ot", og // rows, lambda ot: channel_block(mul(ot, rows), rows))]
                          + ([channel_block(const(og - og % rows), og % rows)] if og % rows else []))
        if groups > 1:
            tiles = For(g, const(0), const(groups), "serial", tiles)  # type: ignore[arg-type]
        body = For(b, const(0), const(n_ext), "serial", seq([copy_in, tiles, copy_out]))
        return Allocate(flat_in, Allocate(flat_out, body))
    return Scheduled(out_shape, "float32", emit, "conv2d")
