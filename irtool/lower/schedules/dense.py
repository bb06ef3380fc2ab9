"""The register-tiled `nn.dense` schedule (see tile.py for the tile itself)."""

from __future__ import annotations

from irtool.ir.tir import Allocate, Buffer, BufferLoad, BufferStore, For, Stmt, Var, seq
from irtool.lower.schedules.tile import (
    RegisterTile,
    Store,
    Vector,
    blocks,
    host_register_tile,
    register_tiles,
    vec,
)
from irtool.lower.te import (
    INDEX,
    Builder,
    Scheduled,
    Tensor,
    add,
    const,
    floordiv,
    floormod,
)


def dense_tiled(x: Tensor, w: Tensor, dtype: str, tile: RegisterTile | None = None) -> Scheduled | None:
    """`nn.dense` (Y[m, n] = sum_k X[m, k] * W[n, k]) as a register-tiled kernel, or None when the
    shapes or dtypes are outside what the tile handles (the rule's scalar form is used then)."""
    if not (dtype == "float32" and x.dtype == w.dtype == dtype and x.ndim == 2 and w.ndim == 2):
        return None
    m_ext, k_ext = x.shape
    n_ext = w.shape[0]
    if min(m_ext, n_ext, k_ext) == 0:
        return None

    shape = tile or host_register_tile()

    def emit(builder: Builder, store: Store) -> Stmt:
        xb, wb = builder.buffer_of(x), builder.buffer_of(w)
        nr = shape.lanes * shape.vectors
        # W in panels of NR columns, k-major inside a panel: a tile's reduction reads one
        # contiguous stream (rows of a plain transpose are N floats apart and thrash the cache).
        packed = Buffer("w_packed", (-(-n_ext // nr), k_ext, nr), dtype)
        n, k = Var("n", INDEX), Var("k", INDEX)
        pack = For(n, const(0), const(n_ext), "serial", For(k, const(0), const(k_ext), "serial", BufferStore(
            packed, (floordiv(n, nr), k, floormod(n, nr)), BufferLoad(wb, (n, k)))))

        def panel_of(first_panel: int) -> Vector:
            """Column blocks start at multiples of NR: tile `nt` of a block reads one panel."""
            return lambda nt, n0, c, lanes, red: BufferLoad(
                packed, (add(nt, first_panel), red[0], vec(const(c), lanes)))
        tiles = [register_tiles(mb, nb, shape.lanes, dtype, (k_ext,), lambda m, red: BufferLoad(xb, (m, red[0])),
                                 panel_of(nb[0] // nr), lambda m, cols: (m, cols), store)
                 for nb in blocks(n_ext, nr) for mb in blocks(m_ext, shape.rows)]
        return Allocate(packed, seq([pack, *tiles]))
    return Scheduled((m_ext, n_ext), dtype, emit, "dense")
