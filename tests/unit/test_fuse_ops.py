"""fuse-ops against TVM's test_pass_fuse_ops.py cases, and the post-dominator analysis it uses.

Programs are built the way TVM's tests build them (vars, op calls, constants). Expected groupings
are TVM's expected functions restated as "ops per primitive function" plus how each fused call
is wired (which main parameter or which earlier fused call feeds each argument). Where TVM's test
uses an operator irtool does not register, an operator of the same pattern kind stands in
(noted at the test).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from irtool.analysis.dominators import (BROADCAST, COMM_REDUCE, ELEMWISE, INJECTIVE, OPAQUE,
                                        OUT_ELEMWISE_FUSABLE, DataflowGraph, PostDominatorTree,
                                        build_dataflow_graph)
from irtool.analysis.typecheck import infer_types
from irtool.ir import (Attrs, Call, Constant, Expr, Function, If, IRModule, Let, Match, Op, RefCreate, RefRead,
                       RefWrite, TensorType, Tuple, TupleGetItem, Var, free_vars, post_order, structural_equal)
from irtool.eval.interpreter import run_function
from irtool.ops.registry import get_op
from irtool.passes.catalog import get_pass
from irtool.passes.fuse_ops import FuseOpsPass, fuse_function
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse_module
from irtool.syntax.printer import print_module

F32 = "float32"


def var(name: str, shape: tuple[int, ...], dtype: str = F32) -> Var:
    return Var(name, TensorType(shape, dtype))


def op(name: str, *args: Expr, **attrs: object) -> Call:
    op_def = get_op(name)
    assert op_def is not None, name
    return Call(Op(name), args, op_def.normalize_attrs(attrs))


def const(value: object, dtype: str = F32) -> Constant:
    return Constant(np.array(value, dtype=dtype))


def module(params: list[Var], body: Expr) -> IRModule:
    mod = IRModule()
    mod.add_function("main", Function(params, body))
    return mod


def fuse(mod: IRModule, **options: int) -> IRModule:
    out = FuseOpsPass(**options).apply(mod)
    infer_types(out)  # the result must type-check
    return out


def primitive_calls(fn: Function) -> list[Call]:
    """Calls of primitive function literals in `fn`, in evaluation order."""
    return [n for n in post_order(fn.body)
            if isinstance(n, Call) and isinstance(n.op, Function) and n.op.is_primitive]


def body_ops(prim: Function) -> tuple[str, ...]:
    """What a fused function computes: op names, `tuple` and `.i` projections, in evaluation order."""
    out: list[str] = []
    for n in post_order(prim.body):
        if isinstance(n, Call):
            out.append(n.op.name)  # type: ignore[attr-defined]
        elif isinstance(n, Tuple):
            out.append("tuple")
        elif isinstance(n, TupleGetItem):
            out.append(f".{n.index}")
    return tuple(out)


def groups(mod: IRModule) -> list[tuple[str, ...]]:
    return [body_ops(c.op) for c in primitive_calls(mod["main"])]  # type: ignore[arg-type]


def wiring(mod: IRModule) -> list[list[str]]:
    """Each fused call's arguments: a main parameter's name, `#k` for the k-th fused call, or `const`."""
    calls = primitive_calls(mod["main"])
    position = {id(c): k for k, c in enumerate(calls)}
    out: list[list[str]] = []
    for c in calls:
        row = []
        for a in c.args:
            if isinstance(a, Var):
                row.append(a.name_hint)
            elif isinstance(a, Constant):
                row.append("const")
            else:
                row.append(f"#{position[id(a)]}")
        out.append(row)
    return out


# ---------------------------------------------------------------------------------------------
# The post-dominator tree


def test_post_dominator_of_diamond_is_the_join() -> None:
    x = var("x", (4,))
    a = op("exp", x)
    left = op("negative", a)
    right = op("squeeze", a)
    join = op("add", left, right)
    fn = Function([x], join)
    infer_types(fn)
    graph = build_dataflow_graph(fn)
    tree = PostDominatorTree.build(graph)
    idx = {n: graph.node_of(n) for n in (x, a, left, right, join)}
    assert tree.parent[idx[a]] == idx[join]
    # the squeeze branch is injective: the strongest pattern on a's way to the join
    assert tree.pattern[idx[a]] == INJECTIVE
    assert tree.parent[idx[left]] == idx[join] and tree.pattern[idx[left]] == ELEMWISE
    assert tree.parent[idx[join]] == -1          # the function body is used from outside
    assert graph.extern_ref[idx[x]] and tree.parent[idx[x]] == -1


def test_broadcast_edge_of_equal_shape_counts_as_elementwise() -> None:
    x = var("x", (2, 3))
    b = var("b", (3,))
    s = op("add", x, b)
    fn = Function([x, b], s)
    infer_types(fn)
    graph = build_dataflow_graph(fn)
    edges = {graph.nodes[i].name_hint: graph.outputs[i][0][1] for i in (graph.node_of(x), graph.node_of(b))}
    assert edges == {"x": ELEMWISE, "b": BROADCAST}


def test_graph_patterns_for_constants_tuples_and_let() -> None:
    x = var("x", (2,))
    scalar, vector, f16 = const(1.0), const([1.0, 2.0]), const(1.0, "float16")
    t = Tuple([op("add", x, scalar), op("add", x, vector), op("cast", x, dtype="float16")])
    y = Var("y", None)
    body = Let(y, op("add", op("cast", x, dtype="float16"), f16), t)
    fn = Function([x], body)
    infer_types(fn)
    graph = build_dataflow_graph(fn)
    pattern = {id(graph.nodes[i]): graph.pattern[i] for i in range(len(graph))}
    assert pattern[id(scalar)] == ELEMWISE
    assert pattern[id(vector)] == OPAQUE       # non-scalar constants stay outside fused functions
    assert pattern[id(f16)] == OPAQUE          # float16 scalars are not inlined (TVM's rule)
    assert pattern[id(t)] == 7
    assert pattern[id(body)] == OPAQUE
    assert graph.extern_ref[graph.node_of(body.value)]  # a let value is a fusion boundary
    assert graph.outputs[graph.node_of(t.fields[0])] == [(graph.node_of(t), INJECTIVE)]


def test_lca_is_fast_on_long_chains_with_a_wide_fanout() -> None:
    """One constant consumed by every node of a 20k chain: each LCA query must stay cheap."""
    n = 20_000
    x = var("x", (2,))
    c = Constant(np.array([1.0, 2.0], dtype=F32))
    y: Expr = x
    for _ in range(n):
        y = op("add", y, c)
    fn = Function([x], y)
    infer_types(fn)
    graph = build_dataflow_graph(fn)
    # consumers in reverse order force the naive walk to climb the whole chain every time
    i = graph.node_of(c)
    graph.outputs[i].reverse()
    tree = PostDominatorTree.build(graph)
    assert tree.parent[i] == graph.node_of(y)
    assert tree.depth[graph.node_of(fn.body.args[0])] == 2


# ---------------------------------------------------------------------------------------------
# TVM's test cases


def test_fuse_simple() -> None:
    x = var("x", (10, 20))
    mod = module([x], op("squeeze", op("exp", op("add", x, const(1.0)))))
    out = fuse(mod)
    assert groups(out) == [("add", "exp", "squeeze")]
    assert wiring(out) == [["x"]]
    (call,) = primitive_calls(out["main"])
    prim = call.op
    assert isinstance(prim, Function)
    assert prim.attrs["Primitive"] == 1
    assert [p.name_hint for p in prim.params] == ["p0"]
    assert prim.params[0].type_annotation == TensorType((10, 20), F32)
    assert prim.ret_type == TensorType((10, 20), F32)
    assert out["main"].body is call


def test_fuse_simple_matches_tvm_expected_function() -> None:
    """The whole result, compared structurally with TVM's `expected()` of test_fuse_simple."""
    x = var("x", (10, 20))
    out = fuse(module([x], op("squeeze", op("exp", op("add", x, const(1.0))))))
    p = var("p", (10, 20))
    prim = Function([p], op("squeeze", op("exp", op("add", p, const(1.0)))), TensorType((10, 20), F32),
                    attrs=Attrs({"Primitive": 1}))
    x2 = var("x", (10, 20))
    assert structural_equal(out["main"], Function([x2], Call(prim, [x2])))


def conv(data: Expr, w: Expr, k: int) -> Call:
    pad = (k - 1) // 2
    return op("nn.conv2d", data, w, kernel_size=[k, k], padding=[pad, pad], channels=16)


def test_conv2d_fuse() -> None:
    dshape = (1, 16, 64, 64)
    x = var("x", dshape)
    w1, w2, w3 = var("w1", (16, 16, 3, 3)), var("w2", (16, 16, 1, 1)), var("w3", (16, 16, 3, 3))
    y = conv(op("add", x, const(1.0)), w1, 3)
    y1 = op("add", const(1.0), y)   # the next post-dominator of the conv2d
    y = op("add", y, y1)
    z2 = conv(y, w2, 1)
    z3 = conv(y, w3, 3)
    out = fuse(module([x, w1, w2, w3], op("add", z2, z3)))
    assert groups(out) == [("add",), ("nn.conv2d", "add", "add"), ("nn.conv2d",), ("nn.conv2d", "add")]
    # f2 is the 3x3 conv (w3); the final add is fused with the 1x1 conv (w2) and takes f2 as p2
    assert wiring(out) == [["x"], ["#0", "w1"], ["#1", "w3"], ["#1", "w2", "#2"]]
    assert [len(c.op.params) for c in primitive_calls(out["main"])] == [1, 2, 2, 3]  # type: ignore[attr-defined]


def test_concatenate() -> None:
    """TVM upsamples the pooled tensor back; `nn.pad` (also injective) restores the shape here."""
    dshape = (1, 16, 64, 64)
    x = var("x", dshape)
    pooled = op("nn.max_pool2d", x, pool_size=[2, 2], strides=[2, 2], padding=[0, 0])
    upsampled = op("nn.pad", pooled, const(0.0), pad_width=[[0, 0], [0, 0], [16, 16], [16, 16]])
    concat = op("concatenate", Tuple([upsampled, x]), axis=1)
    out = fuse(module([x], op("add", concat, const(1.0))))
    assert groups(out) == [("nn.max_pool2d",), ("nn.pad", "tuple", "concatenate", "add")]
    assert wiring(out) == [["x"], ["#0", "x"]]
    # level 0: one function per operator; the tuple feeding concatenate stays outside
    level0 = fuse(module([x], op("add", concat, const(1.0))), opt_level=0)
    assert groups(level0) == [("nn.max_pool2d",), ("nn.pad",), ("concatenate",), ("add",)]


def test_tuple_root() -> None:
    dshape = (1, 16, 64, 64)
    x = var("x", dshape)
    pooled = op("nn.max_pool2d", x, pool_size=[2, 2], strides=[2, 2], padding=[0, 0])
    upsampled = op("nn.pad", pooled, const(0.0), pad_width=[[0, 0], [0, 0], [16, 16], [16, 16]])
    out = fuse(module([x], Tuple([upsampled, x])))
    assert groups(out) == [("nn.max_pool2d",), ("nn.pad",)]
    assert wiring(out) == [["x"], ["#0"]]
    body = out["main"].body
    assert isinstance(body, Tuple) and body.fields[1].name_hint == "x"  # type: ignore[attr-defined]
    assert body.fields[0] is primitive_calls(out["main"])[1]


def test_fuse_myia_regression() -> None:
    """A comparison feeding `if` is fused on its own; the closures in the branches are untouched."""
    x, y = var("x", (), "int64"), var("y", (), "int64")
    then_fn, else_fn = Function([], x), Function([], y)
    cond = If(op("greater", x, y), then_fn, else_fn)
    out = fuse(module([x, y], Call(cond, [])))
    assert groups(out) == [("greater",)]
    assert wiring(out) == [["x", "y"]]
    new_if = out["main"].body.op
    assert isinstance(new_if, If)
    assert new_if.true_branch is then_fn and new_if.false_branch is else_fn


def test_fuse_tuple_get_elemwise() -> None:
    dim = 10
    X, W = var("X", (1, dim)), var("W", (3 * dim, dim))
    split = op("split", op("nn.dense", X, W), indices_or_sections=3, axis=1)
    out_expr = op("add", op("sigmoid", TupleGetItem(split, 0)),
                  op("multiply", op("tanh", TupleGetItem(split, 1)), op("exp", TupleGetItem(split, 2))))
    mod = module([X, W], out_expr)
    out = fuse(mod)
    assert groups(out) == [("nn.dense",),
                           ("split", ".0", "sigmoid", ".1", "tanh", ".2", "exp", "multiply", "add")]
    assert wiring(out) == [["X", "W"], ["#0"]]
    # level 0: every operator alone; the projections of split's tuple stay plain outside
    assert groups(fuse(mod, opt_level=0)) == [("nn.dense",), ("split",), ("sigmoid",), ("tanh",), ("exp",),
                                              ("multiply",), ("add",)]


def test_tuple_get_root() -> None:
    dim = 10
    X, W = var("X", (1, 3 * dim)), var("W", (dim, dim))
    split = op("split", X, indices_or_sections=3, axis=1)
    out = fuse(module([X, W], op("nn.dense", TupleGetItem(split, 0), W)))
    assert groups(out) == [("split", ".0"), ("nn.dense",)]
    assert wiring(out) == [["X"], ["#0", "W"]]
    first = primitive_calls(out["main"])[0].op
    assert first.ret_type == TensorType((1, dim), F32)  # type: ignore[attr-defined]


def test_tuple_intermediate() -> None:
    """Injective producers of a tuple fused into its consumer join it (phase 2): one function."""
    x = var("x", (1, 16, 64, 64))
    inj = op("squeeze", x)
    y1 = op("add", inj, const(1.0))
    tmp = op("add", op("squeeze", inj), const(1.0))
    y2 = op("add", tmp, const(1.0))
    y3 = op("add", inj, const(1.0))
    concat = op("concatenate", Tuple([y1, y2, y3]), axis=1)
    out = fuse(module([x], op("add", op("squeeze", concat), const(1.0))))
    assert groups(out) == [("squeeze", "add", "squeeze", "add", "add", "add", "tuple", "concatenate",
                            "squeeze", "add")]
    assert wiring(out) == [["x"]]
    assert out["main"].body is primitive_calls(out["main"])[0]


def test_tuple_consecutive() -> None:
    x = var("x", (1, 16, 64, 64))

    def intermediate_tuple(v: Expr) -> Expr:
        ys = [op("add", v, const(1.0)) for _ in range(3)]
        return op("add", op("concatenate", Tuple(ys), axis=1), const(1.0))

    concat = op("concatenate", Tuple([intermediate_tuple(x) for _ in range(3)]), axis=1)
    pooled = op("nn.max_pool2d", concat, pool_size=[2, 2], strides=[2, 2], padding=[0, 0])
    out1 = op("add", pooled, const(1.0))
    out2 = op("add", out1, const(1.0))
    out = fuse(module([x], Tuple([out1, out2])))
    inner = ("add", "add", "add", "tuple", "concatenate", "add")
    assert groups(out) == [inner * 3 + ("tuple", "concatenate"), ("nn.max_pool2d", "add"), ("add",)]
    assert wiring(out) == [["x"], ["#0"], ["#1"]]
    assert isinstance(out["main"].body, Tuple)


def test_inception_like() -> None:
    def conv_relu(data: Expr, w: Var) -> Expr:
        return op("nn.relu", conv(data, w, 3))

    x = var("x", (1, 16, 64, 64))
    ws = [var(f"w{i}", (16, 16 if i < 3 else 32, 3, 3)) for i in range(1, 5)]
    in1 = op("concatenate", Tuple([conv_relu(x, ws[0]), conv_relu(x, ws[1])]), axis=1)
    in2 = op("concatenate", Tuple([conv_relu(in1, ws[2]), conv_relu(in1, ws[3])]), axis=1)
    out = fuse(module([x, *ws], in2))
    cr = ("nn.conv2d", "nn.relu")
    assert groups(out) == [cr, cr, ("tuple", "concatenate"), cr, cr, ("tuple", "concatenate")]
    assert wiring(out) == [["x", "w1"], ["x", "w2"], ["#0", "#1"], ["#2", "w3"], ["#2", "w4"], ["#3", "#4"]]


def test_fuse_parallel_injective() -> None:
    """TVM joins the branches with `left_shift`; `subtract` has the same (broadcast) kind."""
    x = var("x", (10, 20))
    y = op("add", x, const(1.0))
    w = op("subtract", op("squeeze", y), op("transpose", y, axes=[0, 1]))
    out = fuse(module([x], w))
    assert groups(out) == [("add", "squeeze", "transpose", "subtract")]
    assert wiring(out) == [["x"]]


def test_immutable() -> None:
    x = var("x", (10, 20))
    body = op("squeeze", op("exp", op("add", x, const(1.0))))
    mod = module([x], body)
    before = mod["main"]
    out = fuse(mod)
    assert mod["main"] is before and before.body is body and out is not mod
    assert groups(out) == [("add", "exp", "squeeze")]


def test_split_through_references_is_well_formed() -> None:
    """`ref(b)` is a boundary: `b`'s projection stays outside; `a` and `c` fuse with the adds."""
    x = var("x", (6, 9))
    y = op("split", x, indices_or_sections=3)
    a, b, c = (TupleGetItem(y, i) for i in range(3))
    out = fuse(module([x], op("add", op("add", a, RefRead(RefCreate(b))), c)))
    assert groups(out) == [("split",), (".0", "add", ".2", "add")]
    split_call, tail = primitive_calls(out["main"])
    assert tail.args[0] is split_call  # both projections share one parameter
    assert len(tail.args) == 2 and isinstance(tail.args[1], RefRead)
    projection = tail.args[1].ref.value  # type: ignore[attr-defined]
    assert isinstance(projection, TupleGetItem) and projection.tuple_value is split_call


def run_chain(n: int, **options: int) -> list[int]:
    x = var("x", (10, 20))
    y: Expr = x
    for _ in range(n):
        y = op("exp", y)
    return [len(g) for g in groups(fuse(module([x], y), **options))]


def test_fuse_max() -> None:
    assert run_chain(300) == [256, 44]
    assert run_chain(20, max_depth=10) == [10, 10]


def test_fuse_max_diamond() -> None:
    def diamond(v: Expr, branch: int) -> Expr:
        a = b = v
        for _ in range(branch):
            a, b = op("exp", a), op("exp", b)
        return op("add", a, b)

    x = var("x", (10, 20))
    y: Expr = x
    for _ in range(3):
        y = diamond(y, 5)
    out = fuse(module([x], y), max_depth=11)
    assert [len(g) for g in groups(out)] == [11, 11, 11]
    assert wiring(out) == [["x"], ["#0"], ["#1"]]
    # without the limit the three diamonds form one group
    assert [len(g) for g in groups(fuse(module([x], y)))] == [33]


def test_fuse_take_with_constant_indices() -> None:
    """A non-scalar constant is an argument of the fused function (TVM without link_params)."""
    x = var("x", (10, 1))
    concat = op("concatenate", Tuple([x, x]), axis=-1)
    indices = Constant(np.array([0], dtype="int64"))
    out = fuse(module([x], op("take", concat, indices)))
    assert groups(out) == [("tuple", "concatenate", "take")]
    assert wiring(out) == [["x", "const"]]
    (call,) = primitive_calls(out["main"])
    assert call.args[1] is indices
    assert call.op.params[1].type_annotation == TensorType((1,), "int64")  # type: ignore[attr-defined]


def test_fuse_bcast_reduce_scalar() -> None:
    x = var("x", (), "int32")
    out = fuse(module([x], op("min", op("less", x, const(10, "int32")))))
    assert groups(out) == [("less", "min")]
    assert wiring(out) == [["x"]]


def test_fuse_softmax() -> None:
    x = var("x", (16, 16))
    out = fuse(module([x], op("cast", op("nn.softmax", x), dtype="float16")))
    assert groups(out) == [("nn.softmax", "cast")]
    assert primitive_calls(out["main"])[0].op.ret_type == TensorType((16, 16), "float16")  # type: ignore


def test_conv_bias_relu_chain_is_one_group() -> None:
    x = var("x", (1, 3, 8, 8))
    w = var("w", (16, 3, 3, 3))
    b = var("b", (16,))
    y = op("nn.relu", op("nn.bias_add", op("nn.conv2d", x, w, padding=[1, 1], channels=16, kernel_size=[3, 3]), b))
    out = fuse(module([x, w, b], op("nn.max_pool2d", y, pool_size=[2, 2], strides=[2, 2])))
    assert groups(out) == [("nn.conv2d", "nn.bias_add", "nn.relu"), ("nn.max_pool2d",)]
    assert wiring(out) == [["x", "w", "b"], ["#0"]]


def test_opt_level_zero_puts_every_operator_alone() -> None:
    x = var("x", (10, 20))
    out = fuse(module([x], op("exp", op("add", x, const(1.0)))), opt_level=0)
    assert groups(out) == [("add",), ("exp",)]
    assert wiring(out) == [["x", "const"], ["#0"]]  # even scalar constants become arguments


def test_let_is_a_boundary_and_nested_functions_are_fused_inside() -> None:
    x = var("x", (4,))
    v = Var("v", None)
    z = var("z", (4,))
    inner = Function([z], op("exp", op("add", z, const(1.0))))
    f = Var("f", None)
    body = Let(v, op("add", x, const(2.0)), Let(f, inner, Call(f, [op("negative", op("exp", v))])))
    out = fuse(module([x], body))
    main = out["main"]
    let1 = main.body
    assert isinstance(let1, Let) and body_ops(let1.value.op) == ("add",)  # type: ignore[attr-defined]
    let2 = let1.body
    assert isinstance(let2, Let) and isinstance(let2.value, Function)
    assert [body_ops(c.op) for c in primitive_calls(let2.value)] == [("add", "exp")]  # type: ignore
    assert isinstance(let2.body, Call) and let2.body.op is let2.var
    assert body_ops(let2.body.args[0].op) == ("exp", "negative")  # type: ignore[attr-defined]


def test_fusing_twice_changes_nothing() -> None:
    x = var("x", (10, 20))
    mod = module([x], op("squeeze", op("exp", op("add", x, const(1.0)))))
    once = fuse(mod)
    twice = fuse(once)
    assert structural_equal(once["main"], twice["main"])


def test_projection_of_an_opaque_ops_tuple_fuses_with_its_consumer() -> None:
    x = var("x", (2, 3))
    bn = op("nn.batch_norm", x, var("g", (3,)), var("b", (3,)), var("m", (3,)), var("v", (3,)))
    mod = module([x, *(v for v in bn.args[1:])], op("exp", TupleGetItem(bn, 0)))  # type: ignore[misc]
    out = fuse(mod)
    assert groups(out) == [("nn.batch_norm",), (".0", "exp")]


def test_large_chain_is_iterative() -> None:
    x = var("x", (4,))
    y: Expr = x
    for _ in range(100_000):
        y = op("exp", y)
    fn = Function([x], y)
    infer_types(fn)
    fn = fuse_function(fn)
    sizes = []
    for c in primitive_calls(fn):
        sizes.append(len(body_ops(c.op)))  # type: ignore[arg-type]
    assert sizes == [256] * 390 + [160]


def test_registered_with_options() -> None:
    cls = get_pass("fuse-ops")
    assert cls is FuseOpsPass
    assert {f.name: f.default for f in cls.options()} == {"max_depth": 256, "opt_level": 2}


def test_bad_options_are_diagnostics() -> None:
    x = var("x", (2,))
    with pytest.raises(DiagnosticError, match="max-depth"):
        FuseOpsPass(max_depth=0).apply(module([x], op("exp", x)))


# ---------------------------------------------------------------------------------------------
# Properties


def naive_post_dominators(graph: DataflowGraph) -> tuple[list[int], list[int]]:
    """TVM's PostDom restated literally: walk the deeper node up one parent at a time."""
    n = len(graph)
    parent, depth, pattern = [-1] * n, [1] * n, [OPAQUE] * n
    for i in range(n - 1, -1, -1):
        if graph.extern_ref[i]:
            continue
        acc, node = ELEMWISE, None
        for k, (consumer, kind) in enumerate(graph.outputs[i]):
            if k == 0:
                node = consumer
            elif node is not None:
                a, b = node, consumer
                while a != b and a is not None and b is not None:
                    if depth[a] < depth[b]:
                        acc, b = max(acc, pattern[b]), (parent[b] if parent[b] >= 0 else None)
                    elif depth[b] < depth[a]:
                        acc, a = max(acc, pattern[a]), (parent[a] if parent[a] >= 0 else None)
                    else:
                        acc = max(acc, pattern[a], pattern[b])
                        a = parent[a] if parent[a] >= 0 else None
                        b = parent[b] if parent[b] >= 0 else None
                node = a if a == b else None
            acc = max(acc, kind)
        if node is not None:
            parent[i], depth[i], pattern[i] = node, depth[node] + 1, acc
    return parent, [pattern[i] if parent[i] >= 0 else -1 for i in range(n)]


@st.composite
def forward_graphs(draw: st.DrawFn) -> DataflowGraph:
    n = draw(st.integers(1, 60))
    graph = DataflowGraph()
    kinds = st.sampled_from([ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_ELEMWISE_FUSABLE, OPAQUE])
    for i in range(n):
        graph.nodes.append(Var(f"v{i}"))
        graph.pattern.append(draw(kinds))
        graph.extern_ref.append(draw(st.booleans()) and draw(st.booleans()))
        later = draw(st.lists(st.integers(i + 1, n - 1), max_size=4)) if i + 1 < n else []
        graph.outputs.append([(c, draw(kinds)) for c in later])
    return graph


@given(forward_graphs())
def test_post_dominator_tree_matches_tvm_walk(graph: DataflowGraph) -> None:
    tree = PostDominatorTree.build(graph)
    parent, pattern = naive_post_dominators(graph)
    assert tree.parent == parent
    assert [tree.pattern[i] if tree.parent[i] >= 0 else -1 for i in range(len(graph))] == pattern


@st.composite
def dataflow_programs(draw: st.DrawFn) -> tuple[IRModule, list[np.ndarray]]:
    """Random DAGs of elementwise, broadcast, injective, reduction, tuple and anchor operators."""
    params = [var("x", (2, 3)), var("y", (2, 3)), var("b", (3,))]
    nodes: list[Expr] = list(params)
    shapes: list[tuple[int, ...]] = [(2, 3), (2, 3), (3,)]

    def pick(shape: tuple[int, ...] | None = None) -> int:
        choices = [i for i, s in enumerate(shapes) if shape is None or s == shape]
        return draw(st.sampled_from(choices))

    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["unary", "binary", "bias", "scalar", "transpose", "sum", "concat",
                                     "split", "softmax", "dense"]))
        i = pick()
        x, s = nodes[i], shapes[i]
        if kind == "unary":
            new, shape = op(draw(st.sampled_from(["tanh", "negative", "sigmoid", "abs"])), x), s
        elif kind == "binary":
            j = pick(s)
            new, shape = op(draw(st.sampled_from(["add", "multiply", "subtract", "maximum"])), x, nodes[j]), s
        elif kind == "bias" and len(s) == 2 and s[1] == 3:
            new, shape = op("add", x, nodes[2]), s
        elif kind == "scalar":
            new, shape = op("multiply", x, const(0.5)), s
        elif kind == "transpose" and len(s) == 2:
            new, shape = op("transpose", x), (s[1], s[0])
        elif kind == "sum" and len(s) == 2:
            new, shape = op("sum", x, axis=[1], keepdims=True), (s[0], 1)
        elif kind == "concat":
            j = pick(s)
            new, shape = op("concatenate", Tuple([x, nodes[j]]), axis=0), (2 * s[0], *s[1:])
        elif kind == "split" and len(s) == 2 and s[1] % 2 == 0:
            parts = op("split", x, indices_or_sections=2, axis=1)
            new, shape = op("add", TupleGetItem(parts, 0), TupleGetItem(parts, 1)), (s[0], s[1] // 2)
        elif kind == "softmax":
            new, shape = op("nn.softmax", x), s
        elif kind == "dense" and len(s) == 2 and s[1] == 3:
            new, shape = op("nn.dense", x, params[1]), (s[0], 2)
        else:
            continue
        nodes.append(new)
        shapes.append(shape)
    outs = draw(st.lists(st.integers(3, len(nodes) - 1), min_size=1, max_size=2, unique=True)) \
        if len(nodes) > 3 else [0]
    body = nodes[outs[0]] if len(outs) == 1 else Tuple([nodes[k] for k in outs])
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    inputs = [rng.standard_normal(p.type_annotation.shape).astype(F32) for p in params]  # type: ignore
    return module(params, body), inputs


def flat(value: object) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [a for v in value for a in flat(v)]
    return [np.asarray(value)]


@given(dataflow_programs(), st.sampled_from([1, 2, 3, 5, 256]), st.sampled_from([0, 2]))
def test_fusion_preserves_results_and_limits_groups(program: tuple[IRModule, list[np.ndarray]],
                                                    max_depth: int, opt_level: int) -> None:
    mod, inputs = program
    expected = flat(run_function(mod, inputs))
    out = fuse(mod, max_depth=max_depth, opt_level=opt_level)
    got = flat(run_function(out, inputs))
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for call in primitive_calls(out["main"]):
        ops = [n for n in post_order(call.op.body) if isinstance(n, (Call, Tuple, TupleGetItem))]  # type: ignore
        assert len(ops) <= (1 if opt_level == 0 else max_depth)
        # fused bodies hold only dataflow: no let, if, match, references or nested functions
        assert all(isinstance(n, (Call, Tuple, TupleGetItem, Var, Constant, Op)) for n in post_order(call.op.body))  # type: ignore
        # only its own parameters are free in a fused function
        assert free_vars(call.op) == []  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Real programs

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "../shared/corpus/tvm-relay"


def corpus_programs() -> list[Path]:
    return sorted(CORPUS.glob("*.relay")) if CORPUS.is_dir() else []


@pytest.mark.skipif(not corpus_programs(), reason="the TVM Relay corpus is not present")
def test_corpus_programs_fuse_and_round_trip() -> None:
    """Every corpus program that type-checks still does after fusion, and prints/re-parses stably."""
    fused = 0
    for path in corpus_programs():
        try:
            mod = parse_module(path.read_text(), str(path))
            infer_types(mod)
        except DiagnosticError:
            continue  # unregistered operators or deliberately ill-typed programs
        out = fuse(mod)
        text = print_module(out)
        again = parse_module(text, f"{path.name}.fused")
        infer_types(again)
        assert print_module(again) == text, path.name
        for fn in out.functions.values():
            for node in post_order(fn):
                if isinstance(node, Function) and node.is_primitive and "Compiler" not in node.attrs:
                    assert not any(isinstance(n, (Let, If, Match, RefCreate, RefRead, RefWrite))
                                   for n in post_order(node.body)), path.name
        fused += 1
    assert fused >= 100  # 105 of the corpus programs type-check with the registered operators


@pytest.mark.parametrize("name", ["mlp.relay", "resnet_block.relay"])
def test_samples_compute_the_same_after_fusion(name: str) -> None:
    mod = parse_module((REPO / "samples" / name).read_text(), name)
    infer_types(mod)
    rng = np.random.default_rng(0)
    inputs = []
    for p in mod["main"].params:
        t = p.checked_type
        assert isinstance(t, TensorType)
        inputs.append(rng.standard_normal(t.shape).astype(t.dtype))  # type: ignore[arg-type]
    out = fuse(mod)
    assert primitive_calls(out["main"])
    for a, b in zip(flat(run_function(out, inputs)), flat(run_function(mod, inputs))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_group_without_a_call_is_not_primitive() -> None:
    """TVM marks a fused function `Primitive=0` when its body calls no operator."""
    x, y = var("x", (2,)), var("y", (2,))
    out = fuse(module([x, y], TupleGetItem(Tuple([x, y]), 0)))
    body = out["main"].body
    assert isinstance(body, Call) and isinstance(body.op, Function)
    assert body.op.attrs["Primitive"] == 0
    assert body_ops(body.op) == ("tuple", ".0")
    assert [a.name_hint for a in body.args] == ["x", "y"]  # type: ignore[attr-defined]
