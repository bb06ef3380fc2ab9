"""Register-tiled schedules that compute rules emit when shapes allow (issue 9, first step).

LLVM does not find a register tile in a scalar loop nest (docs/shared reference: 20-25 % of peak
at best), so the tile is written out here: an MR x NR block of the output lives in a `local`
accumulator indexed only by constants (SROA turns it into MR * NR/L vector registers of L lanes,
L the host's float32 vector width), carried through the whole reduction loop; each reduction
step is NR/L contiguous vector loads and MR broadcasts feeding MR * NR/L `fma` calls. Output
edges are tiles of their own (fewer rows, shorter or scalar vectors), so no tile reads or writes
out of bounds and no branch is needed.

Known limits (next steps of issue 9): a consumer of a tiled tensor (bias, activation) runs in a
nest of its own after it, not in registers; weights are packed at run time, not folded at
compile time; the tile follows the host, not a target option of the lowering.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from irtool.codegen.target import TargetOptions
from irtool.ir.tir import (Allocate, Broadcast, Buffer, BufferLoad, BufferStore, Call, FloatImm, For, PrimExpr, Ramp,
                           Stmt, Var, seq)
from irtool.lower.te import INDEX, Builder, Idx, Scheduled, Tensor, add, const, floordiv, floormod, mul

Store = Callable[[Idx, PrimExpr], Stmt]                            # (output index, value) -> the store
Block = tuple[int, int, int]                                       # (start, tile count, tile size)
Scalar = Callable[[PrimExpr, Idx], PrimExpr]                       # (row, reduction vars)
Vector = Callable[[PrimExpr, PrimExpr, int, int, Idx], PrimExpr]   # (tile no, first col, offset, lanes, red)


@dataclass(frozen=True)
class RegisterTile:
    """`rows` x `vectors` vectors of `lanes` floats of the output held in registers (rows are
    dense's output rows, conv2d's output channels)."""

    lanes: int
    rows: int
    vectors: int = 2


@lru_cache(maxsize=None)
def host_register_tile() -> RegisterTile:
    """The tile for the host's vector registers (lowering has no target option yet; code is
    generated for the host by default). 32 zmm registers hold 8 x 2 accumulators with room
    for the operands; 16 ymm/xmm registers hold 6 x 2 (more spills, docs/shared reference)."""
    _, _, features = TargetOptions().resolved()
    flags = set(features.split(","))
    if "+avx512f" in flags:
        return RegisterTile(16, 8)
    return RegisterTile(8 if "+avx" in flags else 4, 6)


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
                packed, (add(nt, first_panel), red[0], _vec(const(c), lanes)))
        tiles = [_register_tiles(mb, nb, shape.lanes, dtype, (k_ext,), lambda m, red: BufferLoad(xb, (m, red[0])),
                                 panel_of(nb[0] // nr), lambda m, cols: (m, cols), store)
                 for nb in _blocks(n_ext, nr) for mb in _blocks(m_ext, shape.rows)]
        return Allocate(packed, seq([pack, *tiles]))
    return Scheduled((m_ext, n_ext), dtype, emit, "dense")


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
            return BufferLoad(db, (b, rc, add(mul(y, sh), mul(ry, dh)), _vec(add(add(x0, c), mul(rx, dw)), lanes)))
        tiles = [_register_tiles(mb, nb, shape.lanes, dtype, (ic, kh, kw),
                                 lambda o, red: BufferLoad(wb, (o, *red)), vector,
                                 lambda o, cols: (b, o, y, cols), store)
                 for mb in _blocks(o_ext, shape.rows) for nb in _blocks(ow, nr)]
        return For(b, const(0), const(n_ext), "serial", For(y, const(0), const(oh), "serial", seq(tiles)))
    return Scheduled(out_shape, dtype, emit, "conv2d")


def _blocks(extent: int, tile: int) -> list[Block]:
    """(start, tile count, tile size) of the full tiles of an axis, then of its remainder."""
    out = [(0, extent // tile, tile)] if extent >= tile else []
    if extent % tile:
        out.append((extent - extent % tile, 1, extent % tile))
    return out


def _chunks(width: int, lanes: int) -> list[tuple[int, int]]:
    """(offset, lanes) of the vectors covering `width` columns: full vectors, then a short one."""
    out = [(c, lanes) for c in range(0, width - width % lanes, lanes)]
    if width % lanes:
        out.append((width - width % lanes, width % lanes))
    return out


def _vec(base: PrimExpr, lanes: int) -> PrimExpr:
    return Ramp(base, const(1), lanes) if lanes > 1 else base


def _splat(value: PrimExpr, lanes: int) -> PrimExpr:
    return Broadcast(value, lanes) if lanes > 1 else value


def _tile_loop(name: str, block: Block, inner: Callable[[PrimExpr], Stmt]) -> Stmt:
    """The loop over the tiles of one block (no loop for a single tile): `inner` gets the tile's
    number within the block."""
    if block[1] == 1:
        return inner(const(0))
    v = Var(name, INDEX)
    return For(v, const(0), const(block[1]), "serial", inner(v))


def _register_tiles(mblock: Block, nblock: Block, lanes: int, dtype: str, reduction: tuple[int, ...],
                    scalar: Scalar, vector: Vector, at: Callable[[PrimExpr, PrimExpr], Idx], store: Store) -> Stmt:
    """The tiles of one (row block, column block): acc[r, c:c+lanes] += broadcast(scalar(row))
    * vector(columns) over the whole reduction, then stored at `at(row, column vector)`."""
    mr, nr = mblock[2], nblock[2]
    chunks = _chunks(nr, lanes)
    zero = FloatImm(0.0, dtype)

    def tile(mt: PrimExpr, nt: PrimExpr) -> Stmt:
        m0, n0 = add(mul(mt, mr), mblock[0]), add(mul(nt, nr), nblock[0])
        acc = Buffer("acc", (mr, nr), dtype, scope="local")
        red = tuple(Var(f"r{j}", INDEX) for j in range(len(reduction)))

        def slot(r: int, c: int, n: int) -> Idx:
            return (const(r), _vec(const(c), n))
        init = [BufferStore(acc, slot(r, c, n), _splat(zero, n)) for r in range(mr) for c, n in chunks]
        step: Stmt = seq([BufferStore(acc, slot(r, c, n), Call("fma", [
            _splat(scalar(add(m0, r), red), n), vector(nt, n0, c, n, red), BufferLoad(acc, slot(r, c, n))]))
            for r in range(mr) for c, n in chunks])
        for v, extent in zip(reversed(red), reversed(reduction)):
            step = For(v, const(0), const(extent), "serial", step)
        out = [store(at(add(m0, r), _vec(add(n0, c), n)), BufferLoad(acc, slot(r, c, n)))
               for r in range(mr) for c, n in chunks]
        return Allocate(acc, seq([*init, step, *out]))
    return _tile_loop("no", nblock, lambda nt: _tile_loop("mo", mblock, lambda mt: tile(mt, nt)))
