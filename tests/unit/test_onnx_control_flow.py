"""RNN, GRU, LSTM, If, Loop and Scan (irtool/frontend/onnx_ops/recurrent.py, control.py, loops.py)
against the ONNX node cases' expected outputs and onnxruntime, through the interpreter and
native code."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.ir.expr import Function, Let  # noqa: E402
from irtool.ir.visitor import post_order  # noqa: E402
from support.onnx_graphs import build  # noqa: E402
from support.onnx_cases import assert_outputs, check_node_case, node_cases, onnxruntime_outputs, run_irtool  # noqa: E402

RNG = np.random.default_rng(15)
CASES = (
    *(f"test_gru_{s}" for s in ("defaults", "with_initial_bias", "seq_length", "batchwise", "reverse", "bidirectional")),
    *(f"test_lstm_{s}" for s in ("defaults", "with_initial_bias", "with_peepholes", "batchwise", "reverse",
                                 "bidirectional")),
    "test_rnn_seq_length",
    *(f"test_simple_rnn_{s}" for s in ("defaults", "with_initial_bias", "batchwise", "reverse", "bidirectional")),
    "test_scan_sum", "test_scan9_sum", "test_scan9_multi_state", "test_scan9_scalar", "test_if", "test_loop11",
)


def _cases() -> dict:
    return node_cases("gru", "lstm", "rnn", "scan", "if_", "loop")


def _through_backend(case: object, native: bool) -> None:
    """The case through irtool's ONNX backend, which binds test_loop11's trip count and condition
    (graph inputs) as constants when the import asks for them."""
    from irtool.frontend.onnx_backend import InterpreterBackend, NativeBackend
    rep = (NativeBackend if native else InterpreterBackend).prepare(case.model)  # type: ignore[attr-defined]
    for inputs, outputs in case.data_sets:  # type: ignore[attr-defined]
        assert_outputs(list(rep.run(list(inputs))), outputs, case.rtol, case.atol)  # type: ignore[attr-defined]


def test_node_cases_through_the_interpreter() -> None:
    failures = []
    for name in CASES:
        try:
            _through_backend(_cases()[name], native=False)
        except AssertionError as exc:
            failures.append(f"{name}: {str(exc)[:200]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name,message", [("test_if_seq", r"SequenceConstruct\): .*sequences are out of scope"),
                                          ("test_if_opt", r"Optional\): .*optional values are out of scope")])
def test_branches_of_sequences_are_refused(name: str, message: str) -> None:
    with pytest.raises(DiagnosticError, match=rf"unsupported: If \(opset \d+\): its \w+ node #\d+ \({message}"):
        check_node_case(_cases()[name])


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _matches_onnxruntime(model: onnx.ModelProto, inputs: dict[str, np.ndarray], native: bool,
                         tol: float = 1e-5) -> None:
    want = onnxruntime_outputs(model, list(inputs.values()))
    for backend in (False, True) if native else (False,):
        assert_outputs(run_irtool(model, list(inputs.values()), backend), want, tol, tol)


def _recurrent(op: str, gates: int, directions: int, attrs: dict, peepholes: bool = False,
               lengths: list[int] | None = None) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One RNN/GRU/LSTM node with every optional input (seq_lens when given), weights as initializers."""
    steps, batch, width, hidden = 4, 3, 2, 5
    inputs = {"x": _f32(steps, batch, width), "h0": _f32(directions, batch, hidden)}
    inits = {"w": _f32(directions, gates * hidden, width), "r": _f32(directions, gates * hidden, hidden),
             "b": _f32(directions, 2 * gates * hidden)}
    names = ["x", "w", "r", "b", "", "h0"]
    if lengths is not None:
        inputs["lens"] = np.array(lengths, np.int32)
        names[4] = "lens"
    outputs = ["y", "yh"]
    if op == "LSTM":
        inputs["c0"] = _f32(directions, batch, hidden)
        names.append("c0")
        outputs.append("yc")
        if peepholes:
            inits["p"] = _f32(directions, 3 * hidden)
            names.append("p")
    node = helper.make_node(op, names, outputs, hidden_size=hidden, **attrs)
    return build([node], inputs, inits, tuple(outputs), opset=17), inputs


@pytest.mark.parametrize("op,gates,attrs,peepholes,lengths", [
    ("LSTM", 4, {"direction": "bidirectional"}, True, [4, 1, 3]),
    ("LSTM", 4, {"direction": "reverse", "clip": 0.5}, False, None),
    ("GRU", 3, {"direction": "bidirectional", "linear_before_reset": 1}, False, [2, 4, 1]),
    ("GRU", 3, {"direction": "reverse", "activations": ["HardSigmoid", "Relu"],
                "activation_alpha": [0.3], "activation_beta": [0.4]}, False, None),
    ("RNN", 1, {"direction": "bidirectional", "activations": ["Relu", "Tanh"]}, False, [3, 3, 2]),
    ("RNN", 1, {"activations": ["LeakyRelu"], "activation_alpha": [0.2]}, False, None),
])
def test_recurrent_layers_match_onnxruntime(op: str, gates: int, attrs: dict, peepholes: bool,
                                            lengths: list[int] | None) -> None:
    """Directions, initial states, biases, peepholes, clipping, per-entry sequence lengths (entries
    past their length keep their state and write zeros), and non-default activations."""
    model, inputs = _recurrent(op, gates, 2 if attrs.get("direction") == "bidirectional" else 1, attrs,
                               peepholes, lengths)
    _matches_onnxruntime(model, inputs, native=peepholes)


def test_a_recurrent_layer_is_one_loop_over_time() -> None:
    """The time steps are iterations of one recursive closure (per direction), not unrolled: the
    module has one function literal, bound by a `let` to a variable it calls."""
    model, _ = _recurrent("GRU", 3, 1, {}, lengths=None)
    body = import_model(model).module["main"].body
    loops = [n for n in post_order(body) if isinstance(n, Let) and isinstance(n.value, Function)]
    assert len(loops) == 1 and [n for n in post_order(body) if isinstance(n, Function)] == [loops[0].value]
    assert any(n is loops[0].var for n in post_order(loops[0].value.body))


def _graph(nodes: list, inputs: list[tuple[str, int, list]], outputs: list[str], name: str = "body") -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                             [helper.make_empty_tensor_value_info(o) for o in outputs])


def _if_model() -> onnx.ModelProto:
    """If whose branches compute from outer tensors (x and the weight w) read by name."""
    then = _graph([helper.make_node("MatMul", ["x", "w"], ["t"])], [], ["t"], "then")
    other = _graph([helper.make_node("Sub", ["x", "x2"], ["e"])], [], ["e"], "else")
    nodes = [helper.make_node("Mul", ["x", "x"], ["x2"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    return build(nodes, {"c": np.array(True), "x": _f32(3, 3)}, {"w": _f32(3, 3)}, opset=17)


def test_if_with_a_run_time_condition_matches_onnxruntime() -> None:
    import irtool
    model = _if_model()
    x = _f32(3, 3)
    compiled = irtool.build(import_model(model, embed_params=True).module)
    for cond in (np.array(True), np.array(False)):
        want = onnxruntime_outputs(model, [cond, x])
        assert_outputs(run_irtool(model, [cond, x]), want, 1e-5, 1e-5)
        assert_outputs([compiled(cond, x)], want, 1e-5, 1e-5)


def test_if_with_a_constant_condition_imports_one_branch() -> None:
    model = _if_model()
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(False), "c"))
    body = import_model(model).module["main"].body
    assert "If" not in {type(n).__name__ for n in post_order(body)}
    x = _f32(3, 3)
    assert_outputs(run_irtool(model, [x]), [x - x * x], 1e-6, 1e-6)


def test_if_branches_of_different_types_are_refused() -> None:
    then = _graph([helper.make_node("Identity", ["x"], ["t"])], [], ["t"], "then")
    other = _graph([helper.make_node("ReduceSum", ["x"], ["e"], keepdims=0)], [], ["e"], "else")
    model = build([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branch")],
                  {"c": np.array(True), "x": _f32(2)}, opset=17)
    with pytest.raises(DiagnosticError, match=r"node #0 'branch': unsupported: If \(opset 17\): output 0 is "
                                              r"Tensor\[\(2\), float32\] in one place and float32 in the other"):
        import_model(model)


def _while_model() -> onnx.ModelProto:
    """Loop doubling x while its sum is below a limit (an outer tensor), at most 10 times; the
    iteration number is added too, so the trip count and the condition both matter."""
    body = _graph([helper.make_node("Mul", ["v", "two"], ["d"]),
                   helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
                   helper.make_node("Add", ["d", "fi"], ["v_out"]),
                   helper.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0),
                   helper.make_node("Less", ["s", "limit"], ["go"])],
                  [("i", TensorProto.INT64, []), ("c", TensorProto.BOOL, []), ("v", TensorProto.FLOAT, [3])],
                  ["go", "v_out"])
    nodes = [helper.make_node("Loop", ["m", "", "x"], ["y"], body=body)]
    return build(nodes, {"x": _f32(3), "limit": np.array(50.0, np.float32)},
                 {"m": np.array(10, np.int64), "two": np.array(2.0, np.float32)}, opset=17)


def test_loop_with_a_run_time_condition_matches_onnxruntime() -> None:
    model = _while_model()
    for limit in (50.0, 1e9):   # stops on the condition, on the trip count
        inputs = {"x": np.abs(_f32(3)) + 1, "limit": np.array(limit, np.float32)}
        _matches_onnxruntime(model, inputs, native=True)


def test_loop_with_scan_outputs_matches_onnxruntime_without_unrolling() -> None:
    """A running product with its per-iteration values as a scan output: a static trip count
    and a condition that stays true, so the scan output has a static length; one loop."""
    body = _graph([helper.make_node("Mul", ["v", "x"], ["v_out"]), helper.make_node("Identity", ["c"], ["c_out"]),
                   helper.make_node("Sin", ["v_out"], ["scan"])],
                  [("i", TensorProto.INT64, []), ("c", TensorProto.BOOL, []), ("v", TensorProto.FLOAT, [2, 2])],
                  ["c_out", "v_out", "scan"])
    model = build([helper.make_node("Loop", ["m", "t", "v0"], ["y", "ys"], body=body)],
                  {"x": _f32(2, 2), "v0": _f32(2, 2)}, {"m": np.array(6, np.int64), "t": np.array(True)},
                  ("y", "ys"), opset=17)
    body_expr = import_model(model).module["main"].body
    assert sum(isinstance(n, Function) for n in post_order(body_expr)) == 1
    _matches_onnxruntime(model, {"x": _f32(2, 2), "v0": _f32(2, 2)}, native=False)


@pytest.mark.parametrize("nodes,message", [
    ([helper.make_node("Concat", ["v", "v"], ["v_out"], axis=0)],
     r"loop state 1 is Tensor\[\(2\), float32\] before an iteration and Tensor\[\(4\), float32\] after it"),
    ([helper.make_node("Identity", ["v"], ["v_out"]), helper.make_node("NoSuchOp", ["v"], ["w"])],
     r"its body node #1 \(NoSuchOp\): NoSuchOp \(opset 17\): not an ONNX operator"),
])
def test_loop_bodies_irtool_cannot_take_are_refused(nodes: list, message: str) -> None:
    """(A body whose state changes shape is unrolled when it runs at most 64 times; this runs 100.)"""
    body = _graph(nodes, [("i", TensorProto.INT64, []), ("c", TensorProto.BOOL, []), ("v", TensorProto.FLOAT, [2])],
                  ["c", "v_out"])
    model = build([helper.make_node("Loop", ["m", "", "x"], ["y"], body=body)], {"x": _f32(2)},
                  {"m": np.array(100, np.int64)}, opset=17)
    with pytest.raises(DiagnosticError, match=r"node #0: unsupported: Loop \(opset 17\): " + message):
        import_model(model)


def test_scan_axes_and_directions_match_onnxruntime() -> None:
    """Scan over axis 1 of one input forwards and of another backwards, a state, an outer tensor
    read by name, and scan outputs reversed and placed on axis 1."""
    body = _graph([helper.make_node("Add", ["s", "a"], ["t"]), helper.make_node("Mul", ["t", "k"], ["s_out"]),
                   helper.make_node("Sub", ["s_out", "b"], ["o1"]), helper.make_node("Neg", ["a"], ["o2"])],
                  [("s", TensorProto.FLOAT, [3]), ("a", TensorProto.FLOAT, [3]), ("b", TensorProto.FLOAT, [3])],
                  ["s_out", "o1", "o2"])
    node = helper.make_node("Scan", ["s0", "xa", "xb"], ["s", "y1", "y2"], body=body, num_scan_inputs=2,
                            scan_input_axes=[1, 1], scan_input_directions=[0, 1], scan_output_axes=[1, 0],
                            scan_output_directions=[1, 0])
    inputs = {"s0": _f32(3), "xa": _f32(3, 4), "xb": _f32(3, 4), "k": np.array(0.5, np.float32)}
    _matches_onnxruntime(build([node], inputs, outputs=("s", "y1", "y2"), opset=17), inputs, native=True)


def test_scan_8_over_a_batch_matches_onnxruntime() -> None:
    """Opset 8's Scan: a batch axis in front of every input, the body seeing one batch entry."""
    body = _graph([helper.make_node("Add", ["s", "a"], ["s_out"]), helper.make_node("Mul", ["s_out", "a"], ["o"])],
                  [("s", TensorProto.FLOAT, [2]), ("a", TensorProto.FLOAT, [2])], ["s_out", "o"])
    node = helper.make_node("Scan", ["", "s0", "xs"], ["s", "y"], body=body, num_scan_inputs=1, directions=[1])
    inputs = {"s0": _f32(3, 2), "xs": _f32(3, 4, 2)}
    _matches_onnxruntime(build([node], inputs, outputs=("s", "y"), opset=8), inputs, native=False)
