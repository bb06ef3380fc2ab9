"""Shape functions over run-time rows (irtool/lower/shape_funcs.py, batch.py; docs/native-relay.md
"Dynamic shapes"): how many leading axes each operator treats row by row, what it refuses, and what a
lowered group records — each result's prefix extents in terms of the inputs' `?`s and the
extents that must agree at run time. Expected values are derived by hand from each operator's
definition."""

from __future__ import annotations

import pytest

from irtool.core.diagnostics import DiagnosticError
from irtool.ir.signature import primfunc_type
from irtool.ir.tir import PrimFunc
from irtool.ir.types import Any, TensorType
from irtool.lower.shape_funcs import REGROUP, row_prefix, shape_func
from irtool.ops.registry import get_op
from irtool.passes import run
from irtool.syntax.parser import parse_module


def t(*dims: int | None) -> TensorType:
    return TensorType(tuple(Any() if d is None else d for d in dims), "float32")


def kept(name: str, args: list[TensorType], out: TensorType, **attrs: object) -> int | str:
    rule = shape_func(name)
    assert rule is not None
    op = get_op(name)
    assert op is not None
    return rule(args, out, op.full_attrs(op.normalize_attrs(attrs)))


def test_the_row_prefix_runs_to_the_last_dynamic_axis() -> None:
    assert [row_prefix(x) for x in (t(2, 3), t(None, 3), t(2, None, 3), t(None, 4, None), t(None))] == [0, 1, 2, 3, 1]


@pytest.mark.parametrize(("name", "args", "out", "attrs", "want"), [
    ("exp", [t(None, None, 8)], t(None, None, 8), {}, 3),                       # element-wise: every axis
    ("add", [t(None, None, 8), t(8)], t(None, None, 8), {}, 3),                 # a bias below the prefix
    ("add", [t(None, None, 8), t(1, 1, 8)], t(None, None, 8), {}, 3),           # ones on the prefix
    ("add", [t(None, None, 8), t(2, 1, 8)], t(None, None, 8), {}, "spans the row prefix"),
    ("add", [t(None, None, 8), t(None, 8)], t(None, None, 8), {}, "lower rank than the result"),
    ("nn.dense", [t(None, None, 64), t(32, 64)], t(None, None, 32), {}, 2),     # all but the contracted axis
    ("nn.dense", [t(None, 64), t(None, 64)], t(None, None), {}, "must be static"),
    ("nn.bias_add", [t(None, 3, 5, 5), t(3)], t(None, 3, 5, 5), {"axis": 1}, 1),  # before the bias's axis
    ("nn.softmax", [t(None, None, 16)], t(None, None, 16), {"axis": -1}, 2),     # before the normalised axis
    ("nn.softmax", [t(None, None, 16)], t(None, None, 16), {"axis": 1}, 1),
    ("nn.layer_norm", [t(2, None, 16), t(16), t(16)], t(2, None, 16), {"axis": -1}, 2),
    ("sum", [t(None, None, 8)], t(None, None, 1), {"axis": [-1], "keepdims": True}, 2),
    ("mean", [t(None, None, 8)], t(None), {"axis": [1, 2]}, 1),                 # before the first reduced axis
    ("max", [t(None, 8)], t(1), {"axis": [1], "exclude": True}, 0),
    ("argmax", [t(None, 8)], t(None), {"axis": [1]}, 1),
    ("concatenate", [t(None, None, 2), t(None, None, 3)], t(None, None, 5), {"axis": 2}, 2),
    ("expand_dims", [t(None, 8)], t(None, 1, 8), {"axis": 1}, REGROUP),         # a new axis moves no element
    ("strided_slice", [t(2, None, 8)], t(2, None, 4), {"begin": [0], "end": [4], "axes": [2]}, 2),  # before the sliced axis
    ("strided_slice", [t(None, 8)], t(None, 4), {"begin": [0, 0], "end": [-1, 4]}, 0),  # end -1 cuts axis 0
    ("nn.pad", [t(None, None, 8), t()], t(None, None, 10), {"pad_width": [[0, 0], [0, 0], [1, 1]]}, 2),
    ("transpose", [t(None, None, 4, 8)], t(None, None, 8, 4), {"axes": [0, 1, 3, 2]}, 2),  # the axes left in place
    ("transpose", [t(None, 8)], t(8, None), {"axes": [1, 0]}, 0),
    ("squeeze", [t(None, None, 1, 8)], t(None, None, 8), {"axis": [2]}, 2),
    ("nn.batch_matmul", [t(None, None, 8), t(1, 4, 8)], t(None, None, 4), {}, 2),  # a shared right matrix
    ("nn.batch_matmul", [t(None, 3, 8), t(None, 4, 8)], t(None, 3, 4), {}, 1),      # pairs: the batch axis
    ("nn.batch_matmul", [t(None, 3, 8), t(2, 4, 8)], t(None, 3, 4), {}, "spans the row prefix"),
    ("nn.conv2d", [t(None, 2, 6, 6), t(3, 2, 3, 3)], t(None, 3, 6, 6), {}, 1),
    ("nn.conv2d", [t(None, 6, 6, 2), t(3, 3, 2, 3)], t(None, 6, 6, 3), {"data_layout": "NHWC", "kernel_layout": "HWIO"},
     1),
    ("nn.max_pool2d", [t(None, 6, 6, 2)], t(None, 3, 3, 2), {"pool_size": [2, 2], "layout": "HWCN"},
     "does not lead with the batch axis"),
    ("reshape", [t(None, None, 8)], t(None, 8), {"newshape": [-1, 8]}, REGROUP),
    ("nn.batch_flatten", [t(None, 2, 4)], t(None, 8), {}, REGROUP),
    ("strided_slice", [t(None, None, 64)], t(None, None, 32), {"begin": [0], "end": [32], "axes": [2]}, 2),
    ("strided_slice", [t(None, None, 64)], t(None, None, 64), {"begin": [1], "end": [2**62], "axes": [1]}, 1),
    ("strided_slice", [t(None, 8)], t(None, 4), {"begin": [0, 2], "end": [2**62, 6]}, 1),  # axis 0 whole
    ("strided_slice", [t(None, 8)], t(None, 4), {"begin": [0, 0], "end": [2**62, 8], "strides": [1, 2]}, 1),
    ("take", [t(None, None, 8), t(3)], t(None, None, 3), {"axis": 2}, 2),       # before the gathered axis
    ("take", [t(None, 8), t(None)], t(None, None), {"axis": 1}, "must be static"),
    ("take", [t(None, 8), t(3)], t(3), {}, 0),                                  # flattened: no rows
])
def test_each_operator_keeps_its_leading_axes(name: str, args: list[TensorType], out: TensorType,
                                              attrs: dict[str, object], want: int | str) -> None:
    got = kept(name, args, out, **attrs)
    if isinstance(want, str):
        assert isinstance(got, str) and want in got
    else:
        assert got == want


def test_operators_without_a_row_rule_have_no_shape_function() -> None:
    assert shape_func("cumsum") is None and shape_func("topk") is None and shape_func("gather") is None \
        and shape_func("nn.lrn") is None


HEADER = '#[version = "0.0.5"]\n'


def lowered(text: str) -> dict[str, PrimFunc]:
    mod = run(parse_module(HEADER + text), "fuse-ops,lower")
    return {n: f for n, f in mod.functions.items() if isinstance(f, PrimFunc) and "batch_tile" in f.attrs}


def test_a_group_records_its_prefix_extents_and_the_checks_that_pair_rows() -> None:
    (one,) = lowered("def @main(%x: Tensor[(?, ?, 8), float32], %y: Tensor[(?, ?, 8), float32]) "
                     "{ exp(add(%x, %y)) }").values()
    # exp and add treat every axis alike: the kernels take the two-axis prefix as one axis of rows.
    assert one.attrs["batch_buffers"] == (1, 1, 1)
    assert [p.shape for p in one.params] == [(1, 8)] * 3
    # x's ?s are (buffer 0, axes 0 and 1), y's (buffer 1, ...); the result takes x's; the add pairs
    # them axis by axis, which implies the row counts agree (no third check).
    assert one.attrs["batch_dims"] == (((1, 0, 0), (1, 0, 1)), ((1, 1, 0), (1, 1, 1)), ((1, 0, 0), (1, 0, 1)))
    assert one.attrs["batch_checks"] == (((1, 0, 0), (1, 1, 0)), ((1, 0, 1), (1, 1, 1)))
    assert str(primfunc_type(one)).endswith("-> Tensor[(?, ?, 8), float32]")


@pytest.mark.parametrize(("body", "flat"), [
    ("nn.dense(%x, %w, units=8)", True),                                  # a matrix product of n·m rows
    ("nn.softmax(nn.bias_add(%x, %b, axis=2), axis=2)", True),           # axes after the prefix move down
    ("add(%x, %b)", True),                                                # a bias below the prefix
    ("add(%x, ones_like(%x))", True),
    ("concatenate((%x, %x), axis=2)", False),                              # an axis attribute of its own
    ("add(%x, %c)", False),                                               # a static operand on the prefix
    ("transpose(%x, axes=[0, 1, 2])", False),
])
def test_a_prefix_of_two_axes_is_flattened_for_operators_that_allow_it(body: str, flat: bool) -> None:
    """The 32-row kernel sees `(32, 8)` where every operator treats the prefix alike (so a dense
    takes the 2-d tiled schedule), else `(1, 32, 8)`."""
    mod = run(parse_module(HEADER + "def @main(%x: Tensor[(?, ?, 8), float32], %w: Tensor[(8, 8), float32], "
                           f"%b: Tensor[(8), float32], %c: Tensor[(1, 1, 8), float32]) {{ {body} }}"), "fuse-ops,lower")
    ones = [f for f in mod.functions.values() if isinstance(f, PrimFunc) and "batch_tile" in f.attrs]
    assert ones
    for one in ones:
        tile = mod.functions[str(one.attrs["batch_tile"])]
        assert isinstance(tile, PrimFunc)
        assert tile.params[0].shape == ((32, 8) if flat else (1, 32, 8))
        assert one.params[0].shape == ((1, 8) if flat else (1, 1, 8))
        assert one.attrs["batch_buffers"][0] == (1 if flat else 2)
        assert one.attrs["batch_dims"][0] == ((1, 0, 0), (1, 0, 1))   # the group's prefix either way


def test_a_reshape_in_a_group_merges_the_prefix_into_one_extent() -> None:
    funcs = lowered("def @main(%x: Tensor[(2, ?, 8), float32], %y: Tensor[(?, ?, 8), float32]) "
                    "{ (reshape(exp(%x), newshape=[-1, 8]), reshape(sigmoid(%y), newshape=[-1, 2, 4])) }")
    # (2, n, 8) to (2n, 8): the result's ? is 2 × x's axis 1; (n, m, 8) to (nm, 2, 4): n × m.
    assert {f.attrs["batch_dims"][1] for f in funcs.values()} == {((2, 0, 1),), ((1, 0, 0, 0, 1),)}
    assert all("batch_checks" not in f.attrs for f in funcs.values())


@pytest.mark.parametrize(("body", "message"), [
    ("nn.dense(%x, %w)", r"`nn.dense` with a `\?` on axis 2 of Tensor\[\(\?, 4, \?\), float32\] "
     r"\(it treats only axes 0..1 row by row\)"),
    ("nn.softmax(%x, axis=-1)", r"`nn.softmax` with a `\?` on axis 2 .*\(it treats only axes 0..1 row by row\)"),
    ("transpose(%x, axes=[0, 2, 1])", r"`transpose` with a `\?` on axis 2 .*\(it treats only axes 0..0 row by row\)"),
    ("sum(%x, axis=[1])", r"`sum` with a `\?` on axis 2 .*\(it treats only axes 0..0 row by row\)"),
    ("reshape(exp(%x), newshape=[0, -1])", r"`reshape` from Tensor\[\(\?, 4, \?\), float32\] to "
     r"Tensor\[\(\?, \?\), float32\] \(its rows regroup into other than one `\?` axis\)"),
    ("reshape(exp(%x), newshape=[2, -1])", r"`reshape` over run-time rows \(at 32 rows its result is "
     r"Tensor\[\(2, 16\), float32\], not Tensor\[\(2, \?\), float32\]"),
])
def test_a_dynamic_axis_an_operator_does_not_treat_row_by_row_is_a_located_error(body: str, message: str) -> None:
    text = f"def @main(%x: Tensor[(?, 4, ?), float32], %w: Tensor[(3, 5), float32]) {{\n  {body}\n}}\n"
    with pytest.raises(DiagnosticError, match=message) as info:
        lowered(text)
    assert info.value.span is not None and info.value.span.line == 3


def test_a_tuple_field_the_group_does_not_read_is_not_a_batched_buffer() -> None:
    """A loop's (state, stacked outputs) reach a group that projects only the outputs: the state's
    n rows must not be paired with the outputs' 4·n."""
    (one,) = lowered("def @main(%c: bool, %s: Tensor[(?, 8), float32], %y: Tensor[(4, ?, 8), float32]) { "
                     "%0 = if (%c) { (%s, %y) } else { (%s, %y) }; expand_dims(%0.1, axis=1) }").values()
    # Buffers: s (not read), y (prefix 4, n: buffer 1's axis 1), the result (4, 1, n).
    assert one.attrs["batch_buffers"] == (0, 2, 3)
    assert one.attrs["batch_dims"] == ((), ((4,), (1, 1, 1)), ((4,), (1,), (1, 1, 1)))
    assert "batch_checks" not in one.attrs
