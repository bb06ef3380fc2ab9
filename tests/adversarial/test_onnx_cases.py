"""Adversarial ONNX protobufs (issue #18, cases 6 and 7): fields that contradict each other or
the specification once crashed the importer (`ValueError`, `KeyError`, `internal:`), or were
imported into Relay its own parser rejects, or ran to random numbers. Each is now refused with a
message naming the node (in the importer's one format: `node #i 'name': unsupported: Op (opset
N): reason`), the graph input or the initializer.

Tools run as a user runs them (`run_tool`, in a subprocess outside the checkout). The cases the
ONNX fuzzer (tests/property/test_onnx_fuzz.py) found are in the second half, in-process.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from support.adversarial import assert_no_crash, run_tool

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.frontend.onnx_ops import CONVERTERS  # noqa: E402

N = helper.make_node


def conv_model(**conv_attrs: object) -> onnx.ModelProto:
    """x (1, 3, 6, 6) → Conv `conv` with a (4, 3, 3, 3) weight `w` → Relu `relu`."""
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], **conv_attrs}
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph([N("Conv", ["x", "w"], ["c"], name="conv", **attrs), N("Relu", ["c"], ["y"], name="relu")],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def relu_model(elem_type: int = TensorProto.FLOAT, dims: list[int] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph([N("Relu", ["x"], ["y"], name="act")], "g",
                              [helper.make_tensor_value_info("x", elem_type, dims or [2, 3])],
                              [helper.make_tensor_value_info("y", elem_type, dims or [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def save(tmp_path: Path, model: onnx.ModelProto, name: str = "model.onnx") -> Path:
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())   # as written, unchecked: a writer may err
    return path


def assert_refused(proc: object, says: str) -> None:
    """Exit status 1, an `error:` naming the culprit, no traceback, no `internal:`."""
    assert_no_crash(proc)  # type: ignore[arg-type]
    assert proc.returncode == 1, (proc.returncode, proc.stderr)  # type: ignore[attr-defined]
    assert "error: " in proc.stderr and "cannot import the model" in proc.stderr, proc.stderr  # type: ignore[attr-defined]
    assert says in proc.stderr, proc.stderr  # type: ignore[attr-defined]


# ---- attributes of the wrong type ---------------------------------------------------------------

@pytest.mark.parametrize("value,given", [(3.0, "FLOAT"), ("3x3", "STRING")])
def test_an_attribute_of_the_wrong_type_names_the_node(tmp_path: Path, value: object, given: str) -> None:
    """`kernel_shape` as a float or a string once reached the converter: ValueError/TypeError."""
    proc = run_tool("irtool-import", save(tmp_path, conv_model(kernel_shape=value)), "--embed-params", cwd=tmp_path)
    assert_refused(proc, f"node #0 'conv': unsupported: Conv (opset 13): attribute 'kernel_shape' must be INTS, "
                         f"not {given}")


# ---- initializers whose data does not match their shape -----------------------------------------

def with_weight(tensor: onnx.TensorProto) -> onnx.ModelProto:
    model = conv_model()
    model.graph.initializer[0].CopyFrom(tensor)
    return model


def tensor(name: str, data_type: int, dims: list[int], raw: bytes | None = None,
           floats: list[float] | None = None) -> onnx.TensorProto:
    """A TensorProto as a careless writer makes it (`helper.make_tensor` would check the sizes)."""
    t = TensorProto(name=name, data_type=data_type, dims=dims)
    if raw is not None:
        t.raw_data = raw
    t.float_data.extend(floats or [])
    return t


def test_raw_data_too_short_or_too_long_names_the_initializer(tmp_path: Path) -> None:
    for nbytes in (428, 436):   # 108 floats need 432 bytes
        weight = tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], raw=bytes(nbytes))
        proc = run_tool("irtool-import", save(tmp_path, with_weight(weight)), "--embed-params", cwd=tmp_path)
        assert_refused(proc, f"node #0 'conv': unsupported: Conv (opset 13): initializer 'w' has {nbytes} bytes "
                             "of raw_data, but its shape (4, 3, 3, 3) of float needs 432")


def test_a_wrong_float_data_count_names_the_initializer(tmp_path: Path) -> None:
    weight = tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], floats=[0.5] * 100)
    proc = run_tool("irtool-import", save(tmp_path, with_weight(weight)), "--embed-params", cwd=tmp_path)
    assert_refused(proc, "node #0 'conv': unsupported: Conv (opset 13): initializer 'w' holds 100 values in "
                         "float_data, but its shape (4, 3, 3, 3) of float needs 108")


# ---- negative dimensions ------------------------------------------------------------------------

def test_a_negative_input_dimension_is_refused_not_written_as_relay(tmp_path: Path) -> None:
    """Once `Tensor[(-3, 3), float32]` in the output, which irtool's own parser rejects (exit 0)."""
    out = tmp_path / "m.relay"
    proc = run_tool("irtool-import", save(tmp_path, relu_model(dims=[-3, 3])), "-o", out, cwd=tmp_path)
    assert_refused(proc, "graph input 'x' has a negative dimension -3 (shape (-3, 3))")
    assert not out.exists()


def test_a_negative_initializer_dimension_names_the_initializer(tmp_path: Path) -> None:
    weight = tensor("w", TensorProto.FLOAT, [4, 3, -3, 3], raw=b"")
    proc = run_tool("irtool-import", save(tmp_path, with_weight(weight)), "--embed-params", cwd=tmp_path)
    assert_refused(proc, "node #0 'conv': unsupported: Conv (opset 13): initializer 'w' has a negative dimension "
                         "-3 (shape (4, 3, -3, 3))")


# ---- element types the parser (and the backends) do not have ------------------------------------

@pytest.mark.parametrize("elem_type,name", [(TensorProto.COMPLEX64, "complex64"), (TensorProto.STRING, "string"),
                                            (TensorProto.BFLOAT16, "bfloat16")])
def test_an_unsupported_element_type_is_refused_by_its_onnx_name(tmp_path: Path, elem_type: int, name: str) -> None:
    """`complex64` and `object` tensors were once written as Relay the parser rejects."""
    proc = run_tool("irtool-import", save(tmp_path, relu_model(elem_type)), cwd=tmp_path)
    assert_refused(proc, f"graph input 'x' has the unsupported element type {name}\n")
    assert "reads 'x', which nothing defines" not in proc.stderr   # one problem, one message


def test_running_a_string_model_is_refused_instead_of_printing_random_floats(tmp_path: Path) -> None:
    proc = run_tool("irtool-run", save(tmp_path, relu_model(TensorProto.STRING)), cwd=tmp_path)
    assert_refused(proc, "graph input 'x' has the unsupported element type string")
    assert proc.stdout == ""


# ---- found by the ONNX fuzzer (in-process: the same function irtool-import calls) ----------------

def refusal(model: onnx.ModelProto) -> str:
    with pytest.raises(DiagnosticError) as info:
        import_model(model, embed_params=True)
    return str(info.value)


def test_a_converter_failure_on_a_model_onnx_rejects_gives_onnxs_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """A converter trusts the specification (a 3-d convolution once unpacked `kd, kh, kw` from a
    4-d weight: ValueError). When one fails on a model ONNX's shape inference rejects, the
    importer names the node and gives inference's reason; on a model it accepts, the failure is
    an irtool bug and stays an exception."""
    def fragile(b: object, node: object) -> list[object]:
        raise ValueError("not enough values to unpack (expected 3, got 2)")

    monkeypatch.setitem(CONVERTERS, "Conv", fragile)
    model = conv_model(kernel_shape=[3, 3, 3], pads=[1, 1, 1, 1, 1, 1], dilations=[1, 1])
    model.graph.input[0].type.tensor_type.shape.dim.add().dim_value = 6
    model.graph.output[0].type.tensor_type.ClearField("shape")
    message = refusal(model)
    assert ("node #0 'conv': unsupported: Conv (opset 13): ONNX shape inference rejects the model: Attribute "
            "dilations has incorrect size") in message
    assert "ValueError" not in message
    with pytest.raises(ValueError, match="not enough values"):
        import_model(conv_model(), embed_params=True)


def test_a_weight_of_the_wrong_rank_names_the_node() -> None:
    """The same 5-d input with a 4-d weight, which ONNX's inference lets through."""
    model = conv_model(kernel_shape=[3, 3, 3], pads=[1, 1, 1, 1, 1, 1])
    model.graph.input[0].type.tensor_type.shape.dim.add().dim_value = 6
    model.graph.output[0].type.tensor_type.ClearField("shape")
    assert "node #0 'conv': unsupported: Conv (opset 13): W has rank 4, but X has rank 5" in refusal(model)


def test_an_operator_attribute_the_node_makes_invalid_names_the_node() -> None:
    """A one-element MaxPool `strides` was "nn.max_pool2d: attribute ..." with no node named."""
    graph = helper.make_graph([N("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2, 2])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    message = refusal(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)]))
    assert "node #0 'pool': unsupported: MaxPool (opset 10): nn.max_pool2d: attribute `strides`" in message


def test_undefined_element_types_name_the_tensor() -> None:
    """Element type 0 (UNDEFINED) raised KeyError (an input) or TypeError (an initializer)."""
    assert "graph input 'x' has the unsupported element type undefined" in refusal(relu_model(TensorProto.UNDEFINED))
    model = conv_model()
    model.graph.initializer[0].data_type = TensorProto.UNDEFINED
    assert "node #0 'conv': unsupported: Conv (opset 13): initializer 'w' of element type undefined" in refusal(model)


def test_missing_required_attributes_and_inputs_are_named() -> None:
    concat = helper.make_graph([N("Concat", ["x", "x"], ["y"], name="cat")], "g",
                               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    message = refusal(helper.make_model(concat, opset_imports=[helper.make_opsetid("", 13)]))
    assert "node #0 'cat': unsupported: Concat (opset 13): the required attribute 'axis' is missing" in message
    model = conv_model()
    model.graph.node[0].input[1] = ""
    assert "node #0 'conv': unsupported: Conv (opset 13): input 1 (W) is required, but its name is empty" \
        in refusal(model)
    model = conv_model()
    del model.graph.node[0].input[1]
    assert "node #0 'conv': unsupported: Conv (opset 13): 1 inputs given, but Conv takes 2 to 3" in refusal(model)


def test_unknown_attributes_and_second_definitions_are_named() -> None:
    model = conv_model()
    model.graph.node[1].attribute.append(helper.make_attribute("alpha", 0.5))
    assert "node #1 'relu': unsupported: Relu (opset 13): 'alpha' is not an attribute of Relu\n" in refusal(model) + "\n"
    model = conv_model()
    model.graph.node[1].output[0] = "c"   # Relu writes its own input's name again
    assert "node #1 'relu' (Relu) writes 'c', which is already defined" in refusal(model)


def test_a_constant_nodes_tensor_is_checked_like_an_initializer() -> None:
    value = tensor("v", TensorProto.INT64, [2], raw=bytes(12))
    graph = helper.make_graph([N("Constant", [], ["s"], name="k", value=value),
                               N("Reshape", ["x", "s"], ["y"], name="r")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    message = refusal(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert ("node #0 'k': unsupported: Constant (opset 13): attribute 'value' has 12 bytes of raw_data, but its "
            "shape (2,) of int64 needs 16") in message


@pytest.mark.parametrize("where", ["input", "op_type"])
def test_a_name_that_is_not_utf8_is_an_invalid_model(where: str) -> None:
    """Protobuf hands a string field with invalid UTF-8 over as bytes: sanitising the input's name
    and sorting the unknown op types raised TypeError."""
    model = relu_model()
    if where == "input":
        model.graph.input[0].name = model.graph.node[0].input[0] = "é"
    else:
        model.graph.node[0].op_type = "Reé"
    data = model.SerializeToString().replace("é".encode(), b"\xc3\x28")   # no longer UTF-8
    message = refusal(onnx.load_model_from_string(data))
    assert "not a valid ONNX model: " in message
    assert ("a graph input name" if where == "input" else "an op type") + " is not UTF-8 text" in message
