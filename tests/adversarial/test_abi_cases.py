"""Issue #18, native cases: target flags LLVM would warn about, reject late or abort on are
refused up front, naming the flag; empty tensors give the same results, or the same located
error, in both backends of `irtool-run`."""

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


def _program(tmp_path: Path, name: str, params: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(f'#[version = "0.0.5"]\ndef @main({params}) {{\n  {body}\n}}\n')
    return path


@pytest.mark.parametrize(("params", "body", "says"), [
    ("%x: Tensor[(3, 0), float32]", "max(%x, axis=[1])", "max of no elements is undefined"),
    ("%x: Tensor[(3, 0), float32]", "argmin(%x, axis=[1])", "argmin of no elements is undefined"),
    ("%x: Tensor[(1, 2, 0, 3), float32]", "nn.global_max_pool2d(%x)", "nn.global_max_pool2d of no elements"),
    ("%x: Tensor[(3, 0), int32]", "mean(%x, axis=[1])", "an integer mean of no elements is undefined"),
], ids=["max", "argmin", "global-max-pool", "integer-mean"])
def test_reductions_of_nothing_are_the_same_located_error_in_both_backends(tmp_path: Path, params: str,
                                                                          body: str, says: str) -> None:
    """Natively `max` over an empty axis once returned garbage with exit status 0."""
    path = _program(tmp_path, "empty.relay", params, body)
    runs = [run_tool("irtool-run", path, "--seed", "1", *backend, cwd=tmp_path)
            for backend in ([], ["--backend=native"])]
    for proc in runs:
        assert_clean_failure(proc, says=says)
        assert proc.stderr.startswith(f"{path}:3:3: error: "), proc.stderr
    assert runs[0].stderr == runs[1].stderr


@pytest.mark.parametrize(("params", "body", "shown"), [
    ("%x: Tensor[(3, 0), float32]", "mean(%x, axis=[1])", "values: [nan, nan, nan]"),
    ("%x: Tensor[(0, 4), float32]", "exp(%x)", "output0: Tensor[(0, 4), float32]"),
    ("%x: Tensor[(3, 0), float32]", "sum(%x, axis=[1])", "values: [0, 0, 0]"),
], ids=["mean-nan", "empty-output", "sum-zero"])
def test_empty_tensors_print_the_same_bytes_in_both_backends(tmp_path: Path, params: str, body: str,
                                                             shown: str) -> None:
    """Once a (0, 4) output was refused by the runtime that allocated it, and a mean of nothing
    failed as "not 64-byte aligned"; the summaries include each output's sha256."""
    path = _program(tmp_path, "empty.relay", params, body)
    runs = [run_tool("irtool-run", path, "--seed", "1", *backend, cwd=tmp_path)
            for backend in ([], ["--backend=native"])]
    for proc in runs:
        assert proc.returncode == 0, proc.stderr
        assert shown in proc.stdout
    assert runs[0].stdout == runs[1].stdout
