"""Register-tiled schedules that compute rules emit when shapes allow (issue 9, first step).

LLVM does not find a register tile in a scalar loop nest (20-25 % of peak at best, measured
with the unscheduled lowering), so the tile is written out here: an MR x NR block of the output
lives in a `local` accumulator, carried through the whole reduction loop; each reduction step is
NR/L contiguous vector loads and MR broadcasts feeding MR * NR/L `fma` calls. The tile's rows and
vectors are `unrolled` loops (`each_slot`), which code generation expands, so the accumulator is
indexed only by constants there (SROA turns it into MR * NR/L vector registers of L lanes, L the
target's float32 vector width) while the TIR has one statement per operation of the tile. Output
edges are tiles of their own (fewer rows, shorter or scalar vectors), so no tile reads or writes
out of bounds and no branch is needed.

The elementwise epilogue of the fused group (bias, batch-norm affine, residual add, activation)
is applied to the accumulator vectors by the `store` callback (irtool/lower/te.py), so the
tile's result is never stored and re-read. Known limits: the tile follows the host, not a
target option of the lowering.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from irtool.target import current_target
from irtool.ir.tir import (
    Allocate,
    BinaryOp,
    Broadcast,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    For,
    PrimExpr,
    Ramp,
    Stmt,
    Var,
    is_float,
    seq,
)
from irtool.lower.te import INDEX, Idx, add, const, imm, mul

Store = Callable[[Idx, PrimExpr], Stmt]                            # (output index, value) -> the store
Block = tuple[int, int, int]                                       # (start, tile count, tile size)
Scalar = Callable[[PrimExpr, Idx], PrimExpr]                       # (row, reduction vars)
Vector = Callable[[PrimExpr, PrimExpr, PrimExpr, int, Idx], PrimExpr]   # (tile no, first col, vector no, lanes, red)
Combine = Callable[[PrimExpr, PrimExpr, PrimExpr], PrimExpr]       # (broadcast scalar, vector, acc) -> new acc


@dataclass(frozen=True)
class RegisterTile:
    """`rows` x `vectors` vectors of `lanes` floats of the output held in registers (rows are
    dense's output rows, conv2d's output channels)."""

    lanes: int
    rows: int
    vectors: int = 2


def register_tile() -> RegisterTile:
    """The tile for the vector registers of the target being compiled for (`current_target`:
    the host unless a build or `irtool-llc --mcpu` says otherwise)."""
    return tile_for_width(current_target().vector_bits())


@cache
def tile_for_width(bits: int) -> RegisterTile:
    """32 zmm registers hold 8 x 2 accumulators with room for the operands; 16 ymm/xmm registers
    hold 6 x 2: 12 accumulators, 2 weight vectors and a broadcast. On znver3 (AVX2) 6 x 2 reached
    OpenBLAS on a 512^3 dense; 4 x 3, 5 x 2 and 4 x 2 were 2-5 % slower (best of 60 runs) and
    3 x 4 (17 live vectors) spills, at half the speed."""
    if bits >= 512:
        return RegisterTile(16, 8)
    return RegisterTile(8 if bits == 256 else 4, 6)


def blocks(extent: int, tile: int) -> list[Block]:
    """(start, tile count, tile size) of the full tiles of an axis, then of its remainder."""
    out = [(0, extent // tile, tile)] if extent >= tile else []
    if extent % tile:
        out.append((extent - extent % tile, 1, extent % tile))
    return out


def column_blocks(width: int, tile: int, lanes: int) -> list[Block]:
    """The column tiles of an output row: full tiles, then the rest as whole vectors ending at
    the row's end, overlapping the last full tile (its outputs are computed twice and stored
    twice, alike), where a full tile fits; otherwise `blocks`. A short vector of 15 lanes costs
    LLVM 8 + 4 + 2 + 1 loads per step (SqueezeNet's stem: 111 = 3 x 32 + 15 columns)."""
    rest = width % tile
    if width < tile or rest == 0:
        return blocks(width, tile)
    cover = -(-rest // lanes) * lanes
    return [(0, width // tile, tile), (width - cover, 1, cover)]


def chunks(width: int, lanes: int) -> list[tuple[int, int]]:
    """(offset, lanes) of the vectors covering `width` columns: full vectors, then a short one."""
    out = [(c, lanes) for c in range(0, width - width % lanes, lanes)]
    if width % lanes:
        out.append((width - width % lanes, width % lanes))
    return out


def vec(base: PrimExpr, lanes: int) -> PrimExpr:
    return Ramp(base, const(1), lanes) if lanes > 1 else base


def shifted(index: PrimExpr, offset: PrimExpr) -> PrimExpr:
    """A scalar index or unit-stride ramp moved by `offset` (a tile's columns placed in the output)."""
    if isinstance(index, Ramp):
        return Ramp(add(index.base, offset), index.stride, index.lanes)
    return add(index, offset)


def splat(value: PrimExpr, lanes: int) -> PrimExpr:
    return Broadcast(value, lanes) if lanes > 1 else value


# Operand dtypes of the integer products (accumulated in int32, as numpy's int32 matmul wraps).
INTEGER_OPERANDS = ("int8", "uint8", "int16", "uint16", "int32")


def tiled_dtypes(dtype: str, a: str, b: str) -> bool:
    """Whether the tile computes a `dtype` product of `a` and `b` operands: float32 throughout,
    or integers (quantized int8 / uint8 codes) accumulated in int32."""
    if dtype == "float32":
        return a == b == dtype
    return dtype == "int32" and a in INTEGER_OPERANDS and b in INTEGER_OPERANDS


def mul_add(a: PrimExpr, b: PrimExpr, c: PrimExpr) -> PrimExpr:
    """a * b + c: one `fma` for floats; for integers (an int8 product accumulated in int32) a
    multiply and an add, which wrap as numpy's do."""
    if is_float(c.dtype):
        return Call("fma", [a, b, c])
    return BinaryOp("add", BinaryOp("mul", a, b), c)


def loop(name: str, extent: int, body: Callable[[PrimExpr], Stmt], kind: str = "serial") -> Stmt:
    """A loop of `kind`, or just its body at 0 when it has one iteration (nothing for none)."""
    if extent == 1:
        return body(const(0))
    if extent == 0:
        return seq([])
    v = Var(name, INDEX)
    return For(v, const(0), const(extent), kind, body(v))


def nest(extents: Sequence[int], name: str, body: Callable[[Idx], Stmt]) -> Stmt:
    """Serial loops over `extents` (outermost first, variables `<name>0`, `<name>1`, ...) around
    `body(loop variables)`; as `loop`, an axis of one iteration is just the index 0, and an
    axis of none leaves nothing."""
    if 0 in extents:
        return seq([])
    loop_vars = [Var(f"{name}{k}", INDEX) for k in range(len(extents))]
    stmt = body(tuple(const(0) if e == 1 else v for v, e in zip(loop_vars, extents)))
    for v, extent in zip(reversed(loop_vars), reversed(extents)):
        if extent != 1:
            stmt = For(v, const(0), const(extent), "serial", stmt)
    return stmt


def tile_loop(name: str, block: Block, inner: Callable[[PrimExpr], Stmt]) -> Stmt:
    """The loop over the tiles of one block: `inner` gets the tile's number within the block."""
    return loop(name, block[1], inner)


Slot = Callable[[PrimExpr, PrimExpr, int], Stmt]                   # (row, vector no, lanes) -> statement


def each_slot(rows: int, width: int, lanes: int, slot: Slot) -> Stmt:
    """`slot` for every row of a tile and every vector covering its `width` columns (vector c
    starts at column c * lanes; the last one may be short), in order, as `unrolled` loops over
    the rows and the full vectors: code generation expands them into the statements of each
    slot with constant indices (`irtool.tir_transform.unroll`)."""
    full, short = divmod(width, lanes)

    def row(r: PrimExpr) -> Stmt:
        body = loop("c", full, lambda c: slot(r, c, lanes), "unrolled")
        return seq([body, slot(r, const(full), short)]) if short else body
    return loop("r", rows, row, "unrolled")


def register_tiles(mblock: Block, nblock: Block, lanes: int, dtype: str, reduction: tuple[int, ...],
                   scalar: Scalar, vector: Vector, at: Callable[[PrimExpr, PrimExpr], Idx], store: Store,
                   split: int = 1, combine: Combine = mul_add) -> Stmt:
    """The tiles of one (row block, column block): acc[r, c:c+lanes] += broadcast(scalar(row))
    * vector(columns) over the whole reduction, then stored at `at(row, column vector)`;
    `combine` is that step (the int8 tiles' byte dot product instead of a multiply-add).

    `split` > 1 keeps that many partial sums per output vector, over interleaved steps of the
    innermost reduction axis (step k goes to sum k % split), added up before the store: a tile
    with few rows (a matrix-vector product) then still has enough independent `fma` chains to
    hide the instruction's latency."""
    mr, nr = mblock[2], nblock[2]
    zero = imm(0, dtype)
    outer, tail = divmod(reduction[-1], split)

    def tile(mt: PrimExpr, nt: PrimExpr) -> Stmt:
        m0, n0 = add(mul(mt, mr), mblock[0]), add(mul(nt, nr), nblock[0])
        acc = Buffer("acc", (mr * split, nr), dtype, scope="local")
        red = tuple(Var(f"r{j}", INDEX) for j in range(len(reduction)))

        def slot(r: PrimExpr, c: PrimExpr, n: int) -> Idx:
            return (r, vec(mul(c, lanes), n))

        def steps(at_red: Idx, part: int) -> Stmt:
            """One reduction step into partial sum `part` of every slot."""
            def update(r: PrimExpr, c: PrimExpr, n: int) -> Stmt:
                def at() -> Idx:   # built per access, as every index: codegen emits a shared node once
                    return slot(add(mul(r, split), part), c, n)
                return BufferStore(acc, at(), combine(splat(scalar(add(m0, r), at_red), n),
                                                      vector(nt, n0, c, n, at_red), BufferLoad(acc, at())))
            return each_slot(mr, nr, lanes, update)
        init = each_slot(mr * split, nr, lanes, lambda r, c, n: BufferStore(acc, slot(r, c, n), splat(zero, n)))
        main: Stmt = seq([steps((*red[:-1], add(mul(red[-1], split), u)), u) for u in range(split)])
        inner = [For(red[-1], const(0), const(outer), "serial", main)] if outer else []
        inner += [steps((*red[:-1], const(outer * split + u)), u) for u in range(tail)]
        step = seq(inner)
        for v, extent in zip(reversed(red[:-1]), reversed(reduction[:-1])):
            step = For(v, const(0), const(extent), "serial", step)

        def total(r: PrimExpr, c: PrimExpr, n: int) -> PrimExpr:
            value: PrimExpr = BufferLoad(acc, slot(mul(r, split), c, n))
            for u in range(1, split):
                value = BinaryOp("add", value, BufferLoad(acc, slot(add(mul(r, split), u), c, n)))
            return value
        out = each_slot(mr, nr, lanes,
                        lambda r, c, n: store(at(add(m0, r), vec(add(n0, mul(c, lanes)), n)), total(r, c, n)))
        return Allocate(acc, seq([init, step, out]))
    return tile_loop("no", nblock, lambda nt: tile_loop("mo", mblock, lambda mt: tile(mt, nt)))
