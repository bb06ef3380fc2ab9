"""The register-tiled `nn.dense` schedule (see tile.py for the tile itself)."""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import (
    Allocate,
    BinaryOp,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    FloatImm,
    For,
    PrimExpr,
    Stmt,
    Var,
    seq,
)
from irtool.lower.schedules.tile import (
    Block,
    RegisterTile,
    Store,
    blocks,
    each_slot,
    loop,
    register_tile,
    register_tiles,
    shifted,
    splat,
    tile_loop,
    vec,
)
from irtool.lower.te import INDEX, Builder, Idx, Scheduled, Tensor, add, const, mul


def panel_layout(tile: RegisterTile | None = None) -> str:
    """The packed weight layout the tile reads directly: panels of NR = lanes x vectors rows of
    W, k-major inside a panel (`NK16n` is W as (N/16, K, 16))."""
    shape = tile or register_tile()
    return f"NK{shape.lanes * shape.vectors}n"


def weight_layout_for(rows: int, tile: RegisterTile | None = None) -> str:
    """The weight layout `dense_tiled` reads best when X has `rows` rows: the tile's panels for a
    matrix product; "NK" (W as given) for fewer rows than the tile's, whose weight rows are
    streamed once straight from W (`dot_tiles`: measured 1.3x faster than from packed panels
    on a 1 x 9216 . 4096 x 9216 FC layer)."""
    shape = tile or register_tile()
    return "NK" if rows < shape.rows else panel_layout(shape)


def row_blocks(extent: int, rows: int) -> list[Block]:
    """The row tiles of a matrix product's `extent` rows, at most `rows` each and as even as
    possible: ceil(extent / rows) tiles of s or s - 1 rows. A remainder tile of one or two rows
    has too few independent `fma` chains to hide the instruction's latency: ConvNeXt's 49-row
    products (6 x 8 + 1) ran at 181-192 GFLOP/s against 235-250 for its 196-row ones; 7 x 7
    rows keep every tile busy."""
    count = -(-extent // rows)
    size = -(-extent // count)
    full = extent - count * (size - 1)      # tiles of `size` rows; the others have one fewer
    out = [(0, full, size)]
    if full < count:
        out.append((full * size, count - full, size - 1))
    return out


def dense_tiled(x: Tensor, w: Tensor, dtype: str, tile: RegisterTile | None = None,
                weight_layout: str = "NK") -> Scheduled | None:
    """`nn.dense` (Y[m, n] = sum_k X[m, k] * W[n, k]) as a register-tiled kernel, or None when the
    shapes, dtypes or weight layout are outside what the tile handles (the rule's scalar form is
    used then).

    Column tiles of NR = lanes x vectors outputs run one after the other; each reads one panel of
    W (NR rows, k-major: one contiguous stream) for all its row tiles. `weight_layout` is "NK"
    (W as given: each panel is packed into a small scratch buffer just before its tiles, where
    it stays in cache) or the tile's `panel_layout()` (W already packed, e.g. at compile time by
    `alter-layout`). With fewer rows than the tile's (a matrix-vector product: batch-1 FC
    layers), the one pass over the weight must not be latency bound: panels split each output's
    sum over interleaved k steps; an unpacked W is not packed at all but read row by row
    (`dot_tiles`), since packing would cost more traffic than the product itself."""
    if not (dtype == "float32" and x.dtype == w.dtype == dtype and x.ndim == 2):
        return None
    shape = tile or register_tile()
    nr = shape.lanes * shape.vectors
    prepacked = weight_layout != "NK"
    if prepacked and (weight_layout != panel_layout(shape) or w.shape[1:] != (x.shape[1], nr)):
        return None
    if not prepacked and w.ndim != 2:
        return None
    m_ext, k_ext = x.shape
    n_ext = w.shape[0] * nr if prepacked else w.shape[0]
    if min(m_ext, n_ext, k_ext) == 0:
        return None
    split = max(1, shape.rows // m_ext)

    if not prepacked and m_ext < shape.rows:
        return Scheduled((m_ext, n_ext), dtype, lambda builder, store: dot_tiles(
            builder.buffer_of(x), builder.buffer_of(w), dtype, shape, store), "dense")

    def emit(builder: Builder, store: Store) -> Stmt:
        xb = builder.buffer_of(x)
        scratch = None if prepacked else Buffer("w_panel", (k_ext, nr), dtype)

        def column_tile(first: int, width: int, nt: PrimExpr) -> Stmt:
            """Every row tile of the NR columns from `first + nt * NR` (`width` of them)."""
            n0 = add(mul(nt, nr), first)
            source, lead = (builder.buffer_of(w), (add(nt, first // nr),)) if scratch is None else (scratch, ())

            def vector(_nt: PrimExpr, _n0: PrimExpr, c: PrimExpr, lanes: int, red: Idx) -> PrimExpr:
                return BufferLoad(source, (*lead, red[0], vec(mul(c, shape.lanes), lanes)))
            tiles = [register_tiles(mb, (0, 1, width), shape.lanes, dtype, (k_ext,),
                                    lambda m, red: BufferLoad(xb, (m, red[0])), vector,
                                    lambda m, cols: (m, shifted(cols, n0)), store, split)
                     for mb in row_blocks(m_ext, shape.rows)]
            return seq(tiles if scratch is None else [pack_panel(builder, w, scratch, n0, width, k_ext), *tiles])
        body = seq([tile_loop("no", nb, lambda nt, nb=nb: column_tile(nb[0], nb[2], nt))
                    for nb in blocks(n_ext, nr)])
        return body if scratch is None else Allocate(scratch, body)
    return Scheduled((m_ext, n_ext), dtype, emit, "dense")


def pack_panel(builder: Builder, w: Tensor, panel: Buffer, n0: PrimExpr, width: int, k_ext: int,
               kc: int = 16, lead: Idx = ()) -> Stmt:
    """panel[k, j] = w[*lead, n0 + j, k] for the `width` rows from n0, as transposes of width x KC
    blocks: each block reads one cache line from each row and writes KC lines of the panel, all
    in L1 (rows whose stride is a multiple of 4 KiB would otherwise evict each other between
    consecutive k). A computed `w` (the model zoo's weights are `full(...)` fills fused into the
    group) is evaluated right here instead of into a stage of all of W. Columns past `width` are
    left unset: no tile reads them."""
    out: list[Stmt] = []
    for k0, count, size in blocks(k_ext, kc):
        kb, j, kk = Var("kb", INDEX), Var("j", INDEX), Var("kk", INDEX)
        k = add(add(mul(kb, size), k0), kk)
        body = builder.store_element(w, (*lead, add(n0, j), k), panel, (k, j))
        body = For(j, const(0), const(width), "serial", For(kk, const(0), const(size), "serial", body))
        out.append(For(kb, const(0), const(count), "serial", body))
    return seq(out)


def dot_tiles(x: Buffer, w: Buffer, dtype: str, tile: RegisterTile, store: Store) -> Stmt:
    """Y = X W^T for few rows of X, vectorized along k: R rows of W (R x M x vectors accumulators
    fill the tile's registers) are read once each as contiguous vector streams, every row of X
    reuses them, and each output is its accumulator's lanes added up after the reduction."""
    (m_ext, k_ext), n_ext = x.shape, w.shape[0]
    per_row = max(1, tile.rows // m_ext)
    width = tile.lanes * tile.vectors
    zero = FloatImm(0.0, dtype)

    def columns(first: int, rows: int, nt: PrimExpr) -> Stmt:
        n0 = add(mul(nt, rows), first)
        acc = Buffer("acc", (m_ext * rows, width), dtype, scope="local")

        def slots(body: Callable[[PrimExpr, PrimExpr, PrimExpr], Stmt]) -> Stmt:
            """`body(m, r, slot)` for each row m of X and row r of the block of W (unrolled)."""
            def row_of_w(m: PrimExpr) -> Stmt:
                return loop("r", rows, lambda r: body(m, r, add(mul(m, rows), r)), "unrolled")
            return loop("m", m_ext, row_of_w, "unrolled")

        def steps(k0: PrimExpr, span: int) -> Stmt:
            def update(m: PrimExpr, r: PrimExpr, i: PrimExpr, c: PrimExpr, n: int) -> Stmt:
                def k() -> PrimExpr:   # built per access, as every index: codegen emits a shared node once
                    return vec(add(k0, mul(c, tile.lanes)), n)

                def at() -> Idx:
                    return (i, vec(mul(c, tile.lanes), n))
                fma = Call("fma", [BufferLoad(w, (add(n0, r), k())), BufferLoad(x, (m, k())), BufferLoad(acc, at())])
                return BufferStore(acc, at(), fma)
            return slots(lambda m, r, i: each_slot(1, span, tile.lanes, lambda _, c, n: update(m, r, i, c, n)))
        ko = Var("ko", INDEX)
        body: list[Stmt] = [each_slot(m_ext * rows, width, tile.lanes, lambda i, c, n: BufferStore(
            acc, (i, vec(mul(c, tile.lanes), n)), splat(zero, n)))]
        if k_ext >= width:
            body.append(For(ko, const(0), const(k_ext // width), "serial", steps(mul(ko, width), width)))
        if k_ext % width:
            body.append(steps(const(k_ext - k_ext % width), k_ext % width))

        def result(m: PrimExpr, r: PrimExpr, i: PrimExpr) -> Stmt:
            total: PrimExpr = BufferLoad(acc, (i, const(0)))
            for lane in range(1, width):
                total = BinaryOp("add", total, BufferLoad(acc, (i, const(lane))))
            return store((m, add(n0, r)), total)
        body.append(slots(result))
        return Allocate(acc, seq(body))
    return seq([tile_loop("no", nb, lambda nt, nb=nb: columns(nb[0], nb[2], nt)) for nb in blocks(n_ext, per_row)])
