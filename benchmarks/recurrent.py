"""Native speed of ONNX's recurrent layers (issue 15: a loop over time, docs/onnx.md) against
onnxruntime, one thread.

    python benchmarks/recurrent.py [--only lstm,gru,...] [--repeat N]

Each row is one RNN/GRU/LSTM node with its weights as initializers and every output used,
imported and compiled by `irtool.build`, and the same model in onnxruntime (ORT_ENABLE_ALL, one
thread), timed alternately in the same run (`harness.alternate`); medians, the median per-round
ratio and the ratio of the fastest runs, under a line naming the host. The native outputs are
checked against onnxruntime's before timing.
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
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
# key -> (operator, direction, steps, batch, input size, hidden size)
CASES = {
    "lstm": ("LSTM", "forward", 32, 4, 64, 128),
    "lstm-bi": ("LSTM", "bidirectional", 32, 4, 64, 128),
    "gru": ("GRU", "forward", 32, 4, 64, 128),
    "rnn": ("RNN", "forward", 64, 1, 32, 64),
}


def _model(op: str, direction: str, steps: int, batch: int, width: int, hidden: int) -> tuple[onnx.ModelProto, dict]:
    d = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    f = np.float32
    inits = {"w": RNG.standard_normal((d, g * hidden, width)).astype(f) * 0.1,
             "r": RNG.standard_normal((d, g * hidden, hidden)).astype(f) * 0.1,
             "b": RNG.standard_normal((d, 2 * g * hidden)).astype(f) * 0.1}
    outputs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    node = helper.make_node(op, ["x", "w", "r", "b"], outputs, hidden_size=hidden, direction=direction)
    x = RNG.standard_normal((steps, batch, width)).astype(f)
    graph = helper.make_graph([node], "bench", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                              [helper.make_empty_tensor_value_info(o) for o in outputs],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": x}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    chosen = [c for c in args.only.split(",") if c] or list(CASES)
    print(describe_host().line())
    print("| layer | irtool ms | onnxruntime ms | ratio | ratio of minima | compile s |")
    print("|---|---|---|---|---|---|")
    for key in chosen:
        op, direction, steps, batch, width, hidden = CASES[key]
        model, inputs = _model(op, direction, steps, batch, width, hidden)
        t0 = time.perf_counter()
        native = irtool.build(import_model(model, embed_params=True).module)
        compile_s = time.perf_counter() - t0
        session = onnxruntime_session(model)
        for ours, theirs in zip(native(**inputs), session.run(None, inputs), strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
        times = alternate({"irtool": lambda: native(**inputs), "onnxruntime": lambda: session.run(None, inputs)},
                          args.repeat, warmup=2)
        r = versus(times["irtool"], times["onnxruntime"])
        label = f"{op} {direction}, T={steps}, B={batch}, I={width}, H={hidden}"
        print(f"| {label} | {r.ms:.3f} | {r.baseline_ms:.3f} | {r.ratio:.2f} | {r.ratio_min:.2f} | {compile_s:.2f} |")


if __name__ == "__main__":
    main()
