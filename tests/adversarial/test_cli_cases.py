"""Issue #18, command-line cases: bad files and bad option values for every tool.

Whatever the input, a tool must refuse it with exit status 1 (a bad input) or 2 (bad usage), a
message that names the file or the option (`file:line:col: error:`, or `irtool-xxx: error:`),
no traceback and no `internal:` error, within a bounded time. Each row runs the tool's `main` in
this process (one interpreter start-up for the table); `test_the_console_commands_agree` runs a
few rows as separate processes, the way a user does.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from support.adversarial import LOCATED, TOOLS, assert_clean_failure, run_tool

TIME_LIMIT = 60  # seconds; every row takes well under one
PROGRAM = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 8), float32]) {\n  nn.relu(%x)\n}\n'
HUGE_INPUT = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(99999999999, 99999), float32]) {\n  %x\n}\n'
HUGE_OUTPUT = ('#[version = "0.0.5"]\ndef @main() {\n'
               '  zeros(shape=[1099511627776, 1099511627776], dtype="float32")\n}\n')
ONNX = importlib.util.find_spec("onnx") is not None
UNREADABLE = "/proc/self/mem"  # reading it fails (EIO) even for root, who may read any mode-000 file

# (tool, arguments, exit status, text the message must contain)
CASES: list[tuple[str, list[str], int, str]] = []


def case(tools: str, args: list[str], status: int, says: str) -> None:
    for tool in tools.split():
        CASES.append((f"irtool-{tool}", args, status, says))


# Input files, for every tool that reads one.
case("opt run llc fmt viz", ["missing.relay"], 1, "cannot read 'missing.relay': No such file or directory")
case("opt run llc fmt viz", ["adir"], 1, "cannot read 'adir': Is a directory")
case("opt run llc fmt viz", [UNREADABLE], 1, f"cannot read '{UNREADABLE}'")
case("opt run llc fmt viz", ["latin1.relay"], 1, "latin1.relay:2:26: error: invalid UTF-8 byte 0xe9")
case("opt run llc fmt viz", ["garbage.bin"], 1, "garbage.bin:2:118: error: invalid UTF-8 byte 0x80")
case("run viz", ["empty.relay"], 1, "no function")
case("llc", ["empty.relay"], 1, "irtool-llc: error: the module has neither `main` nor any primfn to compile")
case("import", ["missing.onnx"], 1, "cannot read 'missing.onnx'")
case("import", ["adir"], 1, "cannot read 'adir': Is a directory")
case("import", [UNREADABLE], 1, f"cannot read '{UNREADABLE}'")
case("import", ["garbage.bin"], 1, "garbage.bin: not a valid ONNX model")
case("run llc", ["missing.onnx"], 1, "cannot read 'missing.onnx'")
# Output paths, for every output option.
case("opt run llc", ["m.relay", "-o", "adir"], 1, "cannot write 'adir': it is a directory")
case("viz", ["m.relay", "-o", "dir.dot"], 1, "cannot write 'dir.dot': it is a directory")
case("opt run llc viz", ["m.relay", "-o", "missing/out.x.dot"], 1, "cannot write 'missing/out.x.dot': No such file")
case("opt", ["m.relay", "-o", ""], 1, "cannot write '': the file name is empty")
case("opt", ["m.relay", "--memory-report-file", "adir"], 1, "cannot write 'adir'")
case("opt", ["m.relay", "--memory-timeline", "missing/t.png"], 1, "cannot write 'missing/t.png'")
case("opt", ["m.relay", "--memory-report-file", "-"], 2, "would both go to standard output")
case("run", ["m.relay", "-o", "-"], 2, "argument -o/--output: the summaries go to standard output")
case("import", ["w.onnx", "-o", "w.relay", "--params", "adir"], 1, "cannot write 'adir'")
case("import", ["w.onnx", "--params", "-"], 1, "--params -: the Relay text already goes to standard output")
case("import", ["w.onnx"], 1, "the model has weights: name their file with --params")
case("fmt", ["-i", "-"], 1, "--in-place needs files")
# Numbers: negative, zero, huge, empty, not a number.
for value in ("-1", "abc", "", "1.5"):
    case("run", ["m.relay", "--seed", value], 2, "argument --seed: the seed must be")
for value in ("0", "-4", "2147483648", "many"):
    case("run llc", ["m.relay", "--threads", value], 2, "argument --threads: the thread count must be")
for value in ("0", "-1", "x"):
    case("run", ["m.relay", "--backend=native", "--profile", "--repeat", value], 2, "argument --repeat")
case("llc", ["m.relay", "-O", "7"], 2, "argument -O: invalid choice: 7")
case("llc", ["m.relay", "-O", "-1"], 2, "argument -O")
# Names and choices.
case("run", ["m.relay", "--entry", ""], 2, "argument --entry: must not be empty")
case("run", ["m.relay", "--entry", "nope"], 1, "no function @nope")
case("viz", ["m.relay", "--function", ""], 2, "argument --function: must not be empty")
case("viz", ["m.relay", "--function", "nope"], 1, "no function `@nope`")
case("viz", ["m.relay", "-o", "graph.txt"], 1, "unknown output format `.txt`")
case("run", ["m.relay", "--backend", "gpu"], 2, "argument --backend: invalid choice: 'gpu'")
case("llc", ["m.relay", "--emit", "exe"], 2, "argument --emit: invalid choice: 'exe'")
case("llc", ["m.relay", "--prefix", ""], 2, "--prefix must be a C identifier")
case("llc", ["m.relay", "--prefix", "9lives"], 2, "--prefix must be a C identifier, got `9lives`")
case("opt", ["m.relay", "--pass", ""], 2, "argument --pass: must not be empty")
case("opt", ["m.relay", "-p", "no-such-pass"], 1, "<pipeline>:1:1: error: unknown pass `no-such-pass`")
case("llc", ["m.relay", "--pipeline", "no-such-pass"], 1, "<pipeline>:1:1: error: unknown pass `no-such-pass`")
case("viz", ["m.relay", "-p", "no-such-pass"], 1, "<pipeline>:1:1: error: unknown pass `no-such-pass`")
case("opt", ["m.relay", "-p", "fuse-ops{max-depth=-1}"], 1, "max-depth must be at least 1")
case("opt", ["m.relay", "--memory-report=xml"], 2, "argument --memory-report: invalid choice: 'xml'")
case("opt", [], 2, "the following arguments are required: FILE")
case("fmt", ["--check", "-i", "m.relay"], 2, "not allowed with argument --check")
case("lsp", ["--port", "1"], 2, "irtool-lsp: error: unknown arguments: --port 1")
case("import", ["w.onnx", "--input-shape", "x=two"], 1, "--input-shape expects NAME=D0,D1,...")
# Input arrays for irtool-run.
case("run", ["m.relay", "--inputs", "missing.npz"], 1, "--inputs: cannot read 'missing.npz': No such file")
case("run", ["m.relay", "--inputs", "adir"], 1, "--inputs: cannot read 'adir': Is a directory")
case("run", ["m.relay", "--inputs", UNREADABLE], 1, f"--inputs: cannot read '{UNREADABLE}'")
case("run", ["m.relay", "--inputs", "text.npz"], 1, "--inputs: cannot read 'text.npz': not a NumPy .npy or .npz")
case("run", ["m.relay", "--inputs", "trunc.npz"], 1, "--inputs: cannot read 'trunc.npz': truncated or corrupt")
case("run", ["m.relay", "--inputs", "objects.npz"], 1, "--inputs: cannot read 'objects.npz': it holds Python objects")
case("run", ["m.relay", "--inputs", "x.npy"], 1, "--inputs: cannot read 'x.npy': an .npy file holds one array")
case("run", ["m.relay", "--input", "x=trunc.npy"], 1, "--input x: cannot read 'trunc.npy': truncated or corrupt")
case("run", ["m.relay", "--input", "x=x.npz"], 1, "--input x: cannot read 'x.npz': an .npz archive")
case("run", ["m.relay", "--input", "x=garbage.bin"], 1, "--input x: cannot read 'garbage.bin': not a NumPy")
case("run", ["m.relay", "--input", "x.npy"], 1, "--input expects NAME=FILE.npy, got `x.npy`")
case("run", ["m.relay", "--input", "x=wrong.npy"], 1, "main expects %x: Tensor[(2, 8), float32]; input `x` has shape")
# Sizes no machine has: refused before anything is allocated.
case("run", ["huge.relay"], 1, "%x: Tensor[(99999999999, 99999), float32] takes 39999599999600004 bytes")
case("run", ["huge.relay", "--backend=native"], 1, "takes 39999599999600004 bytes")
case("run", ["huge_output.relay", "--backend=native"], 1, "out of memory: cannot allocate")
case("run", ["huge_output.relay"], 1, "huge_output.relay:3:3: error: zeros failed")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "m.relay").write_text(PROGRAM)
    (tmp_path / "latin1.relay").write_bytes(b'#[version = "0.0.5"]\ndef @main() { 1f } // caf\xe9\n')
    (tmp_path / "garbage.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "empty.relay").write_text("")
    (tmp_path / "adir").mkdir()
    (tmp_path / "dir.dot").mkdir()
    (tmp_path / "huge.relay").write_text(HUGE_INPUT)
    (tmp_path / "huge_output.relay").write_text(HUGE_OUTPUT)
    (tmp_path / "text.npz").write_text("x = [1, 2, 3]\n")
    np.save(tmp_path / "x.npy", np.zeros((2, 8), np.float32))
    np.save(tmp_path / "wrong.npy", np.zeros((3,), np.float32))
    np.savez(tmp_path / "x.npz", x=np.zeros((2, 8), np.float32))
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    for name in ("x.npy", "x.npz"):
        data = (tmp_path / name).read_bytes()
        (tmp_path / f"trunc{Path(name).suffix}").write_bytes(data[:len(data) // 2])
    if ONNX:
        import onnx
        from onnx import helper, numpy_helper
        graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [8])],
                                  [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [8])],
                                  [numpy_helper.from_array(np.ones((8,), np.float32), "w")])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "w.onnx"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def time_limit() -> Iterator[None]:
    """A hang becomes an exception inside the tool (reported as `internal:`, which fails the row)."""
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {TIME_LIMIT} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TIME_LIMIT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _main(tool: str, args: list[str]) -> int:
    module = "irtool.tools.lsp" if tool == "irtool-lsp" else TOOLS[tool]
    status: int = importlib.import_module(module).main(args)
    return status


def _skip_unless_possible(tool: str, args: list[str]) -> None:
    if (tool == "irtool-import" or "w.onnx" in args) and not ONNX:
        pytest.skip("needs onnx")
    if UNREADABLE in args and not os.path.exists(UNREADABLE):
        pytest.skip(f"no {UNREADABLE} here")


@pytest.mark.parametrize(("tool", "args", "status", "says"), CASES,
                         ids=[f"{t[7:]}:{' '.join(a) or '(none)'}" for t, a, _, _ in CASES])
def test_bad_input_is_refused_cleanly(workdir: Path, time_limit: None, capsys: pytest.CaptureFixture[str],
                                      tool: str, args: list[str], status: int, says: str) -> None:
    _skip_unless_possible(tool, args)
    started = time.monotonic()
    got = _main(tool, args)
    out, err = capsys.readouterr()
    assert "Traceback (most recent call last)" not in out + err, err
    assert "internal:" not in out + err, err
    assert got == status, (got, err)
    assert LOCATED.search(err), err
    assert says in err, err
    assert time.monotonic() - started < TIME_LIMIT
    assert sorted(p.name for p in workdir.iterdir() if p.name.endswith(".tmp")) == []  # no temporary left


@pytest.mark.parametrize(("tool", "args", "status", "says"), [
    ("irtool-run", ["m.relay", "--seed", "-1"], 2, "irtool-run: error: argument --seed: the seed must be at least 0"),
    ("irtool-run", ["m.relay", "--inputs", "text.npz"], 1, "irtool-run: error: --inputs: cannot read 'text.npz'"),
    ("irtool-llc", ["m.relay", "--threads", "0"], 2, "irtool-llc: error: argument --threads"),
    ("irtool-opt", ["m.relay", "-o", "adir"], 1, "irtool-opt: error: cannot write 'adir': it is a directory"),
], ids=["run-seed", "run-inputs", "llc-threads", "opt-output"])
def test_the_console_commands_agree(workdir: Path, tool: str, args: list[str], status: int, says: str) -> None:
    proc = run_tool(tool, *args, cwd=workdir, timeout=TIME_LIMIT)
    assert_clean_failure(proc, says=says)
    assert proc.returncode == status


def test_a_valid_run_next_to_the_bad_ones_still_works(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The table's files are bad only where meant: the same program with good values runs."""
    assert _main("irtool-run", ["m.relay", "--seed", "0", "--input", "x=x.npy", "-o", "out.npz"]) == 0
    assert capsys.readouterr().err == ""
    with np.load(workdir / "out.npz") as result:
        np.testing.assert_array_equal(result["output0"], np.zeros((2, 8), np.float32))
