"""Issue 14's indexing operators: gathers, scatters, OneHot, TopK, CumSum/CumProd, Range, Trilu,
Einsum, EyeLike, ReverseSequence, CenterCropPad, DepthToSpace/SpaceToDepth.

Each converter against onnxruntime on small graphs through the interpreter (the registry's
numpy implementation, with weights as parameters and embedded); one graph per family compiled
natively against onnxruntime too; the type relations' errors; out-of-range indices as errors in
both backends. tests/unit/test_lower_ops.py checks every TIR rule against the interpreter.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402
from support.onnx_native import native_matches_onnxruntime  # noqa: E402
from test_onnx_ops import build, check  # noqa: E402

import irtool  # noqa: E402
from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.eval.interpreter import run_function  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.ir.expr import Call  # noqa: E402
from irtool.ir.types import TensorType, TupleType  # noqa: E402
from irtool.ir.visitor import post_order  # noqa: E402
from irtool.ops import TypeRelError, get_op  # noqa: E402
from irtool.syntax.parser import parse_module  # noqa: E402

RNG = np.random.default_rng(14)
N = helper.make_node


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def ints(low: int, high: int, *shape: int, dtype: type = np.int64) -> np.ndarray:
    return RNG.integers(low, high, shape).astype(dtype)


def operators(model: onnx.ModelProto) -> set[str]:
    main = import_model(model, embed_params=True).module["main"]
    return {n.op.name for n in post_order(main.body) if isinstance(n, Call)}


# ------------------------------------------------------------------ converters vs onnxruntime

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_with_negative_indices(axis: int) -> None:
    x = rand(3, 4)
    n = x.shape[axis]
    check([N("GatherElements", ["x", "i"], ["y"], axis=axis)], {"x": x, "i": ints(-n, n, 3, 4)})


def test_gather_elements_indices_shorter_than_data() -> None:
    check([N("GatherElements", ["x", "i"], ["y"], axis=1)], {"x": rand(4, 5), "i": ints(-5, 5, 2, 7)})


@pytest.mark.parametrize("batch_dims,data,indices", [
    (0, (3, 4, 2), (5, 2)),        # tuples of 2: slices of (2,)
    (0, (3, 4), (2, 2, 1)),        # tuples of 1: rows
    (1, (2, 3, 4), (2, 5, 1)),     # per batch
    (2, (2, 3, 4, 2), (2, 3, 2)),  # two batch axes, full tuples
])
def test_gather_nd(batch_dims: int, data: tuple, indices: tuple) -> None:
    m = indices[-1]
    extents = data[batch_dims:batch_dims + m]
    index = np.stack([ints(-d, d, *indices[:-1]) for d in extents], axis=-1)
    check([N("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)], {"x": rand(*data), "i": index})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_reductions(reduction: str) -> None:
    # Repeated positions: every reduction combines them in order (none: the last one wins).
    indices = np.array([[1, 0, 2], [1, -3, 2]], np.int64)
    check([N("ScatterElements", ["x", "i", "u"], ["y"], axis=0, reduction=reduction)],
          {"x": rand(3, 3), "i": indices, "u": rand(2, 3)}, opset=18)


def test_deprecated_scatter_and_scatter_elements_along_axis_1() -> None:
    check([N("Scatter", ["x", "i", "u"], ["y"], axis=1)],
          {"x": rand(2, 5), "i": np.array([[4, 0], [-1, 2]], np.int64), "u": rand(2, 2)}, opset=10)
    check([N("ScatterElements", ["x", "i", "u"], ["y"], axis=-1)],
          {"x": rand(2, 5), "i": np.array([[3], [1]], np.int32), "u": rand(2, 1)}, opset=13)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_reductions(reduction: str) -> None:
    indices = np.array([[0, 1], [2, -1], [0, 1]], np.int64)  # (0, 1) twice
    check([N("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)],
          {"x": rand(3, 4, 2), "i": indices, "u": rand(3, 2)}, opset=18)


def test_scatter_nd_whole_slices() -> None:
    check([N("ScatterND", ["x", "i", "u"], ["y"])],
          {"x": rand(4, 3), "i": np.array([[3], [0]], np.int64), "u": rand(2, 3)}, opset=13)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_axis_negative_and_out_of_range_indices(axis: int) -> None:
    indices = np.array([[0, -1, 2], [5, -6, 4]], np.int64)  # 5 and -6 are outside [-5, 4]: all off
    check([N("OneHot", ["i", "depth", "values"], ["y"], axis=axis)], {"i": indices},
          {"depth": np.array(5, np.int64), "values": np.array([-1.5, 3.0], np.float32)}, opset=11)


def test_one_hot_float_indices_and_integer_values() -> None:
    check([N("OneHot", ["i", "depth", "values"], ["y"])], {"i": np.array([0.0, 2.7, -1.2], np.float32)},
          {"depth": np.array([4], np.int64), "values": np.array([0, 7], np.int64)}, opset=11)


@pytest.mark.parametrize("largest,axis", [(1, -1), (0, -1), (1, 0)])
def test_topk_orders_ties_by_lower_index(largest: int, axis: int) -> None:
    x = ints(-3, 3, 4, 6).astype(np.float32)  # many equal values
    check([N("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)], {"x": x},
          {"k": np.array([3], np.int64)}, outputs=("v", "i"), opset=11)


def test_topk_k_attribute_before_opset_10_and_integers() -> None:
    x = ints(-100, 100, 3, 5, dtype=np.int32)
    model = build([N("TopK", ["x"], ["v", "i"], k=2, axis=1)], {"x": x}, outputs=("v", "i"), opset=9)
    values, indices = run_function(import_model(model).module, [x])
    order = np.argsort(-x.astype(np.int64), axis=1, kind="stable")[:, :2]
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, 1))


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_scans_exclusive_and_reverse(op: str, exclusive: int, reverse: int) -> None:
    check([N(op, ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)], {"x": rand(3, 4)},
          {"axis": np.array(-1, np.int32)}, opset=26)


def test_cumsum_of_integers_along_axis_0() -> None:
    check([N("CumSum", ["x", "axis"], ["y"])], {"x": ints(-5, 5, 4, 2, dtype=np.int32)},
          {"axis": np.array(0, np.int64)}, opset=14)


@pytest.mark.parametrize("start,limit,delta,dtype", [(0, 10, 3, np.int64), (10, 4, -2, np.int32),
                                                    (1.0, 2.0, 0.25, np.float32), (3.0, 1.0, 0.5, np.float32)])
def test_range_of_constants_is_static(start: float, limit: float, delta: float, dtype: type) -> None:
    inits = {n: np.array(v, dtype) for n, v in (("s", start), ("l", limit), ("d", delta))}
    nodes = [N("Range", ["s", "l", "d"], ["r"]), N("Add", ["r", "x"], ["y"])]
    check(nodes, {"x": np.ones((), dtype)}, inits, opset=11)
    main = import_model(build(nodes, {"x": np.ones((), dtype)}, inits, opset=11)).module["main"]
    assert isinstance(main.body.checked_type, TensorType) and main.body.checked_type.is_static


def test_range_of_run_time_values_is_a_clear_error() -> None:
    model = build([N("Range", ["s", "l", "d"], ["y"])], {"s": np.zeros((), np.float32), "l": np.ones((), np.float32)},
                  {"d": np.array(0.5, np.float32)}, opset=11)
    with pytest.raises(DiagnosticError, match="start is the graph input 's', but it must be a constant known at "
                                              "import time"):
        import_model(model)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2, 9])
def test_trilu(upper: int, k: int | None) -> None:
    inputs = ["x"] if k is None else ["x", "k"]
    feeds = {"x": rand(2, 3, 5)} if k is None else {"x": rand(2, 3, 5), "k": np.array(k, np.int64)}
    check([N("Trilu", inputs, ["y"], upper=upper)], feeds, opset=14)


@pytest.mark.parametrize("equation,shapes,lowered", [
    ("ij,jk->ik", [(3, 4), (4, 5)], "nn.dense"),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], "nn.batch_matmul"),
    ("bhid,bhjd->bhij", [(1, 2, 3, 4), (1, 2, 5, 4)], "nn.batch_matmul"),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 2)], "nn.batch_matmul"),
    ("ij->ji", [(3, 4)], "transpose"),
    ("ijk->i", [(3, 4, 2)], "sum"),
    ("i,i", [(5,), (5,)], "nn.dense"),
    ("ij,kj", [(2, 3), (4, 3)], "nn.dense"),
    ("ii->i", [(4, 4)], "einsum"),
    ("bij,bjk,bkl->bil", [(2, 2, 3), (2, 3, 4), (2, 4, 2)], "einsum"),
    ("ij,j->ij", [(3, 4), (1,)], "einsum"),  # size-1 broadcasting
])
def test_einsum_equations_and_their_lowering(equation: str, shapes: list, lowered: str) -> None:
    names = [f"x{i}" for i in range(len(shapes))]
    feeds = {n: rand(*s) for n, s in zip(names, shapes)}
    nodes = [N("Einsum", names, ["y"], equation=equation)]
    check(nodes, feeds, opset=12, rtol=1e-4)
    assert lowered in operators(build(nodes, feeds, opset=12))


@pytest.mark.parametrize("attrs", [dict(), dict(k=1), dict(k=-2, dtype=onnx.TensorProto.INT32)])
def test_eye_like(attrs: dict) -> None:
    check([N("EyeLike", ["x"], ["y"], **attrs)], {"x": rand(3, 4)}, opset=9)


@pytest.mark.parametrize("time_axis,batch_axis", [(0, 1), (1, 0)])
def test_reverse_sequence(time_axis: int, batch_axis: int) -> None:
    shape = (4, 3, 2) if time_axis == 0 else (3, 4, 2)
    check([N("ReverseSequence", ["x", "lens"], ["y"], time_axis=time_axis, batch_axis=batch_axis)],
          {"x": rand(*shape), "lens": np.array([4, 1, 2], np.int64)}, opset=10)


@pytest.mark.parametrize("shape,axes", [([2, 3, 4], None), ([5, 2, 7], None), ([2, 6], [-1, 1]), ([1, 5], [0, 2])])
def test_center_crop_pad(shape: list, axes: list | None) -> None:
    attrs = {} if axes is None else {"axes": axes}
    check([N("CenterCropPad", ["x", "shape"], ["y"], **attrs)], {"x": rand(3, 4, 5)},
          {"shape": np.array(shape, np.int64)}, opset=18)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back(mode: str) -> None:
    check([N("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode)], {"x": rand(1, 8, 2, 3)}, opset=13)
    check([N("SpaceToDepth", ["x"], ["y"], blocksize=2)], {"x": rand(2, 3, 4, 6)}, opset=13)


# -------------------------------------------------------------------------------- natively

def test_indexing_family_natively_matches_onnxruntime() -> None:
    """One compiled graph exercising every rule's loop structure (gathers, a scatter with and
    one without a reduction, top-k's insertion, a reversed exclusive scan, one-hot, ...)."""
    x = rand(4, 6)
    feeds = {"x": x, "i": ints(-6, 6, 4, 3), "nd": np.array([[1, -1], [3, 2]], np.int64),
             "u": rand(4, 3), "lens": np.array([3, 1, 6, 2], np.int64), "oh": ints(-4, 5, 3)}
    nodes = [
        N("GatherElements", ["x", "i"], ["g"], axis=1),
        N("GatherND", ["x", "nd"], ["gn"]),
        N("ScatterElements", ["x", "i", "u"], ["s_add"], axis=1, reduction="add"),
        N("ScatterElements", ["x", "i", "u"], ["s_set"], axis=1),
        N("TopK", ["x", "k"], ["tv", "ti"], axis=1),
        N("CumSum", ["x", "one"], ["cs"], exclusive=1, reverse=1),
        N("OneHot", ["oh", "depth", "values"], ["o"]),
        N("Trilu", ["x"], ["tri"], upper=0),
        N("ReverseSequence", ["x", "lens"], ["rs"], batch_axis=0, time_axis=1),
        N("Einsum", ["x", "x"], ["e"], equation="ij,ij->i"),
    ]
    inits = {"k": np.array([4], np.int64), "one": np.array(1, np.int64), "depth": np.array(4, np.int64),
             "values": np.array([0.0, 2.0], np.float32)}
    outputs = ("g", "gn", "s_add", "s_set", "tv", "ti", "cs", "o", "tri", "rs", "e")
    model = build(nodes, {k: v for k, v in feeds.items()}, inits, outputs=outputs, opset=18)
    native_matches_onnxruntime(model, feeds)


def test_depth_space_and_eye_natively_match_onnxruntime() -> None:
    feeds = {"x": rand(1, 8, 2, 3)}
    nodes = [N("DepthToSpace", ["x"], ["d"], blocksize=2, mode="CRD"), N("SpaceToDepth", ["d"], ["s"], blocksize=2),
             N("EyeLike", ["m"], ["eye"], k=1), N("CenterCropPad", ["x", "shape"], ["c"])]
    inits = {"m": np.zeros((3, 5), np.float32), "shape": np.array([1, 5, 3, 2], np.int64)}
    native_matches_onnxruntime(build(nodes, feeds, inits, outputs=("d", "s", "eye", "c"), opset=18), feeds)


# ------------------------------------------------------------------------ errors and relations

def _call(op: str, types: list, **attrs: object) -> object:
    opdef = get_op(op)
    assert opdef is not None
    return opdef.type_rel(types, opdef.full_attrs(opdef.normalize_attrs(attrs)))


F32 = "float32"


@pytest.mark.parametrize("op,types,attrs,message", [
    ("gather", [TensorType((3, 4), F32), TensorType((3,), "int64")], {}, "must have the rank of data"),
    ("gather", [TensorType((3, 4), F32), TensorType((3, 4), F32)], {}, "indices must be integers"),
    ("gather", [TensorType((3, 4), F32), TensorType((3, 5), "int64")], {}, "longer than data"),
    ("gather_nd", [TensorType((3, 4), F32), TensorType((3, 2), "int64")], {}, "do not fit data"),
    ("gather_nd", [TensorType((3, 4), F32), TensorType((1, 2), "int64")], {"batch_dims": 1}, "batch dimension 0"),
    ("scatter_nd", [TensorType((3, 4), F32), TensorType((1, 2), "int64"), TensorType((2, 3), F32)], {},
     "must have shape \\(2, 4\\)"),
    ("scatter_elements", [TensorType((3, 4), F32), TensorType((2, 4), "int64"), TensorType((2, 4), "int32")], {},
     "dtype of data"),
    ("topk", [TensorType((3, 4), F32)], {"k": 5}, "more than the 4 elements"),
    ("one_hot", [TensorType((3,), "int64"), TensorType((), F32), TensorType((), F32)], {"depth": 2, "axis": 2},
     "out of range"),
    ("einsum", [TupleType((TensorType((3, 4), F32),))], {"equation": "ijk->i"}, "do not match an operand of rank 2"),
    ("einsum", [TupleType((TensorType((3, 4), F32), TensorType((5, 4), F32)))], {"equation": "ij,jk->ik"},
     "subscript 'j' has extents 4 and 5"),
    ("einsum", [TupleType((TensorType((3, 4), F32),))], {"equation": "ij->iz"}, "name no operand"),
    ("arange", [], {"stop": 3.0, "step": 0.0}, "step non-zero"),
    ("trilu", [TensorType((3,), F32), TensorType((), "int64")], {}, "rank >= 2"),
    ("reverse_sequence", [TensorType((3, 4), F32), TensorType((4,), "int32")], {}, "one entry per batch"),
    ("nn.depth_to_space", [TensorType((1, 6, 2, 2), F32)], {"block_size": 2}, "not divisible by block_size"),
])
def test_type_relation_errors(op: str, types: list, attrs: dict, message: str) -> None:
    with pytest.raises(TypeRelError, match=message):
        _call(op, types, **attrs)


GATHER = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %i: Tensor[(2, 2), int64]) {
  gather(%x, %i, axis=1)
}"""


def test_out_of_range_indices_are_errors_in_both_backends() -> None:
    """ONNX allows [-n, n); anything else fails the call: the interpreter names the index, the
    compiled kernel's assertion names the operator and axis (never a read out of bounds)."""
    mod = parse_module(GATHER)
    x = rand(2, 3)
    good = np.array([[0, -1], [2, -3]], np.int64)
    np.testing.assert_array_equal(run_function(mod, [x, good]), np.take_along_axis(x, good % 3, 1))
    native = irtool.build(mod)
    np.testing.assert_array_equal(native(x, good), np.take_along_axis(x, good % 3, 1))
    bad = np.array([[0, 3], [1, 2]], np.int64)
    with pytest.raises(DiagnosticError, match="gather failed: gather: index 3 is out of range for axis 1 of extent 3"):
        run_function(mod, [x, bad])
    with pytest.raises(DiagnosticError, match="assertion failed: gather: an index is out of range for axis 1 of extent 3"):
        native(x, bad)
    with pytest.raises(DiagnosticError, match="assertion failed"):
        native(x, np.array([[0, -4], [1, 2]], np.int64))
