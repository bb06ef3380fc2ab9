"""A program with control flow (a recurrent loop written as tail recursion, a recursion deeper than
the caller's stack budget, a list) compiled by `irtool-llc` to one object and a header, linked
into a C program with `cc main.c model.o -lm` and called through the unchanged C ABI
(docs/native-relay.md); its outputs must match the interpreter's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from irtool.eval.interpreter import flatten_value, run_function
from irtool.syntax.parser import parse
from support.c_link import link_model

PROGRAM = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }

def @cell(%i: int32, %h: Tensor[(1, 8), float32], %x: Tensor[(1, 8), float32], %w: Tensor[(8, 8), float32])
    -> Tensor[(1, 8), float32] {
  if (%i == 0) { %h } else { @cell(%i - 1, tanh(add(nn.dense(%h, %w), %x)), %x, %w) }
}

def @sum_to(%n: int32) -> int32 { if (%n == 0) { 0 } else { %n + @sum_to(%n - 1) } }

def @length(%l: List[Tensor[(1, 8), float32]]) -> int32 {
  match (%l) { Cons(_, %t) => 1 + @length(%t), Nil => 0 }
}

def @main(%x: Tensor[(1, 8), float32], %w: Tensor[(8, 8), float32], %n: int32)
    -> (Tensor[(1, 8), float32], int32, int32) {
  %0 = @cell(%n, zeros(shape=[1, 8], dtype="float32"), %x, %w);
  (%0, @sum_to(%n * 1000), @length(Cons(%0, Cons(%x, Nil))))
}
"""

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "model.h"

int main(int argc, char **argv) {
  struct model_inputs in;
  struct model_outputs out;
  in.x = malloc(8 * sizeof(float));
  in.w = malloc(64 * sizeof(float));
  in.n = malloc(sizeof(int32_t));
  for (int i = 0; i < 8; i++) in.x[i] = (float)sin(i * 0.7);
  for (int i = 0; i < 64; i++) in.w[i] = (float)(0.3 * cos(i * 0.37));
  out.output0 = malloc(8 * sizeof(float));
  out.output1 = malloc(sizeof(int32_t));
  out.output2 = malloc(sizeof(int32_t));
  void *ws = malloc(model_workspace_size + 1);
  for (int a = 1; a < argc; a++) {
    *in.n = atoi(argv[a]);
    int32_t status = model_run(&in, &out, ws);
    printf("n %d status %d sum %d length %d h", *in.n, status, *out.output1, *out.output2);
    for (int i = 0; i < 8; i++) printf(" %.9g", out.output0[i]);
    printf("\n");
  }
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_a_program_with_control_flow_links_into_a_c_program(tmp_path: Path) -> None:
    prog, header = link_model(tmp_path, PROGRAM, DRIVER)
    assert "struct model_inputs {\n  float* x;" in header and "int32_t* n;" in header
    assert "int32_t model_run(const struct model_inputs* in, struct model_outputs* out, void* workspace);" in header
    # n = 20: a 20,000-deep recursion, more than the 512 KiB of the caller's stack `_run` tries first.
    counts = [0, 1, 3, 20]
    done = subprocess.run([str(prog), *map(str, counts)], capture_output=True, text=True, check=True)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == len(counts)
    mod = parse(PROGRAM, "model.relay")
    x = np.sin(np.arange(8) * 0.7).astype(np.float32).reshape(1, 8)
    w = (0.3 * np.cos(np.arange(64) * 0.37)).astype(np.float32).reshape(8, 8)
    for n, line in zip(counts, lines):
        words = line.split()
        assert words[:8] == ["n", str(n), "status", "0", "sum", str(n * 1000 * (n * 1000 + 1) // 2), "length", "2"]
        h, total, length = flatten_value(run_function(mod, {"x": x, "w": w, "n": np.array(n, np.int32)}))
        assert (int(total), int(length)) == (n * 1000 * (n * 1000 + 1) // 2, 2)
        np.testing.assert_allclose(np.array(words[9:], np.float32), h.ravel(), rtol=1e-5, atol=1e-6)
