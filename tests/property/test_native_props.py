"""Native code computes what the interpreter computes.

Random well-typed programs (`support.strategies.dataflow_programs`: elementwise/broadcast graphs
with tuples, lets and constants; and `op_programs(kind)` here, one test per operator family so
that every registered operator with a TIR compute rule is reached: a call with random shapes and
attributes, often with an elementwise epilogue) are compiled with
`irtool.build` at -O1 (compile time dominates; the optimisation level does not change strict-FP
results) and run on random inputs; outputs must match the Relay interpreter.

Tolerances: integer and bool results exactly. float64 rtol 1e-12. float32 rtol/atol 1e-5:
sums and convolutions may add in a different order than numpy's pairwise sums, and libm's
`expf`/`tanhf`/`erff` differ from numpy's SIMD versions in the last bit, which an epilogue can
amplify a little. Non-finite values must agree in kind (`equal_nan`).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import dataflow_programs

import irtool
from irtool.analysis.typecheck import infer_types
from irtool.eval.interpreter import flatten_value, run_function
from irtool.ir import Call, Constant, Expr, Function, IRModule, Op, TensorType, Tuple, TupleGetItem, Var
from irtool.ops import get_op


def _inputs(mod: IRModule, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for p in mod["main"].params:
        t = p.type_annotation
        assert isinstance(t, TensorType)
        shape = tuple(int(d) for d in t.shape)
        if t.dtype == "bool":
            out[p.name_hint] = rng.random(shape) < 0.5
        elif t.dtype.startswith(("int", "uint")):
            out[p.name_hint] = rng.integers(-9 if t.dtype.startswith("int") else 0, 10, shape).astype(t.dtype)
        else:
            out[p.name_hint] = (rng.standard_normal(shape) * 2).astype(t.dtype)
    return out


def _assert_native_matches(mod: IRModule, seed: int) -> None:
    infer_types(mod)   # the strategies build well-typed programs; say so if one is not
    args = _inputs(mod, seed)
    want = flatten_value(run_function(mod, args))
    got = flatten_value(irtool.build(mod, opt_level=1)(**args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            tol = 1e-5 if w.dtype == np.float32 else 1e-12
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)


@settings(max_examples=100)
@given(dataflow_programs(), st.integers(0, 2**16))
def test_dataflow_programs_natively(mod: IRModule, seed: int) -> None:
    _assert_native_matches(mod, seed)


def _call(name: str, args: list[Expr], **attrs: object) -> Call:
    op = get_op(name)
    assert op is not None
    return Call(Op(name), args, op.normalize_attrs(attrs))


KINDS = ("conv2d", "dense", "batch_matmul", "max_pool2d", "avg_pool2d", "global_pool", "softmax", "log_softmax",
         "reduce", "argreduce", "concatenate", "transpose", "strided_slice", "take", "pad", "split", "where",
         "int_arith", "cast", "clip", "leaky_relu", "prelu", "lrn", "layout_transform", "power", "rsqrt_log",
         "full", "compare", "logic", "shape", "inference", "like", "math", "remainder", "bits")


@st.composite
def op_programs(draw: st.DrawFn, kind: str) -> IRModule:
    """A call of an operator of family `kind` with random shapes/attributes, and an epilogue."""
    params: list[Var] = []

    def param(shape: tuple[int, ...], dtype: str = "float32") -> Var:
        v = Var(f"p{len(params)}", TensorType(shape, dtype))
        params.append(v)
        return v

    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    h, w = draw(st.integers(2, 6)), draw(st.integers(2, 6))
    x = param((n, c, h, w))
    out: Expr
    if kind == "conv2d":
        groups = draw(st.sampled_from([g for g in (1, 2, 4) if c % g == 0]))
        oc = groups * draw(st.integers(1, 2))
        kh, kw = draw(st.integers(1, min(3, h))), draw(st.integers(1, min(3, w)))
        out = _call("nn.conv2d", [x, param((oc, c // groups, kh, kw))], groups=groups,
                    padding=tuple(draw(st.lists(st.integers(0, 1), min_size=4, max_size=4))),
                    strides=tuple(draw(st.lists(st.integers(1, 2), min_size=2, max_size=2))),
                    dilation=(draw(st.integers(1, 2)),) * 2 if min(h, w) > 4 else (1, 1))
    elif kind == "dense":
        flat = _call("reshape", [x], newshape=(n, c * h * w))
        out = _call("nn.dense", [flat, param((draw(st.integers(1, 5)), c * h * w))])
    elif kind == "batch_matmul":
        out = _call("nn.batch_matmul", [_call("reshape", [x], newshape=(n * c, h, w)), param((n * c, 3, w))],
                    transpose_b=True)
    elif kind in ("max_pool2d", "avg_pool2d"):
        size = (draw(st.integers(1, min(3, h))), draw(st.integers(1, min(3, w))))
        extra = {"count_include_pad": draw(st.booleans())} if kind == "avg_pool2d" else {}
        out = _call(f"nn.{kind}", [x], pool_size=size, padding=(draw(st.integers(0, 1)),) * 2,
                    strides=(draw(st.integers(1, 2)),) * 2, ceil_mode=draw(st.booleans()), **extra)
    elif kind == "global_pool":
        out = _call(draw(st.sampled_from(["nn.global_avg_pool2d", "nn.global_max_pool2d"])), [x])
    elif kind in ("softmax", "log_softmax"):
        out = _call(f"nn.{kind}", [x], axis=draw(st.integers(-1, 3)))
    elif kind == "reduce":
        axes = tuple(sorted(draw(st.sets(st.integers(0, 3), min_size=1, max_size=3))))
        out = _call(draw(st.sampled_from(["sum", "mean", "max", "min", "prod"])), [x], axis=axes,
                    keepdims=draw(st.booleans()))
    elif kind == "argreduce":
        out = _call(draw(st.sampled_from(["argmax", "argmin"])), [x], axis=(draw(st.integers(0, 3)),))
    elif kind == "concatenate":
        out = _call("concatenate", [Tuple([x, param((n, c, h, w))])], axis=draw(st.integers(-4, 3)))
    elif kind == "transpose":
        out = _call("transpose", [x], axes=tuple(draw(st.permutations(range(4)))))
    elif kind == "strided_slice":
        out = _call("strided_slice", [x], begin=(0, 0, 1, 0), end=(n, c, h, w), strides=(1, 1, 1, 2))
    elif kind == "take":
        idx = param((3,), "int32")
        out = _call("take", [x, idx], axis=draw(st.integers(0, 3)), mode="clip")
    elif kind == "pad":
        out = _call("nn.pad", [x, Constant(np.array(0.5, np.float32))], pad_width=((0, 0), (0, 0), (1, 0), (0, 2)))
    elif kind == "split":
        out = _call("split", [x], indices_or_sections=2 if h % 2 == 0 else (1,), axis=2)
    elif kind == "where":
        out = _call("where", [_call("greater", [x, param((w,))]), x, param((n, c, h, w))])
    elif kind == "int_arith":
        a, b = param((c, w), "int32"), param((w,), "int32")
        op = draw(st.sampled_from(["divide", "add", "multiply", "subtract", "maximum", "minimum"]))
        out = _call(op, [a, b])
    elif kind == "cast":
        out = _call("cast", [x], dtype=draw(st.sampled_from(["int32", "float64", "int8", "bool", "float16"])))
    elif kind == "clip":
        out = _call("clip", [x], a_min=-0.5, a_max=1.0)
    elif kind == "leaky_relu":
        out = _call("nn.leaky_relu", [x], alpha=0.1)
    elif kind == "prelu":
        out = _call("nn.prelu", [x, param((c,))])
    elif kind == "lrn":
        out = _call("nn.lrn", [x], size=3)
    elif kind == "layout_transform":
        out = _call("layout_transform", [x], src_layout="NCHW", dst_layout="NCHW1c")
    elif kind == "power":
        out = _call("power", [_call("abs", [x]), Constant(np.array(1.5, np.float32))])
    elif kind == "rsqrt_log":
        out = _call(draw(st.sampled_from(["rsqrt", "log", "sqrt", "erf"])), [_call("abs", [x])])
    elif kind == "full":
        const = _call(draw(st.sampled_from(["zeros", "ones"])), [], shape=(h, w), dtype="float32")
        out = _call("add", [x, _call("add", [const, _call("full", [Constant(np.array(1.5, np.float32))],
                                                           shape=(w,), dtype="float32")])])
    elif kind == "compare":
        out = _call(draw(st.sampled_from(["equal", "not_equal", "less", "greater_equal", "less_equal", "greater"])),
                    [x, param((h, w))])
    elif kind == "logic":
        a, b = _call("greater", [x, param((w,))]), param((n, c, h, w), "bool")
        out = _call(draw(st.sampled_from(["logical_and", "logical_or"])), [_call("logical_not", [a]), b])
    elif kind == "shape":
        shaped = _call("expand_dims", [x], axis=draw(st.integers(0, 4)))
        out = _call("nn.batch_flatten", [_call("squeeze", [_call("copy", [shaped])])]) if n > 1 else \
            _call("squeeze", [shaped])
        out = _call(draw(st.sampled_from(["floor", "ceil", "round", "sqrt"])), [_call("abs", [out])])
    elif kind == "inference":   # simplify-inference rewrites these before lowering
        stats = [param((c,)) for _ in range(4)]
        bn = _call("nn.batch_norm", [_call("nn.bias_add", [x, param((c,))]), stats[0], stats[1], stats[2],
                                     _call("add", [_call("abs", [stats[3]]), Constant(np.array(0.5, np.float32))])])
        out = TupleGetItem(_call("nn.dropout", [_call("nn.relu", [TupleGetItem(bn, 0)])]), 0)
    elif kind == "math":
        fn = draw(st.sampled_from(["sin", "cos", "tan", "atan", "sinh", "cosh", "asinh", "sign", "asin", "acos",
                                   "atanh"]))
        inner = _call("multiply", [_call("tanh", [x]), Constant(np.array(0.9, np.float32))]) \
            if fn in ("asin", "acos", "atanh") else x   # inside (-1, 1)
        out = _call(fn, [inner])
    elif kind == "remainder":
        dtype = draw(st.sampled_from(["int32", "int8", "float32"]))
        a, b = param((c, w), dtype), param((w,), dtype)
        out = _call(draw(st.sampled_from(["mod", "floor_mod"])), [a, b])
    elif kind == "bits":
        a, b = param((c, w), "int32"), param((w,), "int32")
        op = draw(st.sampled_from(["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"]))
        out = _call("bitwise_not", [_call(op, [a, b])])
    else:
        like = draw(st.sampled_from(["zeros_like", "ones_like", "full_like", "collapse_sum_like"]))
        if like == "full_like":
            out = _call("add", [x, _call(like, [x, Constant(np.array(2.5, np.float32))])])
        elif like == "collapse_sum_like":
            out = _call(like, [x, param((c, 1, w))])
        else:
            out = _call("add", [x, _call(like, [x])])
    if draw(st.booleans()) and kind not in ("split", "argreduce", "int_arith", "cast", "compare", "logic",
                                            "remainder", "bits"):
        out = _call(draw(st.sampled_from(["nn.relu", "tanh", "sigmoid", "exp", "negative"])), [out])
    mod = IRModule()
    mod.add_function("main", Function(params, out, None))
    return mod


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=8)
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_operator_programs_natively(kind: str, data: st.DataObject, seed: int) -> None:
    _assert_native_matches(data.draw(op_programs(kind)), seed)
