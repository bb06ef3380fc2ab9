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
from irtool.frontend.onnx import ImportFailure, import_model, sanitize  # noqa: E402
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
    nodes = [N("Relu", ["x"], ["a"], name="r"), N("MaxRoiPool", ["a", "x"], ["b"], name="p1"),
             N("MaxRoiPool", ["x", "x"], ["c"], name="p2"), N("SequenceConstruct", ["b", "c"], ["y"], name="lp"),
             N("Conv", ["x", "w"], ["z"], name="conv4d"), N("NoSuchOp", ["x"], ["t"]),
             N("Gelu", ["x"], ["u"], name="new")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 2, 2, 2, 2])],
        [helper.make_empty_tensor_value_info(o) for o in "yztuv"],
        [numpy_helper.from_array(np.ones((1, 1, 1, 1, 1, 1), np.float32), "w")])
    with pytest.raises(DiagnosticError) as info:
        import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), source="bad.onnx")
    lines = str(info.value).splitlines()
    assert lines[0] == "bad.onnx: cannot import the model:"
    # Operators nothing converts first (by message), then each node a converter refused.
    assert [line.strip() for line in lines[1:]] == [
        "node #6 'new': unsupported: Gelu (opset 13): Gelu is defined from opset 20 on",
        "nodes #1 'p1', #2 'p2': unsupported: MaxRoiPool (opset 13)",
        "node #5: unsupported: NoSuchOp (opset 13): not an ONNX operator",
        "node #3 'lp': unsupported: SequenceConstruct (opset 13): sequences are out of scope",
        "node #4 'conv4d': unsupported: Conv (opset 13): 4-d convolution (irtool has 1-d to 3-d)"]


def test_other_domains_are_refused_by_name() -> None:
    graph = helper.make_graph(
        [N("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", name="le"),
         N("FusedMatMul", ["x", "x"], ["z"], domain="com.microsoft")], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_empty_tensor_value_info("y"), helper.make_empty_tensor_value_info("z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    with pytest.raises(DiagnosticError) as info:
        import_model(model)
    message = str(info.value)
    assert ("node #0 'le': unsupported: ai.onnx.ml.LabelEncoder (ai.onnx.ml opset 3): classical machine-learning "
            "operators (ai.onnx.ml) are out of scope") in message
    assert ("node #1: unsupported: com.microsoft.FusedMatMul (domain com.microsoft is not imported): "
            "operators of domain com.microsoft are out of scope") in message


def test_symbolic_axes_stay_unknown_unless_sized() -> None:
    model, weights = mlp(input_dims=["N", 4])
    kept = import_model(model)
    assert str(kept.module["main"].params[0].type_annotation) == "Tensor[(?, 4), float32]"
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(run_function(kept.module, {"v1input": x, **kept.params}), reference(x, weights),
                               rtol=1e-6)
    # Native code needs every size: the error names the input, its axis and the option.
    with pytest.raises(DiagnosticError) as info:
        import_model(model, static_shapes=True)
    assert ("graph input '1input' has symbolic axis 0 'N' (give its size with --input-shape v1input=1,4): "
            "native code needs the size of every axis") in str(info.value)
    for key in ("1input", "v1input"):  # the ONNX name or the parameter's
        result = import_model(model, input_shapes={key: (5, 4)})
        assert result.module["main"].params[0].type_annotation.shape == (5, 4)
    with pytest.raises(DiagnosticError, match="--input-shape names no graph input: nope"):
        import_model(model, input_shapes={"1input": (5, 4), "nope": (1,)})


@pytest.mark.parametrize("shape, message", [
    ((5, 4, 1), "--input-shape v1input gives 3 dimensions, but graph input '1input' has rank 2"),
    ((5,), "--input-shape v1input gives 1 dimension, but graph input '1input' has rank 2"),
    ((5, 3), "--input-shape v1input gives axis 1 the size 3, but graph input '1input' fixes it at 4"),
])
def test_input_shape_sizes_symbolic_axes_only(shape: tuple[int, ...], message: str) -> None:
    """A wrong rank was once accepted and imported into a module whose Gemm then failed to type."""
    model, _ = mlp(input_dims=["N", 4])
    with pytest.raises(DiagnosticError) as info:
        import_model(model, input_shapes={"v1input": shape})
    assert message in str(info.value)


def test_converter_needing_a_symbolic_size_says_which_input() -> None:
    graph = helper.make_graph([N("Shape", ["x"], ["s"], name="sh")], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_empty_tensor_value_info("s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(DiagnosticError) as info:
        import_model(model)
    # A shape of symbolic sizes is followed at import time for a Reshape, never computed at run.
    assert ("graph output 's': unsupported: it is a shape read from a tensor with symbolic axes (irtool "
            "computes such shapes only at import time, for a Reshape); graph input 'x' has symbolic axis 0 "
            "'batch' (give its size with --input-shape x=1,3)") in str(info.value)
    shaped = import_model(model, input_shapes={"x": (2, 3)})
    np.testing.assert_array_equal(run_function(shaped.module, {"x": np.zeros((2, 3), np.float32)}), [2, 3])


def test_opsets_from_1_to_the_installed_onnx() -> None:
    graph = helper.make_graph([N("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])],
                              [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 1)])
    x = np.array([-1, 0, 2], np.float32)
    for opset in (1, onnx.defs.onnx_opset_version()):
        model.opset_import[0].version = opset
        np.testing.assert_array_equal(run_function(import_model(model).module, {"x": x}), [0, 0, 2])
    model.opset_import[0].version = onnx.defs.onnx_opset_version() + 1
    with pytest.raises(DiagnosticError, match=f"opset {onnx.defs.onnx_opset_version() + 1} is newer than the "
                                              "installed onnx package knows"):
        import_model(model)
    model.opset_import[0].version = 0
    with pytest.raises(DiagnosticError, match="opset 0 is not an ONNX opset"):
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
    graph = helper.make_graph([N("MaxRoiPool", ["x"], ["y"], name="h")], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                              [helper.make_empty_tensor_value_info("y")])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    out = tmp_path / "bad.relay"
    assert importer.main([str(path), "-o", str(out)]) == 1
    assert not out.exists()
    err = capsys.readouterr().err
    assert err.startswith("irtool-import: error: ") and "node #0 'h': unsupported: MaxRoiPool (opset 13)" in err
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


def test_input_shape_option_in_run_and_llc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Symbolic axes: the interpreter runs them as given; native code needs --input-shape."""
    from irtool.tools import llc
    model, weights = mlp(input_dims=["batch", 4])
    path = tmp_path / "dyn.onnx"
    onnx.save(model, str(path))
    x = np.full((3, 4), 0.25, np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "o.npz"
    assert run.main([str(path), "--input", f"v1input={tmp_path / 'x.npy'}", "-o", str(out)]) == 0
    np.testing.assert_allclose(np.load(out)["output0"], reference(x, weights), rtol=1e-6)
    capsys.readouterr()
    for tool, argv in ((run, [str(path), "--backend=native", "--input", f"v1input={tmp_path / 'x.npy'}"]),
                       (llc, [str(path), "--emit=llvm", "-o", str(tmp_path / "dyn.ll")])):
        assert tool.main(argv) == 1
        err = capsys.readouterr().err
        assert "graph input '1input' has symbolic axis 0 'batch' (give its size with --input-shape v1input=1,4)" in err
        assert tool.main(argv + ["--input-shape", "v1input=3,4"]) == 0
    assert "@dyn_run(" in (tmp_path / "dyn.ll").read_text()
    assert llc.main([str(tmp_path / "x.npy"), "--input-shape", "x=1"]) == 1
    assert "--input-shape applies to .onnx models" in capsys.readouterr().err


def test_graph_inputs_needed_as_constants() -> None:
    """A Reshape target that is a graph input: an error naming it, unless an initializer of the
    same name gives its value (IR version 4 and later: a default the caller may override)."""
    graph = helper.make_graph([N("Reshape", ["x", "shape"], ["y"], name="rs")], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("shape", onnx.TensorProto.INT64, [2])],
                              [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ImportFailure) as info:
        import_model(model)
    assert ("node #0 'rs': unsupported: Reshape (opset 13): shape is the graph input 'shape', but it must be a "
            "constant known at import time (give it an initializer)") in str(info.value)
    assert info.value.constant_inputs == ["shape"]
    model.graph.initializer.append(numpy_helper.from_array(np.array([3, 2], np.int64), "shape"))
    result = import_model(model)
    assert result.inputs == ["x"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run_function(result.module, {"x": x}), x.reshape(3, 2))
