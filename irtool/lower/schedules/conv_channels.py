"""`nn.conv2d` vectorized over output channels: the schedule for strided, 1x1, grouped convs and
small feature maps (the column-vector tile of conv.py needs unit column stride and wastes lanes
when the output width is not a multiple of the vector).

The convolution is a matrix product per group: rows are output pixels (flattened over the output
rows, so a 7x7 map is 49 rows, not 7 short rows), columns are the group's output channels, the
reduction is (input channel, kernel row, kernel column). Weights are read in blocks of one vector
of output channels (`OIHW8o` for 8 lanes: one vector load gives 8 channels): as given when the
kernel already has that layout (the `alter-layout` pass packs constant weights at compile time),
otherwise packed at the start of each call. Each reduction step broadcasts one input scalar per
pixel of the tile; any stride or dilation is just a different scalar address. Results are stored
channel vector by channel vector into NCHW (a strided store, per element).
"""

from __future__ import annotations


from irtool.ir.tir import (
    Allocate,
    Buffer,
    BufferLoad,
    BufferStore,
    For,
    PrimExpr,
    Stmt,
    Var,
    seq,
)
from irtool.lower.schedules.layout import in_blocked, output_blocked
from irtool.lower.schedules.tile import (
    Combine,
    RegisterTile,
    Store,
    Vector,
    blocks,
    loop,
    mul_add,
    register_tiles,
    shifted,
    tiled_dtypes,
    vec,
)
from irtool.lower.te import (
    INDEX,
    Builder,
    Idx,
    Scheduled,
    Tensor,
    add,
    cast,
    const,
    floordiv,
    floormod,
    mul,
)


def packs_weights(kernel_layout: str, per_group: int, lanes: int) -> bool:
    """Whether the channel tile packs its weights at every call: unless they come in blocks of
    one vector of output channels (`alter-layout` blocks constant weights when each group's
    output channels are a multiple of the vector)."""
    return not (output_blocked(kernel_layout, "O", "OIHW") == lanes and per_group % lanes == 0)


def conv2d_channels_tiled(data: Tensor, w: Tensor, kernel_layout: str, kernel: tuple[int, int], dtype: str,
                          out_shape: tuple[int, ...], strides: tuple[int, int], dilation: tuple[int, int],
                          groups: int, tile: RegisterTile, strip: int = 256,
                          combine: Combine = mul_add) -> Scheduled | None:
    """The NCHW conv over already padded `data` with a `kernel` = (KH, KW) weight `w` in
    `kernel_layout` (any permutation of OIHW, possibly blocked), or None for dtypes other than
    float32 and integers accumulated in int32 (widened on load).

    `tile.rows` pixels x `tile.vectors` vectors of `tile.lanes` channels are accumulated in
    registers; pixels are swept in strips of about `strip` so that the strip's input rows stay
    in cache while every channel tile of the group passes over them. `combine` is the tile's
    reduction step (int8.py's byte dot product over channels packed four to a word)."""
    if not tiled_dtypes(dtype, data.dtype, w.dtype) or min(out_shape) == 0:
        return None
    n_ext, o_ext, oh, ow = out_shape
    cg = data.shape[1] // groups
    og = o_ext // groups
    lanes = tile.lanes
    kh, kw = kernel
    pixels = oh * ow
    sh, sw = strides
    dh, dw = dilation
    per_group = -(-og // lanes)           # channel blocks per group
    prepacked = not packs_weights(kernel_layout, og, lanes)
    nr = lanes * tile.vectors
    mr = tile.rows
    # Pixels per strip: whole output rows, as many as divide the map and fit in `strip`, so
    # that every strip has the same tiles (one copy of the code, not a tail strip too); a
    # strip shorter than a row is a multiple of the tile rows.
    rows = [ow * k for k in range(1, oh + 1) if oh % k == 0 and ow * k <= strip]
    span = max(rows) if rows else max(mr, strip // mr * mr)

    def emit(builder: Builder, store: Store) -> Stmt:
        db, wb = builder.buffer_of(data), builder.buffer_of(w)
        b = Var("b", INDEX)
        g: PrimExpr = Var("g", INDEX) if groups > 1 else const(0)
        packed = wb if prepacked else Buffer("w_packed", (groups * per_group, cg, kh, kw, lanes), dtype)

        def pixel(p: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
            return floordiv(p, ow), floormod(p, ow)

        def scalar(p: PrimExpr, red: Idx) -> PrimExpr:
            rc, ry, rx = red
            y, x = pixel(p)
            return cast(dtype, BufferLoad(db, (b, add(mul(g, cg), rc), add(mul(y, sh), mul(ry, dh)),
                                               add(mul(x, sw), mul(rx, dw)))))

        def weights_of(first_block: int) -> Vector:
            """Channel tiles of a block start at multiples of NR: chunk c of tile nt is block
            first + nt * vectors + c of the group."""
            def load(nt: PrimExpr, n0: PrimExpr, c: PrimExpr, n: int, red: Idx) -> PrimExpr:
                blk = add(add(mul(g, per_group), mul(nt, tile.vectors)), add(c, first_block))
                return BufferLoad(packed, (blk, *red, vec(const(0), n)))
            return load

        def at(p: PrimExpr, cols: PrimExpr) -> Idx:
            y, x = pixel(p)
            return (b, shifted(cols, mul(g, og)), y, x)

        def strip_tiles(first: PrimExpr, extent: int) -> Stmt:
            return seq([register_tiles((add(first, mb[0]), mb[1], mb[2]), nb,  # type: ignore[arg-type]
                                       lanes, dtype, (cg, kh, kw), scalar, weights_of(nb[0] // lanes), at, store,
                                       combine=combine)
                        for nb in blocks(og, nr) for mb in blocks(extent, mr)])
        strips: list[Stmt] = []
        if pixels >= span:
            strips.append(loop("s", pixels // span, lambda s: strip_tiles(mul(s, span), span)))
        if pixels % span:
            strips.append(strip_tiles(const(pixels - pixels % span), pixels % span))
        per_image = seq(strips) if groups == 1 else For(g, const(0), const(groups), "serial", seq(strips))  # type: ignore[arg-type]
        body: Stmt = For(b, const(0), const(n_ext), "serial", per_image)
        if prepacked:
            return body
        o, rc, ry, rx = (Var(v, INDEX) for v in ("o", "rc", "ry", "rx"))
        blk = add(mul(floordiv(o, og), per_group), floordiv(floormod(o, og), lanes))
        pack = For(o, const(0), const(o_ext), "serial", For(rc, const(0), const(cg), "serial", For(
            ry, const(0), const(kh), "serial", For(rx, const(0), const(kw), "serial", BufferStore(
                packed, (blk, rc, ry, rx, floormod(floormod(o, og), lanes)),
                cast(dtype, BufferLoad(wb, in_blocked((o, rc, ry, rx), "OIHW", kernel_layout))))))))
        return Allocate(packed, seq([pack, body]))
    return Scheduled(out_shape, dtype, emit, "conv2d")
