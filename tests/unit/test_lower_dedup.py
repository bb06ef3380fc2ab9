"""Lowering shares the kernel of equal fused groups: a group equal to one lowered before (same
structure and attributes, parameters of the same types) is not lowered again; groups that differ
in a parameter's shape, or in an attribute, get kernels of their own; the results still match
numpy."""

from __future__ import annotations

import numpy as np
import pytest

import irtool
import irtool.lower.module as module_mod
from irtool.ir.tir import PrimFunc
from irtool.passes import parse_pipeline, run_pipeline
from irtool.syntax.parser import parse

# softmax does not fuse with softmax: four groups, of three kinds (two on (2, 3) along the last
# axis, one on (3, 2), one on (2, 3) along the first axis).
TEXT = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(3, 2), float32]) {
  %0 = nn.softmax(%x);
  %1 = nn.softmax(%0);
  %2 = nn.softmax(%y);
  %3 = nn.softmax(%1, axis=0);
  (%3, %2)
}
"""


def _softmax(a: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(a.astype(np.float64) - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_equal_groups_are_lowered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    lowered: list[object] = []
    real = module_mod.lower_primitive

    def counting(fn):  # type: ignore[no-untyped-def]
        lowered.append(fn)
        return real(fn)
    monkeypatch.setattr(module_mod, "lower_primitive", counting)
    mod = run_pipeline(parse(TEXT, "dedup.relay"), parse_pipeline("fuse-ops,lower"))
    kernels = [f for f in mod.functions.values() if isinstance(f, PrimFunc)]
    assert len(lowered) == 3 and len(kernels) == 3
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 3), np.float32), rng.standard_normal((3, 2), np.float32)
    first, second = irtool.build(mod)(x=x, y=y)
    np.testing.assert_allclose(first, _softmax(_softmax(_softmax(x, 1), 1), 0), rtol=1e-5)
    np.testing.assert_allclose(second, _softmax(y, 1), rtol=1e-5)
