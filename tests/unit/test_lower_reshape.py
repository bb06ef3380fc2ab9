"""Reshapes inside fused kernels map axis runs of equal size on their own (rules/transform.py).

The lowered kernel must compute what the Relay interpreter computes for any split/merge/transpose
chain, and a channel shuffle must keep its H and W axes as plain loop indices (one division and one
remainder for the channel, not digits of a flat index recomputed for every axis).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from irtool.eval.interpreter import run_function
from irtool.ir.tir import BinaryOp, PrimFunc
from irtool.ir.tir import children as tir_children
from irtool.lower.module import lower_module
from irtool.lower.rules.transform import axis_groups
from irtool.passes import run
from irtool.syntax.parser import parse_module


def _module(shape: tuple[int, ...], body: str) -> str:
    dims = ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "")
    return f'#[version = "0.0.5"]\ndef @main(%x: Tensor[({dims}), float32]) {{ {body} }}'


def _div_mod_count(func: PrimFunc) -> int:
    count, stack = 0, [func.body]
    while stack:
        node = stack.pop()
        if isinstance(node, BinaryOp) and node.op in ("floordiv", "floormod", "div", "mod"):
            count += 1
        stack.extend(tir_children(node))
    return count


def test_axis_groups_pair_runs_of_equal_size() -> None:
    assert axis_groups((1, 4, 8, 8), (1, 2, 2, 8, 8)) == [((0, 1), (0, 1)), ((1, 2), (1, 3)), ((2, 3), (3, 4)),
                                                          ((3, 4), (4, 5))]
    assert axis_groups((2, 3), (3, 2)) == [((0, 2), (0, 2))]  # no common boundary inside
    assert axis_groups((4,), (4, 1)) == [((0, 1), (0, 1)), ((1, 1), (1, 2))]
    assert axis_groups((0, 3), (3, 0)) is None


def test_channel_shuffle_keeps_spatial_axes_plain() -> None:
    text = _module((1, 12, 5, 7), "%0 = reshape(%x, newshape=[1, 3, 4, 5, 7]); "
                                  "%1 = transpose(%0, axes=[0, 2, 1, 3, 4]); reshape(%1, newshape=[1, 12, 5, 7])")
    mod = parse_module(text)
    low = run(mod, "fuse-ops,lower")
    kernels = [f for f in low.functions.values() if isinstance(f, PrimFunc)]
    assert len(kernels) == 1
    assert _div_mod_count(kernels[0]) <= 2
    x = np.arange(12 * 35, dtype=np.float32).reshape(1, 12, 5, 7)
    want = x.reshape(1, 3, 4, 5, 7).transpose(0, 2, 1, 3, 4).reshape(1, 12, 5, 7)
    np.testing.assert_array_equal(np.asarray(run_function(low, [x])), want)


@st.composite
def _chains(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(input shape, split shape, transpose axes, output shape): the input's axes factored into
    the split shape, permuted, then regrouped into another factorization of the same size."""
    factors = draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))
    split = tuple(factors)
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(split) - 1)), max_size=len(split) - 1)))
    bounds = [0, *cuts, len(split)]
    shape = tuple(int(np.prod(split[a:b])) for a, b in zip(bounds, bounds[1:]) if b > a)
    perm = tuple(draw(st.permutations(range(len(split)))))
    permuted = [split[p] for p in perm]
    cuts2 = sorted(draw(st.sets(st.integers(1, max(1, len(split) - 1)), max_size=len(split) - 1)))
    bounds2 = [0, *cuts2, len(split)]
    out = tuple(int(np.prod(permuted[a:b])) for a, b in zip(bounds2, bounds2[1:]) if b > a)
    return shape, split, perm, out


@settings(deadline=None)
@given(_chains())
def test_reshape_transpose_reshape_matches_numpy(chain: tuple) -> None:
    shape, split, perm, out = chain
    body = (f"%0 = reshape(%x, newshape={list(split)}); %1 = transpose(%0, axes={list(perm)}); "
            f"reshape(%1, newshape={list(out)})")
    low = run(parse_module(_module(shape, body)), "fuse-ops,lower")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = x.reshape(split).transpose(perm).reshape(out)
    np.testing.assert_array_equal(np.asarray(run_function(low, [x])), want)
