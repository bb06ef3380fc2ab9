"""16-bit floats natively accumulate sums as numpy does (irtool/lower/rules/_rule.py: `sum_dtype`,
`dot_dtype`): float16 sums and both 16-bit floats' products in float32, rounded once.

The inputs are chosen so that accumulating in the 16-bit type itself gives a visibly wrong
answer: float16 has an ulp of 2 above 2048, so adding 4096 ones one at a time stops at 2048,
while the exact sum, 4096, is representable.
"""

from __future__ import annotations

import numpy as np
import pytest

import irtool
from irtool.eval.interpreter import run_function
from irtool.syntax.parser import parse_module

K = 4096


def _module(text: str, params: str):
    return parse_module(f'#[version = "0.0.5"]\ndef @main({params}) {{ {text} }}')


@pytest.mark.parametrize("text,params,args,want", [
    ("sum(%x, axis=[1])", f"%x: Tensor[(2, {K}), float16]", [np.ones((2, K), np.float16)], np.full(2, K)),
    ("mean(%x, axis=[1])", f"%x: Tensor[(2, {K}), float16]", [np.ones((2, K), np.float16)], np.ones(2)),
    ("nn.softmax(%x)", f"%x: Tensor[(1, {K}), float16]", [np.zeros((1, K), np.float16)], np.full((1, K), 1 / K)),
    ("nn.dense(%x, %w)", f"%x: Tensor[(1, {K}), float16], %w: Tensor[(3, {K}), float16]",
     [np.ones((1, K), np.float16), np.ones((3, K), np.float16)], np.full((1, 3), K)),
    ("nn.batch_matmul(%x, %w)", f"%x: Tensor[(1, 2, {K}), float16], %w: Tensor[(1, {K}, 1), float16]",
     [np.ones((1, 2, K), np.float16), np.ones((1, K, 1), np.float16)], np.full((1, 2, 1), K)),
    ("nn.conv2d(%x, %w)", f"%x: Tensor[(1, {K}, 1, 1), float16], %w: Tensor[(1, {K}, 1, 1), float16]",
     [np.ones((1, K, 1, 1), np.float16), np.ones((1, K, 1, 1), np.float16)], np.full((1, 1, 1, 1), K)),
])
def test_half_sums_accumulate_in_float32_in_both_backends(text: str, params: str, args: list, want: np.ndarray) -> None:
    mod = _module(text, params)
    for got in (run_function(mod, args), irtool.build(mod)(*args)):
        assert got.dtype == np.float16
        np.testing.assert_array_equal(got, want.astype(np.float16))
