"""The register-tiled `nn.conv2d` schedules (see tile.py for the tile itself)."""

from __future__ import annotations

from irtool.ir.tir import BufferLoad, For, PrimExpr, Stmt, Var, seq
from irtool.lower.schedules.tile import (
    RegisterTile,
    Store,
    blocks,
    host_register_tile,
    register_tiles,
    vec,
)
from irtool.lower.te import INDEX, Builder, Idx, Scheduled, Tensor, add, const, mul


def conv2d_nchw_tiled(data: Tensor, w: Tensor, dtype: str, out_shape: tuple[int, ...], strides: tuple[int, int],
                      dilation: tuple[int, int], tile: RegisterTile | None = None) -> Scheduled | None:
    """An NCHW/OIHW, ungrouped `nn.conv2d` over already padded `data` as register tiles of
    output channels x output columns (the columns are the vector axis, contiguous in the input
    when the horizontal stride is 1); None outside that case."""
    if not (dtype == "float32" and data.dtype == w.dtype == dtype and strides[1] == 1):
        return None
    n_ext, o_ext, oh, ow = out_shape
    ic, kh, kw = w.shape[1:]
    if min(out_shape) == 0 or data.shape[1] != ic:
        return None
    shape = tile or host_register_tile()
    sh, (dh, dw) = strides[0], dilation
    nr = shape.lanes * shape.vectors

    def emit(builder: Builder, store: Store) -> Stmt:
        db, wb = builder.buffer_of(data), builder.buffer_of(w)
        b, y = Var("b", INDEX), Var("oy", INDEX)

        def vector(nt: PrimExpr, x0: PrimExpr, c: int, lanes: int, red: Idx) -> PrimExpr:
            rc, ry, rx = red
            return BufferLoad(db, (b, rc, add(mul(y, sh), mul(ry, dh)), vec(add(add(x0, c), mul(rx, dw)), lanes)))
        tiles = [register_tiles(mb, nb, shape.lanes, dtype, (ic, kh, kw),
                                 lambda o, red: BufferLoad(wb, (o, *red)), vector,
                                 lambda o, cols: (b, o, y, cols), store)
                 for mb in blocks(o_ext, shape.rows) for nb in blocks(ow, nr)]
        return For(b, const(0), const(n_ext), "serial", For(y, const(0), const(oh), "serial", seq(tiles)))
    return Scheduled(out_shape, dtype, emit, "conv2d")
