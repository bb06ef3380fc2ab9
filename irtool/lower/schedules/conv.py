"""The register-tiled `nn.conv2d` schedules (see tile.py for the tile itself)."""

from __future__ import annotations

from irtool.ir.tir import BufferLoad, For, PrimExpr, Ramp, Stmt, Var, seq
from irtool.lower.schedules.conv_channels import conv2d_channels_tiled, packs_weights
from irtool.lower.schedules.conv_flat import conv2d_1x1_flat
from irtool.lower.schedules.conv_depthwise import conv2d_depthwise
from irtool.lower.schedules.layout import in_blocked
from irtool.lower.schedules.tile import (
    RegisterTile,
    Store,
    blocks,
    column_blocks,
    register_tile,
    register_tiles,
)
from irtool.ir.types import TensorType
from irtool.lower.te import INDEX, Builder, Idx, Scheduled, Tensor, add, const, mul
from irtool.ops.definitions.nn import unblocked_shape


def conv2d_nchw_tiled(data: Tensor, w: Tensor, dtype: str, out_shape: tuple[int, ...], strides: tuple[int, int],
                      dilation: tuple[int, int], tile: RegisterTile | None = None,
                      kernel_layout: str = "OIHW", groups: int = 1) -> Scheduled | None:
    """An NCHW `nn.conv2d` over already padded `data` (weight `w` in `kernel_layout`, OIHW or
    blocked: each weight is one broadcast scalar) as register tiles of output channels x output
    columns (the columns are the vector axis, contiguous in the input and the output when the
    horizontal stride is 1, two loads and a shuffle at stride 2), group by group (a tile's
    channels stay in one group); None outside that case."""
    if not (dtype == "float32" and data.dtype == w.dtype == dtype and strides[1] in (1, 2)):
        return None
    n_ext, o_ext, oh, ow = out_shape
    cg, kh, kw = (int(d) for d in unblocked_shape("nn.conv2d", kernel_layout, TensorType(w.shape, w.dtype), "OIHW")[1:])
    if min(out_shape) == 0 or data.shape[1] != cg * groups or o_ext % groups:
        return None
    shape = tile or register_tile()
    (sh, sw), (dh, dw) = strides, dilation
    nr = shape.lanes * shape.vectors
    og = o_ext // groups

    def emit(builder: Builder, store: Store) -> Stmt:
        db, wb = builder.buffer_of(data), builder.buffer_of(w)
        b, y = Var("b", INDEX), Var("oy", INDEX)
        g: PrimExpr = Var("g", INDEX) if groups > 1 else const(0)

        def vector(nt: PrimExpr, x0: PrimExpr, c: PrimExpr, lanes: int, red: Idx) -> PrimExpr:
            rc, ry, rx = red
            first = add(mul(add(x0, mul(c, shape.lanes)), sw), mul(rx, dw))
            return BufferLoad(db, (b, add(mul(g, cg), rc), add(mul(y, sh), mul(ry, dh)),
                                   Ramp(first, const(sw), lanes) if lanes > 1 else first))
        tiles: Stmt = seq([register_tiles((add(mul(g, og), mb[0]), mb[1], mb[2]), nb,  # type: ignore[arg-type]
                                          shape.lanes, dtype, (cg, kh, kw),
                                          lambda o, red: BufferLoad(wb, in_blocked((o, *red), "OIHW", kernel_layout)),
                                          vector, lambda o, cols: (b, o, y, cols), store)
                           for mb in blocks(og, shape.rows) for nb in column_blocks(ow, nr, shape.lanes)])
        if groups > 1:
            tiles = For(g, const(0), const(groups), "serial", tiles)  # type: ignore[arg-type]
        return For(b, const(0), const(n_ext), "serial", For(y, const(0), const(oh), "serial", tiles))
    return Scheduled(out_shape, dtype, emit, "conv2d")


# Input channels of a stem conv (`stem`).
STEM_CHANNELS = 4


def pixel_vectors(kernel: tuple[int, int], strides: tuple[int, int], width: int, lanes: int) -> bool:
    """Whether a 1x1 conv vectorizes along its output rows (loads and stores whole vectors of
    pixels, weights broadcast) rather than its channels (a strided store per element): when a
    row holds a vector. On znver4 (AVX-512) that made EfficientNet's 1x1 convs at 112x112 to
    28x28 1.3-1.6x faster with the SiLU epilogue (16 -> 96 channels at 112x112: 2.0 -> 1.2 ms)."""
    return kernel == (1, 1) and strides == (1, 1) and width >= lanes


def stem(channels: int, strides: tuple[int, int], width: int, lanes: int) -> bool:
    """Whether a conv reading few input channels (an image's 3) vectorizes along its output
    rows, loading its stride-2 input columns as two vectors and a shuffle: its reduction (27
    steps for a 3x3 kernel) is too short to hide the channel tile's store, one element at a
    time into NCHW. SqueezeNet's 3 -> 64 3x3/2 stem ran at 67 GFLOP/s in the channel tile (znver5)."""
    return channels <= STEM_CHANNELS and strides[1] in (1, 2) and width >= lanes


def conv2d_schedule(data: Tensor, w: Tensor, kernel_layout: str, kernel: tuple[int, int], dtype: str,
                    out_shape: tuple[int, ...], strides: tuple[int, int], dilation: tuple[int, int],
                    groups: int) -> Scheduled | None:
    """The register-tiled schedule for an NCHW conv over padded `data`, chosen from the shapes
    and the target's vector width; None when none applies (the rule's scalar nest is used then).

    Depthwise convs vectorize along the output row, and so do float32 1x1 convs whose rows hold a
    vector (`pixel_vectors`; grouped ones when their weights are not blocked, ShuffleNet's 34, 68
    or 136 channels per group: the channel tile packed them at every call and wasted lanes) and
    `stem` convs. A 1x1 conv on a narrower plane whose weights would be packed at every call
    runs over the flattened plane (conv_flat.py). Otherwise output channels are the vector axis
    (no lane wasted on 7- or 14-wide maps, any stride, groups), unless a group has fewer
    channels than a vector and the column-vector tile applies (ungrouped, unit column stride).
    The channel tile is rows x 2 vectors with rows = 12 / 2 accumulators for 16 registers (8 x 2
    with 32): 3 x 4 and 4 x 3 measured 2-3x slower here, 12 x 1 1.7x slower (znver3, AVX2)."""
    host = register_tile()
    o_ext, c_ext, width = out_shape[1], data.shape[1], out_shape[3]
    if groups == o_ext == c_ext:
        return conv2d_depthwise(data, w, kernel_layout, kernel, dtype, out_shape, strides, dilation, host.lanes)
    packs = packs_weights(kernel_layout, o_ext // groups, host.lanes)
    few_outputs = strides[1] == 1 and o_ext < host.lanes and kernel_layout == "OIHW"
    ungrouped_rows = groups == 1 and (few_outputs or stem(c_ext, strides, width, host.lanes))
    if ungrouped_rows or (pixel_vectors(kernel, strides, width, host.lanes) and (groups == 1 or packs)):
        rows = conv2d_nchw_tiled(data, w, dtype, out_shape, strides, dilation, host, kernel_layout, groups)
        if rows is not None:
            return rows
    if kernel == (1, 1) and strides == (1, 1) and width < host.lanes and packs:
        flat = conv2d_1x1_flat(data, w, kernel_layout, out_shape, host, groups)
        if flat is not None:
            return flat
    tile = RegisterTile(host.lanes, host.rows, 2)
    return conv2d_channels_tiled(data, w, kernel_layout, kernel, dtype, out_shape, strides, dilation, groups, tile)
