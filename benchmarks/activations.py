"""What an activation costs after a convolution, natively, against onnxruntime (one thread).

    python benchmarks/activations.py [--repeat N] [--json OUT]

The layer is MobileNetV3/EfficientNet-sized: 1x64x56x56, 64 filters 3x3, pad 1. Each row is the
ONNX model Conv + activation imported and compiled (`irtool.build`); the activation fuses into
the convolution's epilogue, so the row minus the first (Conv alone) is the activation's cost.
onnxruntime runs the same model in the same process, alternately with irtool
(`harness.alternate`: `--repeat` A/B rounds after a warm-up, so load hits both alike). Times are
the median and the minimum; on a shared machine compare rows of one run. The host line comes first.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

import irtool
from harness import alternate, describe_host
from irtool.frontend.onnx import import_model
from irtool.frontend.onnx_support import newest_opset
from irtool.frontend.onnx_zoo import onnxruntime_session

# (label, ONNX op type or None for the bare convolution, attributes, opset the op needs)
ROWS: list[tuple[str, str | None, dict[str, Any], int]] = [
    ("Conv alone", None, {}, 13),
    ("Relu", "Relu", {}, 13),
    ("HardSwish", "HardSwish", {}, 14),
    ("HardSigmoid", "HardSigmoid", {}, 13),
    ("Swish (SiLU)", "Swish", {}, 24),
    ("Gelu", "Gelu", {}, 20),
    ("Gelu tanh", "Gelu", {"approximate": "tanh"}, 20),
    ("Mish", "Mish", {}, 18),
]


def _model(op: str | None, attrs: dict[str, Any], opset: int, w: np.ndarray, b: np.ndarray) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if op else "y"], pads=[1, 1, 1, 1])]
    if op:
        nodes.append(helper.make_node(op, ["c"], ["y"], **attrs))
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64, 56, 56])],
                              [helper.make_empty_tensor_value_info("y")],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    rows = []
    print(describe_host().line())
    print(f"{'activation':14s} {'irtool median/min ms':>21s} {'min over Conv':>14s} {'onnxruntime median/min ms':>26s}")
    base = None
    for label, op, attrs, opset in ROWS:
        if opset > newest_opset():
            print(f"{label:14s} (opset {opset} is newer than the importer's {newest_opset()})")
            continue
        model = _model(op, attrs, opset, w, b)
        native = irtool.build(import_model(model, embed_params=True).module)
        session = onnxruntime_session(model)
        times = alternate({"irtool": lambda: native.run(x), "onnxruntime": lambda: session.run(None, {"x": x})},
                          args.repeat)
        ours, theirs = ((statistics.median(t), min(t)) for t in (times["irtool"], times["onnxruntime"]))
        base = ours[1] if base is None else base
        rows.append({"activation": label, "irtool_ms": ours[0], "irtool_min_ms": ours[1], "over_conv_min_ms": ours[1] - base,
                     "onnxruntime_ms": theirs[0], "onnxruntime_min_ms": theirs[1]})
        print(f"{label:14s} {ours[0]:12.2f} /{ours[1]:7.2f} {ours[1] - base:14.2f} {theirs[0]:17.2f} /{theirs[1]:7.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
