"""Neural-network operators: convolution, dense/matmul, normalisation, pooling, softmax, padding.

2-d operators accept any data layout that is a permutation of NCHW (kernel: of OIHW); the
reference implementations transpose to NCHW/OIHW, compute with whole-array numpy (windows via
`sliding_window_view`, contractions via `einsum`/`matmul`), and transpose back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from irtool.ir.expr import AttrValue
from irtool.ir.types import Any, Dim, TensorType, TupleType, Type
from irtool.ops.attrs import lengths, one_of, positive
from irtool.ops.definitions._common import (
    as_array,
    check_domain,
    dims_equal,
    int_pair,
    is_known,
    norm_axis,
    np_dtype,
    padding4,
    prod,
    tensor_arg,
)
from irtool.ops.definitions.reduce import check_not_empty, mean_in_dtype
from irtool.ops.definitions.transform import parse_layout
from irtool.ops.registry import (
    AttrField,
    OpDef,
    OpPattern,
    TypeRelError,
    Value,
    register,
)

Attrs = Mapping[str, AttrValue]


def permutation_of(letters: str, allow_empty: bool = False) -> Callable[[AttrValue], str | None]:
    """A layout attribute that reorders the given axis letters (e.g. NHWC for NCHW)."""
    def check(v: AttrValue) -> str | None:
        if allow_empty and v == "":
            return None
        if isinstance(v, str) and sorted(v) == sorted(letters):
            return None
        return f"must be a permutation of {letters}"
    return check


def blocked_layout_of(letters: str, allow_empty: bool = False) -> Callable[[AttrValue], str | None]:
    """A weight layout attribute: the given axes in any order, optionally blocked
    (`OIHW8o`: output channels in blocks of 8, innermost), as `layout_transform` writes them."""
    def check(v: AttrValue) -> str | None:
        if allow_empty and v == "":
            return None
        try:
            items = parse_layout(str(v)) if isinstance(v, str) else None
        except ValueError as e:
            return f"is not a valid layout ({e})"
        if items is None or sorted(a for a, _ in items if a.isupper()) != sorted(letters):
            return f"must be a layout of the axes {letters} (a permutation, optionally blocked: {letters}8" \
                   f"{letters[0].lower()})"
        return None
    return check


def unblocked_shape(op: str, layout: str, t: TensorType, canonical: str) -> list[Dim]:
    """The extents of a (possibly blocked) weight in `canonical` axis order."""
    items = parse_layout(layout)
    if t.ndim != len(items):
        raise TypeRelError(f"{op}: weight layout {layout} needs rank {len(items)}, got {t}")
    dims = dict(zip((a for a, _ in items), t.shape))
    for a, factor in items:
        if factor is not None and is_known(dims[a]) and dims[a] != factor:
            raise TypeRelError(f"{op}: axis {a} of the weight {t} must have extent {factor} in layout {layout}")
    return [prod((dims[a], dims.get(a.lower(), 1))) for a in canonical]


def unblock(x: np.ndarray, layout: str, canonical: str) -> np.ndarray:
    """A (possibly blocked) weight array re-laid out as `canonical` (e.g. OIHW8o -> OIHW)."""
    names = [a for a, _ in parse_layout(layout)]
    perm: list[int] = []
    for a in canonical:
        perm += [names.index(a)] + ([names.index(a.lower())] if a.lower() in names else [])
    wide = np.transpose(x, perm)
    shape, k = [], 0
    for a in canonical:
        n = 2 if a.lower() in names else 1
        shape.append(int(np.prod(wide.shape[k:k + n])))
        k += n
    return wide.reshape(shape)


def _layout(attrs: Attrs, key: str, fallback: str) -> str:
    value = str(attrs[key])
    return value or fallback


def _spatial_out(op: str, size: Dim, pad: int, kernel: Dim, dilation: int, stride: int,
                 ceil_mode: bool = False) -> Dim:
    """Output extent of a sliding window along one axis (TVM's formula, incl. ceil mode)."""
    if not (is_known(size) and is_known(kernel)):
        return Any()
    extent = (kernel - 1) * dilation + 1  # type: ignore[operator]
    span = size + pad - extent  # type: ignore[operator]
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if span < 0 or out <= 0:
        raise TypeRelError(f"{op}: the window of extent {extent} does not fit an input of "
                           f"size {size} with padding {pad}")
    return out


def _shape_in(layout: str, canonical: str, t: TensorType) -> list[Dim]:
    return [t.shape[layout.index(c)] for c in canonical]


def _shape_out(canonical: str, layout: str, dims: Sequence[Dim]) -> tuple[Dim, ...]:
    return tuple(dims[canonical.index(c)] for c in layout)


def _to_canonical(x: np.ndarray, layout: str, canonical: str) -> np.ndarray:
    return np.transpose(x, [layout.index(c) for c in canonical])


def _from_canonical(x: np.ndarray, canonical: str, layout: str) -> np.ndarray:
    return np.transpose(x, [canonical.index(c) for c in layout])


def _rank(op: str, t: TensorType, n: int, what: str) -> None:
    if t.ndim != n:
        raise TypeRelError(f"{op}: {what} must have rank {n}, got {t}")


def _windows(x: np.ndarray, kernel: tuple[int, int], dilation: tuple[int, int],
             strides: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """(N, C, OH, OW, KH, KW) view of the windows of an already padded NCHW array."""
    ext = ((kernel[0] - 1) * dilation[0] + 1, (kernel[1] - 1) * dilation[1] + 1)
    win = sliding_window_view(x, ext, axis=(2, 3))[..., ::dilation[0], ::dilation[1]]
    return win[:, :, ::strides[0], ::strides[1]][:, :, :out_hw[0], :out_hw[1]]


def _window_reduce(x: np.ndarray, kernel: tuple[int, int], dilation: tuple[int, int],
                   strides: tuple[int, int], out_hw: tuple[int, int],
                   combine: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Combine the strided slices of a padded NCHW array at each kernel offset.

    One whole-array step per kernel offset (not per element), which is far faster than
    reducing a strided window view over its last two axes.
    """
    acc: np.ndarray | None = None
    for ky in range(kernel[0]):
        for kx in range(kernel[1]):
            y0, x0 = ky * dilation[0], kx * dilation[1]
            part = x[:, :, y0:y0 + (out_hw[0] - 1) * strides[0] + 1:strides[0],
                     x0:x0 + (out_hw[1] - 1) * strides[1] + 1:strides[1]]
            acc = part.copy() if acc is None else combine(acc, part)
    assert acc is not None
    return acc


# ---------------------------------------------------------------------------------- conv2d

CONV2D_ATTRS = (
    AttrField("strides", "int_or_list", (1, 1), check=lengths(1, 2, positive_entries=True)),
    AttrField("padding", "int_or_list", (0, 0), check=lengths(1, 2, 4, non_negative_entries=True),
              doc="[p], [pad_h, pad_w] or [top, left, bottom, right]"),
    AttrField("dilation", "int_or_list", (1, 1), check=lengths(1, 2, positive_entries=True)),
    AttrField("groups", "int", 1, check=positive),
    AttrField("channels", "int", None, optional=True, check=positive),
    AttrField("kernel_size", "int_or_list", None, optional=True,
              check=lengths(1, 2, positive_entries=True)),
    AttrField("data_layout", "str", "NCHW", check=permutation_of("NCHW")),
    AttrField("kernel_layout", "str", "OIHW", check=blocked_layout_of("OIHW"),
              doc="a permutation of OIHW, optionally blocked (OIHW8o: weight (O/8, I, H, W, 8))"),
    AttrField("out_layout", "str", "", check=permutation_of("NCHW", allow_empty=True)),
    AttrField("out_dtype", "dtype", ""),
)


def _conv2d_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.conv2d"
    x, w = tensor_arg(op, types, 0, "data"), tensor_arg(op, types, 1, "weight")
    check_domain(op, x, "numeric", "data")
    check_domain(op, w, "numeric", "weight")
    _rank(op, x, 4, "data")
    dl, kl = str(attrs["data_layout"]), str(attrs["kernel_layout"])
    n, c, h, wd = _shape_in(dl, "NCHW", x)
    o, i, kh, kw = unblocked_shape(op, kl, w, "OIHW")
    groups = int(attrs["groups"])  # type: ignore[arg-type]
    if attrs["channels"] is not None and not dims_equal(o, attrs["channels"]):  # type: ignore[arg-type]
        raise TypeRelError(f"{op}: channels={attrs['channels']} but the weight {w} has {o} "
                           "output channels")
    if attrs["kernel_size"] is not None:
        ks = int_pair(attrs["kernel_size"])
        if not (dims_equal(kh, ks[0]) and dims_equal(kw, ks[1])):
            raise TypeRelError(f"{op}: kernel_size={list(ks)} but the weight {w} has a "
                               f"{kh}x{kw} kernel")
    if is_known(c) and is_known(i) and c != i * groups:  # type: ignore[operator]
        raise TypeRelError(f"{op}: data {x} has {c} input channels but weight {w} expects "
                           f"{i} per group x {groups} groups")
    if is_known(o) and o % groups != 0:  # type: ignore[operator]
        raise TypeRelError(f"{op}: {o} output channels are not divisible by groups={groups}")
    top, left, bottom, right = padding4(attrs["padding"])
    dh, dw = int_pair(attrs["dilation"])
    sh, sw = int_pair(attrs["strides"])
    oh = _spatial_out(op, h, top + bottom, kh, dh, sh)
    ow = _spatial_out(op, wd, left + right, kw, dw, sw)
    out_layout = _layout(attrs, "out_layout", dl)
    dtype = str(attrs["out_dtype"]) or x.dtype
    return TensorType(_shape_out("NCHW", out_layout, (n, o, oh, ow)), dtype)


def _conv2d(args: list[Value], attrs: Attrs) -> Value:
    dl, kl = str(attrs["data_layout"]), str(attrs["kernel_layout"])
    out_type = _conv2d_rel([TensorType(args[0].shape, str(args[0].dtype)),
                            TensorType(args[1].shape, str(args[1].dtype))], attrs)
    assert isinstance(out_type, TensorType)
    dtype = np_dtype(out_type.dtype)
    x = _to_canonical(args[0], dl, "NCHW").astype(dtype, copy=False)
    w = unblock(args[1], kl, "OIHW").astype(dtype, copy=False)
    top, left, bottom, right = padding4(attrs["padding"])
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    groups = int(attrs["groups"])  # type: ignore[arg-type]
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    out_canon = _shape_in(_layout(attrs, "out_layout", dl), "NCHW", out_type)
    win = _windows(x, (kh, kw), int_pair(attrs["dilation"]), int_pair(attrs["strides"]),
                   (int(out_canon[2]), int(out_canon[3])))
    oh, ow = win.shape[2:4]
    # im2col per group: (G, N*OH*OW, Cg*KH*KW) @ (G, Cg*KH*KW, O/G), one batched matmul.
    cols = win.reshape(n, groups, cg, oh, ow, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    cols = cols.reshape(groups, n * oh * ow, cg * kh * kw)
    wg = w.reshape(groups, o // groups, cg * kh * kw).transpose(0, 2, 1)
    out = np.matmul(cols, wg).reshape(groups, n, oh, ow, o // groups)
    out = out.transpose(1, 0, 4, 2, 3).reshape(n, o, oh, ow)
    return as_array(_from_canonical(out, "NCHW", _layout(attrs, "out_layout", dl)), out_type.dtype)


register(OpDef("nn.conv2d", 2, CONV2D_ATTRS, OpPattern.OUT_ELEMWISE_FUSABLE, _conv2d_rel, _conv2d,
               description="2-d convolution (grouped, dilated, strided, padded)"))

# ------------------------------------------------------------------------- dense / matmul


def _dense_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.dense"
    x, w = tensor_arg(op, types, 0, "data"), tensor_arg(op, types, 1, "weight")
    check_domain(op, x, "numeric", "data")
    check_domain(op, w, "numeric", "weight")
    if x.ndim < 1:
        raise TypeRelError(f"{op}: data must have rank >= 1, got {x}")
    units_w, k = unblocked_shape(op, _layout(attrs, "weight_layout", "NK"), w, "NK")
    if not dims_equal(x.shape[-1], k):
        raise TypeRelError(f"{op}: data {x} and weight {w} disagree on the reduction "
                           f"dimension ({x.shape[-1]} vs {k})")
    units = attrs["units"]
    if units is not None and not dims_equal(units_w, units):  # type: ignore[arg-type]
        raise TypeRelError(f"{op}: units={units} but the weight {w} has {units_w} rows")
    return TensorType(x.shape[:-1] + (units_w,), str(attrs["out_dtype"]) or x.dtype)


def _dense(args: list[Value], attrs: Attrs) -> Value:
    x, w = args
    w = unblock(w, _layout(attrs, "weight_layout", "NK"), "NK")
    dtype = str(attrs["out_dtype"]) or str(x.dtype)
    return as_array(np.matmul(x.astype(dtype, copy=False), w.astype(dtype, copy=False).T), dtype)


register(OpDef("nn.dense", 2,
               (AttrField("units", "int", None, optional=True, check=positive),
                AttrField("out_dtype", "dtype", ""),
                AttrField("weight_layout", "str", "", check=blocked_layout_of("NK", allow_empty=True),
                          doc="NK (default, also written ''), or blocked: NK16n is weight (N/16, K, 16)")),
               OpPattern.OUT_ELEMWISE_FUSABLE, _dense_rel, _dense,
               description="data @ weight.T with weight (units, in)"))


def _batch_matmul_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.batch_matmul"
    a, b = tensor_arg(op, types, 0, "x"), tensor_arg(op, types, 1, "y")
    check_domain(op, a, "numeric", "x")
    check_domain(op, b, "numeric", "y")
    _rank(op, a, 3, "x")
    _rank(op, b, 3, "y")
    m, ka = (a.shape[2], a.shape[1]) if attrs["transpose_a"] else (a.shape[1], a.shape[2])
    kb, n = (b.shape[2], b.shape[1]) if attrs["transpose_b"] else (b.shape[1], b.shape[2])
    if not dims_equal(ka, kb):
        raise TypeRelError(f"{op}: {a} and {b} disagree on the reduction dimension "
                           f"({ka} vs {kb})")
    ba, bb = a.shape[0], b.shape[0]
    if ba == 1:
        batch = bb
    elif bb == 1:   # a shared right operand: the left's batch, `?` included
        batch = ba
    elif dims_equal(ba, bb):
        batch = ba if is_known(ba) else bb
    else:
        raise TypeRelError(f"{op}: batch sizes of {a} and {b} do not match")
    return TensorType((batch, m, n), str(attrs["out_dtype"]) or a.dtype)


def _batch_matmul(args: list[Value], attrs: Attrs) -> Value:
    a, b = args
    dtype = str(attrs["out_dtype"]) or str(a.dtype)
    a = a.astype(dtype, copy=False)
    b = b.astype(dtype, copy=False)
    if attrs["transpose_a"]:
        a = np.swapaxes(a, 1, 2)
    if attrs["transpose_b"]:
        b = np.swapaxes(b, 1, 2)
    return as_array(np.matmul(a, b), dtype)


register(OpDef("nn.batch_matmul", 2,
               (AttrField("out_dtype", "dtype", ""),
                AttrField("transpose_a", "bool", False),
                AttrField("transpose_b", "bool", False)),
               OpPattern.OUT_ELEMWISE_FUSABLE, _batch_matmul_rel, _batch_matmul,
               description="batched matrix product; a batch of 1 broadcasts"))

# --------------------------------------------------------------- bias, norms, activations


def _channel_vector(op: str, data: TensorType, t: Type, axis: int, what: str) -> TensorType:
    if not isinstance(t, TensorType) or t.ndim != 1 or not dims_equal(t.shape[0], data.shape[axis]):
        raise TypeRelError(f"{op}: {what} must be a vector of {data.shape[axis]} elements "
                           f"(axis {axis} of {data}), got {t}")
    return t


def _bias_add_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.bias_add"
    x = check_domain(op, tensor_arg(op, types, 0, "data"), "numeric")
    axis = norm_axis(op, int(attrs["axis"]), x.ndim)  # type: ignore[arg-type]
    bias = _channel_vector(op, x, types[1], axis, "bias")
    if bias.dtype != x.dtype:
        raise TypeRelError(f"{op}: dtype mismatch between {x} and {bias}")
    return x


def _along(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """A vector shaped to broadcast along `axis` of a rank-`ndim` array."""
    shape = [1] * ndim
    shape[axis] = -1
    return v.reshape(shape)


def _bias_add(args: list[Value], attrs: Attrs) -> Value:
    x, b = args
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    return as_array(x + _along(b, axis, x.ndim), str(x.dtype))


register(OpDef("nn.bias_add", 2, (AttrField("axis", "int", 1),), OpPattern.BROADCAST,
               _bias_add_rel, _bias_add, description="adds a vector along one axis"))


def _prelu_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.prelu"
    x = check_domain(op, tensor_arg(op, types, 0, "data"), "numeric")
    axis = norm_axis(op, int(attrs["axis"]), x.ndim)  # type: ignore[arg-type]
    alpha = _channel_vector(op, x, types[1], axis, "alpha")
    if alpha.dtype != x.dtype:
        raise TypeRelError(f"{op}: dtype mismatch between {x} and {alpha}")
    return x


def _prelu(args: list[Value], attrs: Attrs) -> Value:
    x, alpha = args
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    return as_array(np.where(x > 0, x, x * _along(alpha, axis, x.ndim)), str(x.dtype))


register(OpDef("nn.prelu", 2, (AttrField("axis", "int", 1),), OpPattern.BROADCAST,
               _prelu_rel, _prelu, description="leaky relu with one learned slope per channel"))


def _batch_norm_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.batch_norm"
    x = check_domain(op, tensor_arg(op, types, 0, "data"), "float")
    axis = norm_axis(op, int(attrs["axis"]), x.ndim)  # type: ignore[arg-type]
    names = ("gamma", "beta", "moving_mean", "moving_var")
    vecs = [_channel_vector(op, x, t, axis, name) for t, name in zip(types[1:], names)]
    vec = TensorType((x.shape[axis],), vecs[0].dtype)
    return TupleType((x, vec, vec))


def _batch_norm(args: list[Value], attrs: Attrs) -> Value:
    x, gamma, beta, mean, var = args
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    dt = x.dtype.type
    scale = 1 / np.sqrt(var.astype(x.dtype) + dt(attrs["epsilon"]))
    if attrs["scale"]:
        scale = scale * gamma
    out = (x - _along(mean, axis, x.ndim)) * _along(scale, axis, x.ndim)
    if attrs["center"]:
        out = out + _along(beta, axis, x.ndim)
    return (as_array(out, str(x.dtype)), mean.copy(), var.copy())


register(OpDef("nn.batch_norm", 5,
               (AttrField("axis", "int", 1), AttrField("epsilon", "float", 1e-5),
                AttrField("center", "bool", True), AttrField("scale", "bool", True)),
               OpPattern.OPAQUE, _batch_norm_rel, _batch_norm,
               description="inference batch norm; returns (out, moving_mean, moving_var)"))


def _axis_rel(op: str) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        x = check_domain(op, tensor_arg(op, types, 0, "data"), "float")
        norm_axis(op, int(attrs["axis"]), x.ndim)  # type: ignore[arg-type]
        return x
    return rel


def _shifted(x: np.ndarray, axis: int) -> np.ndarray:
    """`x` minus its maximum along `axis` (the stable form of softmax). An empty axis leaves
    nothing to normalise: the (empty) result is the empty input, as natively."""
    if x.size == 0:
        return x.copy()
    return x - np.max(x, axis=axis, keepdims=True)


def _softmax(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    axis = int(attrs["axis"])  # type: ignore[arg-type]
    e = np.exp(_shifted(x, axis))
    return as_array(e / np.sum(e, axis=axis, keepdims=True), str(x.dtype))


def _log_softmax(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    axis = int(attrs["axis"])  # type: ignore[arg-type]
    shifted = _shifted(x, axis)
    return as_array(shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True)),
                    str(x.dtype))


register(OpDef("nn.softmax", 1, (AttrField("axis", "int", -1),), OpPattern.OUT_ELEMWISE_FUSABLE,
               _axis_rel("nn.softmax"), _softmax, description="softmax along an axis"))
register(OpDef("nn.log_softmax", 1, (AttrField("axis", "int", -1),),
               OpPattern.OUT_ELEMWISE_FUSABLE, _axis_rel("nn.log_softmax"), _log_softmax,
               description="log of softmax along an axis"))


def _lrn(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    axis = int(attrs["axis"]) % x.ndim  # type: ignore[arg-type]
    size = int(attrs["size"])  # type: ignore[arg-type]
    half = size // 2
    pads = [(0, 0)] * x.ndim
    pads[axis] = (half, half)
    sq = np.pad(x * x, pads)
    sums = sliding_window_view(sq, size, axis=axis).sum(axis=-1)
    sums = np.take(sums, np.arange(x.shape[axis]), axis=axis)
    dt = x.dtype.type
    denom = np.power(dt(attrs["bias"]) + dt(attrs["alpha"]) * sums / dt(size), dt(attrs["beta"]))
    return as_array(x / denom, str(x.dtype))


register(OpDef("nn.lrn", 1,
               (AttrField("size", "int", 5, check=positive), AttrField("axis", "int", 1),
                AttrField("bias", "float", 2.0), AttrField("alpha", "float", 1e-4),
                AttrField("beta", "float", 0.75)),
               OpPattern.OPAQUE, _axis_rel("nn.lrn"), _lrn,
               description="local response normalisation across an axis"))


def _dropout_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    x = check_domain("nn.dropout", tensor_arg("nn.dropout", types, 0, "data"), "float")
    return TupleType((x, x))


def _rate(v: AttrValue) -> str | None:
    return None if 0.0 <= v < 1.0 else "must lie in [0, 1)"  # type: ignore[operator]


register(OpDef("nn.dropout", 1, (AttrField("rate", "float", 0.5, check=_rate),),
               OpPattern.OPAQUE, _dropout_rel,
               lambda args, attrs: (args[0].copy(), np.ones_like(args[0])),
               description="inference dropout: (data, mask of ones)"))

# --------------------------------------------------------------------------------- pooling

POOL_ATTRS = (
    AttrField("pool_size", "int_or_list", required=True, check=lengths(1, 2, positive_entries=True)),
    AttrField("strides", "int_or_list", (1, 1), check=lengths(1, 2, positive_entries=True)),
    AttrField("dilation", "int_or_list", (1, 1), check=lengths(1, 2, positive_entries=True)),
    AttrField("padding", "int_or_list", (0, 0), check=lengths(1, 2, 4, non_negative_entries=True)),
    AttrField("layout", "str", "NCHW", check=permutation_of("NCHW")),
    AttrField("out_layout", "str", "", check=permutation_of("NCHW", allow_empty=True)),
    AttrField("ceil_mode", "bool", False),
)


def _pool_rel(op: str) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        x = check_domain(op, tensor_arg(op, types, 0, "data"), "numeric")
        _rank(op, x, 4, "data")
        layout = str(attrs["layout"])
        n, c, h, w = _shape_in(layout, "NCHW", x)
        kh, kw = int_pair(attrs["pool_size"])
        top, left, bottom, right = padding4(attrs["padding"])
        dh, dw = int_pair(attrs["dilation"])
        sh, sw = int_pair(attrs["strides"])
        ceil = bool(attrs["ceil_mode"])
        oh = _spatial_out(op, h, top + bottom, kh, dh, sh, ceil)
        ow = _spatial_out(op, w, left + right, kw, dw, sw, ceil)
        return TensorType(_shape_out("NCHW", _layout(attrs, "out_layout", layout), (n, c, oh, ow)),
                          x.dtype)
    return rel


def _pool(op: str, is_max: bool) -> Callable[[list[Value], Attrs], Value]:
    rel = _pool_rel(op)

    def compute(args: list[Value], attrs: Attrs) -> Value:
        x0 = args[0]
        layout = str(attrs["layout"])
        out_type = rel([TensorType(x0.shape, str(x0.dtype))], attrs)
        assert isinstance(out_type, TensorType)
        x = _to_canonical(x0, layout, "NCHW")
        _, _, h, w = x.shape
        _, _, oh, ow = _shape_in(_layout(attrs, "out_layout", layout), "NCHW", out_type)
        kernel, dil, strides = (int_pair(attrs[k]) for k in ("pool_size", "dilation", "strides"))
        top, left, bottom, right = padding4(attrs["padding"])
        # Ceil mode may need room past the explicit padding for the last window.
        extra_h = max(0, (oh - 1) * strides[0] + (kernel[0] - 1) * dil[0] + 1 - (h + top + bottom))
        extra_w = max(0, (ow - 1) * strides[1] + (kernel[1] - 1) * dil[1] + 1 - (w + left + right))
        pads = ((0, 0), (0, 0), (top, bottom + extra_h), (left, right + extra_w))
        if is_max:
            if np.issubdtype(x.dtype, np.floating):
                fill = -np.inf
            else:
                fill = np.iinfo(x.dtype).min
            padded = np.pad(x, pads, constant_values=fill)
            out = _window_reduce(padded, kernel, dil, strides, (oh, ow), np.maximum)
        else:
            padded = np.pad(x, pads)
            total = _window_reduce(padded, kernel, dil, strides, (oh, ow), np.add)
            # Count the window positions over real data, or also over explicit padding
            # (never over the ceil-mode extension), as TVM's topi pool does.
            region = np.zeros((1, 1) + padded.shape[2:], dtype=np.int64)
            if attrs["count_include_pad"]:
                region[..., :h + top + bottom, :w + left + right] = 1
            else:
                region[..., top:top + h, left:left + w] = 1
            count = _window_reduce(region, kernel, dil, strides, (oh, ow), np.add)
            count = np.maximum(count, 1)
            if np.issubdtype(x.dtype, np.integer):
                out = np.fix(total / count)
            else:
                out = total / count.astype(x.dtype)
        return as_array(_from_canonical(np.asarray(out), "NCHW", _layout(attrs, "out_layout", layout)),
                        str(x0.dtype))
    return compute


register(OpDef("nn.max_pool2d", 1, POOL_ATTRS, OpPattern.OUT_ELEMWISE_FUSABLE,
               _pool_rel("nn.max_pool2d"), _pool("nn.max_pool2d", True),
               description="2-d max pooling"))
register(OpDef("nn.avg_pool2d", 1, POOL_ATTRS + (AttrField("count_include_pad", "bool", False),),
               OpPattern.OUT_ELEMWISE_FUSABLE, _pool_rel("nn.avg_pool2d"),
               _pool("nn.avg_pool2d", False), description="2-d average pooling"))

GLOBAL_POOL_ATTRS = (
    AttrField("layout", "str", "NCHW", check=permutation_of("NCHW")),
    AttrField("out_layout", "str", "", check=permutation_of("NCHW", allow_empty=True)),
)


def _global_pool_rel(op: str) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        x = check_domain(op, tensor_arg(op, types, 0, "data"), "numeric")
        _rank(op, x, 4, "data")
        layout = str(attrs["layout"])
        n, c, _, _ = _shape_in(layout, "NCHW", x)
        check_not_empty(op, x, (layout.index("H"), layout.index("W")))
        return TensorType(_shape_out("NCHW", _layout(attrs, "out_layout", layout), (n, c, 1, 1)),
                          x.dtype)
    return rel


def _global_pool(reduce: Callable[..., np.ndarray]) -> Callable[[list[Value], Attrs], Value]:
    def compute(args: list[Value], attrs: Attrs) -> Value:
        layout = str(attrs["layout"])
        x = _to_canonical(args[0], layout, "NCHW")
        out = reduce(x, axis=(2, 3), keepdims=True)
        return as_array(_from_canonical(out, "NCHW", _layout(attrs, "out_layout", layout)),
                        str(x.dtype))
    return compute


register(OpDef("nn.global_avg_pool2d", 1, GLOBAL_POOL_ATTRS, OpPattern.OUT_ELEMWISE_FUSABLE,
               _global_pool_rel("nn.global_avg_pool2d"), _global_pool(mean_in_dtype),
               description="mean over the spatial axes"))
register(OpDef("nn.global_max_pool2d", 1, GLOBAL_POOL_ATTRS, OpPattern.OUT_ELEMWISE_FUSABLE,
               _global_pool_rel("nn.global_max_pool2d"), _global_pool(np.max),
               description="max over the spatial axes"))

# ----------------------------------------------------------------------- pad, flatten


def _pad_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.pad"
    x = tensor_arg(op, types, 0, "data")
    value = tensor_arg(op, types, 1, "pad_value")
    if value.ndim != 0:
        raise TypeRelError(f"{op}: pad_value must be a scalar, got {value}")
    width = attrs["pad_width"]
    assert isinstance(width, tuple)
    if len(width) != x.ndim:
        raise TypeRelError(f"{op}: pad_width has {len(width)} entries for a tensor of rank "
                           f"{x.ndim} ({x})")
    shape = []
    for d, (before, after) in zip(x.shape, width):
        if attrs["pad_mode"] == "reflect" and is_known(d) and max(before, after) >= d:
            raise TypeRelError(f"{op}: reflect padding of {max(before, after)} needs an axis "
                               f"longer than {d}")
        shape.append(d + before + after if is_known(d) else Any())
    return TensorType(tuple(shape), x.dtype)


def _pairs(v: AttrValue) -> str | None:
    assert isinstance(v, tuple)
    if all(len(row) == 2 and row[0] >= 0 and row[1] >= 0 for row in v):
        return None
    return "must list one [before, after] pair of non-negative integers per axis"


def _pad(args: list[Value], attrs: Attrs) -> Value:
    x, value = args
    mode = str(attrs["pad_mode"])
    width = [tuple(row) for row in attrs["pad_width"]]  # type: ignore[union-attr]
    if x.ndim == 0:
        return x.copy()
    if mode == "constant":
        out = np.pad(x, width, constant_values=np.asarray(value).astype(x.dtype))
    else:
        out = np.pad(x, width, mode=mode)
    return as_array(out, str(x.dtype))


register(OpDef("nn.pad", 2,
               (AttrField("pad_width", "int_list_list", required=True, check=_pairs),
                AttrField("pad_mode", "str", "constant", check=one_of("constant", "edge", "reflect"))),
               OpPattern.INJECTIVE, _pad_rel, _pad,
               description="pads each axis (data, pad_value)"))


def _batch_flatten_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    x = tensor_arg("nn.batch_flatten", types, 0, "data")
    if x.ndim < 1:
        raise TypeRelError(f"nn.batch_flatten: data must have rank >= 1, got {x}")
    return TensorType((x.shape[0], prod(x.shape[1:])), x.dtype)


register(OpDef("nn.batch_flatten", 1, (), OpPattern.INJECTIVE, _batch_flatten_rel,
               lambda args, attrs: args[0].reshape(args[0].shape[0], -1),
               description="flattens every axis but the first", extra={"reshape_only": True}))
