"""The importer's contract: parameters vs embedded weights, names, errors, and the CLI tools."""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stderr
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

from irtool.analysis.typecheck import infer_types  # noqa: E402
from irtool.eval.interpreter import run_function  # noqa: E402
from irtool.frontend.onnx import import_model, sanitize  # noqa: E402
from irtool.ir.equality import structural_equal  # noqa: E402
from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.syntax.parser import parse  # noqa: E402
from irtool.syntax.printer import print_program  # noqa: E402
from irtool.tools import importer, run  # noqa: E402

N = helper.make_node


def mlp(ir_version: int = 3, input_dims: list = [2, 4]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x·W + b → Relu, with the weights also listed among the inputs (as IR version 3 does)."""
    rng = np.random.default_rng(0)
    weights = {"fc1/W:0": rng.standard_normal((4, 3)).astype(np.float32),
               "fc1/b:0": rng.standard_normal(3).astype(np.float32)}
    inits = [numpy_helper.from_array(a, n) for n, a in weights.items()]
    inputs = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, a.shape) for n, a in weights.items()]
    inputs.append(helper.make_tensor_value_info("1input", onnx.TensorProto.FLOAT, input_dims))
    graph = helper.make_graph(
        [N("Gemm", ["1input", "fc1/W:0", "fc1/b:0"], ["h"], name="fc1"), N("Relu", ["h"], ["out"], name="act")],
        "mlp", inputs, [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = ir_version
    return model, weights


def reference(x: np.ndarray, weights: dict[str, np.ndarray]) -> np.ndarray:
    return np.maximum(x @ weights["fc1/W:0"] + weights["fc1/b:0"], 0)


def test_inputs_bound_by_name_and_weights_become_trailing_params() -> None:
    model, weights = mlp()
    result = import_model(model)
    main = result.module["main"]
    assert [p.name_hint for p in main.params] == ["v1input", "fc1/W_0", "fc1/b_0"]
    assert result.inputs == ["v1input"]
    assert list(result.params) == ["fc1/W_0", "fc1/b_0"]
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    np.testing.assert_allclose(run_function(result.module, {"v1input": x, **result.params}),
                               reference(x, weights), rtol=1e-6)


def test_embedded_weights_print_as_metadata_and_round_trip() -> None:
    model, weights = mlp()
    result = import_model(model, embed_params=True)
    assert result.params == {}
    assert [p.name_hint for p in result.module["main"].params] == ["v1input"]
    text = print_program(result.module)
    assert "meta[relay.Constant][0]" in text and "#[metadata]" in text
    again = parse(text, "mlp.relay")
    infer_types(again)
    assert structural_equal(again, result.module)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(run_function(again, {"v1input": x}), reference(x, weights), rtol=1e-6)


def test_sanitize_keeps_valid_names() -> None:
    assert sanitize("gpu_0/data_0") == "gpu_0/data_0"
    assert sanitize("onnx::Conv_3") == "onnx__Conv_3"
    assert sanitize("42") == "v42"


def test_all_unsupported_operators_reported_at_once() -> None:
    nodes = [N("Relu", ["x"], ["a"], name="r"), N("Unique", ["a"], ["b"], name="u1"),
             N("Unique", ["x"], ["c"], name="u2"), N("Frobnicate", ["b", "c"], ["y"], name="fr"),
             N("Conv", ["x", "w"], ["z"], name="conv4d")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 2, 2, 2, 2])],
        [helper.make_empty_tensor_value_info("y"), helper.make_empty_tensor_value_info("z")],
        [numpy_helper.from_array(np.ones((1, 1, 1, 1, 1, 1), np.float32), "w")])
    with pytest.raises(DiagnosticError) as info:
        import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), source="bad.onnx")
    message = str(info.value)
    assert "unsupported operators: Frobnicate (fr); Unique (u1, u2)" in message
    assert "node 'conv4d' (Conv): 4-d convolution" in message


def test_dynamic_input_needs_a_shape() -> None:
    model, weights = mlp(input_dims=["N", 4])
    with pytest.raises(DiagnosticError, match="dynamic dimension 'N'.*--input-shape v1input="):
        import_model(model)
    for key in ("1input", "v1input"):  # the ONNX name or the parameter's
        result = import_model(model, input_shapes={key: (5, 4)})
        assert result.module["main"].params[0].type_annotation.shape == (5, 4)
    with pytest.raises(DiagnosticError, match="--input-shape names no graph input: nope"):
        import_model(model, input_shapes={"1input": (5, 4), "nope": (1,)})


def test_opset_out_of_range_is_an_error() -> None:
    model, _ = mlp()
    model.opset_import[0].version = 5
    with pytest.raises(DiagnosticError, match="opset 5 is not supported"):
        import_model(model)


def test_cli_writes_relay_and_params_then_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, weights = mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    out = tmp_path / "mlp.relay"
    assert importer.main([str(path), "-o", str(out)]) == 0
    saved = dict(np.load(tmp_path / "mlp.npz"))
    assert sorted(saved) == ["fc1/W_0", "fc1/b_0"]
    np.testing.assert_array_equal(saved["fc1/W_0"], weights["fc1/W:0"])
    x = np.full((2, 4), 0.5, np.float32)
    np.savez(tmp_path / "in.npz", v1input=x, **saved)
    assert run.main([str(out), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["output0"], reference(x, weights), rtol=1e-6)
    # irtool-run reads the .onnx directly, weights bound from the initializers.
    np.save(tmp_path / "x.npy", x)
    assert run.main([str(path), "--input", f"v1input={tmp_path / 'x.npy'}", "-o", str(tmp_path / "p.npz")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "p.npz")["output0"], reference(x, weights), rtol=1e-6)


def test_cli_errors_leave_no_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = helper.make_graph([N("Unique", ["x"], ["y"], name="h")], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                              [helper.make_empty_tensor_value_info("y")])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    out = tmp_path / "bad.relay"
    assert importer.main([str(path), "-o", str(out)]) == 1
    assert not out.exists()
    err = capsys.readouterr().err
    assert err.startswith("irtool-import: error: ") and "unsupported operator: Unique (h)" in err
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    assert importer.main([str(tmp_path / "junk.onnx")]) == 1
    assert "not a valid ONNX model" in capsys.readouterr().err
    model, _ = mlp()
    onnx.save(model, str(tmp_path / "mlp.onnx"))
    assert importer.main([str(tmp_path / "mlp.onnx")]) == 1  # weights but nowhere to put them
    assert "--params" in capsys.readouterr().err


def test_cli_timings_only_on_a_terminal(tmp_path: Path) -> None:
    model, _ = mlp()
    onnx.save(model, str(tmp_path / "mlp.onnx"))
    proc = subprocess.run([sys.executable, "-m", "irtool.tools.importer", str(tmp_path / "mlp.onnx"),
                           "--embed-params"], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith('#[version = "0.0.5"]')
    timer = importer.StageTimer(True)
    buffer = io.StringIO()
    with redirect_stderr(buffer):
        timer("convert", 0.25)
    timer_lines = buffer.getvalue().splitlines()
    assert timer_lines == ["irtool-import: convert        0.250 s"]
