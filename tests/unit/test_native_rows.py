"""Native code over a row prefix with several `?`s (docs/native-relay.md, "Dynamic shapes"):
`Tensor[(?, ?, 64), float32]` through a transformer-style block and `Tensor[(2, ?, 8), float32]`
give the interpreter's answer (and numpy's) at every extent, 0 and non-multiples of the 32-row
tile included; extents that must agree but do not are status 5; many calls free every box."""

from __future__ import annotations

import math

import numpy as np
import pytest

import irtool
from irtool.core.diagnostics import DiagnosticError
from irtool.eval.interpreter import flatten_value, run_function
from irtool.runtime.native import NativeModule
from irtool.syntax.parser import parse
from support.dynamic_programs import TOKENS
from support.heap import heap_in_use

_RNG = np.random.default_rng(11)
WEIGHTS = {"w1": _RNG.standard_normal((64, 64)).astype(np.float32) * 0.15,
           "b1": _RNG.standard_normal(64).astype(np.float32) * 0.1,
           "g": _RNG.standard_normal(64).astype(np.float32), "beta": _RNG.standard_normal(64).astype(np.float32),
           "w2": _RNG.standard_normal((16, 64)).astype(np.float32) * 0.2}


@pytest.fixture(scope="module")
def tokens() -> NativeModule:
    return irtool.build(parse(TOKENS, "tokens.relay"))


def _x(batch: int, seq: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, seq, 64)).astype(np.float32)


def _layer_norm(v: np.ndarray) -> np.ndarray:
    centred = v - v.mean(-1, keepdims=True)
    return centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + 1e-5) * WEIGHTS["g"] + WEIGHTS["beta"]


def _numpy(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    h = x @ WEIGHTS["w1"].T + WEIGHTS["b1"]
    h = 0.5 * h * (1 + np.vectorize(math.erf, otypes=[np.float64])(h * 0.707107))
    h = np.maximum(_layer_norm(h) + x, 0)
    logits = h @ WEIGHTS["w2"].T
    e = np.exp(logits - logits.max(-1, keepdims=True))
    soft = e / e.sum(-1, keepdims=True)
    return soft, soft.reshape(-1, 16), _layer_norm(h)


@pytest.mark.parametrize(("batch", "seq"), [(1, 1), (2, 3), (3, 33), (1, 70), (4, 8), (0, 5), (5, 0), (0, 0)])
def test_two_dynamic_axes_through_a_transformer_block_match_the_interpreter(tokens: NativeModule, batch: int,
                                                                          seq: int) -> None:
    inputs = {"x": _x(batch, seq, 31 * batch + seq), **WEIGHTS}
    got = tokens(**inputs)
    assert [g.shape for g in got] == [(batch, seq, 16), (batch * seq, 16), (batch, seq, 64)]
    want = flatten_value(run_function(parse(TOKENS, "tokens.relay"), inputs))
    for g, w, ref in zip(got, want, _numpy(inputs["x"])):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(g, ref, rtol=1e-3, atol=1e-4)


STATIC_LEAD = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, ?, 8), float32], %y: Tensor[(2, ?, 8), float32], %w: Tensor[(4, 8), float32]) {
  %0 = nn.softmax(tanh(nn.dense(%x, %w, units=4)), axis=-1);
  %1 = reshape(exp(%x), newshape=[-1, 8]);
  %2 = sum(multiply(%x, %y), axis=[2]);
  (%0, %1, %2)
}
"""


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 40])   # 2n rows: below, at and past a 32-row tile
def test_a_static_axis_before_a_dynamic_one_matches_the_interpreter(n: int) -> None:
    rng = np.random.default_rng(n)
    inputs = {"x": rng.standard_normal((2, n, 8)).astype(np.float32),
              "y": rng.standard_normal((2, n, 8)).astype(np.float32),
              "w": rng.standard_normal((4, 8)).astype(np.float32)}
    got = irtool.build(parse(STATIC_LEAD, "lead.relay"))(**inputs)
    assert [g.shape for g in got] == [(2, n, 4), (2 * n, 8), (2, n)]
    want = flatten_value(run_function(parse(STATIC_LEAD, "lead.relay"), inputs))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], np.exp(inputs["x"]).reshape(-1, 8), rtol=1e-6)
    np.testing.assert_allclose(got[2], (inputs["x"] * inputs["y"]).sum(-1), rtol=1e-5, atol=1e-6)


def test_extents_that_must_agree_but_do_not_are_refused() -> None:
    mod = irtool.build(parse(STATIC_LEAD, "lead.relay"))
    x = np.zeros((2, 3, 8), np.float32)
    with pytest.raises(DiagnosticError, match="two batches that must be equal"):
        mod(x=x, y=np.zeros((2, 4, 8), np.float32), w=np.zeros((4, 8), np.float32))
    with pytest.raises(DiagnosticError, match=r"input `x` must have shape \(2, \?, 8\), got \(3, 3, 8\)"):
        mod(x=np.zeros((3, 3, 8), np.float32), y=x, w=np.zeros((4, 8), np.float32))


def test_2000_calls_over_two_dynamic_axes_release_every_box(tokens: NativeModule) -> None:
    inputs = {"x": _x(3, 5, 0), **WEIGHTS}
    tokens(**inputs)
    before = heap_in_use()
    for _ in range(2_000):
        out = tokens(**inputs)
    del out
    # Seven boxes a call at least 48 bytes each: one leaked per call would be 96 KB.
    assert heap_in_use() - before < 64 * 1024


SHARED_RIGHT = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, ?, 8), float32], %w: Tensor[(1, 8, 4), float32], %v: Tensor[(1, 5, 8), float32]) {
  (nn.batch_matmul(%x, %w), nn.batch_matmul(%x, %v, transpose_b=True))
}
"""


@pytest.mark.parametrize(("batch", "seq"), [(1, 1), (2, 3), (3, 33), (1, 70), (0, 4), (4, 0)])
def test_a_shared_right_operand_of_batch_one_runs_over_every_row(batch: int, seq: int) -> None:
    """A static right operand of batch 1 broadcasts over the left's `?` batch: the result is
    `(?, ?, n)` (it once typed as `(1, ?, n)`, so every batch but 1 was status 5)."""
    rng = np.random.default_rng(batch * 100 + seq)
    inputs = {"x": rng.standard_normal((batch, seq, 8)).astype(np.float32),
              "w": rng.standard_normal((1, 8, 4)).astype(np.float32),
              "v": rng.standard_normal((1, 5, 8)).astype(np.float32)}
    got = irtool.build(parse(SHARED_RIGHT, "shared.relay"))(**inputs)
    want = flatten_value(run_function(parse(SHARED_RIGHT, "shared.relay"), inputs))
    for g, w, ref in zip(got, want, (inputs["x"] @ inputs["w"], inputs["x"] @ inputs["v"].transpose(0, 2, 1))):
        assert g.shape == ref.shape == w.shape
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


HEADS = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, ?, 64), float32]) {
  %0 = reshape(%x, newshape=[0, 0, 4, 16]);
  %1 = exp(%0);
  %2 = reshape(%1, newshape=[0, 0, -1]);
  %3 = reshape(%x, newshape=[0, -1, 16]);
  (%1, %2, %3)
}
"""


@pytest.mark.parametrize(("batch", "seq"), [(1, 1), (2, 3), (3, 33), (1, 70), (0, 5), (4, 0)])
def test_a_reshape_splitting_the_rows_of_two_dynamic_axes_into_heads_runs(batch: int, seq: int) -> None:
    """Multi-head attention's `(?, ?, 64)` to `(?, ?, 4, 16)` and back: each copied `?` is the
    operand's extent, the one left (`[0, -1, 16]`) the element count over the others."""
    x = np.random.default_rng(batch * 100 + seq).standard_normal((batch, seq, 64)).astype(np.float32)
    got = irtool.build(parse(HEADS, "heads.relay"))(x=x)
    want = flatten_value(run_function(parse(HEADS, "heads.relay"), {"x": x}))
    refs = (np.exp(x).reshape(batch, seq, 4, 16), np.exp(x), x.reshape(batch, seq * 4, 16))
    for g, w, ref in zip(got, want, refs):
        assert g.shape == w.shape == ref.shape
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("body", ["reshape(%x, newshape=[-1, 0, 4, 16])",                 # a step of `main`
                                  "%0 = reshape(%x, newshape=[-1, 0, 4, 16]);\n  (%0, exp(%0))"])  # a view lowered
def test_a_reshape_leaving_two_dynamic_axes_unknown_is_a_located_error(body: str) -> None:
    src = f"""#[version = "0.0.5"]
def @main(%x: Tensor[(?, ?, 64), float32]) {{
  {body}
}}
"""
    with pytest.raises(DiagnosticError, match=r"`reshape` to Tensor\[\(\?, \?, 4, 16\), float32\] with several `\?`") \
            as info:
        irtool.build(parse(src, "heads.relay"))
    assert info.value.span is not None and info.value.span.line == 3


FLAT = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, ?, 64), float32], %w: Tensor[(48, 64), float32], %b: Tensor[(48), float32],
          %g: Tensor[(48), float32], %beta: Tensor[(48), float32]) {
  %0 = nn.bias_add(nn.dense(%x, %w, units=48), %b, axis=2);
  %1 = nn.layer_norm(nn.relu(%0), %g, %beta, axis=2);
  (nn.softmax(%1, axis=2), sum(%1, axis=[2], keepdims=True), max(%0, axis=[2]))
}
"""


@pytest.mark.parametrize(("batch", "seq"), [(1, 1), (2, 3), (3, 33), (2, 64), (1, 70), (0, 5), (4, 0)])
def test_kernels_over_a_flattened_prefix_read_their_axes_after_it(batch: int, seq: int) -> None:
    """A dense, bias, layer norm, softmax and reductions over `(?, ?, 64)` run as kernels of
    `(rows, 64)`: their non-negative axes (2 here) move down to 1 on the kernels; the results
    are numpy's and the interpreter's at every extent."""
    rng = np.random.default_rng(batch * 100 + seq)
    inputs = {"x": rng.standard_normal((batch, seq, 64)).astype(np.float32),
              "w": (rng.standard_normal((48, 64)) * 0.2).astype(np.float32),
              "b": rng.standard_normal(48).astype(np.float32), "g": rng.standard_normal(48).astype(np.float32),
              "beta": rng.standard_normal(48).astype(np.float32)}
    got = irtool.build(parse(FLAT, "flat.relay"))(**inputs)
    want = flatten_value(run_function(parse(FLAT, "flat.relay"), inputs))
    h = inputs["x"] @ inputs["w"].T + inputs["b"]
    r = np.maximum(h, 0)
    centred = r - r.mean(-1, keepdims=True)
    ln = centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + 1e-5) * inputs["g"] + inputs["beta"]
    e = np.exp(ln - ln.max(-1, keepdims=True))
    refs = (e / e.sum(-1, keepdims=True), ln.sum(-1, keepdims=True), h.max(-1, initial=-np.inf))
    for g, w, ref in zip(got, want, refs):
        assert g.shape == w.shape == ref.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(g, ref, rtol=1e-3, atol=1e-3)


JOINS = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 4), float32], %y: Tensor[(?, 4), float32], %z: Tensor[(2, ?, 3), float32],
          %s: Tensor[(2, 5, 3), float32]) {
  (concatenate((%x, %y), axis=0), concatenate((%z, %z, %z), axis=0), concatenate((%z, %s), axis=1))
}
"""


@pytest.mark.parametrize(("n", "m", "k"), [(1, 1, 1), (3, 0, 2), (0, 5, 0), (33, 7, 40)])
def test_a_concatenate_on_or_before_a_dynamic_axis_copies_the_parts_slabs(n: int, m: int, k: int) -> None:
    """Joins that are not row by row (a bidirectional layer's directions on `(T, 1, ?, H)`):
    each part's slab is copied for each index of the axes before the joined one."""
    rng = np.random.default_rng(n * 100 + m * 10 + k)
    inputs = {"x": rng.standard_normal((n, 4)).astype(np.float32), "y": rng.standard_normal((m, 4)).astype(np.float32),
              "z": rng.standard_normal((2, k, 3)).astype(np.float32),
              "s": rng.standard_normal((2, 5, 3)).astype(np.float32)}
    got = irtool.build(parse(JOINS, "joins.relay"))(**inputs)
    want = flatten_value(run_function(parse(JOINS, "joins.relay"), inputs))
    refs = (np.concatenate([inputs["x"], inputs["y"]]), np.concatenate([inputs["z"]] * 3),
            np.concatenate([inputs["z"], inputs["s"]], axis=1))
    for g, w, ref in zip(got, want, refs):
        assert g.shape == w.shape == ref.shape
        np.testing.assert_array_equal(g, ref)
        np.testing.assert_array_equal(g, w)


def test_a_concatenate_of_parts_whose_other_dims_differ_is_refused_at_run_time() -> None:
    src = JOINS.replace("%z: Tensor[(2, ?, 3), float32]", "%z: Tensor[(2, ?, ?), float32]")
    z = np.zeros((2, 3, 3), np.float32)
    mod = irtool.build(parse(src, "joins.relay"))
    mod(x=np.zeros((1, 4), np.float32), y=np.zeros((1, 4), np.float32), z=z, s=np.zeros((2, 5, 3), np.float32))
    with pytest.raises(DiagnosticError, match="two batches that must be equal"):
        mod(x=np.zeros((1, 4), np.float32), y=np.zeros((1, 4), np.float32), z=np.zeros((2, 3, 2), np.float32),
            s=np.zeros((2, 5, 3), np.float32))
