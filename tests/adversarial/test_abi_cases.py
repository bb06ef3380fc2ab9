"""Issue #18, native-target cases: target flags LLVM would warn about, reject late or abort on
are refused up front, naming the flag; the tools never crash on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.adversarial import assert_clean_failure, run_tool

PROGRAM = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4, 16), float32]) {\n  nn.relu(%x)\n}\n'


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "m.relay"
    path.write_text(PROGRAM)
    return path


@pytest.mark.parametrize(("flags", "says"), [
    (["--mcpu=bogus-cpu"], "--mcpu: unknown CPU 'bogus-cpu'"),
    (["--mcpu=skylake-avx51"], "did you mean 'skylake-avx512'?"),
    # A CPU LLVM knows but that cannot run x86-64 code: LLVM aborts the process on it.
    (["--mtriple=x86_64-unknown-linux-gnu", "--mcpu=i686"], "--mcpu: LLVM cannot generate code for CPU 'i686'"),
    (["--mattr=,,,"], "--mattr: malformed feature list ',,,'"),
    (["--mattr=avx2"], "each comma-separated item is +name or -name, got 'avx2'"),
    (["--mcpu=x86-64", "--mattr=+avx2,+avx513f"], "--mattr: unknown feature '+avx513f'"),
    (["--mtriple=bogus-triple"], "--mtriple: unknown target triple 'bogus-triple'"),
    (["-O7"], "argument -O: invalid choice: 7"),
    (["--threads=0"], "--threads: the thread count must be at least 1"),
], ids=["unknown-cpu", "misspelt-cpu", "32-bit-cpu", "empty-features", "unsigned-feature", "unknown-feature",
        "unknown-triple", "opt-level", "threads"])
def test_bad_target_flags_are_refused_before_llvm_sees_them(source: Path, tmp_path: Path, flags: list[str],
                                                           says: str) -> None:
    out = tmp_path / "m.o"
    proc = run_tool("irtool-llc", source, "--emit=obj", "-o", out, *flags, cwd=tmp_path)
    assert_clean_failure(proc, says=says)
    assert "irtool-llc: error: " in proc.stderr.splitlines()[-1], proc.stderr
    assert "LLVM ERROR" not in proc.stderr and "not a recognized" not in proc.stderr
    assert not out.exists()


def test_a_valid_foreign_cpu_and_features_still_compile(source: Path, tmp_path: Path) -> None:
    proc = run_tool("irtool-llc", source, "--emit=asm", "--mtriple=x86_64-unknown-linux-gnu", "--mcpu=x86-64",
                    "--mattr=+avx2,-avx512f", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "%ymm" in proc.stdout and "%zmm" not in proc.stdout
