"""Register tiles follow the target being compiled for, not the machine running the compiler.

Before, lowering read the host's feature string: `irtool-llc --mcpu=x86-64` on an AVX-512 host
emitted 16-lane tiles (legalised by LLVM into SSE), and `--mcpu=skylake-avx512` on an AVX2 host
got 8-lane ones; a CPU name implies features its feature string does not list. Every test pins
its CPU, so each holds on any x86-64 host.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

import pytest

from irtool.lower.schedules import register_tile
from irtool.target import TargetOptions, compiling_for, current_target
from irtool.tools.llc import main

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 CPU names")

TRIPLE = "x86_64-unknown-linux-gnu"

# A matrix product: the dense schedule's tile and alter-layout's panels are the target's.
DENSE = """#[version = "0.0.5"]
def @main(%x: Tensor[(64, 64), float32]) {
  nn.dense(%x, ones(shape=[64, 64], dtype="float32"))
}
"""


@pytest.mark.parametrize("cpu, features, bits", [
    ("skylake-avx512", "", 512),        # AVX-512F implied by the CPU name, not listed
    ("znver4", "", 512),
    ("haswell", "", 256),
    ("znver3", "", 256),
    ("x86-64", "", 128),
    ("skylake-avx512", "-avx512f", 256),
    ("haswell", "+avx512f", 512),
])
def test_the_vector_width_is_what_llvm_generates_for_the_cpu(cpu: str, features: str, bits: int) -> None:
    assert TargetOptions(cpu=cpu, features=features or None, triple=TRIPLE).vector_bits() == bits


def test_avx512_cpus_named_without_features_prefer_512_bit_vectors() -> None:
    assert '"prefer-vector-width"="512"' in TargetOptions(cpu="skylake-avx512", triple=TRIPLE).function_attributes()
    assert "prefer-vector-width" not in TargetOptions(cpu="haswell", triple=TRIPLE).function_attributes()


def test_compiling_for_sets_the_target_of_the_block_only() -> None:
    outside = current_target()
    with compiling_for(TargetOptions(cpu="x86-64", triple=TRIPLE)):
        assert register_tile().lanes == 4
        with compiling_for(TargetOptions(cpu="skylake-avx512", triple=TRIPLE)):
            assert (register_tile().lanes, register_tile().rows) == (16, 8)
        assert register_tile().lanes == 4
    assert current_target() == outside


@pytest.mark.parametrize("cpu, lanes", [("skylake-avx512", 16), ("haswell", 8), ("x86-64", 4)])
def test_irtool_llc_tiles_for_its_mcpu(tmp_path: Path, cpu: str, lanes: int) -> None:
    source = tmp_path / "dense.relay"
    source.write_text(DENSE)
    out = tmp_path / "dense.ll"
    assert main([str(source), "--emit=llvm", "-O0", f"--mtriple={TRIPLE}", f"--mcpu={cpu}", "-o", str(out)]) == 0
    ir = out.read_text()
    widths = {int(n) for n in re.findall(r"@llvm\.fma\.v(\d+)f32", ir)}
    assert max(widths) == lanes, (cpu, sorted(widths))   # the tile's full vectors
    assert f'"target-cpu"="{cpu}"' in ir


@pytest.mark.parametrize("cpu, widest", [("znver3", "ymm"), ("haswell", "ymm"), ("sapphirerapids", "zmm"),
                                         ("skylake-avx512", "zmm"), ("x86-64", "xmm")])
def test_the_assembly_uses_the_cpus_widest_registers(tmp_path: Path, cpu: str, widest: str) -> None:
    source = tmp_path / "dense.relay"
    source.write_text(DENSE)
    out = tmp_path / "dense.s"
    assert main([str(source), "--emit=asm", f"--mtriple={TRIPLE}", f"--mcpu={cpu}", "-o", str(out)]) == 0
    asm = out.read_text()
    used = [r for r in ("zmm", "ymm", "xmm") if re.search(rf"%{r}\d", asm)]
    assert used[0] == widest, (cpu, used)
    assert re.search(r"\bvfmadd\w*ps\b", asm) or cpu == "x86-64"   # FMA where the CPU has it
