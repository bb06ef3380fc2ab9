"""Register-tiled matrix products beyond `dense_tiled`: `nn.batch_matmul` (attention's Q·Kᵀ and
P·V), and the integer products of quantized models (`nn.dense` and `nn.batch_matmul` of int8 /
uint8 operands accumulated in int32), on the tile of tile.py.

Each batch is one matrix product C = A·B swept in column tiles of NR = lanes x vectors outputs.
The tile broadcasts one element of A per row and reads NR contiguous elements of B per
reduction step: from a k-major panel packed (and widened to the accumulator's type) for the
column tile just before its row tiles, as `dense_tiled` packs W, whenever several row tiles
read it or B is transposed; straight from B's rows otherwise (one row tile: attention's decode
step, widened on load: int8 lanes become int32 lanes). On a 12 x 128x768 · 768x3072 batch the
panels ran at 45 GFLOP/s against 30 reading B's rows (AVX-512 host). Integer accumulators use
the target's float32 lane count (32-bit lanes: 8 with AVX2, 16 with AVX-512).
"""

from __future__ import annotations

from irtool.ir.tir import Allocate, Buffer, BufferLoad, For, PrimExpr, Stmt, Var, seq, with_lanes
from irtool.lower.schedules.dense import pack_panel, row_blocks
from irtool.lower.schedules.tile import (
    Combine,
    RegisterTile,
    Store,
    blocks,
    mul_add,
    register_tile,
    register_tiles,
    shifted,
    tile_loop,
    tiled_dtypes,
    vec,
)
from irtool.lower.te import INDEX, Builder, Idx, Scheduled, Tensor, add, cast, const, mul

def matmul_tiled(a: Tensor, b: Tensor, dtype: str, out_shape: tuple[int, ...], transpose_a: bool,
                 transpose_b: bool, tile: RegisterTile | None = None,
                 combine: Combine = mul_add) -> Scheduled | None:
    """C = A·B as register tiles, or None outside the dtypes and shapes the tile handles.

    `out_shape` (M, N) is a matrix product of 2-d operands (`nn.dense`: B given as (N, K), so
    `transpose_b`); (G, M, N) a batch of them (`nn.batch_matmul`), where an operand with a
    batch of one is shared by every product. A is (M, K), or (K, M) with `transpose_a`.
    `combine` is the tile's reduction step (int8.py's byte dot product over packed words)."""
    batched = len(out_shape) == 3
    if not (tiled_dtypes(dtype, a.dtype, b.dtype) and a.ndim == b.ndim == len(out_shape) and min(out_shape) > 0):
        return None
    k_ext = a.shape[-2] if transpose_a else a.shape[-1]
    if k_ext == 0:
        return None
    m_ext, n_ext = out_shape[-2:]
    shape = tile or register_tile()
    nr = shape.lanes * shape.vectors
    split = max(1, shape.rows // m_ext)

    def emit(builder: Builder, store: Store) -> Stmt:
        g = Var("g", INDEX)

        def lead(t: Tensor) -> Idx:
            return ((const(0) if t.shape[0] == 1 else g),) if batched else ()
        ab = builder.buffer_of(a)
        packed = transpose_b or m_ext > shape.rows   # a panel several row tiles read
        bb = None if packed else builder.buffer_of(b)
        panel = Buffer("b_panel", (k_ext, nr), dtype) if packed else None

        def scalar(m: PrimExpr, red: Idx) -> PrimExpr:
            index = (*lead(a), red[0], m) if transpose_a else (*lead(a), m, red[0])
            return cast(dtype, BufferLoad(ab, index))

        def column_tile(first: int, width: int, nt: PrimExpr) -> Stmt:
            """Every row tile of the `width` columns from `first + nt * NR`."""
            n0 = add(mul(nt, nr), first)

            def vector(_nt: PrimExpr, _n0: PrimExpr, c: PrimExpr, lanes: int, red: Idx) -> PrimExpr:
                offset = mul(c, shape.lanes)
                if panel is not None:
                    return BufferLoad(panel, (red[0], vec(offset, lanes)))
                assert bb is not None
                return cast(with_lanes(dtype, lanes), BufferLoad(bb, (*lead(b), red[0], vec(add(n0, offset), lanes))))

            def at(m: PrimExpr, cols: PrimExpr) -> Idx:
                return ((g,) if batched else ()) + (m, shifted(cols, n0))
            tiles = [register_tiles(mb, (0, 1, width), shape.lanes, dtype, (k_ext,), scalar, vector, at, store, split,
                                    combine)
                     for mb in row_blocks(m_ext, shape.rows)]
            if panel is None:
                return seq(tiles)
            if transpose_b:
                pack = pack_panel(builder, b, panel, n0, width, k_ext, lead=lead(b))
            else:
                k, j = Var("k", INDEX), Var("j", INDEX)
                pack = For(k, const(0), const(k_ext), "serial", For(j, const(0), const(width), "serial",
                           builder.store_element(b, (*lead(b), k, add(n0, j)), panel, (k, j))))
            return seq([pack, *tiles])
        body = seq([tile_loop("no", nb, lambda nt, nb=nb: column_tile(nb[0], nb[2], nt)) for nb in blocks(n_ext, nr)])
        if panel is not None:   # one panel per product, so that products may run on threads
            body = Allocate(panel, body)
        return For(g, const(0), const(out_shape[0]), "serial", body) if batched else body
    return Scheduled(out_shape, dtype, emit, "batch_matmul" if batched else "dense")
