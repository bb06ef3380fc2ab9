"""Native code on threads computes what the interpreter computes, for every operator family.

The programs are `test_native_props.py`'s (one strategy per operator family, random shapes and
attributes, often an elementwise epilogue; and random dataflow graphs). They are lowered, then
`tir-parallelize{min-work=1}` marks every safe outermost loop parallel whatever its size (the
default threshold would leave these small kernels serial), and `irtool.build(threads=2 or 4)`
runs those loops in chunks on threads: shapes of 1-6 give loops shorter than the thread
count, uneven chunks and single iterations. Outputs must match the Relay interpreter with
test_native_props's tolerances, and equal the one-thread native build bit for bit (each element
is computed by the same code in the same order, only on another thread).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import dataflow_programs
from test_native_props import KINDS, _inputs, op_programs

import irtool
from irtool.analysis.typecheck import infer_types
from irtool.driver import ensure_lowered
from irtool.eval.interpreter import flatten_value, run_function
from irtool.ir import IRModule
from irtool.ir.tir import For, PrimFunc
from irtool.passes import run
from irtool.tir_transform.mutator import walk_stmts


def _parallel_loops(mod: IRModule) -> int:
    return sum(1 for f in mod.functions.values() if isinstance(f, PrimFunc)
               for s in walk_stmts(f.body) if isinstance(s, For) and s.kind == "parallel")


def _assert_threaded_matches(mod: IRModule, seed: int, threads: int) -> None:
    infer_types(mod)
    args = _inputs(mod, seed)
    want = flatten_value(run_function(mod, args))
    lowered = run(ensure_lowered(mod), "tir-parallelize{min-work=1}")
    threaded = irtool.build(lowered, opt_level=1, threads=threads)
    # Every parallel loop is a call of the runtime on its own worker.
    assert threaded.ir.count("call i32 @irtool_parallel_for(") == _parallel_loops(lowered)
    got = flatten_value(threaded(**args))
    serial = flatten_value(irtool.build(lowered, opt_level=1)(**args))
    assert len(got) == len(want) == len(serial)
    for g, w, s in zip(got, want, serial):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, s)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            tol = 1e-5 if w.dtype == np.float32 else 1e-12
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=8)
@given(data=st.data(), seed=st.integers(0, 2**16), threads=st.sampled_from([2, 4]))
def test_operator_programs_on_threads(kind: str, data: st.DataObject, seed: int, threads: int) -> None:
    _assert_threaded_matches(data.draw(op_programs(kind)), seed, threads)


@settings(max_examples=40)
@given(dataflow_programs(), st.integers(0, 2**16), st.sampled_from([2, 4]))
def test_dataflow_programs_on_threads(mod: IRModule, seed: int, threads: int) -> None:
    _assert_threaded_matches(mod, seed, threads)
