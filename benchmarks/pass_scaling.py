"""How the standard pass pipeline scales with program size.

Builds ResNet-like graphs (basic blocks: conv → batch norm → relu → conv → batch norm → add →
relu, each block a global `@blockN` marked `Inline=1`, weights and statistics as constants) of
about 1k, 10k and 100k operators, runs `inline,simplify-inference,fold-constant,fuse-ops` with
verification after every pass, and prints the wall (and CPU) time per size, the exponent of a log-log
fit (target ≤ 1.15, i.e. no worse than n log n) and whether anything hit Python's recursion
limit. The 100k case should finish in under 60 s.

    python benchmarks/pass_scaling.py [--sizes 1000,10000,100000] [--pipeline P] [--no-verify]
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from irtool.ir import Attrs, Call, Constant, Function, GlobalVar, IRModule, Op, TupleGetItem, Var
from irtool.ir.types import TensorType
from irtool.ops import get_op
from irtool.passes import parse_pipeline, run_pipeline

PIPELINE = "inline,simplify-inference,fold-constant,fuse-ops"
CHANNELS, SIZE = 4, 4
OPS_PER_BLOCK = 9  # conv, batch_norm, .0, relu, conv, batch_norm, .0, add, relu


def _call(name: str, args: list, **attrs: object) -> Call:
    opdef = get_op(name)
    assert opdef is not None, name
    return Call(Op(name), args, opdef.normalize_attrs(attrs))


def _block(rng: np.random.Generator) -> Function:
    t = TensorType((1, CHANNELS, SIZE, SIZE), "float32")
    x = Var("x", t)

    def conv(inp: object) -> Call:
        w = Constant(rng.normal(size=(CHANNELS, CHANNELS, 3, 3)).astype("float32"))
        return _call("nn.conv2d", [inp, w], padding=[1, 1, 1, 1], channels=CHANNELS, kernel_size=[3, 3])

    def bn(inp: object) -> TupleGetItem:
        stats = [Constant(rng.normal(size=CHANNELS).astype("float32")) for _ in range(3)]
        stats.append(Constant(rng.uniform(0.5, 2, size=CHANNELS).astype("float32")))
        return TupleGetItem(_call("nn.batch_norm", [inp, *stats]), 0)

    y = _call("nn.relu", [bn(conv(x))])
    y = _call("nn.relu", [_call("add", [bn(conv(y)), x])])
    return Function([x], y, t, attrs=Attrs({"Inline": 1}))


def resnet_like(n_ops: int, seed: int = 0) -> IRModule:
    """A chain of basic blocks with about `n_ops` operator nodes in all."""
    rng = np.random.default_rng(seed)
    t = TensorType((1, CHANNELS, SIZE, SIZE), "float32")
    mod = IRModule()
    data = Var("data", t)
    node: object = data
    for i in range(max(1, n_ops // OPS_PER_BLOCK)):
        mod.add_function(f"block{i}", _block(rng))
        node = Call(GlobalVar(f"block{i}"), [node])
    mod.add_function("main", Function([data], node, t))  # type: ignore[arg-type]
    return mod


def measure(n_ops: int, pipeline: str, verify: bool) -> tuple[float, float, str]:
    """Wall and CPU seconds of one run; CPU time shows how much of the wall time a busy machine added."""
    mod = resnet_like(n_ops)
    passes = parse_pipeline(pipeline)
    started, cpu_started = time.perf_counter(), time.process_time()
    status = "ok"
    try:
        run_pipeline(mod, passes, verify_each=verify)
    except RecursionError:
        status = "RecursionError"
    return time.perf_counter() - started, time.process_time() - cpu_started, status


def fitted_exponent(sizes: list[int], seconds: list[float]) -> float:
    """Slope of log(time) against log(size), least squares."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(t, 1e-9)) for t in seconds]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="operator counts, comma separated")
    parser.add_argument("--pipeline", default=PIPELINE)
    parser.add_argument("--no-verify", dest="verify", action="store_false", help="skip verify-each")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"pipeline: {args.pipeline}  (verify-each {'on' if args.verify else 'off'}; "
          f"recursion limit {sys.getrecursionlimit()})")
    print(f"{'operators':>10}  {'seconds':>8}  {'cpu s':>8}  {'µs/op':>7}  status")
    seconds, ok = [], True
    for n in sizes:
        t, cpu, status = measure(n, args.pipeline, args.verify)
        seconds.append(t)
        ok &= status == "ok"
        print(f"{n:>10}  {t:>8.2f}  {cpu:>8.2f}  {1e6 * t / n:>7.1f}  {status}", flush=True)
    if len(sizes) >= 2:
        exponent = fitted_exponent(sizes, seconds)
        print(f"fitted exponent: {exponent:.3f} (target <= 1.15)")
        ok &= exponent <= 1.15
    if max(sizes) >= 100000:
        ok &= seconds[sizes.index(max(sizes))] < 60
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
