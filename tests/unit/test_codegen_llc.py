"""`irtool-llc` on the command line: every --emit kind, prefixes, atomic outputs, errors."""

from __future__ import annotations

import ctypes
import io
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from irtool.runtime import aligned_empty
from irtool.tools.llc import main

PROGRAM = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 16), float32], %y: Tensor[(16), float32]) {
  %0 = add(%x, %y);
  (nn.relu(%0), sum(%0, axis=[1]))
}
"""


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "my-model.relay"
    path.write_text(PROGRAM)
    return path


def test_obj_is_an_elf_object_with_the_prefixed_symbols(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.o"
    assert main([str(source), "--emit=obj", "-o", str(out), "-O1"]) == 0
    data = out.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert b"my_model_run" in data and b"my_model_workspace_size" in data


def test_asm_and_llvm_go_to_standard_output(source: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(source), "--emit=asm", "--prefix", "net"]) == 0
    assert "net_run:" in capsys.readouterr().out
    assert main([str(source), "--emit=llvm", "--prefix", "net", "--fast-math", "-O0"]) == 0
    text = capsys.readouterr().out
    assert "define i32 @net_run(" in text and "fadd fast float" in text


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_so_loads_and_computes(source: Path, tmp_path: Path) -> None:
    lib_path = tmp_path / "libm.so"
    assert main([str(source), "--emit=so", "-o", str(lib_path)]) == 0
    lib = ctypes.CDLL(str(lib_path))
    size = ctypes.c_uint64.in_dll(lib, "my_model_workspace_size").value
    assert size % 64 == 63   # the plan's 64-byte blocks and the slack `_run` may skip to align them
    x, y = aligned_empty((4, 16), np.float32), aligned_empty((16,), np.float32)
    x[...] = np.linspace(-1, 1, 64).reshape(4, 16)
    y[...] = np.linspace(0.5, -0.5, 16)
    o0, o1 = aligned_empty((4, 16), np.float32), aligned_empty((4,), np.float32)
    ins = (ctypes.c_void_p * 2)(x.ctypes.data, y.ctypes.data)
    outs = (ctypes.c_void_p * 2)(o0.ctypes.data, o1.ctypes.data)
    ws = aligned_empty((size + 1,), np.uint8)[1:]   # any workspace pointer will do
    assert lib.my_model_run(ins, outs, ctypes.c_void_p(ws.ctypes.data)) == 0
    np.testing.assert_allclose(o0, np.maximum(x + y, 0), rtol=1e-6)
    np.testing.assert_allclose(o1, (x + y).sum(axis=1), rtol=1e-5, atol=1e-6)


def test_stdin_input_uses_the_module_prefix(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(PROGRAM.encode())))
    assert main(["-", "--emit=header"]) == 0
    assert "int32_t module_run(const struct module_inputs* in" in capsys.readouterr().out


def test_errors_leave_existing_output_untouched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.relay"
    bad.write_text('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) {\n  unknown_op(%x)\n}\n')
    out = tmp_path / "bad.o"
    out.write_bytes(b"old")
    assert main([str(bad), "--emit=obj", "-o", str(out)]) == 1
    assert out.read_bytes() == b"old"
    err = capsys.readouterr().err
    assert "bad.relay:3:3: error:" in err and "Traceback" not in err
    assert list(tmp_path.glob(".bad.o.*")) == []


def test_usage_errors(source: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(source), "--emit=exe"]) == 2
    assert main([str(source), "--prefix", "not an identifier"]) == 2
    assert "--prefix must be a C identifier" in capsys.readouterr().err
    assert main([str(source), "--no-pipeline", "--pipeline", "lower"]) == 2


def test_unknown_triple_is_an_error(source: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(source), "--emit=asm", "--mtriple=nonsense-arch-none"]) == 2
    assert "irtool-llc: error: --mtriple: unknown target triple 'nonsense-arch-none'" in capsys.readouterr().err


def test_cross_compiling_for_a_named_cpu(source: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(source), "--emit=asm", "--mtriple=x86_64-unknown-linux-gnu", "--mcpu=haswell"]) == 0
    asm = capsys.readouterr().out
    assert "ymm" in asm and "zmm" not in asm


def test_irtool_run_native_backend_matches_the_interpreter(source: Path, tmp_path: Path) -> None:
    from irtool.tools.run import main as run_main
    assert run_main([str(source), "--seed", "3", "-o", str(tmp_path / "interp.npz")]) == 0
    assert run_main([str(source), "--seed", "3", "--backend=native", "-o", str(tmp_path / "native.npz")]) == 0
    with np.load(tmp_path / "interp.npz") as want, np.load(tmp_path / "native.npz") as got:
        assert sorted(got.files) == sorted(want.files) == ["output0", "output1"]
        for key in want.files:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6)


def test_pipeline_with_a_planner_choice(source: Path, tmp_path: Path) -> None:
    """The plan a pipeline writes on `main` is the one the entry point uses."""
    status = main([str(source), "--emit=header", "-o", str(tmp_path / "tvm.h"),
                   "--pipeline", "fuse-ops,lower,plan-memory{algorithm=none}"])
    assert status == 0
    greedy = main([str(source), "--emit=header", "-o", str(tmp_path / "greedy.h")])
    assert greedy == 0
    size = re.compile(r"needs \((\d+)\)")
    no_reuse = int(size.search((tmp_path / "tvm.h").read_text()).group(1))
    planned = int(size.search((tmp_path / "greedy.h").read_text()).group(1))
    # Every intermediate has its own storage without reuse, so that arena is never smaller.
    assert no_reuse >= planned
