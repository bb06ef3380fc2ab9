"""nn.* operators against naive loop oracles on tiny shapes, plus their type-relation errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from irtool.core.span import Span
from irtool.ir.types import Any, TensorType, TupleType
from irtool.ops import TypeRelError, get_op
from irtool.ops.apply import apply_op
from irtool.core.diagnostics import DiagnosticError

F32 = "float32"


def rel(name: str, *types, **attrs):
    op = get_op(name)
    return op.type_rel(list(types), op.full_attrs(op.normalize_attrs(attrs)))


def tt(*shape, dtype: str = F32) -> TensorType:
    return TensorType(tuple(shape), dtype)


# ------------------------------------------------------------------------------- conv2d

def conv2d_oracle(x, w, strides, pad, dilation, groups):
    """Direct definition: out[n,o,i,j] = sum over c in o's group, ky, kx of x_padded * w."""
    n_, c_, h_, w_ = x.shape
    o_, cg, kh, kw = w.shape
    top, left, bottom, right = pad
    oh = (h_ + top + bottom - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (w_ + left + right - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    out = np.zeros((n_, o_, oh, ow), np.float64)
    per_group = o_ // groups
    for n in range(n_):
        for o in range(o_):
            g = o // per_group
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for c in range(cg):
                        for ky in range(kh):
                            for kx in range(kw):
                                y = i * strides[0] + ky * dilation[0] - top
                                z = j * strides[1] + kx * dilation[1] - left
                                if 0 <= y < h_ and 0 <= z < w_:
                                    acc += float(x[n, g * cg + c, y, z]) * float(w[o, c, ky, kx])
                    out[n, o, i, j] = acc
    return out


@st.composite
def conv_case(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cg = draw(st.integers(1, 2))
    per_group = draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    strides = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    form = draw(st.sampled_from([1, 2, 4]))
    pads = draw(st.lists(st.integers(0, 2), min_size=form, max_size=form))
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    pad4 = {1: lambda p: (p[0],) * 4, 2: lambda p: (p[0], p[1], p[0], p[1]), 4: tuple}[form](pads)
    assume(h + pad4[0] + pad4[2] >= (kh - 1) * dilation[0] + 1)
    assume(w + pad4[1] + pad4[3] >= (kw - 1) * dilation[1] + 1)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((draw(st.integers(1, 2)), groups * cg, h, w)).astype(np.float32)
    wt = rng.standard_normal((groups * per_group, cg, kh, kw)).astype(np.float32)
    return x, wt, strides, pads, pad4, dilation, groups


@settings(max_examples=80)
@given(case=conv_case(), layout=st.sampled_from(["NCHW", "NHWC"]))
def test_conv2d_matches_direct_definition(case, layout: str) -> None:
    x, w, strides, pads, pad4, dilation, groups = case
    want = conv2d_oracle(x, w, strides, pad4, dilation, groups)
    attrs = {"strides": list(strides), "padding": pads, "dilation": list(dilation), "groups": groups,
             "channels": w.shape[0], "kernel_size": list(w.shape[2:])}
    if layout == "NHWC":
        attrs.update(data_layout="NHWC", kernel_layout="HWIO")
        t, out = apply_op("nn.conv2d", [x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0)], attrs)
        out = out.transpose(0, 3, 1, 2)
    else:
        t, out = apply_op("nn.conv2d", [x, w], attrs)
    assert out.dtype == np.float32 and t.dtype == F32
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_conv2d_depthwise_out_dtype_and_out_layout() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 4, (1, 4, 5, 5)).astype(np.int8)
    w = rng.integers(-3, 4, (4, 1, 3, 3)).astype(np.int8)
    t, out = apply_op("nn.conv2d", [x, w], {"groups": 4, "padding": [1], "out_dtype": "int32",
                                            "out_layout": "NHWC"})
    assert t == tt(1, 5, 5, 4, dtype="int32")
    want = conv2d_oracle(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 4)
    np.testing.assert_array_equal(out.transpose(0, 3, 1, 2), want.astype(np.int32))


def test_conv2d_type_relation_shapes() -> None:
    assert rel("nn.conv2d", tt(1, 3, 224, 224), tt(64, 3, 7, 7), strides=[2, 2],
               padding=[3, 3, 3, 3]) == tt(1, 64, 112, 112)
    assert rel("nn.conv2d", tt(Any(), 3, Any(), 8), tt(8, 3, 3, 3)) == tt(Any(), 8, Any(), 6)
    # The TVM corpus' NHWC/HWIO call: kernel (1, 1, 3, 3) in HWIO is a 1x1 kernel, 3 -> 3.
    assert rel("nn.conv2d", tt(1, 32, 32, 3), tt(1, 1, 3, 3), data_layout="NHWC",
               kernel_layout="HWIO") == tt(1, 32, 32, 3)


@pytest.mark.parametrize("types,attrs,message", [
    ((tt(1, 4, 8, 8), tt(8, 3, 3, 3)), {}, "has 4 input channels but weight"),
    ((tt(1, 4, 8, 8), tt(6, 1, 3, 3)), {"groups": 4}, "not divisible by groups=4"),
    ((tt(1, 3, 8, 8), tt(8, 3, 3, 3)), {"channels": 16}, "channels=16"),
    ((tt(1, 3, 8, 8), tt(8, 3, 3, 3)), {"kernel_size": [5, 5]}, "kernel_size=[5, 5]"),
    ((tt(1, 3, 2, 2), tt(8, 3, 3, 3)), {}, "does not fit"),
    ((tt(3, 8, 8), tt(8, 3, 3, 3)), {}, "rank 4"),
])
def test_conv2d_type_errors(types, attrs, message: str) -> None:
    with pytest.raises(TypeRelError, match=message.replace("[", r"\[").replace("]", r"\]")):
        rel("nn.conv2d", *types, **attrs)


SPAN = Span("model.relay", 3, 7, 3, 40)


@pytest.mark.parametrize("attrs,message", [
    ({"groups": 0}, "`groups` must be positive, got 0"),
    ({"padding": [1, 2, 3]}, "`padding` must have 1, 2 or 4 values, got [1, 2, 3]"),
    ({"padding": [1, -1]}, "`padding` must not be negative"),
    ({"strides": [0, 1]}, "`strides` must be positive"),
    ({"data_layout": "NCWH2"}, "`data_layout` must be a permutation of NCHW"),
    ({"groups": 1.5}, "`groups` expects an integer, got 1.5f"),
    ({"out_dtype": "floaty"}, "`out_dtype` expects a dtype"),
    ({"group": 2}, "has no attribute `group`; did you mean `groups`?"),
])
def test_conv2d_bad_attributes_are_located(attrs, message: str) -> None:
    with pytest.raises(DiagnosticError) as err:
        get_op("nn.conv2d").normalize_attrs(attrs, SPAN)
    assert message in str(err.value)
    assert err.value.span == SPAN


def test_conv2d_attributes_are_canonical() -> None:
    op = get_op("nn.conv2d")
    assert dict(op.normalize_attrs({"groups": 1, "padding": [0, 0], "strides": [2, 2]})) == \
        {"strides": (2, 2)}
    assert op.full_attrs({})["data_layout"] == "NCHW"


# ------------------------------------------------------------------------ dense, matmul

@settings(max_examples=60)
@given(b=st.integers(1, 3), m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 4),
       seed=st.integers(0, 1000))
def test_dense_and_batch_matmul(b: int, m: int, k: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    t, out = apply_op("nn.dense", [x, w], {"units": n})
    want = np.array([[[sum(float(x[i, r, c]) * float(w[j, c]) for c in range(k)) for j in range(n)]
                      for r in range(m)] for i in range(b)])
    assert t == tt(b, m, n)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    y = rng.standard_normal((1, k, n)).astype(np.float32)  # batch 1 broadcasts
    t, out = apply_op("nn.batch_matmul", [x, y])
    want = np.array([[[sum(float(x[i, r, c]) * float(y[0, c, j]) for c in range(k))
                       for j in range(n)] for r in range(m)] for i in range(b)])
    assert t == tt(b, m, n)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    t, out2 = apply_op("nn.batch_matmul", [x.transpose(0, 2, 1).copy(), y.transpose(0, 2, 1).copy()],
                       {"transpose_a": True, "transpose_b": True})
    np.testing.assert_allclose(out2, want, rtol=1e-5, atol=1e-5)


def test_matmul_type_errors() -> None:
    with pytest.raises(TypeRelError, match="reduction dimension"):
        rel("nn.dense", tt(2, 3), tt(4, 5))
    with pytest.raises(TypeRelError, match="units=3"):
        rel("nn.dense", tt(2, 5), tt(4, 5), units=3)
    with pytest.raises(TypeRelError, match="batch sizes"):
        rel("nn.batch_matmul", tt(2, 3, 4), tt(3, 4, 5))
    assert rel("nn.batch_matmul", tt(2, 3, 4), tt(2, 5, 4), transpose_b=True,
               out_dtype="float16") == tt(2, 3, 5, dtype="float16")
    assert rel("nn.dense", tt(Any(), 768), tt(2304, 768), units=2304) == tt(Any(), 2304)


def test_batch_matmul_broadcasts_a_shared_operand_of_batch_one_over_a_dynamic_batch() -> None:
    # numpy's matmul: a batch of 1 broadcasts, so `?` against 1 is the `?`, on either side.
    assert rel("nn.batch_matmul", tt(Any(), 3, 8), tt(1, 8, 4)) == tt(Any(), 3, 4)
    assert rel("nn.batch_matmul", tt(1, 3, 8), tt(Any(), 8, 4)) == tt(Any(), 3, 4)
    assert rel("nn.batch_matmul", tt(Any(), 3, 8), tt(6, 8, 4)) == tt(6, 3, 4)
    assert rel("nn.batch_matmul", tt(6, 3, 8), tt(1, 8, 4)) == tt(6, 3, 4)


# -------------------------------------------------------------- bias, batch norm, softmax

def test_bias_add_and_batch_norm() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.array([10, 20, 30], np.float32)
    _, out = apply_op("nn.bias_add", [x, b])
    for idx in np.ndindex(x.shape):
        assert out[idx] == x[idx] + b[idx[1]]
    b4 = np.array([1, 2, 3, 4], np.float32)
    _, out = apply_op("nn.bias_add", [x, b4], {"axis": -1})
    assert out[1, 2].tolist() == (x[1, 2] + b4).tolist()
    with pytest.raises(TypeRelError, match="bias must be a vector of 3 elements"):
        rel("nn.bias_add", tt(2, 3, 4), tt(4))

    slopes = np.array([0.5, -1, 2], np.float32)
    _, out = apply_op("nn.prelu", [x - 12, slopes])
    for idx in np.ndindex(x.shape):
        v = x[idx] - 12
        assert out[idx] == (v if v > 0 else v * slopes[idx[1]])
    with pytest.raises(TypeRelError, match="alpha must be a vector of 3 elements"):
        rel("nn.prelu", tt(2, 3, 4), tt(4))

    gamma, beta = np.array([1, 2, 0.5], np.float32), np.array([0, 1, -1], np.float32)
    mean, var = np.array([1, 2, 3], np.float32), np.array([4, 1, 0.25], np.float32)
    t, (y, m, v) = apply_op("nn.batch_norm", [x, gamma, beta, mean, var], {"epsilon": 0.0})
    assert t == TupleType((tt(2, 3, 4), tt(3), tt(3)))
    for idx in np.ndindex(x.shape):
        c = idx[1]
        want = (x[idx] - mean[c]) / math.sqrt(var[c]) * gamma[c] + beta[c]
        assert abs(y[idx] - want) < 1e-5
    assert m.tolist() == mean.tolist() and v.tolist() == var.tolist()
    _, (y2, _, _) = apply_op("nn.batch_norm", [x, gamma, beta, mean, var],
                             {"epsilon": 0.0, "center": False, "scale": False})
    assert abs(y2[0, 1, 0] - (x[0, 1, 0] - 2) / 1.0) < 1e-6
    with pytest.raises(TypeRelError, match="moving_var must be a vector of 3"):
        rel("nn.batch_norm", tt(2, 3, 4), tt(3), tt(3), tt(3), tt(2))


@settings(max_examples=60)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), seed=st.integers(0, 1000),
       data=st.data())
def test_softmax_and_log_softmax(shape, seed: int, data) -> None:
    x = (np.random.default_rng(seed).standard_normal(shape) * 10).astype(np.float32)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    _, out = apply_op("nn.softmax", [x], {"axis": axis})
    _, logs = apply_op("nn.log_softmax", [x], {"axis": axis})
    moved = np.moveaxis(x, axis, -1)
    want = np.empty(moved.shape)
    for idx in np.ndindex(moved.shape[:-1]):
        row = [float(v) for v in moved[idx]]
        total = sum(math.exp(v) for v in row)
        want[idx] = [math.exp(v) / total for v in row]
    want = np.moveaxis(want, -1, axis)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(logs, np.log(want), rtol=1e-5, atol=1e-5)


def test_lrn_matches_window_sum() -> None:
    x = np.random.default_rng(3).standard_normal((1, 6, 2, 2)).astype(np.float32)
    size, alpha, beta, bias = 3, 1e-2, 0.75, 2.0
    _, out = apply_op("nn.lrn", [x], {"size": size, "alpha": alpha, "beta": beta, "bias": bias})
    for n, c, i, j in np.ndindex(x.shape):
        window = [float(x[n, k, i, j]) ** 2 for k in range(c - 1, c + 2) if 0 <= k < 6]
        want = float(x[n, c, i, j]) / (bias + alpha * sum(window) / size) ** beta
        assert abs(out[n, c, i, j] - want) < 1e-5


def test_dropout_is_a_pair_in_inference() -> None:
    x = np.ones((2, 2), np.float32) * 3
    t, (y, mask) = apply_op("nn.dropout", [x], {"rate": 0.25})
    assert t == TupleType((tt(2, 2), tt(2, 2)))
    assert y.tolist() == x.tolist() and mask.tolist() == [[1, 1], [1, 1]]
    with pytest.raises(DiagnosticError, match="rate"):
        get_op("nn.dropout").normalize_attrs({"rate": 1.5}, SPAN)


# ------------------------------------------------------------------------------- pooling

def pool_oracle(x, kernel, strides, dilation, pad4, ceil_mode, is_max, count_include_pad):
    """Explicit windows; averages count data (or data+explicit padding) positions, as TVM."""
    n_, c_, h_, w_ = x.shape
    top, left, bottom, right = pad4

    def extent(size, lo, hi, k, d, s):
        span = size + lo + hi - (k - 1) * d - 1
        return (span + (s - 1 if ceil_mode else 0)) // s + 1

    oh = extent(h_, top, bottom, kernel[0], dilation[0], strides[0])
    ow = extent(w_, left, right, kernel[1], dilation[1], strides[1])
    out = np.zeros((n_, c_, oh, ow))
    for n, c, i, j in np.ndindex(n_, c_, oh, ow):
        vals, count = [], 0
        for ky in range(kernel[0]):
            for kx in range(kernel[1]):
                y = i * strides[0] + ky * dilation[0] - top
                z = j * strides[1] + kx * dilation[1] - left
                inside = 0 <= y < h_ and 0 <= z < w_
                in_padded = -top <= y < h_ + bottom and -left <= z < w_ + right
                if inside:
                    vals.append(float(x[n, c, y, z]))
                if inside or (count_include_pad and in_padded):
                    count += 1
        if is_max:
            out[n, c, i, j] = max(vals, default=-np.inf)  # a window wholly in padding
        else:
            out[n, c, i, j] = sum(vals) / max(count, 1)
    return out


@st.composite
def pool_case(draw):
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad4 = tuple(draw(st.lists(st.integers(0, 1), min_size=4, max_size=4)))
    assume(pad4[0] < k[0] and pad4[2] < k[0] and pad4[1] < k[1] and pad4[3] < k[1])
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    assume(h + pad4[0] + pad4[2] >= (k[0] - 1) * d[0] + 1)
    assume(w + pad4[1] + pad4[3] >= (k[1] - 1) * d[1] + 1)
    ceil_mode = draw(st.booleans())
    if ceil_mode:  # every window must start inside data or explicit padding (as frameworks ensure)
        for size, lo, hi, kk, dd, ss in ((h, pad4[0], pad4[2], k[0], d[0], s[0]),
                                         (w, pad4[1], pad4[3], k[1], d[1], s[1])):
            out = (size + lo + hi - (kk - 1) * dd - 1 + ss - 1) // ss + 1
            assume((out - 1) * ss < size + lo)
    x = np.random.default_rng(draw(st.integers(0, 1000))).standard_normal((1, 2, h, w))
    return x.astype(np.float32), k, s, d, pad4, ceil_mode


@settings(max_examples=100)
@given(case=pool_case(), is_max=st.booleans(), include=st.booleans())
def test_pooling_matches_windows(case, is_max: bool, include: bool) -> None:
    x, k, s, d, pad4, ceil_mode = case
    attrs = {"pool_size": list(k), "strides": list(s), "dilation": list(d), "padding": list(pad4),
             "ceil_mode": ceil_mode}
    if not is_max:
        attrs["count_include_pad"] = include
    t, out = apply_op("nn.max_pool2d" if is_max else "nn.avg_pool2d", [x], attrs)
    want = pool_oracle(x, k, s, d, pad4, ceil_mode, is_max, include)
    assert out.dtype == np.float32 and t.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_pool_layouts_and_global_pools() -> None:
    x = np.random.default_rng(5).standard_normal((2, 3, 4, 5)).astype(np.float32)
    _, nchw = apply_op("nn.max_pool2d", [x], {"pool_size": [2, 2], "strides": [2, 2]})
    t, nhwc = apply_op("nn.max_pool2d", [x.transpose(0, 2, 3, 1)],
                       {"pool_size": [2, 2], "strides": [2, 2], "layout": "NHWC"})
    assert t == tt(2, 2, 2, 3)
    np.testing.assert_array_equal(nhwc.transpose(0, 3, 1, 2), nchw)
    t, avg = apply_op("nn.global_avg_pool2d", [x])
    assert t == tt(2, 3, 1, 1)
    for n, c in np.ndindex(2, 3):
        assert abs(avg[n, c, 0, 0] - sum(float(v) for v in x[n, c].ravel()) / 20) < 1e-6
    _, mx = apply_op("nn.global_max_pool2d", [x.transpose(0, 2, 3, 1)], {"layout": "NHWC"})
    assert mx.shape == (2, 1, 1, 3) and mx[1, 0, 0, 2] == max(x[1, 2].ravel())
    assert rel("nn.max_pool2d", tt(1, 64, 112, 112), pool_size=[3, 3], strides=[2, 2],
               padding=[1, 1]) == tt(1, 64, 56, 56)
    # ceil mode keeps a partial last window (TVM's formula).
    assert rel("nn.max_pool2d", tt(1, 1, 6, 6), pool_size=[3, 3], strides=[2, 2],
               ceil_mode=True) == tt(1, 1, 3, 3)
    with pytest.raises(DiagnosticError, match="missing required attribute `pool_size`"):
        get_op("nn.max_pool2d").normalize_attrs({}, SPAN)


# ------------------------------------------------------------------------- pad, flatten

def test_pad_modes_and_errors() -> None:
    x = np.array([[1, 2], [3, 4]], np.float32)
    t, out = apply_op("nn.pad", [x, np.float32(9)], {"pad_width": [[1, 0], [0, 2]]})
    assert t == tt(3, 4)
    assert out.tolist() == [[9, 9, 9, 9], [1, 2, 9, 9], [3, 4, 9, 9]]
    _, out = apply_op("nn.pad", [x, np.float32(0)], {"pad_width": [[0, 0], [1, 1]], "pad_mode": "edge"})
    assert out.tolist() == [[1, 1, 2, 2], [3, 3, 4, 4]]
    _, out = apply_op("nn.pad", [np.array([1, 2, 3], np.float32), np.float32(0)],
                      {"pad_width": [[2, 1]], "pad_mode": "reflect"})
    assert out.tolist() == [3, 2, 1, 2, 3, 2]
    with pytest.raises(TypeRelError, match="2 entries for a tensor of rank 3"):
        rel("nn.pad", tt(1, 2, 3), tt(), pad_width=[[0, 0], [0, 0]])
    with pytest.raises(DiagnosticError, match="pair of non-negative"):
        get_op("nn.pad").normalize_attrs({"pad_width": [[0, 1, 2]]}, SPAN)
    with pytest.raises(DiagnosticError, match="pad_mode"):
        get_op("nn.pad").normalize_attrs({"pad_width": [[0, 1]], "pad_mode": "wrap"}, SPAN)


def test_batch_flatten() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t, out = apply_op("nn.batch_flatten", [x])
    assert t == tt(2, 12) and out[1].tolist() == list(range(12, 24))
    assert rel("nn.batch_flatten", tt(Any(), 3, 4)) == tt(Any(), 12)
    assert rel("nn.batch_flatten", tt(2, Any(), 4)) == tt(2, Any())
