"""Native code computes what the interpreter computes on programs with control flow
(`support.strategies.control_flow_programs`: nested `if`, `let`, tuples, closures over tensors,
a higher-order global, lists folded by a closure, bounded recursion, tail or not), compiled
with `irtool.build` at -O1 (docs/native-relay.md). Few examples: each one compiles a module.

float32 to rtol 1e-4 / atol 1e-5: libm's `tanhf` differs from numpy's in the last bit and a
recursion of up to 4 steps may amplify that a little.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import control_flow_programs

import irtool
from irtool.eval.interpreter import flatten_value, run_function
from irtool.ir import IRModule, TensorType


@settings(max_examples=25)
@given(control_flow_programs(), st.integers(0, 4), st.booleans(), st.integers(0, 2**16))
def test_programs_with_control_flow_natively(mod: IRModule, n: int, c: bool, seed: int) -> None:
    t = mod["main"].params[0].type_annotation
    assert isinstance(t, TensorType)
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in t.shape)
    args = {"x": rng.standard_normal(shape).astype(np.float32), "y": rng.standard_normal(shape).astype(np.float32),
            "n": np.array(n, np.int32), "c": np.array(c)}
    want = flatten_value(run_function(mod, args))
    got = flatten_value(irtool.build(mod, opt_level=1)(**args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True)
