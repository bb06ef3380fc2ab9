"""Elementwise, broadcasting and reduction operators against independently written oracles."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from irtool.ir.types import Any, TensorType, TupleType
from irtool.ops import TypeRelError, get_op
from irtool.ops.apply import apply_op

FLOATS = hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
                    elements=st.floats(-20, 20, width=32))


def scalar_oracle(fn, x: np.ndarray) -> np.ndarray:
    """Apply a Python scalar function to each element (float64), one element at a time."""
    out = np.empty(x.shape, np.float64)
    for idx in np.ndindex(x.shape):
        out[idx] = fn(float(x[idx]))
    return out


def _round_away(v: float) -> float:
    return math.copysign(math.floor(abs(v) + 0.5), v)


UNARY_ORACLES = {
    "negative": lambda v: -v,
    "abs": abs,
    "exp": math.exp,
    "tanh": math.tanh,
    "sigmoid": lambda v: 1 / (1 + math.exp(-v)),
    "erf": math.erf,
    "floor": math.floor,
    "ceil": math.ceil,
    "round": _round_away,
    "nearbyint": lambda v: float(round(v)),  # Python's round of a float: halves to even
    "nn.relu": lambda v: max(v, 0.0),
    "copy": lambda v: v,
}


@settings(max_examples=300)
@given(name=st.sampled_from(sorted(UNARY_ORACLES)), x=FLOATS)
def test_unary_matches_scalar_oracle(name: str, x: np.ndarray) -> None:
    t, out = apply_op(name, [x])
    assert t == TensorType(x.shape, "float32")
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, scalar_oracle(UNARY_ORACLES[name], x), rtol=2e-6, atol=2e-7)


POSITIVE = hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4),
                      elements=st.floats(0.0009765625, 1024.0, width=32))


POSITIVE_ORACLES = {"log": math.log, "sqrt": math.sqrt, "rsqrt": lambda v: 1 / math.sqrt(v)}


@settings(max_examples=100)
@given(name=st.sampled_from(sorted(POSITIVE_ORACLES)), x=POSITIVE)
def test_unary_positive_domain(name: str, x: np.ndarray) -> None:
    fn = POSITIVE_ORACLES[name]
    _, out = apply_op(name, [x])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, scalar_oracle(fn, x), rtol=2e-6)


def test_round_is_half_away_from_zero() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -1.2], np.float32)
    _, out = apply_op("round", [x])
    assert out.tolist() == [1.0, 2.0, 3.0, -1.0, -3.0, 0.0, -1.0]


def test_nearbyint_rounds_halves_to_even() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -1.2, 3.5], np.float32)
    _, out = apply_op("nearbyint", [x])
    assert out.tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 0.0, -1.0, 4.0]
    _, ints = apply_op("nearbyint", [np.array([3, -4], np.int32)])
    assert ints.dtype == np.int32 and ints.tolist() == [3, -4]


def test_erf_accuracy_over_a_range() -> None:
    x = np.linspace(-6, 6, 2001)
    _, out = apply_op("erf", [x])
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [math.erf(v) for v in x], rtol=3e-7, atol=1e-9)


@settings(max_examples=100)
@given(x=FLOATS, alpha=st.floats(0, 1))
def test_leaky_relu(x: np.ndarray, alpha: float) -> None:
    _, out = apply_op("nn.leaky_relu", [x], {"alpha": alpha})
    want = scalar_oracle(lambda v: v if v > 0 else float(np.float32(alpha)) * v, x)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-30)


@settings(max_examples=100)
@given(x=FLOATS, lo=st.integers(-10, 10), width=st.integers(0, 10))
def test_clip(x: np.ndarray, lo: int, width: int) -> None:
    _, out = apply_op("clip", [x], {"a_min": float(lo), "a_max": float(lo + width)})
    np.testing.assert_array_equal(out, scalar_oracle(lambda v: min(max(v, lo), lo + width), x))


def test_clip_on_integers_and_bad_bounds() -> None:
    _, out = apply_op("clip", [np.array([-5, 0, 5], np.int32)], {"a_min": -1.5, "a_max": 2.5})
    assert out.dtype == np.int32 and out.tolist() == [-1, 0, 2]
    with pytest.raises(TypeRelError, match="a_min"):
        apply_op("clip", [np.zeros(2, np.float32)], {"a_min": 3.0, "a_max": 1.0})


def test_cast_truncates_and_changes_type() -> None:
    x = np.array([1.7, -1.7, 0.2], np.float32)
    t, out = apply_op("cast", [x], {"dtype": "int32"})
    assert t == TensorType((3,), "int32")
    assert out.tolist() == [1, -1, 0]
    t, out = apply_op("cast", [x], {"dtype": "bool"})
    assert t == TensorType((3,), "bool") and out.tolist() == [True, True, True]


def test_logical_not() -> None:
    _, out = apply_op("logical_not", [np.array([True, False])])
    assert out.tolist() == [False, True]


# ------------------------------------------------------------------------- broadcasting

BINARY_ORACLES = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "maximum": max,
    "minimum": min,
    "equal": lambda a, b: a == b,
    "not_equal": lambda a, b: a != b,
    "less": lambda a, b: a < b,
    "less_equal": lambda a, b: a <= b,
    "greater": lambda a, b: a > b,
    "greater_equal": lambda a, b: a >= b,
}


def broadcast_oracle(fn, a: np.ndarray, b: np.ndarray, out_shape: tuple[int, ...]) -> list:
    """Element loop with explicit broadcast indexing (right-aligned, extent-1 axes pinned to 0)."""
    def pick(x: np.ndarray, idx: tuple[int, ...]) -> object:
        own = idx[len(idx) - x.ndim:]
        return x[tuple(0 if d == 1 else i for i, d in zip(own, x.shape))].item()
    out = np.empty(out_shape, object)
    for idx in np.ndindex(out_shape):
        out[idx] = fn(pick(a, idx), pick(b, idx))
    return out.tolist()


@st.composite
def broadcast_pair(draw, dtype=np.int32):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    elems = st.booleans() if dtype is np.bool_ else st.integers(-9, 9)
    a = draw(hnp.arrays(dtype, shapes.input_shapes[0], elements=elems))
    b = draw(hnp.arrays(dtype, shapes.input_shapes[1], elements=elems))
    return a, b, shapes.result_shape


@settings(max_examples=300)
@given(name=st.sampled_from(sorted(BINARY_ORACLES)), data=broadcast_pair())
def test_binary_broadcast(name: str, data) -> None:
    a, b, shape = data
    t, out = apply_op(name, [a, b])
    is_cmp = name not in ("add", "subtract", "multiply", "maximum", "minimum")
    assert t == TensorType(shape, "bool" if is_cmp else "int32")
    assert out.tolist() == broadcast_oracle(BINARY_ORACLES[name], a, b, shape)


@settings(max_examples=100)
@given(data=broadcast_pair())
def test_integer_divide_truncates(data) -> None:
    a, b, shape = data
    b = np.where(b == 0, 1, b).astype(np.int32)
    _, out = apply_op("divide", [a, b])
    assert out.dtype == np.int32
    assert out.tolist() == broadcast_oracle(lambda x, y: math.trunc(x / y), a, b, shape)


@settings(max_examples=100)
@given(data=broadcast_pair(np.float32))
def test_float_divide_and_power(data) -> None:
    a, b, shape = data
    b = np.where(b == 0, 1, b).astype(np.float32)
    _, out = apply_op("divide", [a, b])
    np.testing.assert_allclose(out, broadcast_oracle(lambda x, y: x / y, a, b, shape), rtol=1e-6)
    base = np.abs(a) + 1
    _, out = apply_op("power", [base, b])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, broadcast_oracle(lambda x, y: x ** y, base, b, shape), rtol=1e-5)


@settings(max_examples=50)
@given(data=broadcast_pair(np.bool_))
def test_logical_binary(data) -> None:
    a, b, shape = data
    _, out = apply_op("logical_and", [a, b])
    assert out.tolist() == broadcast_oracle(lambda x, y: x and y, a, b, shape)
    _, out = apply_op("logical_or", [a, b])
    assert out.tolist() == broadcast_oracle(lambda x, y: x or y, a, b, shape)


def test_where_broadcasts_all_three() -> None:
    cond = np.array([[True], [False]])
    x = np.arange(3, dtype=np.float32)
    y = np.float32(-1) * np.ones((2, 1, 3), np.float32)
    t, out = apply_op("where", [cond, x, y])
    assert t == TensorType((2, 2, 3), "float32")
    assert out[0].tolist() == [[0, 1, 2], [-1, -1, -1]]
    assert out[1].tolist() == [[0, 1, 2], [-1, -1, -1]]


def test_broadcast_error_names_both_sides() -> None:
    rel = get_op("add").type_rel
    with pytest.raises(TypeRelError) as err:
        rel([TensorType((1, 3), "float32"), TensorType((4,), "float32")], {})
    assert str(err.value) == "add: cannot broadcast Tensor[(1, 3), float32] with Tensor[(4), float32]"
    with pytest.raises(TypeRelError, match="dtype mismatch"):
        rel([TensorType((3,), "float32"), TensorType((3,), "int32")], {})
    with pytest.raises(TypeRelError, match="must be a tensor"):
        get_op("multiply").type_rel([TensorType((3,), "float32"), TupleType(())], {})


def test_broadcast_unknown_dims() -> None:
    rel = get_op("add").type_rel
    f = lambda *s: TensorType(tuple(s), "float32")  # noqa: E731
    assert rel([f(Any(), 3), f(1, 3)], {}) == f(Any(), 3)
    assert rel([f(Any()), f(4)], {}) == f(4)
    assert rel([f(Any()), f(1)], {}) == f(Any())
    assert rel([f(Any(), 1), f(Any(), 5)], {}) == f(Any(), 5)
    assert get_op("less").type_rel([f(Any()), f(Any())], {}) == TensorType((Any(),), "bool")


# --------------------------------------------------------------------------- reductions

def reduce_oracle(fn, x: np.ndarray, axes: set[int], keepdims: bool) -> np.ndarray:
    """Loop over output positions, collecting the reduced elements of each in row-major order."""
    kept = [i for i in range(x.ndim) if i not in axes]
    groups: dict[tuple, list] = {}
    for idx in np.ndindex(x.shape):
        groups.setdefault(tuple(idx[i] for i in kept), []).append(x[idx].item())
    out_shape = tuple(x.shape[i] for i in kept)
    out = np.empty(out_shape, object)
    for key, values in groups.items():
        out[key] = fn(values)
    out = np.array(out.tolist() if out_shape else out.item())
    if keepdims:
        out = out.reshape([1 if i in axes else d for i, d in enumerate(x.shape)])
    return out


@st.composite
def reduce_case(draw):
    x = draw(hnp.arrays(np.int32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4),
                        elements=st.integers(-5, 5)))
    axis = draw(st.none() | st.lists(st.integers(-x.ndim, x.ndim - 1), max_size=x.ndim,
                                     unique_by=lambda a: a % x.ndim))
    exclude = draw(st.booleans())
    keepdims = draw(st.booleans())
    if axis is None:
        axes = set(range(x.ndim))
    else:
        chosen = {a % x.ndim for a in axis}
        axes = set(range(x.ndim)) - chosen if exclude else chosen
    return x, axis, exclude, keepdims, axes


def wrap_int32(v: int) -> int:
    """Two's-complement wrap-around, as int32 arithmetic overflows."""
    return (v + 2**31) % 2**32 - 2**31


REDUCE_ORACLES = {
    "sum": lambda v: wrap_int32(sum(v)),
    "max": max,
    "min": min,
    "prod": lambda v: wrap_int32(math.prod(v)),
    "mean": lambda v: math.trunc(sum(v) / len(v)),
}


@settings(max_examples=300)
@given(name=st.sampled_from(sorted(REDUCE_ORACLES)), case=reduce_case())
def test_reductions(name: str, case) -> None:
    x, axis, exclude, keepdims, axes = case
    if not all(x.shape[a] > 0 for a in axes) and name in ("max", "min", "mean"):
        return
    attrs = {"axis": axis, "exclude": exclude, "keepdims": keepdims}
    t, out = apply_op(name, [x], attrs)
    want = reduce_oracle(REDUCE_ORACLES[name], x, axes, keepdims)
    assert t.shape == want.shape and t.dtype == "int32"
    assert out.tolist() == want.tolist()


@settings(max_examples=150)
@given(name=st.sampled_from(["argmax", "argmin"]), case=reduce_case(), last=st.booleans())
def test_arg_reductions(name: str, case, last: bool) -> None:
    pick = max if name == "argmax" else min
    x, axis, exclude, keepdims, axes = case
    if not all(x.shape[a] > 0 for a in axes):
        return

    def index_of(values: list) -> int:
        best = pick(values)
        hits = [i for i, v in enumerate(values) if v == best]
        return hits[-1] if last else hits[0]

    attrs = {"axis": axis, "exclude": exclude, "keepdims": keepdims, "select_last_index": last}
    t, out = apply_op(name, [x], attrs)
    want = reduce_oracle(index_of, x, axes, keepdims)
    assert t == TensorType(want.shape, "int32")
    assert out.tolist() == want.tolist()


def test_float_reductions_stay_in_dtype() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    _, out = apply_op("mean", [x], {"axis": [1]})
    assert out.dtype == np.float32 and out.tolist() == [1.5, 5.5, 9.5]
    _, out = apply_op("sum", [x.astype(np.float16)])
    assert out.dtype == np.float16 and out.item() == 66.0


def test_reduction_errors() -> None:
    rel = get_op("sum").type_rel
    full = get_op("sum").full_attrs
    x = TensorType((2, 3), "float32")
    with pytest.raises(TypeRelError, match="axis 2 is out of range"):
        rel([x], full({"axis": (2,)}))
    with pytest.raises(TypeRelError, match="twice"):
        rel([x], full({"axis": (1, -1)}))
    assert rel([TensorType((Any(), 3), "float32")], full({"axis": (1,)})) == TensorType((Any(),), "float32")


def test_pairs_of_reductions_cover_every_axis_combination() -> None:
    """Exhaustive small check: exclude=True with axis A equals reducing the complement."""
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    for r in range(4):
        for axis in itertools.combinations(range(3), r):
            complement = [a for a in range(3) if a not in axis]
            _, a = apply_op("sum", [x], {"axis": list(axis), "exclude": True})
            _, b = apply_op("sum", [x], {"axis": complement})
            assert a.tolist() == b.tolist()
