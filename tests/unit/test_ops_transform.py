"""Shape operators, creation ops and layout transforms against hand-derived results."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from irtool.core.span import Span
from irtool.ir.types import Any, TensorType, TupleType
from irtool.ops import TypeRelError, get_op
from irtool.ops.apply import apply_op
from irtool.ops.definitions._common import MAX_RANK
from irtool.core.diagnostics import DiagnosticError

F32 = "float32"
SPAN = Span("t.relay", 1, 1, 1, 10)


def tt(*shape, dtype: str = F32) -> TensorType:
    return TensorType(tuple(shape), dtype)


def rel(name: str, *types, **attrs):
    op = get_op(name)
    return op.type_rel(list(types), op.full_attrs(op.normalize_attrs(attrs)))


# ------------------------------------------------------------------------------ reshape

@pytest.mark.parametrize("shape,newshape,want", [
    ((2, 3, 4), [6, 1, -1], (6, 1, 4)),
    ((2, 3, 4), [3, -1, 8], (3, 1, 8)),
    ((2, 3, 4), [0, -1], (2, 12)),
    ((2, 3, 4), [-1], (24,)),
    ((2, 3, 4), [-2], (2, 3, 4)),
    ((2, 3, 4), [2, -2], (2, 3, 4)),
    ((2, 3, 4), [-2, 1, 1], (2, 3, 4, 1, 1)),
    ((2, 3, 4), [-3, 4], (6, 4)),
    ((2, 3, 4, 5), [-3, -3], (6, 20)),
    ((2, 3, 4), [0, -3], (2, 12)),
    ((2, 3, 4, 5), [-3, -2], (6, 4, 5)),
    ((2, 3, 4), [-4, 1, 2, -2], (1, 2, 3, 4)),
    ((2, 3, 4), [2, -4, -1, 3, -2], (2, 1, 3, 4)),
    ((1, 384, 128), [-1, 384], (128, 384)),
])
def test_reshape_special_values(shape, newshape, want) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t, out = apply_op("reshape", [x], {"newshape": newshape})
    assert t == TensorType(want, F32)
    assert out.ravel().tolist() == x.ravel().tolist()


def test_reshape_allowzero_and_unknown_dims() -> None:
    t, out = apply_op("reshape", [np.zeros((0, 3), np.float32)], {"newshape": [0, 3], "allowzero": True})
    assert t == tt(0, 3)
    assert rel("reshape", tt(Any(), 3, 4), newshape=[0, -1]) == tt(Any(), 12)
    assert rel("reshape", tt(Any(), 3, 4), newshape=[-1, 4]) == tt(Any(), 4)
    assert rel("reshape", tt(Any(), 3), newshape=[-3]) == tt(Any())


@pytest.mark.parametrize("shape,newshape,message", [
    ((2, 3), [4, 2], "cannot reshape"),
    ((2, 3), [-1, -1], "more than one -1"),
    ((2, 3), [0, 0, 0], "more dimensions"),
    ((2, 3), [-4, 4, -1, 3], "cannot split dimension 2"),
    ((2, 3), [-5], "invalid value -5"),
])
def test_reshape_errors(shape, newshape, message: str) -> None:
    with pytest.raises(TypeRelError, match=message):
        rel("reshape", TensorType(shape, F32), newshape=newshape)


@settings(max_examples=100)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
def test_reshape_to_a_random_factorisation(shape, data) -> None:
    total = int(np.prod(shape))
    dims, rest = [], total
    while rest > 1 and len(dims) < 4:
        d = data.draw(st.sampled_from([k for k in range(1, rest + 1) if rest % k == 0]))
        dims.append(d)
        rest //= d
    dims.append(rest)
    hole = data.draw(st.integers(0, len(dims) - 1))
    newshape = dims[:hole] + [-1] + dims[hole + 1:]
    x = np.arange(total, dtype=np.int32).reshape(shape)
    t, out = apply_op("reshape", [x], {"newshape": newshape})
    assert t == TensorType(tuple(dims), "int32")
    assert out.ravel().tolist() == list(range(total))


# -------------------------------------------------------------- transpose, squeeze, expand

@settings(max_examples=60)
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=4), data=st.data())
def test_transpose_moves_every_element(shape, data) -> None:
    perm = data.draw(st.permutations(range(len(shape))))
    signed = [p - len(shape) if data.draw(st.booleans()) else p for p in perm]
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    t, out = apply_op("transpose", [x], {"axes": signed})
    assert t.shape == tuple(shape[p] for p in perm)
    for idx in np.ndindex(out.shape):
        src = [0] * len(shape)
        for k, p in enumerate(perm):
            src[p] = idx[k]
        assert out[idx] == x[tuple(src)]


def test_transpose_default_and_errors() -> None:
    assert rel("transpose", tt(2, 3, 4)) == tt(4, 3, 2)
    with pytest.raises(TypeRelError, match="not a permutation"):
        rel("transpose", tt(2, 3), axes=[0, 0])
    with pytest.raises(TypeRelError, match="do not match rank"):
        rel("transpose", tt(2, 3), axes=[0])


def test_squeeze_and_expand_dims() -> None:
    assert rel("squeeze", tt(1, 3, 1, Any())) == tt(3, Any())
    assert rel("squeeze", tt(1, 3, 1), axis=[-1]) == tt(1, 3)
    with pytest.raises(TypeRelError, match="cannot squeeze axis 1"):
        rel("squeeze", tt(1, 3), axis=[1])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t, out = apply_op("squeeze", [x.reshape(1, 2, 1, 3)])
    assert t == tt(2, 3) and out.tolist() == x.tolist()
    assert rel("expand_dims", tt(2, 3), axis=0) == tt(1, 2, 3)
    assert rel("expand_dims", tt(2, 3), axis=-1, num_newaxis=2) == tt(2, 3, 1, 1)
    assert rel("expand_dims", tt(3), axis=1, num_newaxis=2) == tt(3, 1, 1)
    t, out = apply_op("expand_dims", [x], {"axis": 1})
    assert t == tt(2, 1, 3) and out[:, 0].tolist() == x.tolist()
    with pytest.raises(TypeRelError, match="out of range"):
        rel("expand_dims", tt(2, 3), axis=4)
    with pytest.raises(DiagnosticError, match="missing required attribute `axis`"):
        get_op("expand_dims").normalize_attrs({}, SPAN)


def test_attribute_driven_ranks_are_limited() -> None:
    """Ranks an attribute asks for are refused above MAX_RANK before a shape is built (a huge
    num_newaxis once hung every tool), and MAX_RANK itself is still accepted."""
    assert rel("expand_dims", tt(2), axis=0, num_newaxis=MAX_RANK - 1) == tt(*([1] * (MAX_RANK - 1)), 2)
    with pytest.raises(TypeRelError, match=f"rank 100000001; at most {MAX_RANK}"):
        rel("expand_dims", tt(2), axis=0, num_newaxis=100_000_000)
    with pytest.raises(TypeRelError, match=f"rank {MAX_RANK + 1}"):
        rel("expand_dims", tt(2), axis=0, num_newaxis=MAX_RANK)
    assert rel("reshape", tt(2), newshape=[1] * (MAX_RANK - 1) + [2]) == tt(*([1] * (MAX_RANK - 1)), 2)
    with pytest.raises(TypeRelError, match="reshape: newshape asks for a tensor of rank 65"):
        rel("reshape", tt(2), newshape=[1] * MAX_RANK + [2])
    for name in ("zeros", "ones"):
        assert rel(name, shape=[1] * MAX_RANK) == tt(*([1] * MAX_RANK))
        with pytest.raises(TypeRelError, match=f"{name}: shape asks for a tensor of rank 65"):
            rel(name, shape=[1] * (MAX_RANK + 1))
    with pytest.raises(TypeRelError, match="full: shape asks for a tensor of rank 65"):
        rel("full", tt(), shape=[1] * (MAX_RANK + 1))


# -------------------------------------------------------------------- concatenate, split

def test_concatenate_takes_one_tuple() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(4, dtype=np.float32).reshape(2, 2) + 100
    t, out = apply_op("concatenate", [(a, b)], {"axis": -1})
    assert t == tt(2, 5)
    assert out.tolist() == [[0, 1, 2, 100, 101], [3, 4, 5, 102, 103]]
    assert rel("concatenate", TupleType((tt(Any(), 3), tt(2, Any()))), axis=0) == tt(Any(), 3)
    assert rel("concatenate", TupleType((tt(Any(), 3), tt(2, 3))), axis=1) == tt(2, 6)
    with pytest.raises(TypeRelError, match="differ on axis 0"):
        rel("concatenate", TupleType((tt(2, 3), tt(3, 3))), axis=1)
    with pytest.raises(TypeRelError, match="cannot concatenate"):
        rel("concatenate", TupleType((tt(2, 3), tt(2, 3, dtype="int32"))))
    with pytest.raises(TypeRelError, match="tuple of tensors"):
        rel("concatenate", tt(2, 3))


@settings(max_examples=60)
@given(extent=st.integers(1, 8), data=st.data())
def test_split_pieces_reassemble(extent: int, data) -> None:
    x = np.arange(extent * 2, dtype=np.int32).reshape(2, extent)
    if data.draw(st.booleans()):
        sections = data.draw(st.sampled_from([k for k in range(1, extent + 1) if extent % k == 0]))
        spec: int | list[int] = sections
        bounds = [(k * extent // sections, (k + 1) * extent // sections) for k in range(sections)]
    else:
        spec = sorted(data.draw(st.lists(st.integers(0, extent), max_size=3)))
        starts = [0, *spec]
        bounds = list(zip(starts, [*spec, extent]))
    t, pieces = apply_op("split", [x], {"indices_or_sections": spec, "axis": 1})
    assert isinstance(t, TupleType) and len(pieces) == len(bounds)
    for piece, (lo, hi) in zip(pieces, bounds):
        assert piece.tolist() == [row[lo:hi] for row in x.tolist()]


def test_split_errors_and_unknown_extent() -> None:
    with pytest.raises(TypeRelError, match="not divisible into 4 sections"):
        rel("split", tt(6), indices_or_sections=4)
    with pytest.raises(TypeRelError, match="increasing"):
        rel("split", tt(6), indices_or_sections=[3, 1])
    with pytest.raises(DiagnosticError, match="must be positive"):
        get_op("split").normalize_attrs({"indices_or_sections": 0}, SPAN)
    assert rel("split", tt(Any(), 2), indices_or_sections=[1, 3]) == \
        TupleType((tt(1, 2), tt(2, 2), tt(Any(), 2)))


# ------------------------------------------------------------------------ strided_slice

@settings(max_examples=150)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
def test_strided_slice_matches_python_slices(shape, data) -> None:
    n = data.draw(st.integers(1, len(shape)))
    begin = data.draw(st.lists(st.integers(-6, 6), min_size=n, max_size=n))
    end = data.draw(st.lists(st.integers(-6, 6), min_size=n, max_size=n))
    strides = data.draw(st.lists(st.integers(-3, 3).filter(bool), min_size=n, max_size=n))
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    t, out = apply_op("strided_slice", [x], {"begin": begin, "end": end, "strides": strides})
    ranges = [list(range(*slice(b, e, s).indices(d))) for b, e, s, d in zip(begin, end, strides, shape)]
    ranges += [list(range(d)) for d in shape[n:]]
    assert t.shape == tuple(len(r) for r in ranges)
    for idx in np.ndindex(out.shape):
        assert out[idx] == x[tuple(r[i] for r, i in zip(ranges, idx))]


def test_strided_slice_modes() -> None:
    # The TVM corpus' call: end -1 stops before the last row.
    assert rel("strided_slice", tt(1, 384, 128), begin=[0, 0, 0], end=[1, -1, 128],
               strides=[1, 1, 1], axes=None) == tt(1, 383, 128)
    x = np.arange(20, dtype=np.int32).reshape(4, 5)
    t, out = apply_op("strided_slice", [x], {"begin": [1], "end": [3], "axes": [1]})
    assert t == tt(4, 2, dtype="int32") and out[0].tolist() == [1, 2]
    t, out = apply_op("strided_slice", [x], {"begin": [1, 2], "end": [2, -1], "slice_mode": "size"})
    assert out.tolist() == [[7, 8, 9], [12, 13, 14]]
    # Missing strides are 1 and missing begin/end cover the whole axis (TVM).
    t, out = apply_op("strided_slice", [x], {"begin": [1], "end": [3], "strides": [1, 2]})
    assert out.tolist() == [[5, 7, 9], [10, 12, 14]]
    t, out = apply_op("strided_slice", [x], {"begin": [3, 0], "end": [0], "strides": [-2]})
    assert out.tolist() == [[15, 16, 17, 18, 19], [5, 6, 7, 8, 9]]
    with pytest.raises(TypeRelError, match="one entry per distinct axis"):
        rel("strided_slice", tt(4, 4), begin=[0, 0], end=[1, 1], axes=[1, -1])
    with pytest.raises(TypeRelError, match="stride of 0"):
        rel("strided_slice", tt(4), begin=[0], end=[4], strides=[0])
    with pytest.raises(DiagnosticError, match="slice_mode"):
        get_op("strided_slice").normalize_attrs({"begin": [0], "end": [1], "slice_mode": "x"}, SPAN)


# ----------------------------------------------------------------------------------- take

def test_take_axis_modes_and_batch_dims() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[0, 5], [-1, 2]], np.int32)
    t, out = apply_op("take", [x, idx], {"axis": 1})
    assert t == tt(3, 2, 2)
    assert out[1].tolist() == [[4, 7], [4, 6]]  # clip: 5 -> 3, -1 -> 0
    _, out = apply_op("take", [x, idx], {"axis": 1, "mode": "wrap"})
    assert out[0].tolist() == [[0, 1], [3, 2]]
    t, out = apply_op("take", [x, np.array([11, 0], np.int64)])
    assert t == tt(2) and out.tolist() == [11, 0]
    rows = np.array([[3, 0], [1, 1], [2, 0]], np.int32)
    t, out = apply_op("take", [x, rows], {"axis": 1, "batch_dims": 1})
    assert t == tt(3, 2)
    assert out.tolist() == [[x[i, j] for j in r] for i, r in enumerate(rows.tolist())]
    with pytest.raises(TypeRelError, match="indices must be integers"):
        rel("take", tt(3, 4), tt(2), axis=0)


# ------------------------------------------------------------------------------ creation

def test_creation_ops() -> None:
    t, out = apply_op("zeros", [], {"shape": [2, 3], "dtype": "int32"})
    assert t == tt(2, 3, dtype="int32") and out.tolist() == [[0] * 3] * 2
    t, out = apply_op("ones", [], {"shape": [2]})
    assert t == tt(2) and out.tolist() == [1.0, 1.0]
    t, out = apply_op("full", [np.array(7, np.int64)], {"shape": [1, 2]})
    assert t == tt(1, 2, dtype="int64") and out.tolist() == [[7, 7]]
    t, out = apply_op("full", [np.array(7, np.int64)], {"shape": [2], "dtype": "float16"})
    assert out.dtype == np.float16
    x = np.arange(4, dtype=np.int8)
    for name, args, want in (("zeros_like", [x], 0), ("ones_like", [x], 1),
                             ("full_like", [x, np.array(5, np.int8)], 5)):
        t, out = apply_op(name, args)
        assert t == tt(4, dtype="int8") and out.tolist() == [want] * 4
    with pytest.raises(TypeRelError, match="fill_value must be a scalar"):
        rel("full", tt(2), shape=[2])
    with pytest.raises(TypeRelError, match="static `shape`"):
        rel("zeros")


# ---------------------------------------------------------------------- layout_transform

def test_layout_transform_blocked_and_back() -> None:
    x = np.random.default_rng(0).standard_normal((2, 8, 3, 5)).astype(np.float32)
    t, blocked = apply_op("layout_transform", [x], {"src_layout": "NCHW", "dst_layout": "NCHW4c"})
    assert t == tt(2, 2, 3, 5, 4)
    for n, c, h, w in np.ndindex(x.shape):
        assert blocked[n, c // 4, h, w, c % 4] == x[n, c, h, w]
    t, back = apply_op("layout_transform", [blocked], {"src_layout": "NCHW4c", "dst_layout": "NCHW"})
    assert t == tt(2, 8, 3, 5) and np.array_equal(back, x)
    t, nhwc = apply_op("layout_transform", [blocked], {"src_layout": "NCHW4c", "dst_layout": "NHWC"})
    assert np.array_equal(nhwc, x.transpose(0, 2, 3, 1))
    w = np.random.default_rng(1).standard_normal((8, 4, 3, 3)).astype(np.float32)
    t, packed = apply_op("layout_transform", [w], {"src_layout": "OIHW", "dst_layout": "OIHW2i4o"})
    assert t == tt(2, 2, 3, 3, 2, 4)
    for o, i, h, k in np.ndindex(w.shape):
        assert packed[o // 4, i // 2, h, k, i % 2, o % 4] == w[o, i, h, k]


@st.composite
def blocked_layout(draw) -> tuple[str, dict[str, int]]:
    """A permutation of NCHW with some primal axes split by 2 or 4 (sub-axes placed after)."""
    primal = "".join(draw(st.permutations("NCHW")))
    factors = {a: draw(st.sampled_from([2, 4])) for a in "CHW" if draw(st.booleans())}
    subs = draw(st.permutations(sorted(factors)))
    return primal + "".join(f"{factors[a]}{a.lower()}" for a in subs), factors


def lay_out(logical: np.ndarray, layout: str, factors: dict[str, int]) -> np.ndarray:
    """Place each element of an NCHW array at its index in `layout` (the definition)."""
    letters = [ch for ch in layout if ch.isalpha()]
    extent = dict(zip("NCHW", logical.shape))
    shape = [extent[a] // factors.get(a, 1) if a.isupper() else factors[a.upper()] for a in letters]
    out = np.empty(shape, logical.dtype)
    for idx in np.ndindex(logical.shape):
        pos = dict(zip("NCHW", idx))
        out[tuple(pos[a] // factors.get(a, 1) if a.isupper() else pos[a.upper()] % factors[a.upper()]
                  for a in letters)] = logical[idx]
    return out


@settings(max_examples=60)
@given(src=blocked_layout(), dst=blocked_layout())
def test_layout_transform_between_random_layouts(src, dst) -> None:
    logical = np.arange(2 * 8 * 4 * 4, dtype=np.int32).reshape(2, 8, 4, 4)
    src_layout, src_factors = src
    dst_layout, dst_factors = dst
    data = lay_out(logical, src_layout, src_factors)
    want = lay_out(logical, dst_layout, dst_factors)
    t, out = apply_op("layout_transform", [data], {"src_layout": src_layout, "dst_layout": dst_layout})
    assert t == TensorType(want.shape, "int32")
    assert np.array_equal(out, want)


def test_layout_transform_errors() -> None:
    with pytest.raises(TypeRelError, match="not divisible by 3"):
        rel("layout_transform", tt(1, 8, 2, 2), src_layout="NCHW", dst_layout="NCHW3c")
    with pytest.raises(TypeRelError, match="same primal axes"):
        rel("layout_transform", tt(1, 8, 2, 2), src_layout="NCHW", dst_layout="NCDW")
    with pytest.raises(TypeRelError, match="does not match rank"):
        rel("layout_transform", tt(1, 8, 2), src_layout="NCHW", dst_layout="NHWC")
    with pytest.raises(DiagnosticError, match="not a valid layout"):
        get_op("layout_transform").normalize_attrs({"src_layout": "NCHW4C", "dst_layout": "NCHW"}, SPAN)
    with pytest.raises(DiagnosticError, match="no primal axis"):
        get_op("layout_transform").normalize_attrs({"src_layout": "NCH4w", "dst_layout": "NCHW"}, SPAN)
    assert rel("layout_transform", tt(Any(), 8, 2, 2), src_layout="NCHW",
               dst_layout="NCHW4c") == tt(Any(), 2, 2, 2, 4)


# --------------------------------------------------------------------- collapse_sum_like

@settings(max_examples=60)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=1, max_dims=3, max_side=3))
def test_collapse_sum_like_inverts_broadcast(shapes) -> None:
    """Summing a broadcast of ones back to the small shape counts how often each cell was copied."""
    small = shapes.input_shapes[0]
    big = shapes.result_shape
    x = np.ones(big, np.float32)
    t, out = apply_op("collapse_sum_like", [x, np.zeros(small, np.float32)])
    assert t == TensorType(small, F32)
    copies = int(np.prod(big)) // max(int(np.prod(small)), 1) if np.prod(small) else 0
    assert out.ravel().tolist() == [float(copies)] * int(np.prod(small))


def test_collapse_sum_like_values_and_errors() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    _, out = apply_op("collapse_sum_like", [x, np.zeros((1, 3), np.float32)])
    assert out.tolist() == [[3, 5, 7]]
    _, out = apply_op("collapse_sum_like", [x, np.zeros((), np.float32)])
    assert out.item() == 15
    with pytest.raises(TypeRelError, match="cannot collapse"):
        rel("collapse_sum_like", tt(2, 3), tt(2, 1, 3))
