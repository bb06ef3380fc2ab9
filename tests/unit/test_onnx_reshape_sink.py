"""Elementwise operators after a MatMul of a 3-d activation are imported before the reshape
that puts the product's rows back into their batch axes, so that the product's kernel computes
them in its epilogue (onnx_values.Builder.call); operands that do not broadcast along the last
axis alone keep the operator after the reshape."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402
from support.onnx_graphs import build, check  # noqa: E402

from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.ir.expr import Call  # noqa: E402
from irtool.ir.tir import PrimFunc  # noqa: E402
from irtool.passes import run  # noqa: E402

N = helper.make_node
RNG = np.random.default_rng(11)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def kernels(nodes: list, inputs: dict[str, np.ndarray], inits: dict[str, np.ndarray], opset: int = 20) -> list[str]:
    """The kernels of the lowered model but the weight's transpose (computed once, in `_init`)."""
    lowered = run(import_model(build(nodes, inputs, inits, opset=opset), embed_params=True).module,
                  "simplify-inference,alter-layout,fuse-ops,lower")
    return sorted(name for name, f in lowered.functions.items()
                  if isinstance(f, PrimFunc) and name != "fused_transpose")


MLP = [N("MatMul", ["x", "w"], ["m"]), N("Add", ["m", "b"], ["a"]), N("Gelu", ["a"], ["g"]),
       N("Add", ["g", "r"], ["y"])]


def test_bias_activation_and_residual_join_the_product_kernel() -> None:
    """MatMul (1x6x5x8 · 8x16) + bias + Gelu + a residual of the whole shape: one dense kernel."""
    inputs = {"x": rand(1, 6, 5, 8), "r": rand(1, 6, 5, 16)}
    inits = {"w": rand(8, 16), "b": rand(16)}
    names = kernels(MLP, inputs, inits)
    assert len(names) == 1 and names[0].startswith("fused_nn_dense_add_multiply"), names
    check(MLP, inputs, inits, opset=20, native=True, rtol=2e-5)


@pytest.mark.parametrize("bias_shape", [(1, 1, 16), (16,), (1,), ()])
def test_operands_broadcast_along_the_last_axis(bias_shape: tuple[int, ...]) -> None:
    nodes = [N("MatMul", ["x", "w"], ["m"]), N("Mul", ["m", "s"], ["y"])]
    inputs, inits = {"x": rand(2, 3, 8)}, {"w": rand(8, 16), "s": rand(*bias_shape)}
    assert kernels(nodes, inputs, inits) == ["fused_nn_dense_multiply"]
    check(nodes, inputs, inits, native=True)


@pytest.mark.parametrize("other_shape", [(2, 1, 16), (1, 3, 1), (1, 2, 3, 16)])
def test_other_broadcasts_stay_after_the_reshape(other_shape: tuple[int, ...]) -> None:
    """An operand along a leading axis, or one that broadcasts the product to more axes."""
    nodes = [N("MatMul", ["x", "w"], ["m"]), N("Add", ["m", "o"], ["y"])]
    inputs, inits = {"x": rand(2, 3, 8)}, {"w": rand(8, 16), "o": rand(*other_shape)}
    assert "fused_nn_dense" in kernels(nodes, inputs, inits)
    check(nodes, inputs, inits, native=True)


def test_a_reshape_that_moves_the_last_axis_is_not_crossed() -> None:
    """Reshape 2x3x8 -> 2x24 puts a row's elements elsewhere: the bias is added after it."""
    nodes = [N("Reshape", ["x", "shape"], ["f"]), N("Add", ["f", "b"], ["y"])]
    inputs, inits = {"x": rand(2, 3, 8)}, {"shape": np.array([2, 24], np.int64), "b": rand(24)}
    check(nodes, inputs, inits, native=True)
    body = import_model(build(nodes, inputs, inits), embed_params=True).module["main"].body
    assert isinstance(body, Call) and body.op.name == "add"
    assert isinstance(body.args[0], Call) and body.args[0].op.name == "reshape"
