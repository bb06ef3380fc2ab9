"""`alter-layout` preserves meaning: the Relay interpreter gives the same results before and after,
on convs hitting every rewrite case (parameter weights, constant and filled weights, groups,
strides) and on dense with packed panels; blocked kernel layouts of the operators themselves are
checked against a hand-blocked numpy weight."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from irtool.passes import run

from irtool.eval.interpreter import flatten_value, run_function
from irtool.ir.expr import Call, Constant, Op
from irtool.ir.visitor import post_order
from irtool.syntax.parser import parse_module


def _calls(mod: object, name: str) -> list[Call]:
    return [n for n in post_order(mod["main"]) if isinstance(n, Call) and isinstance(n.op, Op)  # type: ignore[index]
            and n.op.name == name]


@settings(deadline=None)
@given(groups=st.integers(1, 3), og=st.sampled_from([8, 16, 5]), cg=st.integers(1, 3), k=st.integers(1, 3),
       stride=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_conv_rewrite_preserves_results(groups: int, og: int, cg: int, k: int, stride: int, seed: int) -> None:
    o, c = groups * og, groups * cg
    src = f"""#[version = "0.0.5"]
def @main(%x: Tensor[(1, {c}, 7, 7), float32], %w: Tensor[({o}, {cg}, {k}, {k}), float32]) {{
  %0 = nn.conv2d(%x, %w, strides=[{stride}, {stride}], padding=[1, 1, 1, 1], groups={groups});
  %1 = nn.conv2d(%x, full(0.25f, shape=[{o}, {cg}, {k}, {k}], dtype="float32"), groups={groups});
  (%0, %1)
}}"""
    mod = parse_module(src)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c, 7, 7)).astype(np.float32)
    w = rng.standard_normal((o, cg, k, k)).astype(np.float32)
    before = flatten_value(run_function(mod, {"x": x, "w": w}))
    altered = run(mod, "alter-layout{lanes=8}")
    blocked = [call for call in _calls(altered, "nn.conv2d") if call.attrs.get("kernel_layout") == "OIHW8o"]
    assert len(blocked) == (2 if og % 8 == 0 else 0)
    after = flatten_value(run_function(altered, {"x": x, "w": w}))
    for a, b in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_constant_weight_is_packed_at_compile_time() -> None:
    w = np.arange(16 * 2 * 3 * 3, dtype=np.float32).reshape(16, 2, 3, 3)
    mod = parse_module("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 5, 5), float32]) {
  nn.conv2d(%x, meta[relay.Constant][0])
}""", metadata={"relay.Constant": [{"dtype": "float32", "shape": list(w.shape), "data": w.ravel().tolist()}]})
    altered = run(mod, "alter-layout{lanes=8}")
    (conv,) = _calls(altered, "nn.conv2d")
    assert not _calls(altered, "layout_transform")
    packed = conv.args[1]
    assert isinstance(packed, Constant)
    # element (o, i, y, x) of OIHW sits at (o // 8, i, y, x, o % 8)
    for o, i, y, xx in [(0, 0, 0, 0), (9, 1, 2, 1), (15, 0, 1, 2)]:
        assert packed.data[o // 8, i, y, xx, o % 8] == w[o, i, y, xx]
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(run_function(altered, {"x": x}), run_function(mod, {"x": x}), rtol=1e-5)


def test_dense_rewrite_to_panels_preserves_results() -> None:
    from irtool.passes.bind_params import bind_params
    mod = parse_module("""#[version = "0.0.5"]
def @main(%x: Tensor[(9, 20), float32], %w: Tensor[(32, 20), float32], %v: Tensor[(12, 20), float32],
          %r: Tensor[(1, 20), float32], %u: Tensor[(32, 20), float32]) {
  (nn.dense(%x, %w), nn.dense(%x, %v), nn.dense(%r, %w), nn.dense(%x, %u))
}""")
    rng = np.random.default_rng(1)
    consts = {"w": rng.standard_normal((32, 20)).astype(np.float32),
              "v": rng.standard_normal((12, 20)).astype(np.float32)}
    mod.functions["main"] = bind_params(mod["main"], consts)
    out = run(mod, "alter-layout{lanes=8}")
    layouts = [str(c.attrs.get("weight_layout", "")) for c in _calls(out, "nn.dense")]
    # Only the constant 32-row W read by 9 rows is packed: 12 rows of V are not a multiple of the
    # 16-column panel, a batch-1 product reads W as given, and U arrives at run time (the kernel
    # packs it panel by panel, faster than a separate transform on every call).
    assert sorted(layouts) == ["", "", "", "NK16n"]
    args = {"x": rng.standard_normal((9, 20)).astype(np.float32), "r": rng.standard_normal((1, 20)).astype(np.float32),
            "u": rng.standard_normal((32, 20)).astype(np.float32)}
    for a, b in zip(flatten_value(run_function(mod, args)), flatten_value(run_function(out, args))):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    np.testing.assert_allclose(flatten_value(run_function(out, args))[0], args["x"] @ consts["w"].T, rtol=1e-4,
                               atol=1e-5)


def test_native_dense_reads_packed_panels() -> None:
    """The default pipeline packs a constant dense weight and the tile reads the panels. N = 96
    is a multiple of every host's panel width (NR = 2 vectors: 8 for SSE, 16 for AVX2, 32 for
    AVX-512), so the weight is packed whatever the vector width; the layout is the host tile's."""
    import irtool
    from irtool.lower.schedules import register_tile
    from irtool.lower.schedules.dense import panel_layout
    from irtool.passes.bind_params import bind_params
    src = """#[version = "0.0.5"]
def @main(%x: Tensor[(13, 40), float32], %w: Tensor[(96, 40), float32]) {
  nn.dense(%x, %w)
}"""
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((13, 40)).astype(np.float32), rng.standard_normal((96, 40)).astype(np.float32)
    mod = parse_module(src)
    mod.functions["main"] = bind_params(mod["main"], {"w": w})
    tile = register_tile()
    assert _calls(run(mod, "alter-layout"), "nn.dense")[0].attrs.get("weight_layout") == panel_layout(tile)
    # Pinned vector widths: the panels follow the lanes, not the host.
    for lanes, layout in ((8, "NK16n"), (16, "NK32n")):
        assert _calls(run(mod, f"alter-layout{{lanes={lanes}}}"), "nn.dense")[0].attrs["weight_layout"] == layout
    np.testing.assert_allclose(irtool.build(mod)(x=x), x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)
