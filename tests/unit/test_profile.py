"""The per-kernel profiler (`irtool.runtime.profile`, `irtool-run --profile`): it runs main's steps
one by one on the same buffer layout as `_run` and must compute what the interpreter computes;
one row per step of `_run`, hoisted steps apart; FLOP counts from TIR match hand counts."""

from __future__ import annotations

import re

import numpy as np
import pytest

import irtool
from irtool.eval.interpreter import flatten_value, run_function
from irtool.ir.tir import (BinaryOp, Broadcast, Buffer, BufferLoad, BufferStore, Call, FloatImm, For, IfThenElse,
                           IntImm, PrimExpr, PrimFunc, Ramp, Select, Var, seq)
from irtool.driver import profile
from irtool.runtime.profile import kernel_flops, operators_of
from irtool.syntax.parser import parse
from irtool.tools.run import main as run_main

# conv+relu and dense read weights computed only from constants (hoisted: `_init` runs them);
# the softmax output and a result that is a hoisted tensor are copied out.
PROGRAM = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 16, 16), float32]) {
  %0 = multiply(meta[relay.Constant][0], 0.5f);
  %1 = nn.conv2d(%x, %0, padding=[1, 1, 1, 1]);
  %2 = nn.relu(%1);
  %3 = annotation.stop_fusion(%2);
  %4 = reshape(%3, newshape=[1, 1024]);
  %5 = full(0.01f, shape=[10, 1024], dtype="float32");
  %6 = nn.dense(%4, %5);
  (nn.softmax(%6), %0, %4)
}
#[metadata]
{"relay.Constant": [{"dtype": "float32", "shape": [4, 3, 3, 3], "data": WEIGHTS}]}
"""


def _program() -> tuple[object, np.ndarray]:
    weights = np.round(np.sin(np.arange(108) * 0.7), 3).astype(np.float32)
    mod = parse(PROGRAM.replace("WEIGHTS", "[" + ", ".join(repr(float(v)) for v in weights) + "]"), "p.relay")
    x = (np.arange(768, dtype=np.float32).reshape(1, 3, 16, 16) / 768).astype(np.float32)
    return mod, x


def test_steps_run_one_by_one_compute_what_the_interpreter_computes() -> None:
    mod, x = _program()
    result = profile(mod, x, repeat=3)
    want = flatten_value(run_function(mod, {"x": x}))
    assert len(result.outputs) == len(want) == 3
    for got, ref in zip(result.outputs, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)
    # The steps of `_run`: conv+relu, dense, softmax (the reshape is a view, not a step); the
    # constant-only multiply and full are `_init`'s.
    assert [s.operators for s in result.steps] == ["nn.conv2d+nn.relu", "nn.dense", "nn.softmax"]
    assert sorted(s.operators for s in result.init) == ["full", "multiply"]
    assert [s.shape for s in result.steps] == [(1, 4, 16, 16), (1, 10), (1, 10)]
    assert all(s.ms > 0 for s in result.steps + result.init) and result.run_ms > 0
    # FLOPs of the conv (2 per multiply-add, 1 per relu) and the dense, counted by hand; a schedule
    # may add a few, never drop any. The profiler counts what the kernel executes: the batch-1
    # dense keeps 2 vectors of partial sums per output and adds their lanes up at the end, one
    # add per lane but the first, so its count exceeds 2*N*K by N * (2 * lanes - 1): 150 with
    # AVX2's 8 lanes, 310 with AVX-512's 16 (1.5 % here). The bound holds for every vector width.
    conv, dense = 2 * 4 * 16 * 16 * 3 * 3 * 3 + 4 * 16 * 16, 2 * 10 * 1024
    assert conv <= result.steps[0].flops <= 1.01 * conv  # type: ignore[operator]
    assert dense <= result.steps[1].flops <= dense + 10 * (2 * 16 - 1)  # type: ignore[operator]


def test_the_table_has_one_row_per_step_slowest_first_and_the_sums() -> None:
    mod, x = _program()
    result = irtool.build(mod).profile(x=x, repeat=2)
    lines = result.table().splitlines()
    rows = [line for line in lines[1:] if re.match(r"\s*\d+\s", line)]
    assert len(rows) == len(result.steps) == 3
    times = [float(r.split()[1]) for r in rows]
    assert times == sorted(times, reverse=True)
    shares = [float(r.split()[2]) for r in rows]
    assert sum(shares) == pytest.approx(100, abs=0.3)
    assert f"sum of 3 steps {result.total_ms:.3f} ms" in lines[-2]
    assert lines[-1].startswith("_init (once): 2 hoisted steps")
    top = result.table(top=1).splitlines()
    assert "... 2 more steps" in top[2]


def test_the_sum_of_the_steps_is_close_to_the_whole_run() -> None:
    """Kernels big enough that per-call overhead is small: the step times add up to `_run`'s."""
    src = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 40, 40), float32], %w: Tensor[(16, 16, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = annotation.stop_fusion(nn.relu(%0));
  nn.conv2d(%1, %w, padding=[1, 1, 1, 1])
}
"""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 16, 40, 40)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    result = profile(parse(src, "two.relay"), x, w, repeat=5)
    # Two convolutions (the relu fused into the first); the weights being a parameter, a layout
    # change of them (alter-layout) runs in `_run` too, as steps of their own.
    convs = [s for s in result.steps if s.operators.startswith("nn.conv2d")]
    assert len(convs) == 2 and not result.init
    assert all(s in convs or s.operators == "layout_transform" for s in result.steps)
    assert 0.5 * result.run_ms < result.total_ms < 2.0 * result.run_ms
    np.testing.assert_allclose(result.outputs[0], run_function(parse(src, "two.relay"), {"x": x, "w": w}),
                               rtol=1e-4, atol=1e-4)


def _op(op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return BinaryOp(op, a, b)


def test_kernel_flops_counts_lanes_loops_branches_and_fma() -> None:
    a, out = Buffer("a", (64,), "float32"), Buffer("out", (64,), "float32")
    i, j = Var("i", "int32"), Var("j", "int32")
    load = BufferLoad(a, [i])
    one, two = FloatImm(1.0), FloatImm(2.0)
    vec = Ramp(IntImm(0), IntImm(1), 16)
    # 8 x: 4 x (a[i] * 2 + 1: 2 flops), a 16-lane fma (32 flops), and under an `if` a select of two
    # sums (2 flops; both sides count) against an else branch of one flop: 8 * (4 * 2 + 32 + 2).
    body = seq([
        For(j, IntImm(0), IntImm(4), "serial", BufferStore(out, [i], _op("add", _op("mul", load, two), one))),
        BufferStore(out, [vec], Call("fma", [BufferLoad(a, [vec]), Broadcast(two, 16), Broadcast(one, 16)])),
        IfThenElse(_op("lt", i, IntImm(4)),
                   BufferStore(out, [i], Select(_op("lt", i, IntImm(2)), _op("add", load, one), _op("sub", load, one))),
                   BufferStore(out, [i], _op("max", load, one))),
    ])
    func = PrimFunc([a, out], For(i, IntImm(0), IntImm(8), "serial", body))
    assert kernel_flops(func) == 8 * (4 * 2 + 32 + 2)
    # Integer index arithmetic does not count; an extent that is not a constant makes it unknown.
    shifted = BufferStore(out, [_op("add", i, IntImm(1))], load)
    assert kernel_flops(PrimFunc([a, out], For(i, IntImm(0), IntImm(63), "serial", shifted))) == 0
    n = Var("n", "int32")
    assert kernel_flops(PrimFunc([a, out], For(i, IntImm(0), n, "serial", shifted))) is None


def test_operators_are_read_back_from_kernel_names() -> None:
    assert operators_of("fused_nn_conv2d_add_nn_relu_3") == "nn.conv2d+add+nn.relu"
    assert operators_of("fused_nn_max_pool2d") == "nn.max_pool2d"
    assert operators_of("fused_full_full_add_sqrt_divide_multiply_2") == "full+full+add+sqrt+divide+multiply"
    assert operators_of("fused_nn_conv2d_expand_dims_mul") == "nn.conv2d+expand_dims+mul..."


def test_irtool_run_profile_prints_the_table_and_the_native_outputs(tmp_path: object,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "m.relay"  # type: ignore[operator]
    src.write_text('#[version = "0.0.5"]\ndef @main(%x: Tensor[(4, 8), float32]) {\n'
                   '  %0 = nn.relu(%x);\n  %1 = annotation.stop_fusion(%0);\n  multiply(%1, 3f)\n}\n')
    assert run_main([str(src), "--backend=native", "--profile", "--repeat", "2", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "nn.relu" in out and " multiply" in out and "whole _run" in out
    profiled = out.split("output0:")[1]   # relu and * 3 are exact: the same bytes as the interpreter
    assert run_main([str(src), "--seed", "3"]) == 0
    interpreted = capsys.readouterr().out.split("output0:")[1]
    assert profiled.split("sha256=")[1][:12] == interpreted.split("sha256=")[1][:12]
    assert run_main([str(src), "--profile"]) == 1
    assert "--profile times compiled kernels" in capsys.readouterr().err
