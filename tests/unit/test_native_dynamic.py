"""Native code over a dynamic batch (docs/native-relay.md, "Dynamic shapes"): one compiled module
runs at every batch size, including 1 and 0, and gives the interpreter's answer; an operator
without a shape function is a located error naming it; run-time shapes that do not fit are
refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irtool
from irtool.core.diagnostics import DiagnosticError
from irtool.eval.interpreter import flatten_value, run_function
from irtool.runtime.native import NativeModule
from irtool.syntax.parser import parse
from support.dynamic_programs import MLP_AND_RNN
from support.heap import heap_in_use

_RNG = np.random.default_rng(7)
WEIGHTS = {"w1": _RNG.standard_normal((16, 8)).astype(np.float32) * 0.4,
           "b1": _RNG.standard_normal(16).astype(np.float32) * 0.1,
           "w2": _RNG.standard_normal((4, 16)).astype(np.float32) * 0.4,
           "wh": _RNG.standard_normal((16, 16)).astype(np.float32) * 0.3}


@pytest.fixture(scope="module")
def mlp_and_rnn() -> NativeModule:
    return irtool.build(parse(MLP_AND_RNN, "mlp_rnn.relay"))


def _inputs(batch: int, steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, 8)).astype(np.float32),
            "h0": rng.standard_normal((batch, 16)).astype(np.float32), **WEIGHTS, "n": np.array(steps, np.int32)}


def _numpy_reference(inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    x, w1, b1, w2, wh = (inputs[k] for k in ("x", "w1", "b1", "w2", "wh"))
    y = np.maximum(x @ w1.T + b1, 0) @ w2.T
    h = inputs["h0"]
    for _ in range(int(inputs["n"])):
        h = np.tanh(x @ w1.T + h @ wh.T + b1)
    return y, h


@pytest.mark.parametrize("batch", [0, 1, 2, 5, 32, 33, 80])   # 32 rows a tile (lower/batch.py)
def test_one_module_runs_every_batch_size_like_the_interpreter(mlp_and_rnn: NativeModule, batch: int) -> None:
    inputs = _inputs(batch, 6, batch)
    y, h = mlp_and_rnn(**inputs)
    assert y.shape == (batch, 4) and h.shape == (batch, 16)
    want_y, want_h = flatten_value(run_function(parse(MLP_AND_RNN, "mlp_rnn.relay"), inputs))
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)
    ref_y, ref_h = _numpy_reference(inputs)
    np.testing.assert_allclose(y, ref_y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(h, ref_h, rtol=1e-4, atol=1e-4)


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(0, 100), steps=st.integers(0, 12), seed=st.integers(0, 2**16))
def test_random_batches_and_steps_match_numpy(mlp_and_rnn: NativeModule, batch: int, steps: int, seed: int) -> None:
    inputs = _inputs(batch, steps, seed)
    y, h = mlp_and_rnn(**inputs)
    ref_y, ref_h = _numpy_reference(inputs)
    np.testing.assert_allclose(y, ref_y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(h, ref_h, rtol=1e-4, atol=1e-4)


def test_shapes_that_do_not_fit_are_refused(mlp_and_rnn: NativeModule) -> None:
    inputs = _inputs(3, 2)
    with pytest.raises(DiagnosticError, match=r"input `x` must have shape \(\?, 8\), got \(3, 9\)"):
        mlp_and_rnn(**{**inputs, "x": np.zeros((3, 9), np.float32)})
    with pytest.raises(DiagnosticError, match="two batches that must be equal"):
        mlp_and_rnn(**{**inputs, "h0": np.zeros((2, 16), np.float32)})   # add(x·w, h·w) of 3 and 2 rows
    with pytest.raises(DiagnosticError, match="use run()"):
        mlp_and_rnn.run_into((np.zeros((3, 4), np.float32), np.zeros((3, 16), np.float32)), **inputs)


OPS = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 2, 6, 6), float32], %w: Tensor[(3, 2, 3, 3), float32], %v: Tensor[(?, 5), float32])
    -> (Tensor[(?, 3), float32], Tensor[(?, 108), float32], Tensor[(?, 5), float32], Tensor[(?, 10), float32],
        Tensor[(?), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=3, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  %2 = nn.global_avg_pool2d(%1);
  %3 = nn.batch_flatten(%2);
  %4 = nn.softmax(%3, axis=1);
  %5 = reshape(%1, newshape=[-1, 108]);
  %6 = nn.log_softmax(%v);
  %7 = concatenate((%v, exp(%v)), axis=1);
  %8 = sum(%7, axis=[1]);
  (%4, %5, %6, %7, %8)
}
"""


@pytest.mark.parametrize("batch", [0, 1, 4, 35])
def test_convolution_pooling_softmax_reshape_concatenate_and_sums_over_a_batch(batch: int) -> None:
    mod = parse(OPS, "ops.relay")
    rng = np.random.default_rng(batch)
    inputs = {"x": rng.standard_normal((batch, 2, 6, 6)).astype(np.float32),
              "w": rng.standard_normal((3, 2, 3, 3)).astype(np.float32),
              "v": rng.standard_normal((batch, 5)).astype(np.float32)}
    got = irtool.build(mod)(**inputs)
    if batch == 0:   # the interpreter's batch_flatten cannot reshape an empty batch: shapes only
        assert [g.shape for g in got] == [(0, 3), (0, 108), (0, 5), (0, 10), (0,)]
        return
    want = flatten_value(run_function(parse(OPS, "ops.relay"), inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == np.asarray(w).shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("body", "message"), [
    ("nn.softmax(%x, axis=0)", r"no shape function for `nn.softmax` with a `\?` on axis 0 of Tensor\[\(\?, 8\), "
     r"float32\] \(it treats no axis row by row\)"),
    ("sum(%x, axis=[0])", r"`sum` with a `\?` on axis 0 .* \(it treats no axis row by row\)"),
    ("sum(%x, axis=[0], keepdims=True)", r"`sum` with a `\?` on axis 0 .* \(it treats no axis row by row\)"),
    ("cumsum(%x, axis=1)", r"no shape function for `cumsum` with a `\?` on axis 0 of Tensor\[\(\?, 8\), float32\]$"),
    ("nn.pad(%x, 0f, pad_width=[[1, 0], [0, 0]])", r"`nn.pad` with a `\?` on axis 0 .* \(it treats no axis row by row\)"),
    ("transpose(%x, axes=[1, 0])", r"`transpose` with a `\?` on axis 0 .* \(it treats no axis row by row\)"),
])
def test_an_operator_without_a_shape_function_is_a_located_error(body: str, message: str) -> None:
    text = f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(?, 8), float32]) {{\n  {body}\n}}\n'
    with pytest.raises(DiagnosticError, match=message) as info:
        irtool.build(parse(text, "bad.relay"))
    assert info.value.span is not None and info.value.span.line == 3


def test_irtool_run_native_gives_the_interpreters_outputs(tmp_path: Path) -> None:
    (tmp_path / "model.relay").write_text(MLP_AND_RNN)
    for batch in (4, 1):
        np.savez(tmp_path / f"in{batch}.npz", **_inputs(batch, 3, batch))
        outs = []
        for backend in ("interp", "native"):
            done = subprocess.run([sys.executable, "-m", "irtool.tools.run", "model.relay", "--inputs", f"in{batch}.npz",
                                   f"--backend={backend}", "-o", f"{backend}.npz"], cwd=tmp_path, capture_output=True,
                                  text=True, check=False)
            assert done.returncode == 0, done.stderr
            assert f"output0: Tensor[({batch}, 4), float32]" in done.stdout
            assert f"output1: Tensor[({batch}, 16), float32]" in done.stdout
            outs.append(np.load(tmp_path / f"{backend}.npz"))
        for key in ("output0", "output1"):
            np.testing.assert_allclose(outs[1][key], outs[0][key], rtol=1e-5, atol=1e-5)


def test_10000_calls_release_every_box(mlp_and_rnn: NativeModule) -> None:
    """Input, intermediate and result boxes, and the copies `_run` hands out, are all freed."""
    inputs = _inputs(5, 4)
    mlp_and_rnn(**inputs)
    before = heap_in_use()
    for _ in range(10_000):
        y, h = mlp_and_rnn(**inputs)
    del y, h
    # A box is at least 48 bytes: one leaked per call would be 480 KB.
    assert heap_in_use() - before < 64 * 1024


def test_an_onnx_model_with_a_symbolic_batch_runs_natively_like_onnxruntime() -> None:
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from irtool.frontend.onnx import import_model
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "B"], ["g"]), helper.make_node("Relu", ["g"], ["r"]),
         helper.make_node("Softmax", ["r"], ["y"], axis=1)], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    imported = import_model(model)
    assert str(imported.module["main"].params[0].type_annotation) == "Tensor[(?, 8), float32]"
    native = irtool.build(imported.module)
    session = ort.InferenceSession(model.SerializeToString())
    for batch in (3, 40):
        x = rng.standard_normal((batch, 8)).astype(np.float32)
        np.testing.assert_allclose(native(x, w, b), session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


NORMS = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 3, 4), float32], %y: Tensor[(?, 4, 5), float32], %g: Tensor[(4), float32],
          %b: Tensor[(4), float32])
    -> (Tensor[(?, 3, 5), float32], Tensor[(?, 3, 4), float32], Tensor[(?, 6, 5), float32]) {
  (nn.batch_matmul(%x, %y), nn.layer_norm(%x, %g, %b),
   nn.pad(%y, 0f, pad_width=[[0, 0], [1, 1], [0, 0]]))
}
"""


@pytest.mark.parametrize("batch", [1, 6, 37])
def test_batch_matmul_layer_norm_and_pad_over_a_batch(batch: int) -> None:
    rng = np.random.default_rng(batch)
    inputs = {"x": rng.standard_normal((batch, 3, 4)).astype(np.float32),
              "y": rng.standard_normal((batch, 4, 5)).astype(np.float32),
              "g": rng.standard_normal(4).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32)}
    got = irtool.build(parse(NORMS, "norms.relay"))(**inputs)
    want = flatten_value(run_function(parse(NORMS, "norms.relay"), inputs))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
