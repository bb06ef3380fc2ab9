"""Transformer attention and int8-quantized kernels natively, against onnxruntime (1 thread).

    python benchmarks/attention_int8.py [--only attention,matmul,int8] [--repeat N] [--json OUT]

Each row is one small ONNX graph imported with its weights embedded, compiled with
`irtool.build` and timed beside an onnxruntime session of the same model, alternately
(`harness.alternate`: `--repeat` A/B rounds after a warm-up; medians, the median per-round ratio
and the ratio of the fastest runs; the host line first):

- attention: BERT-base sizes (batch 1, 12 heads, 128 tokens, head size 64) as exporters write
  it at opset 13 (Transpose, MatMul, Mul, Add of a causal mask, Softmax, MatMul), and the ONNX
  `Attention` operator (opset 23) when the importer accepts that opset;
- matmul: the Q·Kᵀ batch matmul alone, and a 128x768 · 768x3072 projection with a constant
  weight and with the weight a graph input;
- int8: QLinearMatMul 256x512 · 512x512 (uint8 activations, int8 weights) and QLinearConv
  1x64x56x56, 64 filters 3x3 (the int8 version of `kernels.py`'s conv2d row).
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import irtool  # noqa: E402
from harness import alternate, describe_host, versus  # noqa: E402
from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.frontend.onnx_zoo import onnxruntime_session  # noqa: E402

RNG = np.random.default_rng(0)


def _model(nodes: list, inputs: dict[str, np.ndarray], inits: dict[str, Any], opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "bench",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 17 else 10
    return model


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def attention_cases() -> list[tuple[str, onnx.ModelProto, dict[str, np.ndarray]]]:
    b, h, s, d = 1, 12, 128, 64
    q, k, v = _f32(b, h, s, d), _f32(b, h, s, d), _f32(b, h, s, d)
    mask = np.triu(np.full((s, s), -1e9, np.float32), 1)
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]),
             helper.make_node("Mul", ["qk", "scale"], ["scaled"]),
             helper.make_node("Add", ["scaled", "mask"], ["biased"]),
             helper.make_node("Softmax", ["biased"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    inputs = {"q": q, "k": k, "v": v}
    cases = [("attention, exported pattern (opset 13)",
              _model(nodes, inputs, {"scale": np.float32(1 / np.sqrt(d)), "mask": mask}, 13), inputs),
             ("Attention operator, causal (opset 23)",
              _model([helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)], inputs, {}, 23), inputs)]
    return cases


def matmul_cases() -> list[tuple[str, onnx.ModelProto, dict[str, np.ndarray]]]:
    q, kt = _f32(1, 12, 128, 64), _f32(1, 12, 64, 128)
    x, w = _f32(1, 128, 768), _f32(768, 3072)
    matmul = [helper.make_node("MatMul", ["a", "b"], ["y"])]
    return [("batch matmul Q·Kᵀ 12x128x64 · 12x64x128", _model(matmul, {"a": q, "b": kt}, {}, 13), {"a": q, "b": kt}),
            ("projection 128x768 · 768x3072, constant weight", _model(matmul, {"a": x}, {"b": w}, 13), {"a": x}),
            ("projection 128x768 · 768x3072, weight an input", _model(matmul, {"a": x, "b": w}, {}, 13),
             {"a": x, "b": w})]


def int8_cases() -> list[tuple[str, onnx.ModelProto, dict[str, np.ndarray]]]:
    a = RNG.integers(0, 256, (256, 512)).astype(np.uint8)
    inits = {"as": np.float32(0.02), "az": np.uint8(128), "w": RNG.integers(-127, 128, (512, 512)).astype(np.int8),
             "ws": np.float32(0.01), "wz": np.int8(0), "ys": np.float32(0.5), "yz": np.uint8(100)}
    qmatmul = helper.make_node("QLinearMatMul", ["x", "as", "az", "w", "ws", "wz", "ys", "yz"], ["y"])
    x = RNG.integers(0, 256, (1, 64, 56, 56)).astype(np.uint8)
    conv_inits = {"xs": np.float32(0.02), "xz": np.uint8(128), "w": RNG.integers(-127, 128, (64, 64, 3, 3)).astype(np.int8),
                  "ws": np.full(64, 0.01, np.float32), "wz": np.zeros(64, np.int8), "ys": np.float32(0.5),
                  "yz": np.uint8(100)}
    qconv = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1, 1, 1, 1])
    return [("QLinearMatMul 256x512 · 512x512", _model([qmatmul], {"x": a}, inits, 13), {"x": a}),
            ("QLinearConv 1x64x56x56, 64 3x3 filters", _model([qconv], {"x": x}, conv_inits, 13), {"x": x})]


GROUPS: dict[str, Callable[[], list]] = {"attention": attention_cases, "matmul": matmul_cases, "int8": int8_cases}


def run_case(name: str, model: onnx.ModelProto, inputs: dict[str, np.ndarray], repeat: int) -> dict[str, Any]:
    row: dict[str, Any] = {"case": name}
    try:
        module = import_model(model, embed_params=True).module
    except DiagnosticError as exc:
        row["error"] = str(exc).splitlines()[-1].strip()
        return row
    start = time.perf_counter()
    native = irtool.build(module)
    row["compile_s"] = round(time.perf_counter() - start, 2)
    session = onnxruntime_session(model)
    args = list(inputs.values())
    ours, theirs = native(*args), session.run(None, inputs)[0]
    row["max_abs_diff"] = float(np.max(np.abs(ours.astype(np.float64) - theirs.astype(np.float64))))
    times = alternate({"irtool": lambda: native(*args), "onnxruntime": lambda: session.run(None, inputs)}, repeat)
    result = versus(times["irtool"], times["onnxruntime"])
    row.update(irtool_ms=round(result.ms, 3), onnxruntime_ms=round(result.baseline_ms, 3),
               ratio=round(result.ratio, 2), ratio_min=round(result.ratio_min, 2))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups: " + ", ".join(GROUPS))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()
    rows = []
    print(describe_host().line())
    print("| case | irtool ms | onnxruntime ms | ratio | ratio of minima | compile s | max abs diff |\n"
          "|---|---|---|---|---|---|---|")
    for group in args.only.split(","):
        for name, model, inputs in GROUPS[group]():
            row = run_case(name, model, inputs, args.repeat)
            rows.append(row)
            if "error" in row:
                print(f"| {name} | – | – | – | – | – | {row['error']} |")
            else:
                print(f"| {name} | {row['irtool_ms']} | {row['onnxruntime_ms']} | {row['ratio']} | {row['ratio_min']} "
                      f"| {row['compile_s']} "
                      f"| {row['max_abs_diff']:.2g} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
