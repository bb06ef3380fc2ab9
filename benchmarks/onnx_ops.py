"""Native speed of issue 14's operators (and issue 15's data-dependent ones) against onnxruntime, one thread.

    python benchmarks/onnx_ops.py [--only layernorm,resize,...] [--repeat N]

Each row is a one-node ONNX graph (LayerNormalization with the residual Add before it, as BERT
exports it), imported and compiled by `irtool.build`, and the same graph in onnxruntime
(ORT_ENABLE_ALL, one thread) timed alternately in the same run (`harness.alternate`: `--repeat`
A/B rounds after a warm-up); medians, the median per-round ratio and the ratio of the fastest
runs, under a line naming the host.
The native result is checked against onnxruntime's before timing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
from onnx import helper, numpy_helper

import irtool
from harness import alternate, describe_host, versus
from irtool.frontend.onnx import import_model
from irtool.frontend.onnx_zoo import onnxruntime_session

RNG = np.random.default_rng(0)


def _model(nodes: list, inputs: dict[str, np.ndarray], inits: dict[str, np.ndarray], opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "bench",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _cases() -> dict[str, tuple[str, list, dict, dict, int]]:
    f = np.float32
    x768 = RNG.standard_normal((128, 768)).astype(f)
    img = RNG.standard_normal((1, 64, 56, 56)).astype(f)
    n = helper.make_node
    return {
        "layernorm": ("LayerNormalization 128x768 after Add (BERT-base)",
                      [n("Add", ["x", "r"], ["s"]), n("LayerNormalization", ["s", "g", "b"], ["y"], epsilon=1e-12)],
                      {"x": x768, "r": x768.copy()},
                      {"g": RNG.standard_normal(768).astype(f), "b": RNG.standard_normal(768).astype(f)}, 17),
        "groupnorm": ("GroupNormalization 1x320x32x32, 32 groups",
                      [n("GroupNormalization", ["x", "g", "b"], ["y"], num_groups=32)],
                      {"x": RNG.standard_normal((1, 320, 32, 32)).astype(f)},
                      {"g": np.ones(320, f), "b": np.zeros(320, f)}, 21),
        "resize-nearest": ("Resize nearest x2 1x64x56x56 (asymmetric, floor)",
                           [n("Resize", ["x", "", "s"], ["y"], mode="nearest", coordinate_transformation_mode="asymmetric",
                              nearest_mode="floor")], {"x": img}, {"s": np.array([1, 1, 2, 2], f)}, 13),
        "resize-linear": ("Resize linear x2 1x64x56x56 (half_pixel)",
                          [n("Resize", ["x", "", "s"], ["y"], mode="linear")], {"x": img},
                          {"s": np.array([1, 1, 2, 2], f)}, 13),
        "resize-cubic": ("Resize cubic x2 1x64x56x56 (half_pixel, a = -0.75)",
                         [n("Resize", ["x", "", "s"], ["y"], mode="cubic")], {"x": img},
                         {"s": np.array([1, 1, 2, 2], f)}, 13),
        "gather-elements": ("GatherElements 128x768, axis 1",
                            [n("GatherElements", ["x", "i"], ["y"], axis=1)],
                            {"x": x768, "i": RNG.integers(0, 768, (128, 768)).astype(np.int64)}, {}, 13),
        "topk": ("TopK k=5 of 64x1000", [n("TopK", ["x", "k"], ["y", "yi"], axis=1)],
                 {"x": RNG.standard_normal((64, 1000)).astype(f)}, {"k": np.array([5], np.int64)}, 11),
        "cumsum": ("CumSum 128x768, axis 1", [n("CumSum", ["x", "a"], ["y"])], {"x": x768},
                   {"a": np.array(1, np.int64)}, 14),
        "nonzero": ("NonZero 1000x1000, half zero", [n("NonZero", ["x"], ["y"])],
                    {"x": np.maximum(RNG.standard_normal((1000, 1000)), 0).astype(f)}, {}, 13),
        "compress": ("Compress 1000x256 rows by a run-time condition (half true)",
                     [n("Compress", ["x", "c"], ["y"], axis=0)],
                     {"x": RNG.standard_normal((1000, 256)).astype(f), "c": RNG.random(1000) < 0.5}, {}, 11),
        "unique": ("Unique sorted of 100,000 values, 10,000 distinct (all four outputs computed)",
                   [n("Unique", ["x"], ["y", "i", "inv", "counts"])],
                   {"x": RNG.integers(0, 10_000, 100_000).astype(f)}, {}, 11),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    cases = _cases()
    chosen = [c for c in args.only.split(",") if c] or list(cases)
    print(describe_host().line())
    print("| operator | irtool ms | onnxruntime ms | ratio | ratio of minima | compile s |")
    print("|---|---|---|---|---|---|")
    for key in chosen:
        label, nodes, inputs, inits, opset = cases[key]
        model = _model(nodes, inputs, inits, opset)
        t0 = time.perf_counter()
        native = irtool.build(import_model(model, embed_params=True).module)
        compile_s = time.perf_counter() - t0
        session = onnxruntime_session(model)
        ours = native(**inputs)
        theirs = session.run(None, inputs)[0]
        first = ours[0] if isinstance(ours, tuple) else ours
        np.testing.assert_allclose(first, theirs, rtol=1e-4, atol=1e-4)
        times = alternate({"irtool": lambda: native(**inputs), "onnxruntime": lambda: session.run(None, inputs)},
                          args.repeat, warmup=2)
        r = versus(times["irtool"], times["onnxruntime"])
        print(f"| {label} | {r.ms:.3f} | {r.baseline_ms:.3f} | {r.ratio:.2f} | {r.ratio_min:.2f} | {compile_s:.2f} |")


if __name__ == "__main__":
    main()
