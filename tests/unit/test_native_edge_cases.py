"""Native code on the edges the ONNX conformance cases reach: zero-element tensors as inputs,
outputs, intermediates and hoisted constants, and conversions to and from float16 that LLVM
lowers to compiler-runtime calls (float64 → float16 always, float32 ↔ float16 without F16C)."""

from __future__ import annotations

import numpy as np
import pytest

import irtool
from irtool.eval.interpreter import flatten_value, run_function
from irtool.syntax.parser import parse


def module(text: str):  # noqa: ANN201
    return parse('#[version = "0.0.5"]\n' + text, "edge.relay")


EMPTY = {
    # Computed from constants only, so hoisted into `_init`: a zero-byte pool.
    "hoisted": ('def @main() -> Tensor[(3, 4, 0), float32] { zeros(shape=[3, 4, 0], dtype="float32") }', []),
    "input to output": ("def @main(%x: Tensor[(0, 4), float32]) { add(%x, 1f) }", [(0, 4)]),
    "reduced away": ("def @main(%x: Tensor[(0, 4), float32]) { sum(%x, axis=[0]) }", [(0, 4)]),
    "empty intermediate": ("def @main(%x: Tensor[(3, 4), float32]) { %0 = strided_slice(%x, begin=[0, 0], "
                           "end=[0, 4]); concatenate((negative(%0), %x)) }", [(3, 4)]),
    "beside a full output": ('def @main(%x: Tensor[(2, 3), float32]) { (negative(%x), zeros(shape=[0, 3], '
                             'dtype="float32")) }', [(2, 3)]),
}


@pytest.mark.parametrize("name", sorted(EMPTY))
def test_zero_element_tensors(name: str) -> None:
    text, shapes = EMPTY[name]
    mod = module(text)
    args = [np.linspace(-1, 1, int(np.prod(s)), dtype=np.float32).reshape(s) for s in shapes]
    want = flatten_value(run_function(mod, args))
    compiled = irtool.build(mod)
    for _ in range(10):  # an unbound pool symbol crashed only sometimes
        got = compiled(*args)
        got = list(got) if isinstance(got, tuple) else [got]
        assert [g.shape for g in got] == [w.shape for w in want]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("src,dst,cpu", [("float64", "float16", "native"), ("float32", "float16", "x86-64"),
                                         ("float16", "float32", "x86-64"), ("float16", "float64", "x86-64")])
def test_half_precision_conversions(src: str, dst: str, cpu: str) -> None:
    """Rounded exactly as numpy rounds (x86-64 without F16C needs the helpers for float32 too)."""
    mod = module(f'def @main(%x: Tensor[(8), {src}]) {{ cast(%x, dtype="{dst}") }}')
    with np.errstate(over="ignore"):  # 7e4 is past float16's range on purpose: it becomes inf
        x = np.array([0.1, -2.5e-5, 65504.0, 7e4, 1 / 3, -1e-8, 2049.0, 0.0], np.float64).astype(src)
        want = x.astype(dst)
    got = irtool.build(mod, cpu=cpu)(x)
    assert got.dtype == np.dtype(dst)
    np.testing.assert_array_equal(got.view(np.uint16) if dst == "float16" else got,
                                  want.view(np.uint16) if dst == "float16" else want)
