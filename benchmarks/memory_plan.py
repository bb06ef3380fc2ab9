"""Memory plans of real network shapes: no-reuse, TVM's greedy, greedy-by-size, the lower bound.

ONNX import does not exist yet, so the networks are generated as Relay text with the shapes of
ResNet-50 (bottleneck stages 3-4-6-3), Inception v1 (GoogLeNet's nine inception modules) and
DenseNet-121 (dense blocks 6-12-24-16, growth 32; batch norm left out):
batch 1, 3x224x224, float32, convolutions with ReLU, residual adds, channel concatenations,
weights as parameters (not planned). Each graph is fused with TVM's rules, then planned.

    python benchmarks/memory_plan.py [--models resnet50,inception_v1,densenet121] [--json OUT]

Anchors (reference/onnx-zoo-anchors.md, the real ONNX graphs after fusion): TVM's greedy is
1.29x the lower bound (geometric mean), 1.36x on ResNet-50, 1.61x on Inception v1, 1.34x on
DenseNet-121; greedy-by-size reaches the bound on the first two and is 1.11x on DenseNet-121. The last column adds in-place reuse and
concatenate-in-place (inputs of a concatenation written straight into their slices). Every plan
is checked with the independent checker before it is counted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

from irtool.analysis.liveness import compute_liveness
from irtool.analysis.memory_plan import plan_memory
from irtool.analysis.typecheck import infer_types
from irtool.passes.verify_memory_plan import check_plan
from irtool.passes import run
from irtool.syntax.parser import parse

MIB = 1 << 20


class _Net:
    """Writes a Relay `main` line by line; tracks each value's NCHW shape."""

    def __init__(self) -> None:
        self.params: list[str] = ["%data: Tensor[(1, 3, 224, 224), float32]"]
        self.lines: list[str] = []
        self.count = 0
        self.shapes: dict[str, tuple[int, int, int, int]] = {"%data": (1, 3, 224, 224)}

    def emit(self, expr: str, shape: tuple[int, int, int, int]) -> str:
        name = f"%{self.count}"
        self.count += 1
        self.lines.append(f"  {name} = {expr};")
        self.shapes[name] = shape
        return name

    def weight(self, shape: tuple[int, ...]) -> str:
        name = f"%w{len(self.params)}"
        dims = ", ".join(map(str, shape))
        self.params.append(f"{name}: Tensor[({dims}), float32]")
        return name

    def conv(self, x: str, channels: int, k: int, stride: int = 1, relu: bool = True) -> str:
        n, c, h, w = self.shapes[x]
        pad = k // 2
        out = (n, channels, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1)
        wt = self.weight((channels, c, k, k))
        y = self.emit(f"nn.conv2d({x}, {wt}, strides=[{stride}, {stride}], padding=[{pad}, {pad}, {pad}, {pad}], "
                      f"channels={channels}, kernel_size=[{k}, {k}])", out)
        bias = self.weight((channels, 1, 1))
        y = self.emit(f"add({y}, {bias})", out)
        return self.emit(f"nn.relu({y})", out) if relu else y

    def max_pool(self, x: str, k: int, stride: int, pad: int) -> str:
        n, c, h, w = self.shapes[x]
        out = (n, c, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1)
        return self.emit(f"nn.max_pool2d({x}, pool_size=[{k}, {k}], strides=[{stride}, {stride}], "
                         f"padding=[{pad}, {pad}, {pad}, {pad}])", out)

    def concat(self, xs: list[str]) -> str:
        n, _, h, w = self.shapes[xs[0]]
        return self.emit(f"concatenate(({', '.join(xs)}), axis=1)", (n, sum(self.shapes[x][1] for x in xs), h, w))

    def head(self, x: str, classes: int = 1000) -> None:
        n, c, _, _ = self.shapes[x]
        g = self.emit(f"nn.global_avg_pool2d({x})", (n, c, 1, 1))
        f = self.emit(f"nn.batch_flatten({g})", (n, c, 1, 1))
        wt = self.weight((classes, c))
        d = self.emit(f"nn.dense({f}, {wt}, units={classes})", (n, classes, 1, 1))
        self.lines.append(f"  nn.softmax({d})")

    def text(self) -> str:
        return "def @main(" + ", ".join(self.params) + ") {\n" + "\n".join(self.lines) + "\n}\n"


def resnet50() -> str:
    net = _Net()
    x = net.conv("%data", 64, 7, 2)
    x = net.max_pool(x, 3, 2, 1)
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 0 else 1
            shortcut = x
            if block == 0:
                shortcut = net.conv(x, width * 4, 1, stride, relu=False)
            y = net.conv(x, width, 1)
            y = net.conv(y, width, 3, stride)
            y = net.conv(y, width * 4, 1, relu=False)
            y = net.emit(f"add({y}, {shortcut})", net.shapes[y])
            x = net.emit(f"nn.relu({y})", net.shapes[y])
    net.head(x)
    return net.text()


# GoogLeNet's inception modules: 1x1, (3x3 reduce, 3x3), (5x5 reduce, 5x5), pool projection.
_INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64), "4c": (128, 128, 256, 24, 64, 64),
    "4d": (112, 144, 288, 32, 64, 64), "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128),
}


def inception_v1() -> str:
    net = _Net()
    x = net.conv("%data", 64, 7, 2)
    x = net.max_pool(x, 3, 2, 1)
    x = net.conv(x, 64, 1)
    x = net.conv(x, 192, 3)
    x = net.max_pool(x, 3, 2, 1)
    for name, (c1, r3, c3, r5, c5, pp) in _INCEPTION.items():
        if name in ("4a", "5a"):
            x = net.max_pool(x, 3, 2, 1)
        b1 = net.conv(x, c1, 1)
        b2 = net.conv(net.conv(x, r3, 1), c3, 3)
        b3 = net.conv(net.conv(x, r5, 1), c5, 5)
        b4 = net.conv(net.max_pool(x, 3, 1, 1), pp, 1)
        x = net.concat([b1, b2, b3, b4])
    net.head(x)
    return net.text()


def densenet121() -> str:
    """Dense blocks 6-12-24-16, growth 32: each layer appends relu-conv1x1-relu-conv3x3 features to a
    running concatenation (as the ONNX graph does: concat(previous concat, new features));
    transitions halve the channels (1x1 conv) and the resolution (2x2 average pooling)."""
    net = _Net()
    x = net.conv("%data", 64, 7, 2)
    x = net.max_pool(x, 3, 2, 1)
    for block, layers in enumerate([6, 12, 24, 16]):
        for _ in range(layers):
            y = net.emit(f"nn.relu({x})", net.shapes[x])
            y = net.conv(y, 128, 1)
            y = net.conv(y, 32, 3, relu=False)
            x = net.concat([x, y])
        if block < 3:
            y = net.conv(x, net.shapes[x][1] // 2, 1)
            n, c, h, w = net.shapes[y]
            x = net.emit(f"nn.avg_pool2d({y}, pool_size=[2, 2], strides=[2, 2])", (n, c, h // 2, w // 2))
    net.head(net.emit(f"nn.relu({x})", net.shapes[x]))
    return net.text()


MODELS: dict[str, Callable[[], str]] = {"resnet50": resnet50, "inception_v1": inception_v1,
                                        "densenet121": densenet121}


def measure(name: str, text: str) -> dict[str, object]:
    started = time.perf_counter()
    mod = run(parse(text), "fuse-ops", verify_each=False)
    infer_types(mod)
    fuse_s = time.perf_counter() - started
    live = compute_liveness(mod)
    lower = sum(live.lower_bound().values())
    row: dict[str, object] = {"model": name, "steps": len(live.steps), "tensors": len(live.planned()),
                              "fuse_s": round(fuse_s, 3), "lower_bound_bytes": lower,
                              "no_reuse_bytes": live.no_reuse_bytes()}
    variants = [("tvm_greedy", "tvm-greedy", False, False), ("greedy_by_size", "greedy-by-size", False, False),
                ("greedy_best", "greedy-best", False, False), ("greedy_best_in_place", "greedy-best", True, True)]
    for key, algorithm, in_place, concat_in_place in variants:
        started = time.perf_counter()
        plan = plan_memory(live, algorithm, 64, in_place, concat_in_place)
        check_plan(live, plan)
        row[f"{key}_s"] = round(time.perf_counter() - started, 4)
        row[f"{key}_bytes"] = plan.workspace_bytes()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = [measure(m, MODELS[m]()) for m in args.models.split(",")]
    columns = [("no_reuse_bytes", "no-reuse"), ("tvm_greedy_bytes", "tvm-greedy"),
               ("greedy_by_size_bytes", "greedy-by-size"), ("greedy_best_bytes", "greedy-best"),
               ("greedy_best_in_place_bytes", "best+in-place+concat"), ("lower_bound_bytes", "lower bound")]
    print(f"{'model':<14}{'steps':>6}" + "".join(f"{title:>22}" for _, title in columns))
    for r in rows:
        lb = r["lower_bound_bytes"]
        cells = "".join(f"{r[key] / MIB:>10.2f} MiB {r[key] / lb:>6.3f}x" for key, _ in columns)
        print(f"{r['model']:<14}{r['steps']:>6}{cells}")
    geo = math.exp(sum(math.log(r["tvm_greedy_bytes"] / r["lower_bound_bytes"]) for r in rows) / len(rows))
    print(f"(MiB and ratio to the lower bound) tvm-greedy / lower bound, geometric mean: {geo:.3f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
