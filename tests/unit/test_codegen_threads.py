"""`parallel` loops on threads: hand-written kernels with parallel loops compiled for several
threads agree with the TIR interpreter on every chunking edge case (fewer iterations than
threads, none, uneven chunks, offsets, 64-bit and unsigned loop variables, captured variables,
nested parallel loops, scratch memory per thread); statuses come back from worker threads; one
thread means exactly the serial code of before; the command-line knobs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

from irtool.codegen import TargetOptions, generate_module
from irtool.codegen.compile import compile_module
from irtool.eval.tir_interp import run_primfunc
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.driver import build, build_kernels, parallelize_kernels, prepare
from irtool.runtime import aligned_empty
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse_module


def _module(body: str, params: str) -> IRModule:
    mod = parse_module(f'#[version = "0.0.5"]\nprimfn @f({params}) {{\n{body}\n}}\n', "f.tir")
    assert isinstance(mod.functions["f"], PrimFunc)
    return mod


def _aligned(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def _agrees(mod: IRModule, arrays: list[np.ndarray], threads: int) -> list[np.ndarray]:
    native = [_aligned(a) for a in arrays]
    interp = [a.copy() for a in arrays]
    lib = build_kernels(mod, 2, threads=threads)
    assert "@irtool_parallel_for" in lib.ir and "@pthread_create" in lib.ir
    assert lib["f"](*native) == 0
    run_primfunc(mod.functions["f"], interp)  # type: ignore[arg-type]
    for n, i in zip(native, interp):
        np.testing.assert_array_equal(n, i)
    return native


ROWS = """
  for %i in parallel({begin}, {end}) {{
    for %j in range(0, 5) {{
      %out[%i, %j] = %a[%i, %j] * 3 + %i;
    }}
  }}"""


@pytest.mark.parametrize("threads", [2, 3, 4])
@pytest.mark.parametrize("begin, end", [(0, 0), (0, 1), (0, 2), (0, 3), (0, 7), (2, 9), (5, 4), (1, 16)])
def test_every_chunking_computes_every_row_once(threads: int, begin: int, end: int) -> None:
    mod = _module(ROWS.format(begin=begin, end=end), "%a: Buffer[(16, 5), int32], %out: Buffer[(16, 5), int32]")
    a = np.arange(80, dtype=np.int32).reshape(16, 5)
    out = _agrees(mod, [a, np.full((16, 5), -1, np.int32)], threads)[1]
    rows = np.arange(16)[:, None]
    inside = (rows >= begin) & (rows < end)
    np.testing.assert_array_equal(out, np.where(inside, a * 3 + rows, -1))


def test_many_launches_with_more_threads_than_cores() -> None:
    # 8 threads on this 2-core machine, 500 launches in a row: threads the scheduler starts late
    # find their chunks taken; every row is still computed exactly once per call.
    mod = _module(ROWS.format(begin=0, end=16), "%a: Buffer[(16, 5), int32], %out: Buffer[(16, 5), int32]")
    kernel = build_kernels(mod, 2, threads=8)["f"]
    a = _aligned(np.arange(80, dtype=np.int32).reshape(16, 5))
    out = _aligned(np.zeros((16, 5), np.int32))
    want = np.asarray(a) * 3 + np.arange(16, dtype=np.int32)[:, None]
    for _ in range(500):
        out[...] = -1
        assert kernel(a, out) == 0
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", ["int64", "uint8"])
def test_other_loop_variable_types(dtype: str) -> None:
    mod = _module(f"""
  for %i in parallel({dtype}(1), {dtype}(11)) {{
    %out[%i] = %a[%i] + 1;
  }}""", "%a: Buffer[(12), int32], %out: Buffer[(12), int32]")
    out = _agrees(mod, [np.arange(12, dtype=np.int32), np.zeros(12, np.int32)], 3)[1]
    np.testing.assert_array_equal(out, [0] + list(range(2, 12)) + [0])


def test_captured_loop_and_let_variables_and_nested_parallel_loops() -> None:
    # The outer loop's variable, a scalar let and a vector let are used inside the worker; the
    # inner parallel loop runs serially inside it (one level of threads).
    mod = _module("""
  for %b in range(0, 3) {
    let %scale: float32 = float32(%b) + 0.5f;
    let %lanes: int32x4 = ramp(0, 1, 4);
    for %i in parallel(0, 6) {
      for %k in parallel(0, 2) {
        %out[%b, %i, broadcast(%k * 4, 4) + %lanes] = %a[%b, %i, broadcast(%k * 4, 4) + %lanes] * broadcast(%scale, 4);
      }
    }
  }""", "%a: Buffer[(3, 6, 8), float32], %out: Buffer[(3, 6, 8), float32]")
    a = np.random.default_rng(0).standard_normal((3, 6, 8)).astype(np.float32)
    out = _agrees(mod, [a, np.zeros((3, 6, 8), np.float32)], 4)[1]
    np.testing.assert_array_equal(out, a * (np.arange(3, dtype=np.float32) + 0.5)[:, None, None])


def test_large_scratch_buffers_are_per_thread() -> None:
    # 128 KiB per iteration: heap-allocated inside the worker, one per running iteration.
    mod = _module("""
  for %i in parallel(0, 8) {
    allocate %tmp: Buffer[(32768), float32] {
      for %j in range(0, 32768) {
        %tmp[%j] = %a[%i] + float32(%j);
      }
      %out[%i] = %tmp[32767] - %tmp[0];
    }
  }""", "%a: Buffer[(8), float32], %out: Buffer[(8), float32]")
    out = _agrees(mod, [np.arange(8, dtype=np.float32), np.zeros(8, np.float32)], 2)[1]
    np.testing.assert_array_equal(out, np.full(8, 32767, np.float32))


@pytest.mark.parametrize("threads", [2, 4])
def test_a_failed_assert_in_a_worker_returns_its_status(threads: int) -> None:
    mod = _module("""
  for %i in parallel(0, 8) {
    assert(%a[%i] >= 0, "a must be non-negative");
    %out[%i] = %a[%i];
  }""", "%a: Buffer[(8), int32], %out: Buffer[(8), int32]")
    kernel = build_kernels(mod, 2, threads=threads)["f"]
    out = _aligned(np.zeros(8, np.int32))
    assert kernel(_aligned(np.arange(8, dtype=np.int32)), out) == 0
    bad = np.arange(8, dtype=np.int32)
    bad[6] = -1   # in the last chunk: a worker thread's chunk, not the caller's
    assert kernel(_aligned(bad), out) == 16


def test_one_thread_is_the_serial_code_of_before() -> None:
    mod = _module(ROWS.format(begin=0, end=16), "%a: Buffer[(16, 5), int32], %out: Buffer[(16, 5), int32]")
    serial = generate_module(mod, "m", TargetOptions(opt_level=0)).ir
    assert serial == generate_module(mod, "m", TargetOptions(opt_level=0, threads=1)).ir
    assert "pthread" not in serial and "parallel" not in serial
    assert "pthread_create" in generate_module(parallelize_kernels(mod, 2), "m", TargetOptions(opt_level=0, threads=2)).ir


def test_the_worker_knows_the_loop_variables_range() -> None:
    """A chunk's bounds come from the runtime, but the loop's constant range still reaches LLVM:
    `floordiv`/`floormod` of the variable compile to unsigned division, as in the serial kernel
    (the signed fix-ups once cost a conv 1.5-4x its serial time)."""
    mod = _module("""
  for %s in parallel(0, 1000) {
    for %r in range(0, 8) {
      %out[floordiv(%s * 8 + %r, 56), floormod(%s * 8 + %r, 56)] = %a[%s, %r];
    }
  }""", "%a: Buffer[(1000, 8), float32], %out: Buffer[(143, 56), float32]")
    for threads in (1, 2):
        options = TargetOptions(cpu="x86-64", triple="x86_64-unknown-linux-gnu", threads=threads)
        ir = str(compile_module(parallelize_kernels(mod, threads), "m", options).llvm_module)
        kernel = "m_f_par0_body" if threads > 1 else "m_f"
        body = re.search(rf"^define [^@]*@{kernel}\(.*?^}}", ir, re.M | re.S).group(0)  # type: ignore[union-attr]
        assert not re.search(r"= s(div|rem) ", body) and re.search(r"= u(div|rem) ", body)
    native = _agrees(mod, [np.arange(8000, dtype=np.float32).reshape(1000, 8), np.zeros((143, 56), np.float32)], 2)
    assert np.array_equal(native[1].ravel()[:8000], np.arange(8000))


@pytest.mark.parametrize("threads", [0, -3, 2**31, 2**40])
def test_the_thread_count_must_fit_the_runtimes_int32(threads: int) -> None:
    """2**40 was once accepted by `irtool.build` and truncated to a 32-bit count in the runtime."""
    with pytest.raises(DiagnosticError, match=f"the thread count must be from 1 to 2147483647, got {threads}"):
        TargetOptions(threads=threads)


RELAY = """#[version = "0.0.5"]
def @main(%x: Tensor[(1024, 1024), float32], %y: Tensor[(1024, 1024), float32]) {
  (nn.relu(add(%x, %y)), sum(%x))
}
"""


def test_build_with_threads_marks_and_runs_the_kernels() -> None:
    mod = parse_module(RELAY, "m.relay")
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((1024, 1024)).astype(np.float32) for _ in range(2))
    serial = build(mod, opt_level=1)
    threaded = build(mod, opt_level=1, threads=2)
    assert "pthread_create" not in serial.ir and "irtool_pool" not in serial.ir
    # Each inference is a section of the pool: `_run` opens it, runs the kernels, closes it.
    run = re.search(r"^define i32 @irtool_run\(.*?^}", threaded.ir, re.M | re.S).group(0)  # type: ignore[union-attr]
    assert re.findall(r"call \w+ @([\w.]+)\(", run) == ["irtool_pool_enter", "irtool_run.inference",
                                                        "irtool_pool_leave"]
    assert "define internal i32 @irtool_run.inference(" in threaded.ir
    # relu(add) gets a worker; the full sum (a reduction into one element) does not.
    assert threaded.ir.count("@irtool_parallel_for(ptr @irtool_fused_add_nn_relu_par0") == 1
    assert "_fused_sum_par" not in threaded.ir
    for got, want in zip(threaded(x=x, y=y), serial(x=x, y=y)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(threaded(x=x, y=y)[0], np.maximum(x + y, 0))


SPLIT = """#[version = "0.0.5"]
def @main(%x: Tensor[(1024, 1024), float32], %y: Tensor[(1024, 1024), float32]) {
  (nn.relu(add(%x, %y)), negative(%y), exp(multiply(%x, %y)))
}
"""


def test_a_threaded_build_compiles_in_chunks_with_one_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    # As on a 3-CPU host: the kernels compile in separate modules, which share the entry's pool.
    monkeypatch.setattr("irtool.runtime.native.compile_threads", lambda: 3)
    monkeypatch.setattr("irtool.codegen.entry.CHUNK_BYTES", 1)   # a module per kernel
    mod = parse_module(SPLIT, "split.relay")
    options = TargetOptions(threads=2)
    chunks = generate_module(prepare(mod, options), "irtool", options, split=True).chunk_irs
    assert len(chunks) == 4
    assert [c.count("define hidden i32 @irtool_parallel_for(") for c in chunks] == [1, 0, 0, 0]
    for chunk in chunks[1:]:
        assert chunk.count("declare hidden i32 @irtool_parallel_for(") == 1
        # Each kernel's workers are defined beside it (they are internal to its module).
        for kernel in re.findall(r"^define i32 @(\w+)\(", chunk, re.M):
            assert f"@{kernel}_par0(" in chunk and f"@{kernel}_par0_body(" in chunk
    threaded = build(mod, opt_level=1, threads=2)
    assert threaded.ir.count("define hidden i32 @irtool_parallel_for(") == 1
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal((1024, 1024)).astype(np.float32) for _ in range(2))
    before = _tasks()
    relu, neg, ex = threaded(x=x, y=y)
    np.testing.assert_array_equal(relu, np.maximum(x + y, 0))
    np.testing.assert_array_equal(neg, -y)
    np.testing.assert_allclose(ex, np.exp(x * y), rtol=2e-6)
    assert _tasks() == before + 1
    # The pool's shutdown is the entry module's destructor: the engine still runs it.
    threaded._engine.run_static_destructors()
    _wait_for_tasks(before)


def _tool(module: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m module` run outside the checkout, so it imports the installed irtool (the
    checkout's `irtool/` lacks the grammar files that installation maps into it)."""
    return subprocess.run([sys.executable, "-m", module, *args], input=stdin, capture_output=True, text=True,
                          check=False, cwd=tempfile.gettempdir())


def test_command_line_threads() -> None:
    llc = _tool("irtool.tools.llc", "-", "--emit=llvm", "-O0", "--threads", "2", stdin=RELAY)
    assert llc.returncode == 0 and "call i32 @pthread_create" in llc.stdout
    bad = _tool("irtool.tools.llc", "-", "--emit=llvm", "--threads", "0", stdin=RELAY)
    assert bad.returncode == 2 and "irtool-llc: error: argument --threads: the thread count must be at least 1" in bad.stderr
    native = _tool("irtool.tools.run", "-", "--backend=native", "--threads", "2", stdin=RELAY)
    interp = _tool("irtool.tools.run", "-", stdin=RELAY)
    assert native.returncode == 0 and interp.returncode == 0
    # The summaries print each output's statistics and hash: the relu output hashes equal.
    assert native.stdout.splitlines()[0] == interp.stdout.splitlines()[0]
    wrong = _tool("irtool.tools.run", "-", "--threads", "2", stdin=RELAY)
    assert wrong.returncode == 1 and "--backend=native" in wrong.stderr


POOLED = """#[version = "0.0.5"]
def @main(%x: Tensor[(1000, 1048), float32], %y: Tensor[(1000, 1048), float32]) {
  nn.relu(multiply(%x, %y))
}
"""


def _tasks() -> int:
    """This process's threads (Linux)."""
    return len(os.listdir("/proc/self/task"))


def _wait_for_tasks(count: int) -> None:
    """Asserts the process is back to `count` threads: a joined thread may linger in /proc for a
    moment while the kernel releases it."""
    for _ in range(1000):
        if _tasks() == count:
            break
        time.sleep(0.01)
    assert _tasks() == count


def _pooled_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal((1000, 1048)).astype(np.float32) for _ in range(2))
    return x, y, np.maximum(x * y, 0)


def test_the_pool_starts_once_and_its_shutdown_joins_the_workers() -> None:
    # A module of its own (no other test builds it): its pool has not started yet.
    model = build(parse_module(POOLED, "pooled.relay"), opt_level=1, threads=3)
    assert model.ir.count("call i32 @irtool_parallel_for(") == 1
    x, y, want = _pooled_inputs()
    before = _tasks()
    np.testing.assert_array_equal(model(x=x, y=y), want)
    started = _tasks()
    assert started == before + 2
    for _ in range(100):
        np.testing.assert_array_equal(model(x=x, y=y), want)
    assert _tasks() == started
    # What the runtime does before the process frees the engine: the workers are joined, and
    # the module still runs, serially.
    model._engine.run_static_destructors()
    _wait_for_tasks(before)
    np.testing.assert_array_equal(model(x=x, y=y), want)
    assert _tasks() == before


def test_two_python_threads_share_one_pool() -> None:
    # Two built modules of one program share the JIT engine, so its pool; each has its own
    # workspace. ctypes releases the GIL: the calls overlap, and a call that finds the pool busy
    # runs its loop serially.
    mod = parse_module(POOLED.replace("multiply", "subtract"), "shared.relay")
    models = [build(mod, opt_level=1, threads=2) for _ in range(2)]
    assert models[0]._engine is models[1]._engine
    x, y, _ = _pooled_inputs()
    want = np.maximum(x - y, 0)
    wrong: list[int] = []

    def calls(model: object) -> None:
        for k in range(60):
            if not np.array_equal(model(x=x, y=y), want):  # type: ignore[operator]
                wrong.append(k)

    threads = [threading.Thread(target=calls, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
