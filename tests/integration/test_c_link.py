"""The emitted object file links into a C program: `irtool-llc --emit=obj` and `--emit=header`,
a small C driver compiled with `cc` (and -lm) fills the inputs, calls `<prefix>_run` (after an
explicit `<prefix>_init`, or letting `_run` call it), prints the outputs; run as a separate
process, its output must match the interpreter and numpy. The weights-only steps' results live
in `.bss`. The driver allocates with `aligned_alloc(64, ...)`, or with plain `malloc` plus 4
bytes (every buffer, the workspace too): the ABI asks only for element alignment."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from irtool.eval.interpreter import flatten_value, run_function
from irtool.syntax.parser import parse

PROGRAM = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 6, 6), float32], %w: Tensor[(4, 3, 3, 3), float32],
          %t: (Tensor[(4), float32], Tensor[(2, 3), int32])) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = nn.bias_add(%0, %t.0);
  %2 = nn.relu(%1);
  %3 = nn.max_pool2d(%2, pool_size=[2, 2], strides=[2, 2]);
  %4 = reshape(%3, newshape=[1, 36]);
  %5 = nn.dense(%4, meta[relay.Constant][0]);
  %6 = add(%5, meta[relay.Constant][1]);
  %7 = multiply(meta[relay.Constant][1], 3f);
  %8 = full(0.25f, shape=[4096, 36], dtype="float32");
  %9 = nn.dense(%4, %8);
  (tanh(%6), %4, divide(%t.1, 2), %t.1, %7, max(%9, axis=[1]))
}
#[metadata]
{"relay.Constant": [{"dtype": "float32", "shape": [5, 36], "data": DENSE},
                    {"dtype": "float32", "shape": [5], "data": [0.5, -0.25, 1.0, 0.0, 2.0]}]}
"""

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "model.h"

#include <stdint.h>

/* 64-byte aligned, or (-DOFFSET4) malloc's pointer plus 4 bytes: 4-byte but not 8-byte aligned. */
static int odd_pointers = 0;
static void *buffer(size_t n) {
#ifdef OFFSET4
  char *p = (char *)malloc(n + 4) + 4;
  odd_pointers += (uintptr_t)p % 8 != 0;
  return p;
#else
  return aligned_alloc(64, (n + 63) / 64 * 64);
#endif
}

/* The same deterministic inputs the test computes with numpy. */
static float *ramp_f(size_t n, double scale) {
  float *p = buffer(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = (float)(sin((double)i * 0.37) * scale);
  return p;
}

static void print_f(const char *name, const float *p, size_t n) {
  printf("%s", name);
  for (size_t i = 0; i < n; i++) printf(" %.9g", p[i]);
  printf("\n");
}

int main(void) {
  struct model_inputs in;
  struct model_outputs out;
  in.x = ramp_f(1 * 3 * 6 * 6, 1.0);
  in.w = ramp_f(4 * 3 * 3 * 3, 0.5);
  in.t_0 = ramp_f(4, 0.1);
  in.t_1 = buffer(6 * sizeof(int32_t));
  for (int i = 0; i < 6; i++) in.t_1[i] = i * 3 - 7;
  out.output0 = buffer(5 * sizeof(float));
  out.output1 = buffer(36 * sizeof(float));
  out.output2 = buffer(6 * sizeof(int32_t));
  out.output3 = buffer(6 * sizeof(int32_t));
  out.output4 = buffer(5 * sizeof(float));
  out.output5 = buffer(1 * sizeof(float));
  void *ws = buffer(model_workspace_size);
  printf("odd %d\n", odd_pointers);
#ifdef CALL_INIT
  printf("init %d\n", model_init());
  printf("again %d\n", model_init());
#endif
  int32_t status = model_run(&in, &out, ws);
  if (status != 0) { printf("status %d\n", status); return 1; }
  /* A pointer that is not float-aligned is refused, not crashed on. */
  struct model_inputs bad = in;
  bad.x = (float *)((char *)in.x + 2);
  printf("misaligned %d\n", model_run(&bad, &out, ws));
  model_run(&in, &out, ws);
  print_f("output0", out.output0, 5);
  print_f("output1", out.output1, 36);
  printf("output2");
  for (int i = 0; i < 6; i++) printf(" %d", out.output2[i]);
  printf("\noutput3");
  for (int i = 0; i < 6; i++) printf(" %d", out.output3[i]);
  printf("\n");
  print_f("output4", out.output4, 5);
  print_f("output5", out.output5, 1);
  return 0;
}
"""


def _ramp(n: int, scale: float) -> np.ndarray:
    return (np.sin(np.arange(n, dtype=np.float64) * 0.37) * scale).astype(np.float32)


def _dense() -> np.ndarray:
    return np.round(np.cos(np.arange(5 * 36) * 0.11), 3).astype(np.float32).reshape(5, 36)


def _source() -> str:
    return PROGRAM.replace("DENSE", "[" + ", ".join(repr(float(v)) for v in _dense().ravel()) + "]")


def _numpy_outputs(x: np.ndarray, w: np.ndarray, bias: np.ndarray, t1: np.ndarray) -> list[np.ndarray]:
    """PROGRAM's first four results computed with numpy alone (float64), independently of irtool."""
    padded = np.pad(x[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    windows = sliding_window_view(padded, (3, 3), axis=(1, 2))           # (3, 6, 6, 3, 3)
    conv = np.einsum("chwij,ocij->ohw", windows, w.astype(np.float64)) + bias[:, None, None]
    pooled = np.maximum(conv, 0).reshape(4, 3, 2, 3, 2).max(axis=(2, 4))  # 2x2 max pool, stride 2
    flat = pooled.reshape(36)
    logits = _dense().astype(np.float64) @ flat + [0.5, -0.25, 1.0, 0.0, 2.0]
    halves = np.trunc(t1 / 2).astype(np.int32)                            # integer divide truncates
    return [np.tanh(logits), flat, halves.ravel(), t1.ravel()]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`model.relay` compiled once by `irtool-llc` to `model.o` and `model.h`."""
    where = tmp_path_factory.mktemp("c_link")
    (where / "model.relay").write_text(_source())
    llc = [sys.executable, "-m", "irtool.tools.llc", str(where / "model.relay")]
    subprocess.run([*llc, "--emit=obj", "-o", str(where / "model.o")], check=True, cwd=where)
    subprocess.run([*llc, "--emit=header", "-o", str(where / "model.h")], check=True, cwd=where)
    return where


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
@pytest.mark.parametrize(("explicit_init", "offset4"), [(True, False), (False, False), (False, True)],
                         ids=["init-then-run", "run-calls-init", "malloc-plus-4"])
def test_object_file_links_into_a_c_program(model_dir: Path, tmp_path: Path, explicit_init: bool,
                                            offset4: bool) -> None:
    source = _source()
    for name in ("model.o", "model.h"):
        shutil.copy(model_dir / name, tmp_path / name)
    header = (tmp_path / "model.h").read_text()
    assert "struct model_inputs {\n  float* x;" in header
    assert "int32_t model_run(const struct model_inputs* in, struct model_outputs* out, void* workspace);" in header
    assert "int32_t model_init(void);" in header
    assert "extern const uint64_t model_workspace_size;" in header
    # The header promises what the code checks: element alignment, any workspace pointer.
    assert "must be aligned to its element\n   size (as malloc's are)" in header and "64-byte aligned" not in header
    # The 4096x36 `full` weights (576 KiB) are computed by model_init into zero-initialised
    # static memory: the object file does not carry them.
    assert (tmp_path / "model.o").stat().st_size < 4096 * 36 * 4 // 4
    pool = int(re.search(r"\((\d+) bytes of static memory\)", header).group(1))  # type: ignore[union-attr]
    workspace = int(re.search(r"needs \((\d+)\)", header).group(1))  # type: ignore[union-attr]
    assert pool >= 4096 * 36 * 4 > workspace
    (tmp_path / "main.c").write_text(DRIVER)
    defines = (["-DCALL_INIT"] if explicit_init else []) + (["-DOFFSET4"] if offset4 else [])
    subprocess.run(["cc", "-O1", *defines, "-o", str(tmp_path / "prog"), str(tmp_path / "main.c"),
                    str(tmp_path / "model.o"), "-lm"], check=True, cwd=tmp_path)
    done = subprocess.run([str(tmp_path / "prog")], capture_output=True, text=True, check=True)
    lines = dict(line.split(" ", 1) for line in done.stdout.strip().splitlines())
    assert lines["misaligned"] == "1"
    # With -DOFFSET4 all 11 buffers (4 inputs, 6 outputs, the workspace) really are off the
    # 8-byte grid, so the run above used unaligned memory throughout.
    assert lines["odd"] == ("11" if offset4 else "0")
    if explicit_init:
        assert lines["init"] == "0" and lines["again"] == "0"

    mod = parse(source, "model.relay")
    args = {"x": _ramp(108, 1.0).reshape(1, 3, 6, 6), "w": _ramp(108, 0.5).reshape(4, 3, 3, 3),
            "t": (_ramp(4, 0.1), (np.arange(6, dtype=np.int32) * 3 - 7).reshape(2, 3))}
    want = flatten_value(run_function(mod, args))
    got = [np.array(lines[f"output{k}"].split(), dtype=w.dtype) for k, w in enumerate(want)]
    for k, ref in enumerate(_numpy_outputs(args["x"], args["w"], args["t"][0], args["t"][1])):
        np.testing.assert_allclose(got[k], ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0], want[0].ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want[1].ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[2], want[2].ravel())
    np.testing.assert_array_equal(got[3], want[3].ravel())
    np.testing.assert_array_equal(got[4], [1.5, -0.75, 3.0, 0.0, 6.0])   # 3 x the bias constant
    # max over 4096 equal units of 0.25 * sum(%4): checked against numpy, not only the interpreter.
    np.testing.assert_allclose(got[5], [0.25 * want[1].astype(np.float64).sum()], rtol=1e-5)
    np.testing.assert_allclose(got[5], want[5].ravel(), rtol=1e-5)
