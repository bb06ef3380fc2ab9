"""Every kernel of ResNet-50 (the `onnx` package's light model) lowers to TIR a person can read:
at most 150 lines of at most 120 columns, for an AVX2 and an AVX-512 target, and the printed
text reads back to the same kernel."""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")

from irtool.driver.prepare import ensure_lowered  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.frontend.onnx_zoo import light_model_path  # noqa: E402
from irtool.ir.tir import For, PrimFunc  # noqa: E402
from irtool.ir.tir_equality import tir_structural_equal  # noqa: E402
from irtool.syntax.parser import parse_primfunc  # noqa: E402
from irtool.syntax.tir_printer import print_primfunc  # noqa: E402
from irtool.target import TargetOptions, compiling_for  # noqa: E402
from irtool.tir_transform.mutator import walk_stmts  # noqa: E402

MAX_LINES = 150
MAX_WIDTH = 120


@pytest.mark.parametrize("cpu", ["znver3", "skylake-avx512"])
def test_resnet50_kernels_print_small_and_read_back(cpu: str) -> None:
    imported = import_model(onnx.load(str(light_model_path("resnet50"))), embed_params=True, source="resnet50")
    with compiling_for(TargetOptions(cpu=cpu)):
        mod = ensure_lowered(imported.module)
    kernels = {name: f for name, f in mod.functions.items() if isinstance(f, PrimFunc)}
    assert len(kernels) > 40
    # The register tiles are there, written as unrolled loops.
    assert sum(any(isinstance(s, For) and s.kind == "unrolled" for s in walk_stmts(f.body))
               for f in kernels.values()) >= 20
    for name, func in kernels.items():
        text = print_primfunc(name, func)
        lines = text.splitlines()
        assert len(lines) <= MAX_LINES, f"{name}: {len(lines)} lines"
        assert max(map(len, lines)) <= MAX_WIDTH, f"{name}: a line of {max(map(len, lines))} columns"
        assert tir_structural_equal(parse_primfunc(text, f"{name}.tir"), func), name
