"""How big lowered code is, per model and target CPU: the printed TIR of each kernel (#16 asks
for at most 150 lines of at most 120 characters for every ResNet-50 kernel) and the LLVM IR text
codegen hands to LLVM (what LLVM's compile time grows with).

    python benchmarks/tir_size.py [--models resnet50,squeezenet,samples/mlp.relay] [--cpus znver3,skylake-avx512]

Models are light zoo names or Relay files. Each is prepared for the CPU (`irtool.driver.prepare`:
the default pipeline, tiles for that CPU whatever the host) and every kernel printed. Sizes are
counts, not times: the host's load does not change them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import describe_host
from irtool.codegen.entry import generate_module
from irtool.driver.prepare import prepare
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.syntax.tir_printer import print_primfunc
from irtool.target import TargetOptions

MAX_LINES, MAX_WIDTH = 150, 120


def load(name: str) -> IRModule:
    if name.endswith(".relay"):
        from irtool.syntax.parser import parse
        return parse(Path(name).read_text(encoding="utf-8"), name)
    import onnx
    from irtool.frontend.onnx import import_model
    from irtool.frontend.onnx_zoo import light_model_path
    return import_model(onnx.load(str(light_model_path(name))), embed_params=True, source=name).module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet50,squeezenet,samples/mlp.relay")
    ap.add_argument("--cpus", default="znver3,skylake-avx512")
    args = ap.parse_args()
    print(describe_host().line())
    print(f"| model | cpu | kernels | max lines | max width | over {MAX_LINES} lines or {MAX_WIDTH} columns "
          "| printed TIR bytes (all, largest) | LLVM IR bytes |")
    print("|---|---|---|---|---|---|---|---|")
    for name in (m.strip() for m in args.models.split(",") if m.strip()):
        module = load(name)
        for cpu in (c.strip() for c in args.cpus.split(",") if c.strip()):
            options = TargetOptions(cpu=cpu)
            prepared = prepare(module, options)
            texts = [print_primfunc(k, f) for k, f in sorted(prepared.functions.items()) if isinstance(f, PrimFunc)]
            shapes = [(len(t.splitlines()), max(map(len, t.splitlines()))) for t in texts]
            over = sum(1 for lines, width in shapes if lines > MAX_LINES or width > MAX_WIDTH)
            ir = generate_module(prepared, "m", options).ir
            print(f"| {name} | {cpu} | {len(texts)} | {max(s[0] for s in shapes)} | {max(s[1] for s in shapes)} | "
                  f"{over} | {sum(map(len, texts))}, {max(map(len, texts))} | {len(ir)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
