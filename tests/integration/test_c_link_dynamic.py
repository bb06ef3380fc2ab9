"""A dynamic-batch MLP and a recurrent cell unrolled by tail recursion, in one program compiled by
`irtool-llc` to one object and a header, linked with `cc main.c model.o -lm` and run at several
batch sizes through the documented ABI for dynamic tensors (docs/native-relay.md): each dynamic
input carries an `int64_t*` shape, each dynamic output is allocated by `_run`, its dims written to
the caller's array, and freed with `model_free`. Results must match the interpreter's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from irtool.eval.interpreter import flatten_value, run_function
from irtool.syntax.parser import parse
from support.c_link import link_model
from support.dynamic_programs import MLP_AND_RNN

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "model.h"

static float *filled(long n, double scale, double step) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  for (long i = 0; i < n; i++) p[i] = (float)(scale * sin(i * step + 0.3));
  return p;
}

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
