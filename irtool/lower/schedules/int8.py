"""Int8 convolutions and matrix products as byte dot products: uint8 activations times int8
weights accumulated in int32, four products per 32-bit lane and step (`dot_u8s8`: VNNI's
`vpdpbusd` where the target has it, `pmaddwd` pairs otherwise), where tile.py's widening tiles
do one product per lane (`vpmulld`).

The reduction is packed four to a 32-bit word, in stages of the kernel: the activations'
input channels (conv) or row elements (dense), and the weights the same way per vector of
output channels. Past the reduction's end the bytes are 0, which add nothing. The tiles are
then tile.py's over the words, with `dot_u8s8` as the step.
"""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import BinaryOp, Call, PrimExpr
from irtool.lower.schedules.conv_channels import conv2d_channels_tiled
from irtool.lower.schedules.layout import in_blocked
from irtool.lower.schedules.matmul import matmul_tiled
from irtool.lower.schedules.tile import register_tile
from irtool.lower.te import Compute, Element, Idx, Scheduled, Tensor, add, cast, cmp, const, imm, mul, select

WORD = 4   # bytes of the reduction per 32-bit lane
ByteOf = Callable[[PrimExpr], PrimExpr]   # element i of the packed axis, as int32


def int8_dot_dtypes(dtype: str, data: str, weight: str) -> bool:
    """Whether a `dtype` product of `data` and `weight` operands is a byte dot product."""
    return dtype == "int32" and data == "uint8" and weight == "int8"


def dot_step(a: PrimExpr, b: PrimExpr, acc: PrimExpr) -> PrimExpr:
    """The tile's step (tile.Combine): acc + the byte dot products of the words a and b."""
    return Call("dot_u8s8", (acc, a, b))


def _word(byte_of: ByteOf, extent: int, first: PrimExpr) -> PrimExpr:
    """The int32 word of the four bytes `first`.. `first + 3` of an axis of `extent` elements
    (0 past its end); `byte_of(i)` loads element i (any in-range index) as int32."""
    word: PrimExpr | None = None
    for j in range(WORD):
        at = add(first, j)
        byte = BinaryOp("bitwise_and", byte_of(at if extent % WORD == 0 else BinaryOp("min", at, const(extent - 1))),
                        imm(255, "int32"))
        if extent % WORD:
            byte = select(cmp("lt", at, const(extent)), byte, imm(0, "int32"))
        if j:
            byte = BinaryOp("shift_left", byte, imm(8 * j, "int32"))
        word = byte if word is None else BinaryOp("bitwise_or", word, byte)
    assert word is not None
    return word


def conv2d_int8(data: Tensor, w: Tensor, kernel_layout: str, kernel: tuple[int, int], dtype: str,
                out_shape: tuple[int, ...], strides: tuple[int, int], dilation: tuple[int, int]) -> Scheduled | None:
    """An ungrouped NCHW conv of padded uint8 `data` and int8 `w` into int32, or None for other
    dtypes. The input's channels are packed into words (N, ⌈C/4⌉, H, W), the weights into
    (⌈O/L⌉, ⌈C/4⌉, KH, KW, L) for L-lane vectors, and the channel tile of conv_channels.py runs
    over the words."""
    if not int8_dot_dtypes(dtype, data.dtype, w.dtype) or min(out_shape) == 0:
        return None
    tile = register_tile()
    lanes = tile.lanes
    n, c, h, wd = data.shape
    o, kh, kw = out_shape[1], kernel[0], kernel[1]
    words = -(-c // WORD)

    def data_word(ctx: Element, idx: Idx) -> PrimExpr:
        b, q, y, x = idx
        return _word(lambda ch: cast("int32", ctx.load(data, (b, ch, y, x))), c, mul(q, WORD))

    def weight_word(ctx: Element, idx: Idx) -> PrimExpr:
        block, q, ry, rx, lane = idx
        channel = add(mul(block, lanes), lane)
        inside = o % lanes == 0
        safe = channel if inside else BinaryOp("min", channel, const(o - 1))
        word = _word(lambda ch: cast("int32", ctx.load(w, in_blocked((safe, ch, ry, rx), "OIHW", kernel_layout))), c,
                     mul(q, WORD))
        return word if inside else select(cmp("lt", channel, const(o)), word, imm(0, "int32"))
    packed_data = Compute((n, words, h, wd), "int32", data_word, "data_words", stage=True)
    packed_w = Compute((-(-o // lanes), words, kh, kw, lanes), "int32", weight_word, "weight_words", stage=True)
    return conv2d_channels_tiled(packed_data, packed_w, f"OIHW{lanes}o", kernel, "int32", out_shape, strides,
                                 dilation, 1, tile, combine=dot_step)


def dense_int8(x: Tensor, w: Tensor, dtype: str, out_shape: tuple[int, ...]) -> Scheduled | None:
    """`nn.dense` of uint8 rows `x` (M, K) and int8 `w` (N, K) into int32, or None for other
    dtypes: x packed to (M, ⌈K/4⌉) words, w to (⌈K/4⌉, N), and matmul.py's tile over them."""
    if not int8_dot_dtypes(dtype, x.dtype, w.dtype) or x.ndim != 2 or min(out_shape) == 0:
        return None
    (m, k), n = x.shape, w.shape[0]
    words = -(-k // WORD)
    if k == 0:
        return None
    packed_x = Compute((m, words), "int32", lambda ctx, idx: _word(
        lambda i: cast("int32", ctx.load(x, (idx[0], i))), k, mul(idx[1], WORD)), "row_words", stage=True)
    packed_w = Compute((words, n), "int32", lambda ctx, idx: _word(
        lambda i: cast("int32", ctx.load(w, (idx[1], i))), k, mul(idx[0], WORD)), "weight_words", stage=True)
    return matmul_tiled(packed_x, packed_w, "int32", out_shape, False, False, combine=dot_step)
