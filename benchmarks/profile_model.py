"""Per-kernel profile of one light ONNX model compiled natively: where `_run`'s time goes.

    python benchmarks/profile_model.py --model resnet50 [--top 20] [--repeat 5] [--opt-level 3]
    python benchmarks/profile_model.py --model densenet --compile-stages

Imports `light_<model>.onnx` (weights embedded), compiles it with its kernels exported, feeds the
ONNX test runner's ramp input, and prints `irtool.runtime.profile.Profile.table`: every step of
`_run` slowest first (ms as the median of --repeat, share of the sum, GFLOP/s from the kernel's
TIR, output shape, kernel and operators), the sum of the steps against the whole `_run`, and the
once-only `_init` time. The compile time is printed first. `--compile-stages` instead prints
where compiling goes (CPU seconds of lowering, IR generation, LLVM parsing, the -O pipeline and
code generation; IR size and kernel count) and runs nothing.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import sys
import time

from irtool.target import TargetOptions
from irtool.frontend.onnx_zoo import LIGHT_MODELS, light_model_path, runner_input
from irtool.ir.module import IRModule

SHORT = {"alexnet": "bvlc_alexnet", "zfnet": "zfnet512", "densenet": "densenet121"}


def compile_stages(name: str, mod: IRModule, options: TargetOptions) -> str:
    """CPU seconds of each stage of `irtool.build`'s path, run one after the other."""
    from irtool.codegen.entry import generate_module
    from irtool.codegen.machine import parse_and_optimize, target_machine
    from irtool.driver import prepare

    clock = time.process_time
    started = clock()
    lowered = prepare(mod, options)
    lower = clock() - started
    started = clock()
    generated = generate_module(lowered, "irtool", options, embed_constants=False)
    generate = clock() - started
    tm = target_machine(options, jit=True)
    started = clock()
    module = parse_and_optimize(generated.ir, options, tm)
    optimise = clock() - started
    started = clock()
    tm.emit_object(module)
    codegen = clock() - started
    total = lower + generate + optimise + codegen
    return (f"{name}: lower {lower:.2f} s, generate IR {generate:.2f} s, parse + -O{options.opt_level} "
            f"{optimise:.2f} s, code generation {codegen:.2f} s; total {total:.2f} s CPU "
            f"({len(generated.ir) / 1e6:.1f} MB of IR, {len(generated.kernels)} kernels)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help=f"one of {', '.join(LIGHT_MODELS)} (default: resnet50)")
    ap.add_argument("--top", type=int, default=20, help="rows to show, slowest first (0: all; default 20)")
    ap.add_argument("--repeat", type=int, default=5, help="timed passes per step (median; default 5)")
    ap.add_argument("--opt-level", type=int, default=3, choices=range(4))
    ap.add_argument("--compile-stages", action="store_true", help="time the stages of compiling instead")
    args = ap.parse_args(argv)
    name = SHORT.get(args.model, args.model)
    if name not in LIGHT_MODELS:
        ap.error(f"unknown model {args.model}; choose from {', '.join(LIGHT_MODELS)}")
    import onnx

    from irtool.driver import prepare
    from irtool.frontend.onnx import import_model
    from irtool.runtime.native import NativeModule
    from irtool.runtime.profile import profile_native

    imported = import_model(onnx.load(str(light_model_path(name))), embed_params=True, source=name)
    if args.compile_stages:
        print(compile_stages(name, imported.module, TargetOptions(opt_level=args.opt_level)))
        return 0
    (input_name,) = imported.inputs
    shape = tuple(int(d) for d in imported.module["main"].params[0].type_annotation.shape)
    started = time.perf_counter()
    options = TargetOptions(opt_level=args.opt_level)
    native = NativeModule(prepare(imported.module, options), options, export_kernels=True)
    print(f"{name}: compiled in {time.perf_counter() - started:.2f} s (kernels exported)", flush=True)
    result = profile_native(native, (), {input_name: runner_input(shape)}, args.repeat)
    print(result.table(top=args.top or None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
