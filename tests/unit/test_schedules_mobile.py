"""The mobile-CNN kernels pick their shape from the target compiled for: 1x1 convs as tiles of
pixel vectors, stride-2 depthwise loads as two vector loads and a shuffle, the flat depthwise
sweep of narrow planes, vector global pooling. Each test pins its CPU (`irtool-llc --mcpu`,
`compiling_for`) and checks the LLVM IR or the TIR, so it holds on any x86-64 host; the
numbers these kernels compute are checked natively in test_schedules_conv.py.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

import numpy as np
import pytest

import irtool
from irtool.passes import run
from irtool.syntax.parser import parse, parse_module
from irtool.syntax.printer import print_program
from irtool.target import TargetOptions, compiling_for
from irtool.tools.llc import main

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 CPU names")

TRIPLE = "x86_64-unknown-linux-gnu"
CPUS = [("znver3", 8), ("skylake-avx512", 16)]


def conv(x: tuple[int, ...], w: tuple[int, ...], stride: int, pad: int, groups: int) -> str:
    return f"""#[version = "0.0.5"]
def @main(%x: Tensor[{x}, float32], %w: Tensor[{w}, float32]) {{
  nn.relu(nn.conv2d(%x, %w, strides=[{stride}, {stride}], padding=[{pad}, {pad}, {pad}, {pad}], groups={groups}))
}}"""


def llvm_ir(tmp_path: Path, src: str, cpu: str) -> str:
    """The unoptimised LLVM IR of `src` for `cpu`: what codegen wrote, before LLVM's passes."""
    source, out = tmp_path / "m.relay", tmp_path / "m.ll"
    source.write_text(src)
    assert main([str(source), "--emit=llvm", "-O0", f"--mtriple={TRIPLE}", f"--mcpu={cpu}", "-o", str(out)]) == 0
    return out.read_text()


def lowered(src: str, cpu: str) -> str:
    with compiling_for(TargetOptions(cpu=cpu, triple=TRIPLE)):
        return print_program(run(parse(src, "m.relay"), "fuse-ops,lower"))


@pytest.mark.parametrize("cpu, lanes, tail", [("znver3", 8, None), ("skylake-avx512", 16, 12)])
def test_a_1x1_conv_on_wide_rows_stores_whole_pixel_vectors(tmp_path: Path, cpu: str, lanes: int,
                                                            tail: int | None) -> None:
    """28 columns: on 8 lanes a tile of 2 x 8, then 2 x 8 ending at the row's end (columns 12-27,
    overlapping it) instead of a 4-lane tail; on 16, one tile of 16 + 12 lanes (no full tile to
    overlap). No element-by-element store (the channel tile's strided store extracts one
    pointer per lane, or is a masked scatter)."""
    ir = llvm_ir(tmp_path, conv((1, 16, 28, 28), (24, 16, 1, 1), 1, 0, 1), cpu)
    assert f"@llvm.fma.v{lanes}f32" in ir
    assert re.search(rf"store <{lanes} x float>", ir)
    assert bool(re.search(rf"store <{28 % lanes} x float>", ir)) == (tail is not None)
    assert not re.search(r"extractelement <\d+ x ptr>", ir)
    assert "@llvm.masked.scatter" not in ir


def test_a_1x1_conv_on_rows_shorter_than_a_vector_keeps_channel_vectors(tmp_path: Path) -> None:
    """7-wide rows fill 7 of 16 lanes: the output channels are the vector then (stored per pixel)."""
    ir = llvm_ir(tmp_path, conv((1, 16, 7, 7), (32, 16, 1, 1), 1, 0, 1), "skylake-avx512")
    assert "@llvm.fma.v16f32" in ir
    assert re.search(r"call void @llvm.masked.scatter.v16f32", ir)
    assert not re.search(r"store <16 x float>.*%out", ir)


@pytest.mark.parametrize("cpu, lanes", CPUS)
def test_stride_2_depthwise_reads_its_phase_planes_with_whole_vectors(tmp_path: Path, cpu: str, lanes: int) -> None:
    """A 3x3/2 depthwise conv copies the padded input once into its phase planes (even and odd
    rows and columns apart, the strided reads happen in that copy), so every tap is one
    contiguous vector load of the plane: no shuffle keeping the even lanes, no load per lane."""
    src = conv((1, 4, 2 * 2 * lanes + 1, 2 * 2 * lanes + 1), (4, 1, 3, 3), 2, 1, 4)
    tir = lowered(src, cpu)
    assert re.search(rf"%p0\[%b, %c, %r_\d+ \* 2,\s+ramp\([^,]* \+ 1, 2, {lanes}\)\]", tir)   # odd columns: a plane
    # the kernel's taps: `unrolled` loops whose fma reads a whole vector (unit stride) of a plane
    assert re.search(r"for %ky\w* in unrolled\(0, 3\) \{\s+for %kx\w* in unrolled\(0, 3\)", tir)
    assert re.search(rf"fma\(broadcast\(%p1\[%c, 0, %ky\w*, %kx\w*\], {lanes}\),\s+%dw_plane\[\s*ramp\([^;]*?, 1, {lanes}\)\]",
                     tir)
    ir = llvm_ir(tmp_path, src, cpu)
    assert len(re.findall(rf"@llvm\.fma\.v{lanes}f32\(", ir)) >= 9     # expanded: one per tap at least
    even = ", ".join(f"i32 {2 * k if 2 * k < lanes else 2 * k + 1}" for k in range(lanes))
    shuffles = re.findall(rf"shufflevector <{lanes} x float> %\w+, <{lanes} x float> %\w+, <{lanes} x i32> <{even}>", ir)
    assert 0 < len(shuffles) <= 4     # in the copies of the 4 phase planes, not one per tap (9)
    assert "@llvm.masked.gather" not in ir


@pytest.mark.parametrize("cpu, lanes", CPUS)
def test_a_depthwise_row_narrower_than_a_vector_is_swept_flat(cpu: str, lanes: int) -> None:
    """14 output columns: the padded 16-wide plane is swept flat through a local copy on every
    target (positions y * 16 + x, the two between rows computed and dropped)."""
    tir = lowered(conv((1, 4, 14, 14), (4, 1, 3, 3), 1, 1, 4), cpu)
    assert "dw_plane: Buffer[(256), float32" in tir
    # tap (ky, kx) reads ky rows of 16 and kx columns on, a whole vector
    assert re.search(rf"%dw_plane\[ramp\([^\]]*\(%ky\w* \* 16 \+ %kx\w*\), 1, {lanes}\)\]", tir)


@pytest.mark.parametrize("cpu, lanes", CPUS)
def test_global_average_pool_accumulates_target_width_vectors(tmp_path: Path, cpu: str, lanes: int) -> None:
    src = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 20, 44), float32]) {
  nn.global_avg_pool2d(%x)
}"""
    ir = llvm_ir(tmp_path, src, cpu)
    assert re.search(rf"fadd <{lanes} x float>", ir)
    assert re.search(rf"fadd <{44 % lanes} x float>", ir)     # the row's tail


@pytest.mark.parametrize("dtype", ["bool", "int32", "float32"])
def test_a_stride_2_load_runs_natively_up_to_the_buffers_last_element(dtype: str) -> None:
    """`a[i, ramp(0, 2, 6)]` of 11-element rows: the last lane is the buffer's last element."""
    src = f"""#[version = "0.0.5"]
primfn @f(%a: Buffer[(2, 11), {dtype}], %out: Buffer[(2, 6), {dtype}], num_outputs=1) {{
  for %i in range(0, 2) {{
    %out[%i, ramp(0, 1, 6)] = %a[%i, ramp(0, 2, 6)];
  }}
}}

def @main(%a: Tensor[(2, 11), {dtype}]) {{
  %0 = (%a,);
  call_lowered(@f, %0)
}}"""
    a = (np.random.default_rng(3).integers(-50, 50, (2, 11)) % 3 == 1) if dtype == "bool" else \
        np.random.default_rng(3).integers(-50, 50, (2, 11)).astype(dtype)
    np.testing.assert_array_equal(irtool.build(parse_module(src))(a=a), a[:, ::2])
