"""`bind-params` (passes/bind_params.py): parameters become constants without changing results."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from irtool.eval.interpreter import run_function
from irtool.ir import Constant, Function, post_order
from irtool.passes import run
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse

BLOCK = Path(__file__).resolve().parents[2] / "samples" / "resnet_block.relay"


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    w = {f"conv{i}_weight": rng.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05 for i in (1, 2)}
    for i in (1, 2):
        w[f"bn{i}_gamma"] = rng.uniform(0.5, 1.5, 64).astype(np.float32)
        w[f"bn{i}_beta"] = rng.standard_normal(64).astype(np.float32)
        w[f"bn{i}_mean"] = rng.standard_normal(64).astype(np.float32)
        w[f"bn{i}_var"] = rng.uniform(0.5, 2.0, 64).astype(np.float32)
    return w


def test_bound_module_computes_what_the_original_computes(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    weights = _weights(rng)
    np.savez(tmp_path / "w.npz", **weights)
    mod = parse(BLOCK.read_text(), str(BLOCK))
    bound = run(mod, f"bind-params{{file={tmp_path / 'w.npz'}}}")
    main = bound.functions["main"]
    assert isinstance(main, Function)
    assert [p.name_hint for p in main.params] == ["data"]
    constants = [n for n in post_order(main.body) if isinstance(n, Constant)]
    assert sorted(c.data.shape for c in constants) == sorted(v.shape for v in weights.values())
    data = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    want = run_function(mod, {"data": data, **weights})
    got = run_function(bound, {"data": data})
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_unknown_names_are_an_error_unless_allowed(tmp_path: Path) -> None:
    np.savez(tmp_path / "w.npz", conv1_weigth=np.zeros((64, 64, 3, 3), np.float32))
    mod = parse(BLOCK.read_text(), str(BLOCK))
    with pytest.raises(DiagnosticError, match="conv1_weigth.*did you mean conv1_weight"):
        run(mod, f"bind-params{{file={tmp_path / 'w.npz'}}}")
    same = run(mod, f"bind-params{{file={tmp_path / 'w.npz'},allow-unknown=true}}")
    assert len(same.functions["main"].params) == len(mod.functions["main"].params)  # type: ignore[union-attr]


def test_a_file_that_is_not_an_npz_archive_is_a_clear_error(tmp_path: Path) -> None:
    np.save(tmp_path / "one.npy", np.zeros(3))
    (tmp_path / "junk.npz").write_text("not a zip")
    mod = parse(BLOCK.read_text(), str(BLOCK))
    for name, message in (("one.npy", "single array"), ("junk.npz", "cannot read")):
        with pytest.raises(DiagnosticError, match=message):
            run(mod, f"bind-params{{file={tmp_path / name}}}")


def test_a_scalar_parameter_binds_to_a_scalar_constant(tmp_path: Path) -> None:
    """A 0-d array once became a `Tensor[(1), float32]` constant, which the bound module's own
    type check refused (#18, corpus 075_test_ref)."""
    np.savez(tmp_path / "x.npz", x=np.float32(0.5))
    mod = parse("def @main(%x: float32) {\n  %0 = ref(%x);\n  ref_write(%0, 1f);\n  ref_read(%0)\n}\n")
    bound = run(mod, f"bind-params{{file={tmp_path / 'x.npz'}}}")  # verified after the pass
    (constant,) = [n for n in post_order(bound.functions["main"].body) if isinstance(n, Constant)
                   and n.data.dtype == np.float32 and float(n.data) == 0.5]
    assert constant.data.shape == ()
    assert float(run_function(bound, {})) == 1.0
