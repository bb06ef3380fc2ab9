"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (irtool/frontend/onnx_ops/loss.py)
against the ONNX node cases' expected outputs and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from support.onnx_cases import (assert_outputs, check_node_case, node_case_failures, node_cases,  # noqa: E402
                                onnxruntime_outputs, run_irtool)

RNG = np.random.default_rng(5)


def _cases() -> dict:
    return node_cases("negativeloglikelihoodloss", "softmax_cross_entropy_loss")


def _names() -> list[str]:
    """The cases whose graphs use a loss operator: both operators' own cases, and the expanded
    SoftmaxCrossEntropyLoss cases (LogSoftmax, then NegativeLogLikelihoodLoss)."""
    return sorted(name for name, c in _cases().items()
                  if any(n.op_type.endswith("Loss") for n in c.model.graph.node))


def test_every_loss_node_case_through_the_interpreter() -> None:
    names = _names()
    assert len(names) == 86
    failures = node_case_failures(_cases(), names)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", [
    "test_nllloss_NCd1d2d3_sum_weight_high_ii",          # an ignored target outside [0, C)
    "test_nllloss_NCd1d2_with_weight_reduction_mean",
    "test_sce_mean_weight_ii_4d_log_prob",
    "test_sce_NCd1d2d3_none_no_weight_negative_ii_log_prob",
])
def test_loss_node_case_natively(name: str) -> None:
    check_node_case(_cases()[name], native=True)


def _model(op: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...] = ("y",), **attrs: object):
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), list(outputs), **attrs)], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_mean_over_ignored_targets_divides_by_the_counted_ones() -> None:
    """ignore_index=-1 without weights: the mean is over the targets that count, as the
    specification and onnxruntime have it (the reference implementation divides by all)."""
    x = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    t = np.array([[0, -1], [2, 1], [-1, -1], [1, 0]], np.int64)
    model = _model("NegativeLogLikelihoodLoss", {"x": x, "t": t}, ignore_index=-1)
    want = onnxruntime_outputs(model, [x, t])
    np.testing.assert_allclose(want[0], -np.mean([x[0, 0, 0], x[1, 2, 0], x[1, 1, 1], x[3, 1, 0], x[3, 0, 1]]),
                               rtol=1e-5)
    assert_outputs(run_irtool(model, [x, t]), want, 1e-6, 1e-7)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_softmax_cross_entropy_matches_onnxruntime(reduction: str) -> None:
    x, w = RNG.standard_normal((3, 6, 4, 2)).astype(np.float32), RNG.random(6).astype(np.float32)
    t = RNG.integers(0, 6, (3, 4, 2)).astype(np.int64)
    t[0, 1, 1] = t[2, 3, 0] = -100            # PyTorch's ignore_index
    model = _model("SoftmaxCrossEntropyLoss", {"x": x, "t": t, "w": w}, ("y", "log_prob"), reduction=reduction,
                   ignore_index=-100)
    want = onnxruntime_outputs(model, [x, t, w])
    for native in (False, True):
        assert_outputs(run_irtool(model, [x, t, w], native), want, 1e-5, 1e-6)


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("NegativeLogLikelihoodLoss", {"x": (3, 5), "t": (4,)}, {}, "scores of shape"),
    ("NegativeLogLikelihoodLoss", {"x": (3, 5), "t": (3,), "w": (4,)}, {}, "a weight of type"),
    ("SoftmaxCrossEntropyLoss", {"x": (3, 5), "t": (3,)}, {"reduction": "max"}, "reduction 'max'"),
    ("NegativeLogLikelihoodLoss", {"x": (2, 0), "t": (2,)}, {}, "no classes"),
])
def test_inconsistent_losses_are_refused(op: str, inputs: dict, attrs: dict, message: str) -> None:
    arrays = {n: (np.zeros(s, np.int64) if n == "t" else np.zeros(s, np.float32)) for n, s in inputs.items()}
    with pytest.raises(DiagnosticError, match=message) as info:
        import_model(_model(op, arrays, **attrs))
    assert f"node #0: unsupported: {op} (opset " in str(info.value)
