"""Attention, RotaryEmbedding, SwiGLU and the broadcasting MatMul (irtool/frontend/onnx_ops/
attention.py, nn.py) against the ONNX node cases' expected outputs and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from support.onnx_cases import (assert_outputs, check_node_case, node_case_failures, node_cases,  # noqa: E402
                                onnxruntime_outputs, run_irtool)

OPS = ("Attention", "RotaryEmbedding", "SwiGLU")
RNG = np.random.default_rng(23)


def _cases() -> dict:
    return node_cases("attention", "rotaryembedding", "swiglu", "matmul")


def _cases_of(ops: tuple[str, ...]) -> list[str]:
    return sorted(name for name, c in _cases().items() if not name.endswith("_expanded")
                  and any(n.op_type in ops for n in c.model.graph.node))


def test_every_node_case_is_covered() -> None:
    assert len(_cases_of(("Attention",))) == 93
    assert len(_cases_of(("RotaryEmbedding",))) == 8 and len(_cases_of(("SwiGLU",))) == 3


def _bfloat16(name: str) -> bool:
    return any(i.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16 for i in _cases()[name].model.graph.input)


def test_every_node_case_through_the_interpreter() -> None:
    """All 104 cases of the three operators (3-d and 4-d, GQA, masks of each kind and rank, past
    and present caches, soft cap, the four qk_matmul_output modes, nonpad_kv_seqlen, sliding
    windows, fully masked rows, float16, partial and interleaved rotation); the bfloat16 ones are
    refused at their graph inputs, as the importer refuses every bfloat16 tensor."""
    names = _cases_of(OPS)
    assert any(_bfloat16(name) for name in names)
    for name in filter(_bfloat16, names):
        with pytest.raises(DiagnosticError, match="has the unsupported element type bfloat16"):
            check_node_case(_cases()[name])
    failures = node_case_failures(_cases(), [name for name in names if not _bfloat16(name)])
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", [
    "test_attention_4d_gqa_with_past_and_present_fp16",
    "test_attention_3d_gqa_causal",
    "test_attention_4d_causal_nonpad_attn_mask_composition",
    "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal",
    "test_attention_local_window_gqa_rank4_mask",
    "test_attention_23_fullymasked_qk_matmul_output_mode3_zero",
    "test_rotary_embedding_with_interleaved_rotary_dim",
    "test_rotary_embedding_3d_input",
    "test_swiglu_float16",
])
def test_node_case_natively(name: str) -> None:
    check_node_case(_cases()[name], native=True)


def _model(nodes: list, inputs: dict[str, np.ndarray], outputs: tuple[str, ...] = ("y",), opset: int = 23,
           inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [onnx.numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("sa,sb", [
    ((2, 3, 5, 8), (2, 3, 8, 5)),      # attention scores: (B, H, S, D) x (B, H, D, S)
    ((2, 5, 8), (8, 6)),               # a projection: (B, S, D) x (D, E), one dense
    ((3, 1, 3, 4), (1, 2, 4, 2)),      # both sides broadcast
    ((1, 3, 5, 8), (2, 3, 8, 4)),      # the left side broadcasts over the batch
    ((2, 1, 5, 8), (2, 4, 8, 3)),      # ... over the heads
    ((4,), (2, 4, 1)),                 # a vector against a batch
    ((2, 3, 4, 6), (6,)),
])
def test_matmul_broadcasts_like_onnxruntime(sa: tuple, sb: tuple) -> None:
    a, b = _f32(*sa), _f32(*sb)
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, opset=13)
    want = onnxruntime_outputs(model, [a, b])
    for native in (False, True):
        assert_outputs(run_irtool(model, [a, b], native), want, 1e-5, 1e-5)


def test_matmul_transposes_only_weights() -> None:
    """A 2-d weight becomes nn.dense of its (hoisted) transpose; a 2-d activation is read as it
    is by one batch matmul, never transposed per call."""
    from irtool.ir.expr import Call
    from irtool.ir.visitor import post_order
    a, b = _f32(2, 5, 8), _f32(8, 6)
    for inits, ops in (({"b": b}, {"nn.dense", "transpose"}), ({}, {"nn.batch_matmul"})):
        inputs = {"a": a} if inits else {"a": a, "b": b}
        model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], inputs, opset=13, inits=inits)
        body = import_model(model).module["main"].body
        called = {n.op.name for n in post_order(body) if isinstance(n, Call)} - {"reshape"}
        assert called == ops
        assert_outputs(run_irtool(model, list(inputs.values()), native=True), [a @ b], 1e-5, 1e-5)


def test_matmul_refuses_batches_that_do_not_broadcast() -> None:
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": _f32(2, 3, 4), "b": _f32(3, 4, 5)}, opset=13)
    with pytest.raises(DiagnosticError, match=r"MatMul.*batch dimensions do not broadcast"):
        import_model(model)


def test_attention_with_a_cache_matches_onnxruntime() -> None:
    """3-d GQA (6 query heads on 2 key/value heads) with a past cache, a causal mask offset by the
    cache and a boolean padding mask, all four outputs; the KV cache is an initializer."""
    q, k, v = _f32(2, 3, 24), _f32(2, 3, 8), _f32(2, 3, 10)
    past_k, past_v = _f32(2, 2, 4, 4), _f32(2, 2, 4, 5)
    mask = RNG.random((2, 1, 3, 7)) < 0.8
    node = helper.make_node("Attention", ["q", "k", "v", "mask", "past_k", "past_v"], ["y", "pk", "pv", "qk"],
                            q_num_heads=6, kv_num_heads=2, is_causal=1, scale=0.3)
    inputs = {"q": q, "k": k, "v": v, "mask": mask}
    model = _model([node], inputs, ("y", "pk", "pv", "qk"), inits={"past_k": past_k, "past_v": past_v})
    want = onnxruntime_outputs(model, list(inputs.values()))
    for native in (False, True):
        assert_outputs(run_irtool(model, list(inputs.values()), native), want, 1e-5, 1e-5)


@pytest.mark.parametrize("inputs,attrs,message", [
    ({"q": (2, 3, 8), "k": (2, 3, 8), "v": (2, 3, 8)}, {}, "q_num_heads and kv_num_heads"),
    ({"q": (1, 3, 2, 4), "k": (1, 2, 2, 4), "v": (1, 2, 2, 4)}, {}, "3 query heads for 2 key"),
    ({"q": (1, 2, 2, 4), "k": (1, 2, 2, 4), "v": (1, 2, 2, 4), "mask": (2, 5)}, {}, "longer than the 2 keys"),
    ({"q": (1, 1, 2, 4), "k": (1, 1, 3, 4), "v": (1, 1, 3, 4)}, {"scale": -1.0}, r"scale=-1\.0"),
    ({"q": (1, 1, 2, 4), "k": (1, 1, 3, 4), "v": (1, 1, 3, 4)}, {"softmax_precision": 7}, "softmax_precision int64"),
])
def test_attention_refuses_inconsistent_shapes(inputs: dict, attrs: dict, message: str) -> None:
    arrays = {n: _f32(*s) for n, s in inputs.items()}
    model = _model([helper.make_node("Attention", list(arrays), ["y"], **attrs)], arrays)
    with pytest.raises(DiagnosticError, match=message) as info:
        import_model(model)
    assert "node #0: unsupported: Attention (opset 23): " in str(info.value)


@pytest.mark.parametrize("mask_dtype", ["bool", "float32"])
def test_fully_masked_rows_are_zero_with_a_causal_mask(mask_dtype: str) -> None:
    """A mask that forbids every key of a row gives that row zeros, also when it is combined
    with a causal mask known at import time (onnx's reference evaluator is the oracle)."""
    from onnx.reference import ReferenceEvaluator
    arrays = {"q": _f32(1, 2, 3, 4), "k": _f32(1, 2, 5, 4), "v": _f32(1, 2, 5, 4)}
    allowed = RNG.random((3, 5)) < 0.8
    allowed[1] = False
    arrays["m"] = allowed if mask_dtype == "bool" else np.where(allowed, 0, -np.inf).astype(np.float32)
    model = _model([helper.make_node("Attention", list(arrays), ["y"], is_causal=1)], arrays)
    want = ReferenceEvaluator(model).run(None, arrays)
    assert not np.any(want[0][:, :, 1])
    for native in (False, True):
        assert_outputs(run_irtool(model, list(arrays.values()), native), want, 1e-5, 1e-6)


def test_attention_of_no_queries_is_empty() -> None:
    arrays = {"q": _f32(1, 1, 0, 4), "k": _f32(1, 1, 3, 4), "v": _f32(1, 1, 3, 4)}
    model = _model([helper.make_node("Attention", list(arrays), ["y"], is_causal=1)], arrays)
    (y,) = run_irtool(model, list(arrays.values()))
    assert y.shape == (1, 1, 0, 4) and y.dtype == np.float32


def test_past_key_needs_past_value() -> None:
    arrays = {n: _f32(1, 1, 2, 4) for n in ("q", "k", "v", "pk")}
    model = _model([helper.make_node("Attention", ["q", "k", "v", "", "pk"], ["y"])], arrays)
    with pytest.raises(DiagnosticError, match="past_key and past_value must be given together"):
        import_model(model)


def test_rotary_embedding_matches_onnxruntime() -> None:
    x, cos, sin = _f32(2, 4, 3, 8), _f32(10, 2), _f32(10, 2)
    positions = np.array([[0, 4, 9], [1, 1, 2]], np.int64)
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "p"], ["y"], interleaved=1, rotary_embedding_dim=4)
    inputs = {"x": x, "cos": cos, "sin": sin, "p": positions}
    model = _model([node], inputs)
    want = onnxruntime_outputs(model, list(inputs.values()))
    assert_outputs(run_irtool(model, list(inputs.values())), want, 1e-6, 1e-6)


def test_swiglu_refuses_broadcasting() -> None:
    arrays = {"a": _f32(2, 4), "b": _f32(1, 4)}
    model = _model([helper.make_node("SwiGLU", ["a", "b"], ["y"])], arrays, opset=28)
    with pytest.raises(DiagnosticError, match="equal shapes and dtypes"):
        import_model(model)


def test_float_masks_must_have_the_attention_dtype() -> None:
    arrays = {"q": _f32(1, 1, 2, 4), "k": _f32(1, 1, 2, 4), "v": _f32(1, 1, 2, 4),
              "m": np.zeros((2, 2), np.float64)}
    model = _model([helper.make_node("Attention", ["q", "k", "v", "m"], ["y"])], arrays)
    with pytest.raises(DiagnosticError, match="a float64 attn_mask for float32 attention"):
        import_model(model)


def test_attention_refuses_integer_tensors() -> None:
    q = helper.make_tensor_value_info("q", TensorProto.INT32, (1, 1, 2, 4))
    graph = helper.make_graph([helper.make_node("Attention", ["q", "q", "q"], ["y"])], "g", [q],
                              [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    with pytest.raises(DiagnosticError, match="attention of int32"):
        import_model(model)
