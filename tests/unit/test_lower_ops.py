"""Every operator's TIR compute rule against its numpy reference implementation.

Each case is one Relay call on small random inputs. `lower` turns the (unfused) call into a group
of its own, and the TIR interpreter's result on the PrimFunc must equal the Relay interpreter's
on the call: exactly for integer and selection operators, to float rounding (sums may be added in
another order than numpy's) for the rest. The table must name every operator that has a rule.
"""

from __future__ import annotations

import numpy as np
import pytest

from irtool.eval.interpreter import flatten_value, run_function
from irtool.ir.expr import Call
from irtool.ir.tir import PrimFunc
from irtool.ir.visitor import post_order
from irtool.lower.module import lower_module
from irtool.lower.rules import compute_rule
from irtool.ops import op_names
from irtool.ops.definitions.data_dependent import is_data_dependent
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse_module

F = "float32"
# (operator, call text, {param: (shape, dtype)}); several cases per operator where attributes
# change the loop structure (groups, dilation, layouts, keepdims, modes...).
CASES: list[tuple[str, str, dict[str, tuple[tuple[int, ...], str]]]] = [
    # elementwise unary
    *[(name, f"{name}(%x)", {"x": ((2, 3), F)}) for name in
      ("negative", "abs", "exp", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "nn.relu", "copy")],
    ("log", "log(abs(%x))", {"x": ((2, 3), F)}),
    ("sqrt", "sqrt(abs(%x))", {"x": ((4,), F)}),
    ("rsqrt", "rsqrt(abs(%x))", {"x": ((4,), "float64")}),
    ("negative", "negative(%x)", {"x": ((5,), "int32")}),
    ("abs", "abs(%x)", {"x": ((5,), "int8")}),
    ("exp", "exp(%x)", {"x": ((5,), "int16")}),
    ("round", "round(%x)", {"x": ((3, 3), "float64")}),
    ("nearbyint", "nearbyint(%x)", {"x": ((3, 3), F)}),
    ("logical_not", "logical_not(%x)", {"x": ((4,), "bool")}),
    ("logical_not", "logical_not(%x)", {"x": ((4,), "int32")}),
    ("nn.leaky_relu", "nn.leaky_relu(%x, alpha=0.1f)", {"x": ((2, 4), F)}),
    ("nn.leaky_relu", "nn.leaky_relu(%x, alpha=0.5f)", {"x": ((6,), "int32")}),
    ("clip", "clip(%x, a_min=-0.5f, a_max=0.75f)", {"x": ((3, 4), F)}),
    ("clip", "clip(%x, a_min=-2.5f, a_max=3.5f)", {"x": ((6,), "int32")}),
    ("cast", "cast(%x, dtype=\"int32\")", {"x": ((2, 3), F)}),
    ("cast", "cast(%x, dtype=\"float64\")", {"x": ((2, 3), "int8")}),
    ("cast", "cast(%x, dtype=\"bool\")", {"x": ((5,), "int32")}),
    # broadcasting binary
    *[(name, f"{name}(%x, %y)", {"x": ((2, 3, 4), F), "y": ((3, 1), F)}) for name in
      ("add", "subtract", "multiply", "divide", "maximum", "minimum", "equal", "not_equal", "less",
       "less_equal", "greater", "greater_equal")],
    ("power", "power(abs(%x), %y)", {"x": ((2, 3), F), "y": ((3,), F)}),
    ("power", "power(%x, %y)", {"x": ((2, 3), "int32"), "y": ((1, 3), "int32")}),
    ("divide", "divide(%x, %y)", {"x": ((3, 4), "int32"), "y": ((4,), "int32")}),
    ("add", "add(%x, %y)", {"x": ((4,), "int8"), "y": ((), "int8")}),
    ("logical_and", "logical_and(%x, %y)", {"x": ((2, 3), "bool"), "y": ((3,), "bool")}),
    ("logical_or", "logical_or(%x, %y)", {"x": ((2, 3), "int32"), "y": ((2, 1), "int32")}),
    ("where", "where(%c, %x, %y)", {"c": ((3, 1), "bool"), "x": ((4,), F), "y": ((3, 4), F)}),
    ("where", "where(%c, %x, %y)", {"c": ((4,), "int32"), "x": ((2, 4), F), "y": ((), F)}),
    # math functions, remainders and bit operations (the arguments keep asin/acos/atanh/acosh in their domains)
    *[(name, f"{name}(%x)", {"x": ((2, 3), F)}) for name in
      ("sin", "cos", "tan", "atan", "sinh", "cosh", "asinh", "sign", "isnan", "isinf")],
    *[(name, f"{name}(tanh(%x))", {"x": ((5,), F)}) for name in ("asin", "acos", "atanh")],
    ("acosh", "acosh(abs(%x) + 1f64)", {"x": ((5,), "float64")}),
    ("sin", "sin(%x)", {"x": ((4,), "int32")}),
    ("sign", "sign(%x)", {"x": ((5,), "int8")}),
    ("sign", "sign(%x)", {"x": ((5,), "uint8")}),
    ("isinf", "isinf(%x)", {"x": ((3,), "int32")}),
    ("mod", "mod(%x, %y)", {"x": ((2, 3), F), "y": ((3,), F)}),
    ("mod", "mod(%x, %y)", {"x": ((3, 4), "int32"), "y": ((4,), "int32")}),
    ("floor_mod", "floor_mod(%x, %y)", {"x": ((2, 3), "float64"), "y": ((2, 1), "float64")}),
    ("floor_mod", "floor_mod(%x, %y)", {"x": ((3, 4), "int8"), "y": ((4,), "int8")}),
    *[(name, f"{name}(%x, %y)", {"x": ((2, 4), "int32"), "y": ((4,), "int32")}) for name in
      ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "logical_xor")],
    ("right_shift", "right_shift(%x, %y)", {"x": ((6,), "uint8"), "y": ((), "uint8")}),
    ("bitwise_not", "bitwise_not(%x)", {"x": ((2, 3), "uint16")}),
    ("logical_xor", "logical_xor(%x, %y)", {"x": ((2, 3), "bool"), "y": ((3,), "bool")}),
    # reductions
    ("sum", "sum(%x, axis=[1])", {"x": ((2, 3, 4), F)}),
    ("sum", "sum(%x, axis=[0, 2], keepdims=True)", {"x": ((2, 3, 4), F)}),
    ("sum", "sum(%x)", {"x": ((3, 4), "int32")}),
    ("prod", "prod(%x, axis=[-1])", {"x": ((2, 3), F)}),
    ("max", "max(%x, axis=[1], exclude=True)", {"x": ((2, 3, 4), F)}),
    ("min", "min(%x, axis=[0])", {"x": ((3, 2), "int32")}),
    ("mean", "mean(%x, axis=[1, 2])", {"x": ((2, 3, 4), F)}),
    ("mean", "mean(%x, axis=[0], keepdims=True)", {"x": ((4, 3), "int32")}),
    ("argmax", "argmax(%x, axis=[1])", {"x": ((3, 5), F)}),
    ("argmax", "argmax(%x, axis=[0, 2], select_last_index=True)", {"x": ((2, 3, 2), "int32")}),
    ("argmin", "argmin(%x, keepdims=True)", {"x": ((3, 4), F)}),
    ("collapse_sum_like", "collapse_sum_like(%x, %y)", {"x": ((2, 3, 4), F), "y": ((3, 1), F)}),
    # neural network
    ("nn.conv2d", "nn.conv2d(%x, %w, padding=[1, 1, 1, 1])", {"x": ((1, 2, 5, 5), F), "w": ((3, 2, 3, 3), F)}),
    ("nn.conv2d", "nn.conv2d(%x, %w, strides=[2, 1], padding=[1, 2, 0, 1], dilation=[1, 2], groups=2)",
     {"x": ((1, 4, 7, 6), F), "w": ((4, 2, 3, 2), F)}),
    ("nn.conv2d", "nn.conv2d(%x, %w, data_layout=\"NHWC\", kernel_layout=\"HWIO\", out_layout=\"NCHW\")",
     {"x": ((2, 4, 4, 3), F), "w": ((2, 2, 3, 2), F)}),
    ("nn.conv2d", "nn.conv2d(%x, %w, out_dtype=\"int32\")", {"x": ((1, 2, 3, 3), "int8"), "w": ((2, 2, 2, 2), "int8")}),
    ("nn.dense", "nn.dense(%x, %w)", {"x": ((3, 5), F), "w": ((4, 5), F)}),
    ("nn.dense", "nn.dense(%x, %w, units=2)", {"x": ((2, 2, 3), F), "w": ((2, 3), F)}),
    ("nn.batch_matmul", "nn.batch_matmul(%a, %b, transpose_b=True)", {"a": ((2, 3, 4), F), "b": ((2, 5, 4), F)}),
    ("nn.batch_matmul", "nn.batch_matmul(%a, %b, transpose_a=True, transpose_b=False)",
     {"a": ((1, 4, 3), F), "b": ((2, 4, 2), F)}),
    ("nn.bias_add", "nn.bias_add(%x, %b)", {"x": ((2, 3, 2, 2), F), "b": ((3,), F)}),
    ("nn.bias_add", "nn.bias_add(%x, %b, axis=-1)", {"x": ((2, 4), F), "b": ((4,), F)}),
    ("nn.prelu", "nn.prelu(%x, %a)", {"x": ((2, 3, 2), F), "a": ((3,), F)}),
    ("nn.softmax", "nn.softmax(%x)", {"x": ((2, 5), F)}),
    ("nn.softmax", "nn.softmax(%x, axis=1)", {"x": ((2, 3, 4), F)}),
    ("nn.log_softmax", "nn.log_softmax(%x)", {"x": ((3, 4), F)}),
    ("nn.lrn", "nn.lrn(%x, size=3, alpha=0.001f, beta=0.75f, bias=1f)", {"x": ((1, 5, 2, 2), F)}),
    ("nn.lrn", "nn.lrn(%x, size=4)", {"x": ((1, 6, 2, 1), F)}),
    ("nn.max_pool2d", "nn.max_pool2d(%x, pool_size=[3, 3], strides=[2, 2], padding=[1, 1])", {"x": ((1, 2, 5, 5), F)}),
    ("nn.max_pool2d", "nn.max_pool2d(%x, pool_size=[2, 2], ceil_mode=True, layout=\"NHWC\")", {"x": ((1, 5, 5, 2), F)}),
    ("nn.avg_pool2d", "nn.avg_pool2d(%x, pool_size=[3, 3], strides=[2, 2], padding=[1, 1])", {"x": ((1, 2, 5, 5), F)}),
    ("nn.avg_pool2d", "nn.avg_pool2d(%x, pool_size=[2, 3], padding=[1, 1], dilation=[2, 1], count_include_pad=True, ceil_mode=True)",
     {"x": ((1, 1, 6, 5), F)}),
    ("nn.avg_pool2d", "nn.avg_pool2d(%x, pool_size=[2, 2])", {"x": ((1, 1, 4, 4), "int32")}),
    ("nn.global_avg_pool2d", "nn.global_avg_pool2d(%x)", {"x": ((2, 3, 3, 4), F)}),
    ("nn.global_max_pool2d", "nn.global_max_pool2d(%x, layout=\"NHWC\")", {"x": ((1, 3, 4, 2), F)}),
    ("nn.pad", "nn.pad(%x, 0.5f, pad_width=[[0, 0], [1, 2], [2, 0]])", {"x": ((2, 3, 2), F)}),
    ("nn.pad", "nn.pad(%x, 0f, pad_width=[[1, 1], [2, 1]], pad_mode=\"edge\")", {"x": ((2, 3), F)}),
    ("nn.pad", "nn.pad(%x, 0f, pad_width=[[1, 2], [2, 1]], pad_mode=\"reflect\")", {"x": ((3, 4), F)}),
    ("nn.batch_flatten", "nn.batch_flatten(%x)", {"x": ((2, 3, 2), F)}),
    # injective
    ("reshape", "reshape(%x, newshape=[3, -1])", {"x": ((2, 3, 2), F)}),
    ("squeeze", "squeeze(%x, axis=[1])", {"x": ((2, 1, 3), F)}),
    ("expand_dims", "expand_dims(%x, axis=1, num_newaxis=2)", {"x": ((2, 3), F)}),
    ("transpose", "transpose(%x, axes=[1, 2, 0])", {"x": ((2, 3, 4), F)}),
    ("transpose", "transpose(%x)", {"x": ((2, 3), "int32")}),
    ("concatenate", "concatenate((%x, %y, %x), axis=1)", {"x": ((2, 2), F), "y": ((2, 3), F)}),
    ("split", "split(%x, indices_or_sections=[1, 3], axis=1)", {"x": ((2, 4), F)}),
    ("split", "split(%x, indices_or_sections=2)", {"x": ((4, 3), F)}),
    ("strided_slice", "strided_slice(%x, begin=[1, 0], end=[3, 4], strides=[1, 2])", {"x": ((4, 5), F)}),
    ("strided_slice", "strided_slice(%x, begin=[-1], end=[0], strides=[-1], axes=[1])", {"x": ((2, 4), F)}),
    ("take", "take(%x, %i, axis=1)", {"x": ((2, 5), F), "i": ((3,), "int32")}),
    ("take", "take(%x, %i, mode=\"wrap\")", {"x": ((2, 3), F), "i": ((2, 2), "int64")}),
    ("take", "take(%x, %i, axis=1, batch_dims=1)", {"x": ((2, 4, 3), F), "i": ((2, 2), "int32")}),
    ("layout_transform", "layout_transform(%x, src_layout=\"NCHW\", dst_layout=\"NCHW2c\")", {"x": ((1, 4, 2, 3), F)}),
    ("layout_transform", "layout_transform(%x, src_layout=\"NCHW2c\", dst_layout=\"NHWC\")", {"x": ((1, 2, 2, 3, 2), F)}),
    ("zeros", "zeros(shape=[2, 3], dtype=\"float32\")", {}),
    ("ones", "ones(shape=[3], dtype=\"int32\")", {}),
    ("full", "full(%v, shape=[2, 2], dtype=\"int32\")", {"v": ((), F)}),
    ("zeros_like", "zeros_like(%x)", {"x": ((2, 3), F)}),
    ("ones_like", "ones_like(%x)", {"x": ((3,), "int8")}),
    ("full_like", "full_like(%x, %v)", {"x": ((2, 3), F), "v": ((), F)}),
    # indexing, normalization, resampling (issue 14; tests/unit/test_onnx_indexing.py etc. go deeper).
    # Indices are named `j`: random in [-9, 9], so axes of 10 keep them in range (negatives wrap).
    ("gather", "gather(%x, %j, axis=1)", {"x": ((2, 10), F), "j": ((2, 3), "int64")}),
    ("gather_nd", "gather_nd(%x, %j, batch_dims=1)", {"x": ((2, 10, 3), F), "j": ((1, 2, 4), "int32")}),
    ("scatter_elements", "scatter_elements(%x, %j, %u, axis=1)", {"x": ((3, 10), F), "j": ((2, 4), "int64"),
                                                                 "u": ((2, 4), F)}),
    ("scatter_elements", "scatter_elements(%x, %j, %u, reduction=\"max\")", {"x": ((10, 2), "int32"),
                                                                          "j": ((6, 2), "int32"), "u": ((6, 2), "int32")}),
    ("scatter_nd", "scatter_nd(%x, %j, %u, mode=\"add\")", {"x": ((10, 3), F), "j": ((1, 4), "int64"), "u": ((4, 3), F)}),
    ("one_hot", "one_hot(%j, 1f, 0f, depth=5, axis=0)", {"j": ((2, 3), "int64")}),
    ("topk", "topk(%x, k=3, axis=0)", {"x": ((6, 2), F)}),
    ("topk", "topk(%x, k=4, is_ascend=True, dtype=\"int64\")", {"x": ((2, 7), "int8")}),
    ("cumsum", "cumsum(%x, axis=1, exclusive=True)", {"x": ((2, 4, 3), F)}),
    ("cumprod", "cumprod(%x)", {"x": ((2, 3), "int32")}),
    ("arange", "arange(start=1f, stop=4f, step=0.5f)", {}),
    ("arange", "arange(start=10f, stop=-3f, step=-4f, dtype=\"int32\")", {}),
    ("trilu", "trilu(%x, %k, upper=False)", {"x": ((2, 3, 4), F), "k": ((), "int64")}),
    ("einsum", "einsum((%a, %b), equation=\"bij,bjk->bik\")", {"a": ((2, 3, 4), F), "b": ((1, 4, 2), F)}),
    ("einsum", "einsum((%a,), equation=\"ii->i\")", {"a": ((3, 3), F)}),
    ("reverse_sequence", "reverse_sequence(%x, %j, seq_axis=0, batch_axis=1)", {"x": ((5, 3, 2), F), "j": ((3,), "int32")}),
    ("nn.depth_to_space", "nn.depth_to_space(%x, block_size=2, mode=\"CRD\")", {"x": ((1, 8, 2, 3), F)}),
    ("nn.space_to_depth", "nn.space_to_depth(%x, block_size=2)", {"x": ((1, 2, 4, 6), F)}),
    ("nn.layer_norm", "nn.layer_norm(%x, %g, %b)", {"x": ((3, 5), F), "g": ((5,), F), "b": ((5,), F)}),
    ("nn.group_norm", "nn.group_norm(%x, %g, %b, num_groups=2, center=False)",
     {"x": ((2, 4, 3, 2), F), "g": ((4,), F), "b": ((4,), F)}),
    ("image.resize1d", "image.resize1d(%x, size=[7], method=\"nearest_neighbor\", coordinate_transformation_mode=\"asymmetric\")",
     {"x": ((1, 2, 5), F)}),
    ("image.resize2d", "image.resize2d(%x, size=[5, 3])", {"x": ((1, 2, 3, 4), F)}),
    ("image.resize2d", "image.resize2d(%x, size=[2, 2], method=\"linear\", antialias=True)", {"x": ((1, 1, 10, 11), F)}),
    ("image.resize2d", "image.resize2d(%x, size=[4, 3], method=\"cubic\", coordinate_transformation_mode=\"tf_crop_and_resize\", "
     "roi=[0.1f, -0.2f, 0.9f, 1.1f], extrapolation_value=7f, cubic_exclude=True)", {"x": ((1, 1, 4, 5), F)}),
    ("image.resize3d", "image.resize3d(%x, size=[3, 2, 4], coordinate_transformation_mode=\"align_corners\")",
     {"x": ((1, 1, 2, 3, 2), F)}),
    ("image.grid_sample", "image.grid_sample(%x, %g, padding_mode=\"reflection\", align_corners=False)",
     {"x": ((1, 2, 3, 4), F), "g": ((1, 2, 3, 2), F)}),
    ("image.grid_sample", "image.grid_sample(%x, %g, method=\"bicubic\", padding_mode=\"border\")",
     {"x": ((1, 1, 4, 4), F), "g": ((1, 2, 2, 3), F)}),
    ("image.grid_sample", "image.grid_sample(%x, %g, method=\"nearest\", layout=\"NCDHW\")",
     {"x": ((1, 1, 2, 3, 4), F), "g": ((1, 3, 2, 2, 2), F)}),
    ("qnn.quantize", 'qnn.quantize(%x, %s, %z, axis=1, out_dtype="uint8")', {"x": ((2, 3, 4), F), "s": ((3,), F), "z": ((3,), "uint8")}),
    ("qnn.dequantize", "qnn.dequantize(%x, %s, %z)", {"x": ((2, 3), "int8"), "s": ((2, 1), F), "z": ((), "int8")}),
]

# Operators whose results are selections or integer arithmetic: equal to the last bit.
_EXACT = {"negative", "abs", "nn.relu", "copy", "floor", "ceil", "round", "nearbyint", "logical_not", "clip", "cast", "maximum",
          "minimum", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
          "logical_or", "where", "max", "min", "argmax", "argmin", "nn.max_pool2d", "nn.global_max_pool2d",
          "nn.pad", "reshape", "squeeze", "expand_dims", "nn.batch_flatten", "transpose", "concatenate", "split",
          "strided_slice", "take", "layout_transform", "zeros", "ones", "full", "zeros_like", "ones_like",
          "full_like", "nn.prelu", "nn.leaky_relu", "sign", "isnan", "isinf", "mod", "floor_mod", "bitwise_and",
          "bitwise_or", "bitwise_xor", "bitwise_not", "left_shift", "right_shift", "logical_xor", "gather", "gather_nd",
          "scatter_elements", "one_hot", "topk", "cumprod", "arange", "trilu", "reverse_sequence", "nn.depth_to_space",
          "nn.space_to_depth",
          "qnn.quantize", "qnn.dequantize"}
_VIEWS = {"reshape", "squeeze", "expand_dims", "nn.batch_flatten"}
# Rules that refuse on purpose (simplify-inference removes these operators first).
_REFUSED = {"nn.batch_norm", "nn.dropout"}


def random_input(shape: tuple[int, ...], dtype: str, rng: np.random.Generator, name: str) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith(("int", "uint")):
        if name == "i":  # indices: include out-of-range and negative ones for clip/wrap modes
            return rng.integers(-4, 7, shape).astype(dtype)
        high = 5 if dtype == "int8" else 9
        return rng.integers(-high, high + 1, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype) * 2


def module_for(text: str, params: dict[str, tuple[tuple[int, ...], str]]):
    sig = ", ".join(f"%{n}: Tensor[({', '.join(map(str, s))}{',' if len(s) == 1 else ''}), {d}]"
                    for n, (s, d) in params.items())
    return parse_module(f"#[version = \"0.0.5\"]\ndef @main({sig}) {{ {text} }}")


@pytest.mark.parametrize("name,text,params", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_matches_reference(name: str, text: str, params: dict) -> None:
    mod = module_for(text, params)
    rng = np.random.default_rng(len(text))
    args = [random_input(s, d, rng, n) for n, (s, d) in params.items()]
    want = flatten_value(run_function(mod, args))
    low = lower_module(mod)
    callees = {getattr(n.op, "name", "") for n in post_order(low["main"].body) if isinstance(n, Call)}
    if name in _VIEWS:  # a view: no kernel, one `reshape` of the input
        assert callees == {"reshape"} and not any(isinstance(f, PrimFunc) for f in low.functions.values())
    else:
        assert callees == {"call_lowered"} and any(isinstance(f, PrimFunc) for f in low.functions.values())
    got = flatten_value(run_function(low, args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if name in _EXACT or not np.issubdtype(w.dtype, np.floating):
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=2e-6 if w.dtype == np.float32 else 1e-12, atol=1e-6)


def test_every_rule_has_a_case() -> None:
    with_rule = {n for n in op_names() if compute_rule(n) is not None}
    assert with_rule - _REFUSED <= {c[0] for c in CASES}
    assert _REFUSED <= with_rule


def test_every_computing_operator_has_a_rule() -> None:
    """Only operators that are not kernels (device placement, memory, calls, and those with
    data-dependent extents, native routines of their own) lack a rule."""
    missing = {n for n in op_names() if compute_rule(n) is None}
    assert missing == {"annotation.stop_fusion", "call_lowered", "device_copy", "memory.alloc_storage",
                       "memory.alloc_tensor", "memory.kill", "on_device", "argwhere", "nonzero", "unique", "compress"}
    assert all(is_data_dependent(n) for n in ("argwhere", "nonzero", "unique", "compress"))


@pytest.mark.parametrize("call", ["nn.batch_norm(%x, %v, %v, %v, %v).0", "nn.dropout(%x).0"])
def test_training_ops_ask_for_simplify_inference(call: str) -> None:
    mod = module_for(call, {"x": ((1, 2, 2, 2), F), "v": ((2,), F)})
    with pytest.raises(DiagnosticError, match="simplify-inference") as info:
        lower_module(mod)
    assert info.value.span is not None
