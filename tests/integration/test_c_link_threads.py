"""An object file compiled with `--threads N` links into a C program (with -pthread) and computes
what the interpreter computes, from one C thread (also after idle gaps, in which the pool's
workers park until the next run wakes them), from two at once (one of them pausing between runs,
so their runs' sections of the pool overlap and interleave) and in a forked child. The
driver wraps `pthread_create` and `pthread_join` (`-Wl,--wrap`) to count the workers the model's
pool starts (N - 1 once, however many runs and loops; none for `--threads 1`, whose object has no
pthread reference at all) and joins at exit, and to refuse every thread (the model then runs
serially and still computes the same)."""

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
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>
#include "model.h"

/* pthread_create counted (or refused with EAGAIN when the program's argument is `refuse`), and
   every join the model's pool does at exit reported on stderr by this process. */
static int created = 0, refuse = 0;
static pid_t parent;
int __real_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*f)(void *), void *arg) {
  if (refuse) return EAGAIN;
  __atomic_add_fetch(&created, 1, __ATOMIC_SEQ_CST);
  return __real_pthread_create(t, a, f, arg);
}
int __real_pthread_join(pthread_t, void **);
int __wrap_pthread_join(pthread_t t, void **r) {
  int rc = __real_pthread_join(t, r);
  if (rc == 0 && getpid() == parent) write(2, "joined\n", 7);
  return rc;
}

static float *ramp_f(size_t n, double scale) {
  float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  for (size_t i = 0; i < n; i++) p[i] = (float)(sin((double)i * 0.37) * scale);
  return p;
}

#define N0 (32 * 32 * 32)
#define N2 512
struct job { struct model_inputs *in; struct model_outputs out; void *ws; int rounds; int gap_us; int32_t status; };

static struct job job_for(struct model_inputs *in, int rounds, int gap_us) {
  struct job j = { in, { .output0 = aligned_alloc(64, N0 * 4), .output1 = aligned_alloc(64, 64),
                         .output2 = aligned_alloc(64, N2 * 4) },
                   aligned_alloc(64, (model_workspace_size + 63) / 64 * 64 + 64), rounds, gap_us, 0 };
  return j;
}

static void *runs(void *arg) {   /* `rounds` runs, `gap_us` apart: nothing may be left over from a run */
  struct job *j = arg;
  for (int r = 0; r < j->rounds; r++) {
    if (j->gap_us) usleep(j->gap_us);
    j->status |= model_run(j->in, &j->out, j->ws);
  }
  return NULL;
}

static int same(const struct job *a, const struct job *b) {
  return a->status == 0 && b->status == 0 && !memcmp(a->out.output0, b->out.output0, N0 * 4)
         && !memcmp(a->out.output1, b->out.output1, 4) && !memcmp(a->out.output2, b->out.output2, N2 * 4);
}

int main(int argc, char **argv) {
  parent = getpid();
  refuse = argc > 1 && !strcmp(argv[1], "refuse");
  struct model_inputs in = { .x = ramp_f(16 * 64 * 64, 1.0), .w = ramp_f(32 * 16 * 9, 0.2), .b = ramp_f(32, 0.1),
                             .z = ramp_f(512 * 1024, 2.0) };
  struct job first = job_for(&in, 2, 0);
  runs(&first);
  if (first.status != 0) { printf("status %d\n", first.status); return 1; }
  /* Runs 30 ms apart: long enough for the workers to park after each. */
  struct job idle = job_for(&in, 4, 30000);
  runs(&idle);
  /* Two C threads run the model at once, each with its own workspace (`_init` already ran). */
  struct job pair[2] = { job_for(&in, 25, 0), job_for(&in, 25, 2000) };
  pthread_t t[2];
  for (int k = 0; k < 2; k++) __real_pthread_create(&t[k], NULL, runs, &pair[k]);
  for (int k = 0; k < 2; k++) __real_pthread_join(t[k], NULL);
  /* A forked child runs it too (on workers of its own) and exits through the pool's shutdown. */
  pid_t child = fork();
  if (child == 0) {
    struct job again = job_for(&in, 3, 0);
    runs(&again);
    exit(same(&again, &first) ? 0 : 3);
  }
  int waited = 0;
  waitpid(child, &waited, 0);
  printf("output0");
  for (int i = 0; i < N0; i++) printf(" %.9g", first.out.output0[i]);
  printf("\noutput1 %.9g\noutput2", first.out.output1[0]);
  for (int i = 0; i < N2; i++) printf(" %.9g", first.out.output2[i]);
  printf("\nidle %d\nconcurrent %d\nchild %d\ncreated %d\n", same(&idle, &first),
         same(&pair[0], &first) && same(&pair[1], &first),
         WIFEXITED(waited) ? WEXITSTATUS(waited) : 100 + WTERMSIG(waited), created);
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
    subprocess.run(["cc", "-O1", "-pthread", "-Wl,--wrap=pthread_create", "-Wl,--wrap=pthread_join", "-o",
                    str(tmp_path / "prog"), str(tmp_path / "main.c"), str(tmp_path / "model.o"), "-lm"],
                   check=True, cwd=tmp_path)
    mod = parse(PROGRAM, "model.relay")
    marked = run(ensure_lowered(mod), "tir-parallelize")
    loops = sum(1 for f in marked.functions.values() if isinstance(f, PrimFunc)
                for s in walk_stmts(f.body) if isinstance(s, For) and s.kind == "parallel")
    assert loops >= 2
    args = {"x": _ramp(16 * 64 * 64, 1.0).reshape(1, 16, 64, 64), "w": _ramp(32 * 16 * 9, 0.2).reshape(32, 16, 3, 3),
            "b": _ramp(32, 0.1), "z": _ramp(512 * 1024, 2.0).reshape(512, 1024)}
    want = flatten_value(run_function(mod, args))
    for refuse in (False, True):
        done = subprocess.run([str(tmp_path / "prog"), *(["refuse"] if refuse else [])], capture_output=True,
                              text=True, check=True, timeout=600)
        lines = dict(line.split(" ", 1) for line in done.stdout.strip().splitlines())
        # The pool starts threads - 1 workers once, on the first of the 2 + 4 + 2 * 25 runs, whatever the
        # number of parallel loops; at exit it joins them. Where no thread can be created, every loop
        # runs on the calling thread.
        workers = 0 if refuse else threads - 1
        assert int(lines["created"]) == workers
        assert done.stderr.count("joined") == workers
        assert lines["idle"] == "1" and lines["concurrent"] == "1" and lines["child"] == "0"
        np.testing.assert_allclose(np.array(lines["output0"].split(), np.float32), want[0].ravel(), rtol=1e-5,
                                   atol=1e-7)
        np.testing.assert_allclose(np.float32(lines["output1"]), want[1], rtol=1e-5)
        np.testing.assert_allclose(np.array(lines["output2"].split(), np.float32), want[2], rtol=1e-5, atol=1e-5)
