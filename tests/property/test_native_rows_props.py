"""Native code over random row prefixes computes what the interpreter computes.

Random programs of operators that treat every axis but the last row by row (element-wise ones,
a static bias, `nn.dense` with a static weight, softmax, `nn.layer_norm` and reductions over the
last axis broadcast back, a second dynamic input of the first's type) on a tensor whose row
prefix has a `?` on its last axis and, at random, a `?` or a static size on each axis before it
(and static axes between it and the last). One compiled module runs at random extents, 0 and
past a 32-row tile included; every result must match the interpreter (float32, rtol/atol 1e-4:
the 32-row tile's dense adds in another order than the batch-1 kernel's, and a layer norm over
a row of two near-equal values amplifies that rounding).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import irtool
from irtool.eval.interpreter import flatten_value, run_function
from irtool.syntax.parser import parse

UNARY = ["tanh({v})", "sigmoid({v})", "nn.relu({v})", "negative({v})", "multiply({v}, {v})",
         "nn.softmax({v}, axis=-1)", "subtract({v}, mean({v}, axis=[-1], keepdims=True))",
         "divide({v}, add(sum(abs({v}), axis=[-1], keepdims=True), 1f))", "max({v}, axis=[-1], keepdims=True)"]


@st.composite
def row_programs(draw: st.DrawFn) -> tuple[str, list[int | None]]:
    """The program's text and the type of `%x` (None for a `?`)."""
    rank = draw(st.integers(2, 4))
    prefix = draw(st.integers(1, rank - 1))
    dims: list[int | None] = [draw(st.sampled_from([None, 1, 2, 3])) if axis < prefix - 1 else
                              None if axis == prefix - 1 else draw(st.integers(1, 3)) for axis in range(rank - 1)]
    width = draw(st.sampled_from([1, 3, 8]))
    dims.append(width)

    def ty(shape: list[int | None]) -> str:
        return "Tensor[(" + ", ".join("?" if d is None else str(d) for d in shape) + "), float32]"
    params = [f"%x: {ty(dims)}", f"%y: {ty(dims)}"]
    lines, v, cur = [], "%x", width
    for k in range(draw(st.integers(1, 5))):
        step = draw(st.sampled_from(["unary", "bias", "dense", "norm", "other"]))
        if step == "bias":
            params.append(f"%b{k}: Tensor[({cur}), float32]")
            text = f"add({v}, %b{k})"
        elif step == "dense":
            units = draw(st.sampled_from([2, 8]))
            params.append(f"%w{k}: Tensor[({units}, {cur}), float32]")
            text, cur = f"nn.dense({v}, %w{k}, units={units})", units
        elif step == "norm":
            params += [f"%g{k}: Tensor[({cur}), float32]", f"%c{k}: Tensor[({cur}), float32]"]
            text = f"nn.layer_norm({v}, %g{k}, %c{k})"
        elif step == "other" and cur == width:
            text = f"add({v}, %y)"
        else:
            text = draw(st.sampled_from(UNARY)).format(v=v)
            cur = 1 if text.startswith("max(") else cur
        lines.append(f"  %{k} = {text};")
        v = f"%{k}"
    body = "\n".join(lines)
    return f'#[version = "0.0.5"]\ndef @main({", ".join(params)}) {{\n{body}\n  {v}\n}}\n', dims


@settings(max_examples=10, deadline=None)
@given(program=row_programs(), extents=st.lists(st.sampled_from([0, 1, 2, 5, 33]), min_size=6, max_size=6),
       seed=st.integers(0, 2**16))
def test_random_row_prefixes_match_the_interpreter(program: tuple[str, list[int | None]], extents: list[int],
                                                   seed: int) -> None:
    text, dims = program
    native = irtool.build(parse(text, "rows.relay"), opt_level=1)
    mod = parse(text, "rows.relay")
    shape = tuple(extents[axis] if d is None else d for axis, d in enumerate(dims))
    rng = np.random.default_rng(seed)
    inputs: dict[str, np.ndarray] = {}
    for p in mod["main"].params:
        t = p.type_annotation
        inputs[p.name_hint] = rng.standard_normal(shape if p.name_hint in ("x", "y") else
                                                  tuple(int(d) for d in t.shape)).astype(np.float32)  # type: ignore[union-attr]
    got = native(**inputs)
    (want,) = flatten_value(run_function(mod, inputs))
    assert got.shape == np.asarray(want).shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
