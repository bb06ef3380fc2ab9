"""An object file compiled with `--threads N` links into a C program (with -pthread) and computes
what the interpreter computes. The driver wraps `pthread_create` (`-Wl,--wrap`) to count the
threads the model starts: none for `--threads 1` (whose object has no pthread reference at
all), some for 2 and 4."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from irtool.driver import ensure_lowered
from irtool.eval.interpreter import flatten_value, run_function
from irtool.ir.tir import For, PrimFunc
from irtool.passes import run
from irtool.syntax.parser import parse
from irtool.tir_transform.mutator import walk_stmts

PROGRAM = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 64, 64), float32], %w: Tensor[(32, 16, 3, 3), float32], %b: Tensor[(32), float32],
          %z: Tensor[(512, 1024), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = nn.relu(nn.bias_add(%0, %b));
  %2 = nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2]);
  (nn.softmax(%2, axis=1), sum(%1), sum(tanh(%z), axis=[1]))
}
"""

DRIVER = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "model.h"

static int created = 0;
int __real_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*f)(void *), void *arg) {
  __atomic_add_fetch(&created, 1, __ATOMIC_SEQ_CST);
  return __real_pthread_create(t, a, f, arg);
}

static float *ramp_f(size_t n, double scale) {
  float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  for (size_t i = 0; i < n; i++) p[i] = (float)(sin((double)i * 0.37) * scale);
  return p;
}

int main(void) {
  struct model_inputs in = { .x = ramp_f(16 * 64 * 64, 1.0), .w = ramp_f(32 * 16 * 9, 0.2), .b = ramp_f(32, 0.1),
                             .z = ramp_f(512 * 1024, 2.0) };
  struct model_outputs out = { .output0 = aligned_alloc(64, 32 * 32 * 32 * 4), .output1 = aligned_alloc(64, 64),
                               .output2 = aligned_alloc(64, 512 * 4) };
  void *ws = aligned_alloc(64, (model_workspace_size + 63) / 64 * 64 + 64);
  for (int round = 0; round < 2; round++) {   /* twice: nothing is left over from a run */
    int32_t status = model_run(&in, &out, ws);
    if (status != 0) { printf("status %d\n", status); return 1; }
  }
  printf("output0");
  for (int i = 0; i < 32 * 32 * 32; i++) printf(" %.9g", out.output0[i]);
  printf("\noutput1 %.9g\noutput2", out.output1[0]);
  for (int i = 0; i < 512; i++) printf(" %.9g", out.output2[i]);
  printf("\ncreated %d\n", created);
  return 0;
}
"""


def _ramp(n: int, scale: float) -> np.ndarray:
    return (np.sin(np.arange(n, dtype=np.float64) * 0.37) * scale).astype(np.float32)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_threaded_object_links_into_a_c_program(tmp_path: Path, threads: int) -> None:
    (tmp_path / "model.relay").write_text(PROGRAM)
    llc = [sys.executable, "-m", "irtool.tools.llc", str(tmp_path / "model.relay"), "--threads", str(threads)]
    subprocess.run([*llc, "--emit=obj", "-o", str(tmp_path / "model.o")], check=True, cwd=tmp_path)
    subprocess.run([*llc, "--emit=header", "-o", str(tmp_path / "model.h")], check=True, cwd=tmp_path)
    obj = (tmp_path / "model.o").read_bytes()
    assert (b"pthread_create" in obj) == (threads > 1)
    (tmp_path / "main.c").write_text(DRIVER)
    subprocess.run(["cc", "-O1", "-pthread", "-Wl,--wrap=pthread_create", "-o", str(tmp_path / "prog"),
                    str(tmp_path / "main.c"), str(tmp_path / "model.o"), "-lm"], check=True, cwd=tmp_path)
    done = subprocess.run([str(tmp_path / "prog")], capture_output=True, text=True, check=True)
    lines = dict(line.split(" ", 1) for line in done.stdout.strip().splitlines())
    # Each parallel loop (all are longer than 4 iterations) starts threads - 1 threads per run;
    # the model runs twice.
    mod = parse(PROGRAM, "model.relay")
    marked = run(ensure_lowered(mod), "tir-parallelize")
    loops = sum(1 for f in marked.functions.values() if isinstance(f, PrimFunc)
                for s in walk_stmts(f.body) if isinstance(s, For) and s.kind == "parallel")
    assert loops >= 2
    assert int(lines["created"]) == 2 * (threads - 1) * loops

    args = {"x": _ramp(16 * 64 * 64, 1.0).reshape(1, 16, 64, 64), "w": _ramp(32 * 16 * 9, 0.2).reshape(32, 16, 3, 3),
            "b": _ramp(32, 0.1), "z": _ramp(512 * 1024, 2.0).reshape(512, 1024)}
    want = flatten_value(run_function(mod, args))
    np.testing.assert_allclose(np.array(lines["output0"].split(), np.float32), want[0].ravel(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.float32(lines["output1"]), want[1], rtol=1e-5)
    np.testing.assert_allclose(np.array(lines["output2"].split(), np.float32), want[2], rtol=1e-5, atol=1e-5)
