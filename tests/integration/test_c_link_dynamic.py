"""A dynamic-batch MLP and a recurrent cell unrolled by tail recursion, in one program compiled by
`irtool-llc` to one object and a header, linked with `cc main.c model.o -lm` and run at several
batch sizes through the documented ABI for dynamic tensors (docs/native-relay.md): each dynamic
input carries an `int64_t*` shape, each dynamic output is allocated by `_run`, its dims written to
the caller's array, and freed with `model_free`. Results must match the interpreter's. A second
program takes two inputs with two `?`s each (extents that disagree are status 5) and returns
them merged into one `?` by a reshape."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from irtool.eval.interpreter import flatten_value, run_function
from irtool.syntax.parser import parse
from support.c_link import link_model
from support.dynamic_programs import MLP_AND_RNN, TWO_AXES

# The drivers' common part: the header and inputs filled with a sine.
PRELUDE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "model.h"

static float *filled(long n, double scale, double step) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  for (long i = 0; i < n; i++) p[i] = (float)(scale * sin(i * step + 0.3));
  return p;
}
"""

DRIVER = PRELUDE + r"""
int main(int argc, char **argv) {
  for (int a = 1; a < argc; a++) {
    long batch = 0, hbatch = 0;
    sscanf(argv[a], "%ld:%ld", &batch, &hbatch);
    int64_t x_shape[2] = {batch, 8}, h_shape[2] = {hbatch, 16}, y_shape[2] = {-1, -1}, g_shape[2] = {-1, -1};
    int32_t n = 5;
    struct model_inputs in = {
      .x = filled(batch * 8, 1.0, 0.7), .x_shape = x_shape, .h0 = filled(hbatch * 16, 0.5, 0.3), .h0_shape = h_shape,
      .w1 = filled(128, 0.3, 0.37), .b1 = filled(16, 0.1, 1.1), .w2 = filled(64, 0.3, 0.53),
      .wh = filled(256, 0.2, 0.19), .n = &n,
    };
    struct model_outputs out = { .output0_shape = y_shape, .output1_shape = g_shape };
    int32_t status = model_run(&in, &out, NULL);
    printf("status %d", status);
    if (status == 0) {
      printf(" y %lld %lld", (long long)y_shape[0], (long long)y_shape[1]);
      for (long i = 0; i < y_shape[0] * y_shape[1]; i++) printf(" %.9g", out.output0[i]);
      printf(" h %lld %lld", (long long)g_shape[0], (long long)g_shape[1]);
      for (long i = 0; i < g_shape[0] * g_shape[1]; i++) printf(" %.9g", out.output1[i]);
      model_free(out.output0);
      model_free(out.output1);
    }
    printf("\n");
  }
  return 0;
}
"""


def filled(n: int, scale: float, step: float) -> np.ndarray:
    return (scale * np.sin(np.arange(n) * step + 0.3)).astype(np.float32)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_dynamic_batch_models_link_into_a_c_program(tmp_path: Path) -> None:
    prog, header = link_model(tmp_path, MLP_AND_RNN, DRIVER)
    assert "  float* x;  /* Tensor[(?, 8), float32] */\n  const int64_t* x_shape;" in header
    assert "  int64_t* output1_shape;" in header and "void model_free(void* p);" in header
    batches = [3, 1, 0, 70]   # 70: two tiles of 32 rows, then 6 rows one by one
    runs = [f"{b}:{b}" for b in batches] + ["3:2"]   # the last: the two batches disagree
    done = subprocess.run([str(prog), *runs], capture_output=True, text=True, check=True)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == len(runs)
    assert lines[-1].split() == ["status", "5"]
    mod = parse(MLP_AND_RNN, "model.relay")
    weights = {"w1": filled(128, 0.3, 0.37).reshape(16, 8), "b1": filled(16, 0.1, 1.1),
               "w2": filled(64, 0.3, 0.53).reshape(4, 16), "wh": filled(256, 0.2, 0.19).reshape(16, 16)}
    for batch, line in zip(batches, lines):
        words = line.split()
        assert words[:2] == ["status", "0"]
        inputs = {"x": filled(batch * 8, 1.0, 0.7).reshape(batch, 8),
                  "h0": filled(batch * 16, 0.5, 0.3).reshape(batch, 16), **weights, "n": np.array(5, np.int32)}
        y, h = flatten_value(run_function(mod, inputs))
        assert words[2:5] == ["y", str(batch), "4"]
        at = 5 + 4 * batch
        np.testing.assert_allclose(np.array(words[5:at], np.float32), np.asarray(y).ravel(), rtol=1e-5, atol=1e-5)
        assert words[at:at + 3] == ["h", str(batch), "16"]
        np.testing.assert_allclose(np.array(words[at + 3:], np.float32), np.asarray(h).ravel(), rtol=1e-5, atol=1e-5)


TWO_AXES_DRIVER = PRELUDE + r"""
int main(int argc, char **argv) {
  for (int a = 1; a < argc; a++) {
    long b = 0, s = 0, ys = 0;
    sscanf(argv[a], "%ld:%ld:%ld", &b, &s, &ys);
    int64_t x_shape[3] = {b, s, 8}, y_shape[3] = {b, ys, 8}, p_shape[3] = {-1, -1, -1}, f_shape[2] = {-1, -1};
    struct model_inputs in = {
      .x = filled(b * s * 8, 1.0, 0.7), .x_shape = x_shape, .y = filled(b * ys * 8, 0.5, 0.3), .y_shape = y_shape,
      .w = filled(32, 0.6, 0.37),
    };
    struct model_outputs out = { .output0_shape = p_shape, .output1_shape = f_shape };
    int32_t status = model_run(&in, &out, NULL);
    printf("status %d", status);
    if (status == 0) {
      printf(" p %lld %lld %lld", (long long)p_shape[0], (long long)p_shape[1], (long long)p_shape[2]);
      for (long i = 0; i < p_shape[0] * p_shape[1] * p_shape[2]; i++) printf(" %.9g", out.output0[i]);
      printf(" f %lld %lld", (long long)f_shape[0], (long long)f_shape[1]);
      for (long i = 0; i < f_shape[0] * f_shape[1]; i++) printf(" %.9g", out.output1[i]);
      model_free(out.output0);
      model_free(out.output1);
    }
    printf("\n");
    free(in.x);
    free(in.y);
    free(in.w);
  }
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_two_dynamic_axes_link_into_a_c_program(tmp_path: Path) -> None:
    prog, header = link_model(tmp_path, TWO_AXES, TWO_AXES_DRIVER)
    assert "  float* x;  /* Tensor[(?, ?, 8), float32] */\n  const int64_t* x_shape;" in header
    cases = [(2, 3), (1, 40), (3, 0), (0, 4), (5, 13)]   # 40 and 65 rows: whole 32-row tiles and the rest
    runs = [f"{b}:{s}:{s}" for b, s in cases] + ["2:3:4"]   # the last: the second extents disagree
    done = subprocess.run([str(prog), *runs], capture_output=True, text=True, check=True)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == len(runs)
    assert lines[-1].split() == ["status", "5"]
    mod = parse(TWO_AXES, "model.relay")
    w = filled(32, 0.6, 0.37).reshape(4, 8)
    for (b, s), line in zip(cases, lines):
        words = line.split()
        assert words[:2] == ["status", "0"]
        inputs = {"x": filled(b * s * 8, 1.0, 0.7).reshape(b, s, 8), "y": filled(b * s * 8, 0.5, 0.3).reshape(b, s, 8),
                  "w": w}
        p, f = flatten_value(run_function(mod, inputs))
        assert words[2:6] == ["p", str(b), str(s), "4"]
        at = 6 + 4 * b * s
        np.testing.assert_allclose(np.array(words[6:at], np.float32), np.asarray(p).ravel(), rtol=1e-5, atol=1e-6)
        assert words[at:at + 3] == ["f", str(b * s), "4"]
        np.testing.assert_allclose(np.array(words[at + 3:], np.float32), np.asarray(f).ravel(), rtol=1e-5, atol=1e-6)
