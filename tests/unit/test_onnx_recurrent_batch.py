"""ONNX RNN, GRU and LSTM whose X is (T, "N", input): a static sequence over a symbolic batch
imports with `?` batch, and one compiled module serves every batch size (docs/onnx.md; native
code copies a step's row of the projection and of the stacked outputs, docs/native-relay.md
"Dynamic shapes"). Checked against onnxruntime in the interpreter and natively."""

from __future__ import annotations

import numpy as np
import pytest

import irtool
from irtool.core.diagnostics import DiagnosticError
from irtool.eval.interpreter import flatten_value, run_function
from irtool.ir.types import Any, TensorType

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from irtool.frontend.onnx import ImportFailure, import_model  # noqa: E402
from support.heap import heap_in_use  # noqa: E402
from support.onnx_cases import assert_outputs, onnxruntime_outputs  # noqa: E402

STEPS, WIDTH, HIDDEN = 5, 3, 8
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
RNG = np.random.default_rng(15)


def _model(op: str, direction: str = "forward", steps: int | str = STEPS) -> onnx.ModelProto:
    """One layer with its weights as initializers and X of a symbolic batch axis "N"."""
    d = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    f = np.float32
    inits = {"w": RNG.standard_normal((d, g * HIDDEN, WIDTH)).astype(f),
             "r": RNG.standard_normal((d, g * HIDDEN, HIDDEN)).astype(f) * 0.3,
             "b": RNG.standard_normal((d, 2 * g * HIDDEN)).astype(f)}
    outputs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    node = helper.make_node(op, ["x", "w", "r", "b"], outputs, hidden_size=HIDDEN, direction=direction)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, "N", WIDTH])],
                              [helper.make_empty_tensor_value_info(o) for o in outputs],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def _matches_onnxruntime_at_several_batches(model, mod, native) -> None:
    """The interpreter and one native module against onnxruntime below, at and past a 32-row tile."""
    for batch in (1, 3, 33):
        x = RNG.standard_normal((STEPS, batch, WIDTH)).astype(np.float32)
        want = onnxruntime_outputs(model, [x])
        assert_outputs(list(flatten_value(run_function(mod, {"x": x}))), want, 1e-5, 1e-5)
        assert_outputs(list(flatten_value(native(x))), want, 1e-5, 1e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_one_module_serves_every_batch_size(op: str) -> None:
    model = _model(op)
    mod = import_model(model, embed_params=True).module
    x_type = mod.functions["main"].params[0].type_annotation
    assert isinstance(x_type, TensorType) and isinstance(x_type.shape[1], Any)
    native = irtool.build(mod)
    _matches_onnxruntime_at_several_batches(model, mod, native)


def test_2000_calls_release_every_row_copy() -> None:
    """Each step's row and output copy is a new box; the loop releases the one it replaces."""
    native = irtool.build(import_model(_model("LSTM"), embed_params=True).module)
    x = RNG.standard_normal((STEPS, 3, WIDTH)).astype(np.float32)
    native(x)
    before = heap_in_use()
    for _ in range(2_000):
        out = native(x)
    del out
    # Each call makes 2·T + 1 boxes of at least 48 bytes: one leaked per call would be 96 KB.
    assert heap_in_use() - before < 32 * 1024


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_an_empty_batch_gives_empty_outputs(op: str) -> None:
    """onnxruntime runs an empty batch for RNN only (its GRU and LSTM abort the process): for
    those the outputs' shapes are ONNX's, (T, 1, 0, H) and (1, 0, H), with nothing in them."""
    model = _model(op)
    mod = import_model(model, embed_params=True).module
    x = np.zeros((STEPS, 0, WIDTH), np.float32)
    want = (onnxruntime_outputs(model, [x]) if op == "RNN" else
            [np.zeros((STEPS, 1, 0, HIDDEN), np.float32)] + [np.zeros((1, 0, HIDDEN), np.float32)] * (2 if op == "LSTM" else 1))
    assert_outputs(list(flatten_value(run_function(mod, {"x": x}))), want, 0, 0)
    assert_outputs(list(flatten_value(irtool.build(mod)(x))), want, 0, 0)


@pytest.mark.parametrize("direction", ["reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_reverse_and_bidirectional_layers_run_natively(op: str, direction: str) -> None:
    """The reverse direction reads X's steps backwards and puts its outputs back in order (a
    `take` of all T rows of a box, copied slab by slab); a bidirectional layer joins both
    directions on the direction axis, before the batch's `?` (a `concatenate` copying each
    direction's slab per step). docs/native-relay.md, "Rows of a static first axis"."""
    model = _model(op, direction)
    mod = import_model(model, embed_params=True).module
    native = irtool.build(mod)
    _matches_onnxruntime_at_several_batches(model, mod, native)
    d = 2 if direction == "bidirectional" else 1
    empty = list(flatten_value(native(np.zeros((STEPS, 0, WIDTH), np.float32))))
    assert [e.shape for e in empty] == [(STEPS, d, 0, HIDDEN)] + [(d, 0, HIDDEN)] * (len(empty) - 1)


def test_a_symbolic_sequence_length_is_a_named_error() -> None:
    with pytest.raises(ImportFailure, match=r"LSTM \(opset 14\): it needs a static sequence length .*graph input 'x' "
                                            r"has symbolic axes 0 'T', 1 'N'"):
        import_model(_model("LSTM", steps="T"))
