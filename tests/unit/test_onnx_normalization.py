"""Issue 14's normalisation operators: LayerNormalization, GroupNormalization, RMSNormalization,
MeanVarianceNormalization, LpNormalization and LpPool.

Converters against onnxruntime through the interpreter and, in one compiled graph, natively;
the type relations' errors; and the shape of the fused layer-norm kernel (two passes over a row
for the statistics, one for the result; never a reduction per output element).
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402
from support.onnx_native import native_matches_onnxruntime  # noqa: E402
from test_onnx_ops import build, check  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.ir.tir import BufferStore, For, PrimFunc  # noqa: E402
from irtool.ir.types import TensorType  # noqa: E402
from irtool.lower.module import lower_module  # noqa: E402
from irtool.ops import TypeRelError, get_op  # noqa: E402
from irtool.passes import run  # noqa: E402
from irtool.syntax.parser import parse_module  # noqa: E402

RNG = np.random.default_rng(23)
N = helper.make_node


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape,axis", [((3, 8), -1), ((2, 3, 4), 1), ((2, 3, 4), -2), ((2, 3), 0)])
def test_layer_normalization_axes(shape: tuple, axis: int) -> None:
    trailing = shape[axis % len(shape):]
    check([N("LayerNormalization", ["x", "g", "b"], ["y"], axis=axis, epsilon=1e-3)], {"x": rand(*shape)},
          {"g": rand(*trailing), "b": rand(*trailing)}, opset=17)


def test_layer_normalization_without_bias_and_with_statistics() -> None:
    check([N("LayerNormalization", ["x", "g"], ["y", "mean", "inv_std"], axis=1)], {"x": rand(2, 3, 5)},
          {"g": rand(3, 5)}, outputs=("y", "mean", "inv_std"), opset=17)


def test_layer_normalization_of_float16_in_float32() -> None:
    """stash_type 1: float16 data is normalised in float32, scaled in float16 (no bias: adding
    one cancels digits, and float16 keeps too few for a relative comparison)."""
    x = rand(4, 16).astype(np.float16)
    check([N("LayerNormalization", ["x", "g"], ["y"])], {"x": x}, {"g": rand(16).astype(np.float16)},
          opset=17, rtol=2e-3)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization_scale_per_group_then_per_channel(opset: int) -> None:
    """Opset 18 gives scale and bias per group, opset 21 per channel."""
    width = 2 if opset == 18 else 6
    check([N("GroupNormalization", ["x", "g", "b"], ["y"], num_groups=2, epsilon=1e-4)], {"x": rand(2, 6, 3, 2)},
          {"g": rand(width), "b": rand(width)}, opset=opset)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization(axis: int) -> None:
    x = rand(2, 3, 4)
    check([N("RMSNormalization", ["x", "g"], ["y"], axis=axis, epsilon=1e-4)], {"x": x},
          {"g": rand(*x.shape[axis % 3:])}, opset=23)


@pytest.mark.parametrize("axes", [None, [1], [0, 1, 2, 3]])
def test_mean_variance_normalization(axes: list | None) -> None:
    attrs = {} if axes is None else {"axes": axes}
    check([N("MeanVarianceNormalization", ["x"], ["y"], **attrs)], {"x": rand(2, 3, 4, 2)}, opset=13, rtol=1e-4)


@pytest.mark.parametrize("p,axis", [(2, -1), (1, 0), (2, 1)])
def test_lp_normalization_with_a_zero_row(p: int, axis: int) -> None:
    x = rand(3, 4)
    x[1, :] = 0
    x[:, 2] = 0
    check([N("LpNormalization", ["x"], ["y"], p=p, axis=axis)], {"x": x}, opset=11)


@pytest.mark.parametrize("attrs,shape", [
    (dict(kernel_shape=[3, 3]), (1, 2, 5, 6)),
    (dict(kernel_shape=[2, 3], p=3, pads=[1, 0, 1, 2], strides=[2, 1]), (1, 2, 5, 6)),
    (dict(kernel_shape=[3], p=1, auto_pad="SAME_UPPER"), (2, 3, 7)),
    (dict(kernel_shape=[2, 2, 2], strides=[1, 2, 1]), (1, 1, 3, 4, 3)),
])
def test_lp_pool(attrs: dict, shape: tuple) -> None:
    check([N("LpPool", ["x"], ["y"], **attrs)], {"x": rand(*shape)}, opset=11, rtol=1e-4)


def test_lp_pool_ceil_mode_is_refused_with_its_reason() -> None:
    model = build([N("LpPool", ["x"], ["y"], kernel_shape=[2, 2], ceil_mode=1)], {"x": rand(1, 1, 5, 5)}, opset=18)
    with pytest.raises(DiagnosticError, match=r"node #0: unsupported: LpPool \(opset 18\): ceil_mode \(its last windows are shorter"):
        import_model(model)


def test_normalization_family_natively_matches_onnxruntime() -> None:
    x = rand(2, 4, 3, 5)
    nodes = [N("Add", ["x", "x"], ["s"]),
             N("LayerNormalization", ["s", "g5", "b5"], ["ln"], epsilon=1e-5),
             N("LayerNormalization", ["x", "g15"], ["ln2"], axis=2),
             N("GroupNormalization", ["x", "g4", "b4"], ["gn"], num_groups=2),
             N("RMSNormalization", ["x", "g5"], ["rms"]),
             N("MeanVarianceNormalization", ["x"], ["mvn"]),
             N("LpNormalization", ["x"], ["lp"], p=1, axis=1),
             N("LpPool", ["x"], ["pool"], kernel_shape=[2, 2], pads=[1, 1, 0, 0])]
    inits = {"g5": rand(5), "b5": rand(5), "g15": rand(3, 5), "g4": rand(4), "b4": rand(4)}
    model = build(nodes, {"x": x}, inits, outputs=("ln", "ln2", "gn", "rms", "mvn", "lp", "pool"), opset=23)
    native_matches_onnxruntime(model, {"x": x}, rtol=1e-4)


# --------------------------------------------------------------------- the layer-norm kernel

LAYER_NORM = """#[version = "0.0.5"]
def @main(%x: Tensor[(8, 768), float32], %g: Tensor[(768), float32], %b: Tensor[(768), float32]) {
  nn.relu(nn.layer_norm(%x, %g, %b))
}"""


def _stores(func: PrimFunc) -> dict[str, list[list[int]]]:
    """Buffer name -> the extents of the loops around each store to it, outermost first."""
    found: dict[str, list[list[int]]] = {}
    stack: list[tuple[object, list[int]]] = [(func.body, [])]
    while stack:
        node, loops = stack.pop()
        if isinstance(node, BufferStore):
            found.setdefault(node.buffer.name, []).append(loops)
            continue
        if isinstance(node, For):
            stack.append((node.body, loops + [node.end.value]))  # type: ignore[attr-defined]
            continue
        for attr in ("body", "then_body", "else_body"):
            child = getattr(node, attr, None)
            if child is not None:
                stack.append((child, loops))
        for child in getattr(node, "stmts", ()):
            stack.append((child, loops))
    return found


def test_fused_layer_norm_reduces_each_row_in_two_passes() -> None:
    """One kernel with the activation fused: the mean and 1/sqrt(var + eps) are stages with
    one entry per row, each summed over the row once (in 8 lanes: 96 steps), and the result
    is one elementwise nest over (8, 768) with no loop inside it."""
    low = lower_module(run(parse_module(LAYER_NORM), "fuse-ops"))
    (kernel,) = [f for f in low.functions.values() if isinstance(f, PrimFunc)]
    stores = _stores(kernel)
    assert stores["out"] == [[8, 768]]
    for stage in ("mean", "inv_std"):
        assert stores[stage] == [[8]]
        lanes = [loops for name, where in stores.items() if name.startswith(f"{stage}_acc") for loops in where]
        assert sorted(map(tuple, lanes)).count((8, 96)) == 8  # eight partial sums, 96 steps each
    assert sum(1 for where in stores.values() for loops in where if 768 in loops or 96 in loops) == 1 + 2 * 8


@pytest.mark.parametrize("op,types,attrs,message", [
    ("nn.layer_norm", [TensorType((3, 4), "float32"), TensorType((3,), "float32"), TensorType((4,), "float32")],
     {}, "gamma must be a float32 vector of the 4 entries"),
    ("nn.layer_norm", [TensorType((3, 4), "int32"), TensorType((4,), "int32"), TensorType((4,), "int32")],
     {}, "floating-point"),
    ("nn.group_norm", [TensorType((2, 6, 3), "float32"), TensorType((6,), "float32"), TensorType((6,), "float32")],
     {"num_groups": 4}, "do not split into 4 groups"),
])
def test_type_relation_errors(op: str, types: list, attrs: dict, message: str) -> None:
    opdef = get_op(op)
    assert opdef is not None
    with pytest.raises(TypeRelError, match=message):
        opdef.type_rel(types, opdef.full_attrs(opdef.normalize_attrs(attrs)))
