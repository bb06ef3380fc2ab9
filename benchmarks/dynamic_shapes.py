"""What a dynamic batch costs natively (docs/native-relay.md, "Dynamic shapes"): one module
compiled for `Tensor[(?, ...)]` inputs against a twin compiled for each batch size, A/B
alternated in one process.

    python benchmarks/dynamic_shapes.py [--batches 1,16,64,256] [--repeat 40] [--models mlp,rnn,tokens,dense]

Models: `samples/mlp.relay` (784 → 128 → 10, softmax) with its batch made `?`, a recurrent
cell `tanh(dense(x) + dense(h) + b)` on 64-wide states unrolled by tail recursion over 16 steps,
a token block (dense, bias, relu, residual, dense, softmax) on `Tensor[(?, ?, 64)]`, run at
(batch, 16): two `?`s on the kernels' row prefix, and one dense on `Tensor[(?, ?, 64)]` at
(batch, 128) against the same product written on 2-d rows (its twin's best form).
The dynamic module is built once and run at every batch size; each static twin is the same text
with the batch written out (the MLP's twin runs on the AOT path, the RNN's on the functions path
with static shapes). Per batch: the median and the minimum CPU time (`time.process_time`) of
`NativeModule.run` (numpy in, numpy out: the dynamic module's outputs are allocated by `_run`
and copied out), --repeat calls each after one warm-up call of each; the ratio of the medians
over rounds and of the minima; outputs checked equal (to float32 rounding: the tiles' schedules
sum in another order).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from harness import alternate, describe_host, load_average, thread_counts, versus
import irtool
from irtool.syntax.parser import parse

ROOT = Path(__file__).resolve().parent.parent
STEPS = 16
RNN = """#[version = "0.0.5"]
def @loop(%i: int32, %h: Tensor[(B, 64), float32], %x: Tensor[(B, 64), float32], %wx: Tensor[(64, 64), float32],
          %wh: Tensor[(64, 64), float32], %b: Tensor[(64), float32]) -> Tensor[(B, 64), float32] {
  if (%i == 0) { %h } else {
    @loop(%i - 1, tanh(nn.bias_add(add(nn.dense(%x, %wx), nn.dense(%h, %wh)), %b)), %x, %wx, %wh, %b)
  }
}
def @main(%x: Tensor[(B, 64), float32], %h: Tensor[(B, 64), float32], %wx: Tensor[(64, 64), float32],
          %wh: Tensor[(64, 64), float32], %b: Tensor[(64), float32]) -> Tensor[(B, 64), float32] {
  @loop(STEPS, %h, %x, %wx, %wh, %b)
}
""".replace("STEPS", str(STEPS))
# A token block over a batch and a sequence axis, both `?` in the dynamic module (rows = B·T).
TOKENS = """#[version = "0.0.5"]
def @main(%x: Tensor[(B, T, 64), float32], %w: Tensor[(64, 64), float32], %b: Tensor[(64), float32],
          %v: Tensor[(16, 64), float32]) -> Tensor[(B, T, 16), float32] {
  %0 = nn.relu(nn.bias_add(nn.dense(%x, %w, units=64), %b, axis=-1));
  nn.softmax(nn.dense(add(%0, %x), %v, units=16), axis=-1)
}
"""
TOKENS_PER_ROW = 16
# One dense over `Tensor[(?, ?, 64)]` at (batch, 128); its static twin is the same product on the
# 2-d form, `(B·128, 64)`, which takes the tiled dense schedule the dynamic kernels should match.
DENSE = """#[version = "0.0.5"]
def @main(%x: Tensor[(B, T, 64), float32], %w: Tensor[(64, 64), float32]) -> Tensor[(B, T, 64), float32] {
  nn.dense(%x, %w, units=64)
}
"""
DENSE_TWIN = """#[version = "0.0.5"]
def @main(%x: Tensor[(B, T, 64), float32], %w: Tensor[(64, 64), float32]) -> Tensor[(B, T, 64), float32] {
  reshape(nn.dense(reshape(%x, newshape=[-1, 64]), %w, units=64), newshape=[B, T, 64])
}
"""
DENSE_ROWS = 128


def mlp_text(batch: str) -> str:
    text = (ROOT / "samples/mlp.relay").read_text()
    return text.replace("Tensor[(1, 784), float32]", f"Tensor[({batch}, 784), float32]").replace(
        "Tensor[(1, 10), float32] {", f"Tensor[({batch}, 10), float32] {{")


def inputs_for(model: str, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    def f(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)
    if model == "mlp":
        return {"x": f(batch, 784), "w1": f(128, 784), "b1": f(128), "w2": f(10, 128), "b2": f(10)}
    if model == "tokens":
        return {"x": f(batch, TOKENS_PER_ROW, 64), "w": f(64, 64), "b": f(64), "v": f(16, 64)}
    if model == "dense":
        return {"x": f(batch, DENSE_ROWS, 64), "w": f(64, 64)}
    return {"x": f(batch, 64), "h": f(batch, 64), "wx": f(64, 64), "wh": f(64, 64), "b": f(64)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=thread_counts, default=[1, 16, 64, 256], help="batch sizes (comma-separated)")
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--models", default="mlp,rnn,tokens,dense", help="which models (comma-separated)")
    args = ap.parse_args()
    host = describe_host()
    print(f"host: {host.cpu}, LLVM {host.llvm_cpu} ({', '.join(host.isa)}), load average {load_average():.1f}")
    texts = {"mlp": mlp_text, "rnn": lambda b: RNN.replace("(B,", f"({b},"),
             "tokens": lambda b: TOKENS.replace("(B, T,", "(?, ?," if b == "?" else f"({b}, {TOKENS_PER_ROW},"),
             "dense": lambda b: DENSE.replace("(B, T,", "(?, ?,") if b == "?" else
             DENSE_TWIN.replace("B, T,", f"{b}, {DENSE_ROWS},")}
    models = args.models.split(",")
    rng = np.random.default_rng(0)
    print("| model | batch | dynamic ms (median / min) | static twin ms (median / min) | ratio (median / min) |")
    print("|---|---|---|---|---|")
    for model, text in [(m, texts[m]) for m in models]:
        dynamic = irtool.build(parse(text("?"), f"{model}_dyn.relay"))
        for batch in args.batches:
            static = irtool.build(parse(text(str(batch)), f"{model}_{batch}.relay"))
            feed = inputs_for(model, batch, rng)
            got, want = dynamic(**feed), static(**feed)
            scale = float(np.abs(want).max(initial=1.0))
            assert got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5 * scale), model
            times = alternate({"dynamic": lambda: dynamic(**feed), "static": lambda: static(**feed)}, args.repeat,
                              clock=time.process_time)
            v = versus(times["dynamic"], times["static"])
            print(f"| {model} | {batch} | {v.ms:.3f} / {v.min_ms:.3f} | {v.baseline_ms:.3f} / {v.baseline_min_ms:.3f} "
                  f"| {v.ratio:.2f} / {v.ratio_min:.2f} |", flush=True)
    print(f"load average at the end: {load_average():.1f}")


if __name__ == "__main__":
    main()
