"""`irtool.build`: whole modules compiled natively, called on numpy arrays, checked against the
interpreter; input checking; the entry function's plumbing (constants, views, results that are
parameters, tuple parameters and results)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import irtool
from irtool.eval.interpreter import flatten_value, run_function
from irtool.runtime import aligned_empty
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse

RESNETISH = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w1: Tensor[(4, 4, 3, 3), float32], %w2: Tensor[(4, 4, 3, 3), float32],
          %g: Tensor[(4), float32], %b: Tensor[(4), float32], %m: Tensor[(4), float32], %v: Tensor[(4), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1]);
  %1 = nn.batch_norm(%0, %g, %b, %m, %v);
  %2 = nn.relu(%1.0);
  %3 = nn.conv2d(%2, %w2, padding=[1, 1, 1, 1]);
  %4 = add(%3, %x);
  %5 = nn.relu(%4);
  %6 = nn.global_avg_pool2d(%5);
  %7 = nn.batch_flatten(%6);
  nn.softmax(%7)
}
"""


def _random_args(mod: object, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    args = {}
    for p in mod["main"].params:  # type: ignore[index]
        shape = tuple(int(d) for d in p.type_annotation.shape)
        args[p.name_hint] = rng.standard_normal(shape).astype(p.type_annotation.dtype)
    args.get("v", np.ones(1))[...] = np.abs(args.get("v", np.ones(1))) + 0.1
    return args


def test_resnet_block_matches_the_interpreter() -> None:
    mod = parse(RESNETISH, "block.relay")
    args = _random_args(mod)
    want = run_function(mod, args)
    got = irtool.build(mod)(**args)
    assert got.shape == (1, 4) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # Positional arguments, and a second call reusing the workspace, give the same result.
    again = irtool.build(mod).run(*args.values())
    np.testing.assert_array_equal(again, got)


def test_views_parameters_constants_and_repeated_results() -> None:
    src = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %t: (Tensor[(3), int32], Tensor[(2, 2), float32])) {
  %0 = exp(%x);
  %1 = reshape(%0, newshape=[3, 2]);
  %2 = add(%t.1, 1f);
  (%1, %0, %1, %x, %t.0, %2, multiply(%t.0, 3))
}
"""
    mod = parse(src, "plumbing.relay")
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    t = (np.array([4, -5, 6], np.int32), np.ones((2, 2), np.float32))
    got = irtool.build(mod)(x, t)
    want = run_function(mod, {"x": x, "t": t})
    assert len(got) == 7
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)
    np.testing.assert_array_equal(got[3], x)            # a parameter returned as it is
    np.testing.assert_array_equal(got[6], [12, -15, 18])


def test_integer_and_bool_programs_are_exact() -> None:
    src = """#[version = "0.0.5"]
def @main(%a: Tensor[(8), int32], %b: Tensor[(8), int32]) {
  %0 = divide(%a, %b);
  (%0, greater(%a, %b), argmax(%a, axis=[0]), sum(%a, axis=[0]), where(less(%a, 0), %a, %b))
}
"""
    mod = parse(src, "ints.relay")
    a = np.array([7, -7, 9, 0, -12, 5, 100, -3], np.int32)
    b = np.array([2, 2, -4, 3, 0, -5, 7, 3], np.int32)   # includes a division by zero (numpy: 0)
    got = flatten_value(irtool.build(mod)(a=a, b=b))
    want = flatten_value(run_function(mod, {"a": a, "b": b}))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(got[0], [3, -3, -2, 0, 0, -1, 14, -1])


def test_inputs_are_checked_with_clear_errors() -> None:
    mod = parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 3), float32], %y: Tensor[(3), float32]) '
                '{ add(%x, %y) }', "chk.relay")
    f = irtool.build(mod)
    x, y = np.zeros((2, 3), np.float32), np.zeros(3, np.float32)
    with pytest.raises(DiagnosticError, match=r"input `x` must have shape \(2, 3\), got \(3, 2\)"):
        f(x=np.zeros((3, 2), np.float32), y=y)
    with pytest.raises(DiagnosticError, match="input `y` must have dtype float32, got float64"):
        f(x=x, y=np.zeros(3))
    with pytest.raises(DiagnosticError, match="input `x` must be C-contiguous"):
        f(x=np.zeros((3, 2), np.float32).T, y=y)
    with pytest.raises(DiagnosticError, match="missing input"):
        f(x=x)
    with pytest.raises(DiagnosticError, match="main has no parameter `z`"):
        f(x=x, y=y, z=y)
    with pytest.raises(DiagnosticError, match="given twice"):
        f(x, x=x, y=y)
    with pytest.raises(DiagnosticError, match="must be a numpy array"):
        f(x=[[0.0] * 3] * 2, y=y)


def _offset_view(shape: tuple[int, ...], dtype: str, offset: int) -> np.ndarray:
    """A C-contiguous array starting `offset` bytes past a 64-byte boundary."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = aligned_empty((n + 64,), np.uint8)
    return raw[offset:offset + n].view(dtype).reshape(shape)


def test_element_aligned_buffers_are_used_in_place() -> None:
    """Inputs and outputs 4 bytes past a 64-byte boundary are passed as they are: the output
    view receives the results, and a 1-byte-offset input (misaligned for float32) is copied."""
    mod = parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(4, 40), float32]) {\n'
                '  %0 = multiply(%x, %x);\n  (add(%0, 1f), negative(%0))\n}', "sq.relay")
    f = irtool.build(mod)
    x = _offset_view((4, 40), "float32", 4)
    x[...] = np.arange(160).reshape(4, 40) * 0.5
    outs = (_offset_view((4, 40), "float32", 4), _offset_view((4, 40), "float32", 36))
    f.run_into(outs, x=x)
    np.testing.assert_array_equal(outs[0], x * x + 1)
    np.testing.assert_array_equal(outs[1], -(x * x))
    odd = _offset_view((4, 40), "float32", 1)
    assert not odd.flags.aligned
    odd[...] = x
    np.testing.assert_array_equal(f(x=odd)[1], -(x * x))
    assert f(x=x)[0].ctypes.data % 64 == 0   # outputs it allocates are 64-byte aligned


def test_run_into_takes_one_array_for_one_output_and_names_what_it_needs() -> None:
    mod = parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(16), float32]) { negative(%x) }', "neg.relay")
    f = irtool.build(mod)
    x = np.arange(16, dtype=np.float32)
    out = np.empty(16, np.float32)
    f.run_into(out, x)
    np.testing.assert_array_equal(out, -x)
    listed = [np.empty(16, np.float32)]
    f.run_into(listed, x)
    np.testing.assert_array_equal(listed[0], -x)
    with pytest.raises(DiagnosticError, match=r"output0 needs a writable, C-contiguous, element-aligned float32 "
                                              r"array of shape \(16,\), got float64 array of shape \(16,\)"):
        f.run_into(np.empty(16), x)
    with pytest.raises(DiagnosticError, match="main has 1 output"):
        f.run_into((out, out), x)


def test_run_into_takes_the_outputs_as_run_returns_them_or_flat() -> None:
    """Issue #18, case 12: nested tuples, a one-element tuple for one output, or a flat list."""
    mod = parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n'
                '  ((negative(%x), (exp(%x),)), add(%x, 1f))\n}', "nest.relay")
    f = irtool.build(mod)
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    expected = [-x, np.exp(x), x + 1]
    a, b, c = (np.empty(4, np.float32) for _ in range(3))
    f.run_into(((a, (b,)), c), x)           # the structure `f(x)` returns
    for got, want in zip((a, b, c), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    flat = [np.empty(4, np.float32) for _ in range(3)]
    f.run_into(flat, x)
    for got, want in zip(flat, expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(DiagnosticError, match="main has 3 output"):
        f.run_into((a, b), x)
    one = irtool.build(parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) { (negative(%x),) }', "one"))
    assert isinstance(one(x), tuple)
    for given in (a, (a,), [a]):
        a[...] = 0
        one.run_into(given, x)
        np.testing.assert_array_equal(a, -x)


def test_buffers_too_large_for_memory_are_memory_errors_that_say_how_large() -> None:
    with pytest.raises(MemoryError, match=r"cannot allocate main's output0: 4398046511104000000 bytes"):
        aligned_empty((2**40, 10**6), np.float32, "main's output0")
    with pytest.raises(MemoryError, match=r"cannot allocate a buffer: \d+ bytes"):
        aligned_empty((2**62, 2**62), np.float64)


@pytest.mark.parametrize(("options", "says"), [
    ({"cpu": "bogus"}, "unknown CPU 'bogus' for target"),
    ({"cpu": "skylake-avx"}, "did you mean 'skylake-avx512'?"),
    ({"features": "+avx2,,+fma"}, "malformed feature list '+avx2,,+fma'"),
    ({"features": "+sse9"}, "unknown feature '+sse9'"),
    ({"opt_level": 7}, "the optimisation level must be 0, 1, 2 or 3, got 7"),
])
def test_bad_target_options_are_value_errors_naming_the_option(options: dict[str, object], says: str) -> None:
    """Raised by `build` itself, before any compiling (once a worker process died instead)."""
    from irtool.target import TargetError
    mod = parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(16), float32]) { negative(%x) }', "neg.relay")
    with pytest.raises(TargetError, match=re.escape(says)) as info:
        irtool.build(mod, **options)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError) and isinstance(info.value, DiagnosticError)
    assert info.value.option == next(iter(options))


def test_fast_math_and_optimisation_levels_agree_on_exact_programs() -> None:
    mod = parse(RESNETISH, "block.relay")
    args = _random_args(mod, seed=5)
    base = irtool.build(mod, opt_level=0)(**args)
    for level in (1, 2, 3):
        np.testing.assert_allclose(irtool.build(mod, opt_level=level)(**args), base, rtol=1e-6)
    np.testing.assert_allclose(irtool.build(mod, fast_math=True)(**args), base, rtol=1e-4, atol=1e-6)


def test_uncompilable_programs_are_located_errors() -> None:
    """A `?` on an axis its operator does not treat row by row is not compiled (docs/native-relay.md,
    "Dynamic shapes")."""
    mod = parse('#[version = "0.0.5"]\ndef @main(%c: bool, %x: Tensor[(2, ?), float32]) {\n'
                '  if (%c) { %x } else { nn.softmax(exp(%x), axis=1) }\n}', "cf.relay")
    with pytest.raises(DiagnosticError, match=r"`nn.softmax` with a `\?` on axis 1 of Tensor\[\(2, \?\), float32\] "
                       r"\(it treats only axes 0..0 row by row\)") as info:
        irtool.build(mod)
    assert info.value.span is not None and info.value.span.line == 3


def test_branches_over_a_static_axis_before_a_dynamic_one_run_natively() -> None:
    mod = parse('#[version = "0.0.5"]\ndef @main(%c: bool, %x: Tensor[(2, ?), float32]) {\n'
                '  if (%c) { %x } else { exp(%x) }\n}', "cf.relay")
    native = irtool.build(mod)
    for n in (3, 0, 40):
        x = np.arange(2 * n, dtype=np.float32).reshape(2, n) / 64
        np.testing.assert_array_equal(native(np.array(True), x), x)
        np.testing.assert_allclose(native(np.array(False), x), np.exp(x), rtol=1e-6)


def test_branches_over_a_dynamic_batch_run_natively() -> None:
    mod = parse('#[version = "0.0.5"]\ndef @main(%c: bool, %x: Tensor[(?, 2), float32]) {\n'
                '  if (%c) { %x } else { exp(%x) }\n}', "cf.relay")
    native = irtool.build(mod)
    for rows in (3, 1):
        x = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) / 4
        np.testing.assert_array_equal(native(np.array(True), x), x)
        np.testing.assert_allclose(native(np.array(False), x), np.exp(x), rtol=1e-6)


def test_build_is_lazy_attribute_of_the_package() -> None:
    from irtool.driver import build
    assert irtool.build is build


def test_in_place_plans_drop_noalias_and_still_compute() -> None:
    """With an in-place plan, exp writes over its own input: that kernel must not claim noalias."""
    src = """#[version = "0.0.5"]
def @main(%x: Tensor[(64), float32], %y: Tensor[(64), float32]) {
  %0 = add(%x, %y);
  %1 = annotation.stop_fusion(%0);
  %2 = exp(%1);
  %3 = annotation.stop_fusion(%2);
  negative(%3)
}
"""
    from irtool.analysis.liveness import compute_liveness
    from irtool.analysis.memory_plan import plan_memory
    from irtool.analysis.plan_attrs import annotate
    from irtool.analysis.typecheck import infer_types
    from irtool.codegen import TargetOptions, generate_module
    from irtool.driver import ensure_lowered

    # The plain plan, then exp's result (step 1) put over its input, as an in-place plan does.
    mod = ensure_lowered(parse(src, "inplace.relay"))
    infer_types(mod)
    live = compute_liveness(mod, "main")
    plan = plan_memory(live, "greedy-by-size", 64)
    exp_step = live.steps[1]
    plan.placement[exp_step.outputs[0]] = plan.placement[exp_step.inputs[0]]
    plan.in_place = True  # declared, so the plan's readers accept the overlap
    mod = annotate(mod, live, plan)
    ir = generate_module(mod, "m", TargetOptions(opt_level=0)).ir
    exp_def = next(line for line in ir.splitlines() if line.startswith("define internal i32 @m_fused_exp("))
    add_def = next(line for line in ir.splitlines() if line.startswith("define internal i32 @m_fused_add("))
    assert "noalias" not in exp_def and "noalias" in add_def
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    y = np.linspace(0, 0.5, 64, dtype=np.float32)
    from irtool.runtime.native import NativeModule
    native = NativeModule(mod, TargetOptions(opt_level=3))
    np.testing.assert_allclose(native(x=x, y=y), -np.exp(x + y), rtol=1e-6)


def test_constants_are_bound_by_content_not_by_shape() -> None:
    """Two modules that differ only in a constant's values compile to different code paths
    (the JIT binds constants by a hash of their bytes), and the object file embeds the bytes."""
    template = ('#[version = "0.0.5"]\ndef @main(%x: Tensor[(3), float32]) { add(%x, meta[relay.Constant][0]) }\n'
                '#[metadata]\n{"relay.Constant": [{"dtype": "float32", "shape": [3], "data": DATA}]}\n')
    x = np.zeros(3, np.float32)
    one = irtool.build(parse(template.replace("DATA", "[1.0, 2.0, 3.0]"), "a.relay"))(x=x)
    two = irtool.build(parse(template.replace("DATA", "[-1.0, 0.5, 8.0]"), "b.relay"))(x=x)
    np.testing.assert_array_equal(one, [1, 2, 3])
    np.testing.assert_array_equal(two, [-1, 0.5, 8])
    from irtool.codegen import TargetOptions, generate_module
    from irtool.driver import prepare
    options = TargetOptions(opt_level=0)
    embedded = generate_module(prepare(parse(template.replace("DATA", "[1.0, 2.0, 3.0]"), "a.relay"), options), "m",
                               options).ir
    # 1.0f, 2.0f, 3.0f little-endian: 0x3f800000, 0x40000000, 0x40400000.
    assert r'constant [12 x i8] c"\00\00\80\3f\00\00\00\40\00\00\40\40", align 64' in embedded


HOISTED_CHAIN = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 64), float32]) {
  %0 = full(0.5f, shape=[64, 64], dtype="float32");
  %1 = multiply(annotation.stop_fusion(%0), 2f);
  %2 = add(annotation.stop_fusion(%1), 0.25f);
  %3 = nn.dense(%x, %2);
  (%3, %1)
}
"""


def test_constant_only_steps_run_once_in_init_from_a_shared_pool() -> None:
    """full -> multiply -> add only read constants: `_init` computes them into the pool, once. The
    full's 16 KiB are dead after the multiply, so the add's result reuses them; the multiply's
    result is returned (copied out like a constant)."""
    from irtool.codegen import TargetOptions, generate_module
    from irtool.driver import prepare
    from irtool.runtime.native import NativeModule
    mod = prepare(parse(HOISTED_CHAIN, "chain.relay"), TargetOptions())
    generated = generate_module(mod, "m", TargetOptions(opt_level=0))
    assert generated.abi is not None and generated.layout is not None
    assert len(generated.layout.init_steps()) == 3
    assert generated.abi.pool_bytes == 2 * 64 * 64 * 4
    assert generated.abi.workspace_bytes < 64 * 64 * 4
    assert "@m_pool = internal global [32768 x i8] zeroinitializer, align 64" in generated.ir
    x = np.linspace(-1, 1, 128, dtype=np.float32).reshape(2, 64)
    native = NativeModule(mod, TargetOptions())
    native.init()
    native.init()   # a second call returns at once
    dense, weights = native(x=x)
    np.testing.assert_array_equal(weights, np.ones((64, 64), np.float32))
    np.testing.assert_allclose(dense, x @ np.full((64, 64), 1.25, np.float32).T, rtol=1e-5)
    again, _ = native(x=2 * x)   # the pool is not recomputed over anything `_run` wrote
    np.testing.assert_allclose(again, 2 * dense, rtol=1e-5)


def test_kernels_stay_out_of_line_and_init_only_kernels_are_optimised_for_size() -> None:
    from irtool.codegen import TargetOptions, compile_module
    from irtool.codegen.compile import emit_llvm
    from irtool.driver import prepare
    mod = prepare(parse(HOISTED_CHAIN, "chain.relay"), TargetOptions())
    art = compile_module(mod, "m", TargetOptions(opt_level=3))
    text = art.generated.ir
    defines = {line.split("@")[1].split("(")[0]: line.rsplit(" ", 2)[1] for line in text.splitlines()
               if line.startswith("define internal i32 @m_fused")}
    assert defines["m_fused_full"] == defines["m_fused_multiply"] == "#2"
    run_groups = [group for name, group in defines.items() if name.startswith("m_fused_nn_dense")]
    assert run_groups and all(group == "#1" for group in run_groups)
    assert "attributes #1 = { nounwind" in text and " noinline }" in text and " noinline optsize }" in text
    # After -O3 every kernel is still a function of its own (none inlined into _init or _run).
    optimised = emit_llvm(art)
    for name in defines:
        assert f"@{name}(" in optimised.split("define i32 @m_init")[0]


def test_chunks_compile_in_parallel_and_link_to_the_same_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split into the entry functions and modules of kernels (each handed on as it is complete,
    compiled in worker processes, linked by the JIT), the module computes what the interpreter
    computes."""
    from irtool.codegen import TargetOptions, generate_module
    from irtool.driver import prepare
    from irtool.runtime import native
    mod = prepare(parse(RESNETISH, "block.relay"), TargetOptions())
    handed: list[str] = []
    generated = generate_module(mod, "m", TargetOptions(opt_level=0), split=True, sink=handed.append)
    entry_ir, *kernel_irs = generated.chunk_irs
    assert kernel_irs == handed and "define i32 @m_run(" in entry_ir and "define i32 @m_fused" not in entry_ir
    defined = [line.split("@")[1].split("(")[0] for text in kernel_irs for line in text.splitlines()
               if line.startswith("define i32 @m_")]
    assert sorted(defined) == sorted(f"m_{k}" for k in generated.kernels)
    assert all(f"declare i32 @{name}(ptr" in entry_ir for name in defined)
    from irtool.codegen import compile as compile_mod
    monkeypatch.setattr(native, "compile_threads", lambda: 2)         # split into modules
    monkeypatch.setattr(compile_mod, "compile_threads", lambda: 2)    # two worker processes, even on one CPU
    args = _random_args(parse(RESNETISH, "block.relay"), seed=4)
    got = native.NativeModule(mod, TargetOptions(opt_level=2))(**args)
    np.testing.assert_allclose(got, run_function(parse(RESNETISH, "block.relay"), args), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunk_bytes", [1, 4096, 1 << 30])
def test_kernel_modules_fill_in_generation_order(monkeypatch: pytest.MonkeyPatch, chunk_bytes: int) -> None:
    """Kernels are gathered in generation order into modules of at least `CHUNK_BYTES` of kernel
    text (the last may hold less), and the modules are the texts handed to the sink."""
    from irtool.codegen import TargetOptions, generate_module
    from irtool.codegen import entry
    from irtool.driver import prepare
    monkeypatch.setattr(entry, "CHUNK_BYTES", chunk_bytes)
    mod = prepare(parse(RESNETISH, "block.relay"), TargetOptions())
    handed: list[str] = []
    generated = generate_module(mod, "m", TargetOptions(), split=True, sink=handed.append)
    assert generated.chunk_irs[1:] == handed
    kernels = [re.findall(r"^define i32 @m_(\w+)\(", text, re.M) for text in handed]
    assert [k for ks in kernels for k in ks] == sorted(generated.kernels)
    sizes = [sum(len(m.group(0)) for m in re.finditer(r"^define .*?^}$", text, re.M | re.S)) for text in handed]
    assert all(size >= chunk_bytes for size in sizes[:-1])
    assert len(handed) == {1: len(generated.kernels), 1 << 30: 1}.get(chunk_bytes, len(handed)) >= 1


def test_kernel_modules_compile_in_turn_beside_other_python_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forking a process that runs other Python threads is unsafe: the compiler then starts no
    workers and compiles each module in turn, to the same objects the workers make."""
    import threading
    from irtool.codegen import TargetOptions, compile as compile_mod, entry, generate_module
    from irtool.driver import prepare
    monkeypatch.setattr(entry, "CHUNK_BYTES", 1)
    monkeypatch.setattr(compile_mod, "compile_threads", lambda: 2)
    options = TargetOptions(opt_level=1)
    texts = generate_module(prepare(parse(RESNETISH, "block.relay"), options), "m", options, split=True).chunk_irs[1:]

    def objects() -> tuple[bool, list[bytes]]:
        compiler = compile_mod.ChunkCompiler(options)
        try:
            for text in texts:
                compiler.submit(text)
            return compiler.pool is not None, compiler.objects()
        finally:
            compiler.close()
    forked, in_workers = objects()
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        forked_beside_thread, in_turn = objects()
    finally:
        release.set()
        other.join()
    assert forked and not forked_beside_thread
    assert in_turn == in_workers and len(in_turn) == len(texts) >= 3


def test_a_kernel_module_carries_the_loop_metadata_of_its_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loop metadata is numbered module-wide; each module of kernels defines the nodes its
    kernels made (and only those), so its references resolve when it is parsed alone."""
    from irtool.codegen import entry
    from irtool.codegen.tir_to_llvm import ModuleContext
    monkeypatch.setattr(entry, "CHUNK_BYTES", 1)
    ctx = ModuleContext()
    handed: list[str] = []
    chunker = entry._Chunker("; m", ctx, [], handed.append)
    for k in range(3):
        tag = ctx.loop_metadata("llvm.loop.vectorize.enable", "i1 true")
        chunker.add(f"define void @k{k}() {{\nentry:\n  br label %l\nl:\n  br label %l, !llvm.loop {tag}\n}}")
    chunker.flush()
    assert len(handed) == 3
    for k, text in enumerate(handed):
        assert re.findall(r"^(![0-9]+) = ", text, re.M) == [f"!{2 * k}", f"!{2 * k + 1}"]
        assert f"!llvm.loop !{2 * k + 1}" in text


EMPTY_CASES = {
    "elementwise (0, 4)": ("%x: Tensor[(0, 4), float32]", "exp(%x)"),
    "sum of nothing": ("%x: Tensor[(3, 0), float32]", "sum(%x, axis=[1])"),
    "prod of nothing": ("%x: Tensor[(3, 0), int32]", "prod(%x, axis=[1])"),
    "mean of nothing": ("%x: Tensor[(0, 5), float32]", "mean(%x)"),
    "global avg pool of nothing": ("%x: Tensor[(1, 2, 0, 3), float32]", "nn.global_avg_pool2d(%x)"),
    "max over a full axis of an empty tensor": ("%x: Tensor[(0, 3), float32]", "max(%x, axis=[1])"),
    "dense K = 0": ("%x: Tensor[(2, 0), float32], %w: Tensor[(3, 0), float32]", "nn.dense(%x, %w)"),
    "dense N = 0": ("%x: Tensor[(2, 4), float32], %w: Tensor[(0, 4), float32]", "nn.dense(%x, %w)"),
    "concat with an empty part": ("%x: Tensor[(0, 4), float32], %y: Tensor[(2, 4), float32]",
                                  "concatenate((%x, %y), axis=0)"),
    "softmax over an empty axis": ("%x: Tensor[(3, 0), float32]", "(nn.softmax(%x), nn.log_softmax(%x))"),
    "conv2d without input channels": ("%x: Tensor[(1, 0, 5, 5), float32], %w: Tensor[(2, 0, 3, 3), float32]",
                                      "nn.conv2d(%x, %w, padding=[1, 1, 1, 1])"),
    "empty slice": ("%x: Tensor[(4, 4), float32]", "strided_slice(%x, begin=[2, 0], end=[2, 4])"),
}


@pytest.mark.parametrize("case", EMPTY_CASES)
def test_empty_tensors_natively_give_the_interpreters_results_bit_for_bit(case: str) -> None:
    """Zero-element inputs and outputs are accepted by the runtime that allocates them, and
    every result (a mean of nothing is the same NaN) matches the interpreter's bytes."""
    params, body = EMPTY_CASES[case]
    mod = parse(f'#[version = "0.0.5"]\ndef @main({params}) {{\n  {body}\n}}\n', "empty.relay")
    args = _random_args(mod, seed=3)
    want = flatten_value(run_function(mod, args))
    got = flatten_value(irtool.build(mod)(**args))
    assert [(g.shape, g.dtype, g.tobytes()) for g in got] == [(w.shape, w.dtype, w.tobytes()) for w in want]
    if case == "sum of nothing":
        assert got[0].tolist() == [0.0, 0.0, 0.0]
    if case.startswith(("mean", "global avg")):
        assert np.isnan(got[0]).all()


def test_empty_outputs_go_through_run_into() -> None:
    mod = parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(0, 4), float32]) { negative(%x) }', "e.relay")
    f = irtool.build(mod)
    out = np.empty((0, 4), np.float32)
    f.run_into(out, np.empty((0, 4), np.float32))
    assert out.shape == (0, 4)


def test_a_loop_over_more_than_int32_elements_runs_every_iteration() -> None:
    """A reduction over an inlined fill of 2^31 + 5 elements (no buffer is large): with an int32
    loop variable the bound wrapped negative and the sum was 0."""
    mod = parse('def @main(%v: Tensor[(), int64]) {\n  sum(full(%v, shape=[2147483653], dtype="int64"))\n}\n',
                "big.relay")
    got = irtool.build(mod)(v=np.array(3, np.int64))
    assert int(got) == 3 * 2147483653
