"""The registry as a whole: coverage of the corpus and the issue's list, fusion patterns as in
TVM, attribute validation and canonical form, and the device / memory / lowering operators."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from irtool.ir.expr import MetaRef
from irtool.core.span import Span
from irtool.ir.types import Any as AnyDim
from irtool.ir.types import FuncType, TensorType, TupleType, Type, TypeCall
from irtool.ops import OpPattern, TypeRelError, get_op, op_names
from irtool.ops.apply import apply_op, value_type
from irtool.core.diagnostics import DiagnosticError

CORPUS = Path(__file__).resolve().parents[2] / "../shared/corpus/tvm-relay"
SPAN = Span("a.relay", 2, 5, 2, 30)

ISSUE_OPS = """
negative abs exp log sqrt rsqrt tanh sigmoid erf floor ceil round clip nn.relu nn.leaky_relu cast copy
add subtract multiply divide power maximum minimum equal not_equal less less_equal greater
greater_equal logical_and logical_or logical_not where sum mean max min prod argmax argmin
nn.conv2d nn.dense nn.batch_matmul nn.bias_add nn.batch_norm nn.softmax nn.log_softmax
nn.max_pool2d nn.avg_pool2d nn.global_avg_pool2d nn.global_max_pool2d nn.lrn nn.dropout nn.pad
nn.batch_flatten reshape transpose squeeze expand_dims concatenate split strided_slice take
full zeros ones full_like zeros_like ones_like layout_transform collapse_sum_like
on_device device_copy call_lowered memory.alloc_storage memory.alloc_tensor memory.kill
""".split()


def test_every_operator_the_issue_lists_is_registered_with_all_facets() -> None:
    for name in ISSUE_OPS:
        op = get_op(name)
        assert op is not None, name
        assert op.type_rel is not None and op.compute is not None and op.description, name
    assert set(ISSUE_OPS) <= set(op_names())
    assert get_op("nn.conv3d") is None


def test_every_operator_the_corpus_calls_is_registered() -> None:
    if not CORPUS.is_dir():
        pytest.skip("TVM corpus not present")
    call = re.compile(r"(?<![%@\w.])([a-z_]\w*(?:\.[a-z_]\w*)*)\(")
    keywords = {"fn", "if", "match", "ref", "ref_read", "ref_write", "let", "free_var"}
    adt_constructors = {"constructor", "my_cons"}  # lower-case ADT constructors in two files
    seen: set[str] = set()
    for path in CORPUS.rglob("*.relay"):
        text = re.sub(r"/\*.*?\*/|//[^\n]*", "", path.read_text(), flags=re.S)
        seen.update(call.findall(text))
    ops = seen - keywords - adt_constructors
    assert {"nn.conv2d", "on_device", "memory.kill", "call_lowered"} <= ops
    assert [name for name in sorted(ops) if get_op(name) is None] == []


# TVM's TOpPattern for each operator (src/relay/op/**: RELAY_REGISTER_OP ... TOpPattern).
TVM_PATTERNS = {
    OpPattern.ELEMWISE: "negative abs exp log sqrt rsqrt tanh sigmoid erf floor ceil round clip "
                        "nn.relu nn.leaky_relu cast copy logical_not full zeros ones full_like "
                        "zeros_like ones_like",
    OpPattern.BROADCAST: "add subtract multiply divide power maximum minimum equal not_equal less "
                         "less_equal greater greater_equal logical_and logical_or where nn.bias_add "
                         "expand_dims nn.prelu",
    OpPattern.INJECTIVE: "reshape transpose squeeze concatenate split strided_slice take "
                         "layout_transform nn.pad nn.batch_flatten",
    OpPattern.COMM_REDUCE: "sum mean max min prod argmax argmin collapse_sum_like",
    OpPattern.OUT_ELEMWISE_FUSABLE: "nn.conv2d nn.dense nn.batch_matmul nn.max_pool2d "
                                    "nn.avg_pool2d nn.global_avg_pool2d nn.global_max_pool2d "
                                    "nn.softmax nn.log_softmax",
    OpPattern.OPAQUE: "nn.batch_norm nn.dropout nn.lrn on_device device_copy call_lowered "
                      "memory.alloc_storage memory.alloc_tensor memory.kill",
}


@pytest.mark.parametrize("pattern", list(TVM_PATTERNS))
def test_fusion_patterns_follow_tvm(pattern: OpPattern) -> None:
    for name in TVM_PATTERNS[pattern].split():
        assert get_op(name).pattern == pattern, name


def test_patterns_are_ordered_as_fusion_compares_them() -> None:
    assert OpPattern.ELEMWISE < OpPattern.BROADCAST < OpPattern.INJECTIVE < OpPattern.COMM_REDUCE \
        < OpPattern.OUT_ELEMWISE_FUSABLE < OpPattern.TUPLE < OpPattern.OPAQUE


# --------------------------------------------------------------------------- attributes

def test_attribute_values_are_canonicalised() -> None:
    leaky = get_op("nn.leaky_relu")
    assert dict(leaky.normalize_attrs({"alpha": 1})) == {"alpha": 1.0}
    assert isinstance(leaky.normalize_attrs({"alpha": 1})["alpha"], float)
    assert dict(leaky.normalize_attrs({"alpha": 0.25})) == {}
    assert dict(get_op("cast").normalize_attrs({"dtype": "float"})) == {"dtype": "float32"}
    assert dict(get_op("cast").normalize_attrs({"dtype": "float32"})) == {"dtype": "float32"}
    bn = get_op("nn.batch_norm").normalize_attrs({"epsilon": 2e-5, "center": False, "axis": 1})
    assert list(bn) == ["epsilon", "center"]
    # Frontends may hand over numpy scalars; they become plain Python values.
    pool = get_op("nn.max_pool2d").normalize_attrs({"pool_size": (np.int64(2), 2),
                                                    "ceil_mode": np.bool_(True)})
    assert dict(pool) == {"pool_size": (2, 2), "ceil_mode": True}
    assert type(pool["pool_size"][0]) is int and type(pool["ceil_mode"]) is bool
    sum_attrs = get_op("sum").normalize_attrs({"keepdims": True, "axis": [1, 2]})
    assert list(sum_attrs.items()) == [("axis", (1, 2)), ("keepdims", True)]


@pytest.mark.parametrize("name,attrs,message", [
    ("cast", {}, "cast: missing required attribute `dtype`"),
    ("cast", {"dtype": ""}, "`dtype` must name a dtype"),
    ("cast", {"dtype": None}, "`dtype` cannot be None"),
    ("cast", {"dtype": 3}, "`dtype` expects a dtype string"),
    ("clip", {"a_min": "0", "a_max": 1.0}, "`a_min` expects a number, got \"0\""),
    ("sum", {"keepdims": 2}, "`keepdims` expects a boolean"),
    ("sum", {"axis": [1.5]}, "`axis` expects an integer or a list of integers"),
    ("sum", {"axes": [1]}, "sum has no attribute `axes`; did you mean `axis`?"),
    ("reshape", {}, "missing required attribute `newshape`"),
    ("nn.softmax", {"axis": None}, "`axis` cannot be None"),
    ("on_device", {"virtual_device": 1.5}, "`virtual_device` expects a device"),
    ("nn.lrn", {"size": 0}, "`size` must be positive, got 0"),
])
def test_bad_attributes_raise_located_diagnostics(name: str, attrs, message: str) -> None:
    with pytest.raises(DiagnosticError) as err:
        get_op(name).normalize_attrs(attrs, SPAN)
    assert message in str(err.value)
    assert err.value.span == SPAN


def test_full_attrs_fill_defaults() -> None:
    op = get_op("nn.avg_pool2d")
    full = op.full_attrs(op.normalize_attrs({"pool_size": [2, 2]}))
    assert full["strides"] == (1, 1) and full["count_include_pad"] is False
    assert full["layout"] == "NCHW" and full["pool_size"] == (2, 2)


# ------------------------------------------------------------------ device, memory, calls

def test_device_annotations_are_identities_of_any_type() -> None:
    dev = MetaRef("VirtualDevice", 1)
    on = get_op("on_device")
    attrs = on.normalize_attrs({"virtual_device": dev, "constrain_result": True})
    assert dict(attrs) == {"virtual_device": dev, "constrain_result": True}
    adt = TypeCall("List", (TensorType((), "int32"),))
    assert on.type_rel([adt], on.full_attrs(attrs)) == adt
    copy = get_op("device_copy")
    full = copy.full_attrs(copy.normalize_attrs(
        {"src_virtual_device": MetaRef("VirtualDevice", 0), "dst_virtual_device": 2}))
    assert full["dst_virtual_device"] == 2
    x = np.arange(3, dtype=np.float32)
    t, out = apply_op("device_copy", [x], full)
    assert t == TensorType((3,), "float32") and out.tolist() == [0, 1, 2] and out is not x
    _, same = apply_op("on_device", [x], {"virtual_device": dev})
    assert same is x


def test_memory_ops_type_and_alias_storage() -> None:
    i64 = TensorType((), "int64")
    storage_t = get_op("memory.alloc_storage").type_rel([i64, TensorType((2,), "int64"), i64],
                                                        get_op("memory.alloc_storage").full_attrs({}))
    assert storage_t == TypeCall("Storage")
    alloc = get_op("memory.alloc_tensor")
    attrs = alloc.full_attrs(alloc.normalize_attrs({"assert_shape": [2, 2], "dtype": "int32"}))
    assert alloc.type_rel([storage_t, i64, TensorType((2,), "int64")], attrs) == \
        TensorType((2, 2), "int32")
    with pytest.raises(TypeRelError, match="does not have rank 3"):
        alloc.type_rel([storage_t, i64, TensorType((3,), "int64")], attrs)
    with pytest.raises(TypeRelError, match="size must be an integer scalar"):
        get_op("memory.alloc_storage").type_rel([TensorType((), "float32"), i64, i64], {})

    storage = get_op("memory.alloc_storage").compute(
        [np.array(32, np.int64), np.array([8], np.int64), np.array(16, np.int64)], {})
    shape = np.array([2, 2], np.int64)
    a = alloc.compute([storage, np.array(0, np.int64), shape], attrs)
    b = alloc.compute([storage, np.array(8, np.int64), shape], attrs)  # overlaps a's second row
    a[...] = [[1, 2], [3, 4]]
    assert b[0].tolist() == [3, 4]
    with pytest.raises(ValueError, match="exceed a storage of 32 bytes"):
        alloc.compute([storage, np.array(24, np.int64), shape], attrs)
    kill = get_op("memory.kill")
    assert kill.type_rel([storage_t], {}) == TupleType(()) and kill.compute([storage], {}) == ()


def test_call_lowered_types_and_calls_its_callee() -> None:
    op = get_op("call_lowered")
    f32 = TensorType((5, 7), "float32")
    fn_t = FuncType((f32, f32), f32)
    assert op.type_rel([fn_t, TupleType((f32, f32))], op.full_attrs({})) == f32
    with pytest.raises(TypeRelError, match="takes 2 arguments, got 1"):
        op.type_rel([fn_t, TupleType((f32,))], {})
    with pytest.raises(TypeRelError, match="callee must be a function"):
        op.type_rel([f32, TupleType((f32,))], {})
    out = op.compute([lambda a, b: a * 10 + b, (np.float32(1), np.float32(2))], {})
    assert out == 12


# ------------------------------------------- facets agree with each other on random calls

SPECIAL = {"on_device", "device_copy", "call_lowered", "memory.alloc_storage",
           "memory.alloc_tensor", "memory.kill"}
DTYPES = ["float32", "float32", "int32", "bool", "int64"]
INDEXED = {"gather", "gather_nd", "scatter_elements", "scatter_nd"}

ATTR_VALUES = {
    "int": st.integers(-3, 4),
    "float": st.floats(-2, 2, allow_nan=False),
    "bool": st.booleans(),
    "str": st.sampled_from(["NCHW", "NHWC", "OIHW", "HWIO", "NCHW4c", "constant", "end", "size",
                            "clip", "wrap", "edge", ""]),
    "dtype": st.sampled_from(["float32", "int32", "float16", ""]),
    "int_list": st.lists(st.integers(-3, 4), max_size=4),
    "float_list": st.lists(st.floats(-2, 2), max_size=3),
    "int_or_list": st.integers(-1, 4) | st.lists(st.integers(-3, 4), max_size=4),
    "int_list_list": st.lists(st.lists(st.integers(0, 2), min_size=2, max_size=2), max_size=4),
}


@st.composite
def tensor_type(draw, dynamic: bool) -> TensorType:
    dims = draw(st.lists(st.integers(1, 4) | (st.just(AnyDim()) if dynamic else st.nothing()),
                         max_size=4))
    return TensorType(tuple(dims), draw(st.sampled_from(DTYPES)))


@st.composite
def random_call(draw, dynamic: bool):
    name = draw(st.sampled_from(sorted(set(op_names()) - SPECIAL)))
    op = get_op(name)
    attrs = {}
    for f in op.attrs or ():
        if f.required or draw(st.booleans()):
            attrs[f.name] = draw(ATTR_VALUES[f.kind] | st.none() if f.optional
                                 else ATTR_VALUES[f.kind])
    n = op.num_inputs if op.num_inputs is not None else 1
    types: list[Type] = [draw(tensor_type(dynamic)) for _ in range(n)]
    if name == "concatenate":
        types = [TupleType(tuple(draw(st.lists(tensor_type(dynamic), min_size=1, max_size=3))))]
    return name, attrs, types


def random_value(t: Type, rng: np.random.Generator):
    if isinstance(t, TupleType):
        return tuple(random_value(f, rng) for f in t.fields)
    assert isinstance(t, TensorType)
    return (rng.standard_normal(t.shape) * 3).astype(t.dtype)


@settings(max_examples=600)
@given(call=random_call(dynamic=True))
def test_type_relations_fail_only_with_type_errors(call) -> None:
    """Whatever the arguments and attributes, a relation answers a type or a TypeRelError."""
    name, attrs, types = call
    op = get_op(name)
    try:
        full = op.full_attrs(op.normalize_attrs(attrs, SPAN))
    except DiagnosticError as err:
        assert err.span == SPAN
        return
    try:
        result = op.type_rel(types, full)
    except TypeRelError as err:
        assert str(err).startswith(name + ":"), str(err)
        return
    assert isinstance(result, (TensorType, TupleType))


@settings(max_examples=600)
@given(call=random_call(dynamic=False), seed=st.integers(0, 2**16))
def test_accepted_calls_compute_values_of_the_inferred_type(call, seed: int) -> None:
    """If the relation accepts static argument types, the kernel runs and agrees with it (a `?`,
    the extent of a data-dependent result, with any size)."""
    name, attrs, types = call
    op = get_op(name)
    try:
        full = op.full_attrs(op.normalize_attrs(attrs, SPAN))
        result = op.type_rel(types, full)
    except (DiagnosticError, TypeRelError):
        return
    if name in ("take",) and any(isinstance(t, TensorType) and 0 in t.shape for t in types):
        return
    rng = np.random.default_rng(seed)
    args = [random_value(t, rng) for t in types]
    if name == "take":
        args[1] = args[1].astype(types[1].dtype)
    with np.errstate(all="ignore"):
        try:
            value = op.compute(args, full)
        except ValueError as err:  # random indices out of range: the gathers' and scatters' run-time error
            assert name in INDEXED and "is out of range" in str(err), err
            return
    assert _fits(value_type(value), result)


def _fits(got: Type, want: Type) -> bool:
    if isinstance(want, TupleType):
        return isinstance(got, TupleType) and len(got.fields) == len(want.fields) \
            and all(_fits(g, w) for g, w in zip(got.fields, want.fields))
    return isinstance(got, TensorType) and isinstance(want, TensorType) and got.dtype == want.dtype \
        and len(got.shape) == len(want.shape) and all(isinstance(w, AnyDim) or g == w for g, w in zip(got.shape, want.shape))
