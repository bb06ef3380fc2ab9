"""Preparing a module for code generation: lower, plan, TIR passes (in that order).

No `plan-memory` pass in the default pipeline: without a plan on `main`, `plan_if_missing` plans
greedy-by-size and leaves out the results kernels write straight into the caller's output
buffers, which a general plan-memory (that plans every tensor of `main`) cannot know.
"""

from __future__ import annotations

from irtool.analysis.liveness import compute_liveness
from irtool.analysis.memory_plan import plan_memory
from irtool.analysis.plan_attrs import annotate, read_plan
from irtool.analysis.steps import COPY, Step
from irtool.analysis.typecheck import infer_types
from irtool.codegen.entry import ALIGN, MainLayout, aliasing_kernels, layout_main, step_kernel
from irtool.codegen.functions import is_dataflow_main
from irtool.core.diagnostics import DiagnosticError
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.lower.module import is_lowered
from irtool.target import TargetOptions, compiling_for
from irtool.tir_transform.parallel import parallelize

DEFAULT_PIPELINE = "simplify-inference,alter-layout,fuse-ops,lower"
# Before the pipeline every function that is not recursive is inlined into its callers, as TVM's
# AOT build inlines before lowering, so that what is dataflow then takes the AOT path; recursion and
# function values are left to the functions path (docs/native-relay.md).
INLINE_CALLS = "inline{all=true}"


def ensure_lowered(mod: IRModule, pipeline: str | None = DEFAULT_PIPELINE) -> IRModule:
    """`mod` lowered by `pipeline` (after `INLINE_CALLS`) unless it already is; with `pipeline=None`
    lowered input is required. The input is verified (its errors are the user's); the passes'
    results are not re-verified between passes, which took a tenth of DenseNet-121's compile time."""
    from irtool.passes import parse_pipeline, run_pipeline, verify
    if is_lowered(mod):
        return mod
    if pipeline is None:
        main = mod.functions.get("main")
        raise DiagnosticError("irtool-llc: the input is not lowered (--no-pipeline was given); run "
                              f"`{DEFAULT_PIPELINE}` first", getattr(main, "span", None))
    passes = parse_pipeline(INLINE_CALLS) + parse_pipeline(pipeline)
    verify(mod)
    return run_pipeline(mod, passes, verify_each=False)


def plan_if_missing(mod: IRModule) -> IRModule:
    """A lowered `mod` whose `main` carries a memory plan: its own, or greedy-by-size over the
    tensors that live in the workspace (results a kernel writes straight into the caller's output
    buffers take no bytes there), 64-byte aligned."""
    main = mod.functions.get("main")
    if main is None or isinstance(main, PrimFunc) or not is_dataflow_main(mod):
        return mod   # a `main` with control flow keeps its tensors in frames (docs/native-relay.md)
    infer_types(mod)
    live = compute_liveness(mod, "main")
    if read_plan(live) is not None:
        return mod
    return annotate(mod, live, plan_memory(live, "greedy-by-size", ALIGN, outside=True))


def parallelize_kernels(mod: IRModule, threads: int) -> IRModule:
    """For more than one thread, each kernel's outermost safe loops marked `parallel` (and fused
    with the loops inside them until each has enough iterations for `threads`), except in
    kernels that a step of `main` calls with overlapping buffers (an in-place plan): the
    dependence test assumes distinct buffers; and except in kernels only `_init` runs (once, on
    hoisted constants): their outlined workers took a third of ResNet-50's extra LLVM time in a
    threaded build, for a one-off fill of weights."""
    if threads <= 1:
        return mod
    skip: set[str] = set()
    main = mod.functions.get("main")
    if main is not None and not isinstance(main, PrimFunc) and is_dataflow_main(mod):
        infer_types(mod)
        layout = layout_main(mod)
        skip = aliasing_kernels(mod, layout) | init_only_kernels(mod, layout)
    out = mod.copy()
    for name, func in mod.functions.items():
        if isinstance(func, PrimFunc) and name not in skip:
            out.functions[name] = parallelize(func, threads=threads)
    return out


def init_only_kernels(mod: IRModule, layout: MainLayout) -> set[str]:
    """The kernels only `_init` calls (steps on hoisted constants), none of `_run`'s steps."""
    def kernels(steps: list[Step]) -> set[str]:
        return {step_kernel(mod, step)[0] for step in steps if step.kind != COPY}
    return kernels(layout.init_steps()) - kernels(layout.run_steps())


def prepare(mod: IRModule, options: TargetOptions, pipeline: str | None = DEFAULT_PIPELINE) -> IRModule:
    """What code generation takes: `mod` lowered (by `pipeline` when it is not), planned, and
    with the TIR passes `options` ask for applied. Lowering tiles for `options`' CPU."""
    with compiling_for(options):
        lowered = ensure_lowered(mod, pipeline)
    return parallelize_kernels(plan_if_missing(lowered), options.threads)
