"""Every output option of every tool pointed at a FIFO, a symbolic link or /dev/null (issue #18,
case 2): the FIFO receives the output and stays a FIFO, the link stays a link to a rewritten
target, and /dev/null stays a character device. The tools' `main` runs in process (one
interpreter start-up for all); `irtool-opt -o /dev/null` also runs as a user runs it."""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import shutil
import stat
import threading
import zipfile
from pathlib import Path

import pytest

from support.adversarial import TOOLS, run_tool

PROGRAM = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 8), float32]) {\n  nn.relu(%x)\n}\n'
ONNX = importlib.util.find_spec("onnx") is not None


def _is_npz(data: bytes) -> bool:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return z.namelist() == ["output0.npy"]


def _has_params(data: bytes) -> bool:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return z.namelist() == ["w.npy"]


# (tool, arguments with OUT for the output path, the FIFO's suffix, what the output must look like)
CASES = [
    ("irtool-opt", ["m.relay", "-o", "OUT"], ".relay", lambda d: d.startswith(b'#[version = "0.0.5"]\ndef @main')),
    ("irtool-opt", ["m.relay", "-p", "fuse-ops", "--memory-report-file", "OUT"], ".txt",
     lambda d: b"arena" in d),
    ("irtool-opt", ["m.relay", "-p", "fuse-ops", "--memory-timeline", "OUT"], ".png",
     lambda d: d.startswith(b"\x89PNG")),
    ("irtool-llc", ["m.relay", "--emit=obj", "--mcpu=x86-64", "-o", "OUT"], ".o", lambda d: d.startswith(b"\x7fELF")),
    ("irtool-llc", ["m.relay", "--emit=so", "--mcpu=x86-64", "-o", "OUT"], ".so", lambda d: d.startswith(b"\x7fELF")),
    ("irtool-llc", ["m.relay", "--emit=llvm", "--mcpu=x86-64", "-o", "OUT"], ".ll", lambda d: b"define" in d),
    ("irtool-llc", ["m.relay", "--emit=header", "-o", "OUT"], ".h", lambda d: b"m_run(" in d),
    ("irtool-run", ["m.relay", "-o", "OUT"], ".npz", _is_npz),
    ("irtool-viz", ["m.relay", "-o", "OUT"], ".dot", lambda d: d.startswith(b"digraph")),
    ("irtool-import", ["w.onnx", "-o", "OUT", "--params", "w.npz"], ".relay", lambda d: b"def @main" in d),
    ("irtool-import", ["w.onnx", "-o", "w.relay", "--params", "OUT"], ".npz", _has_params),
]
IDS = ["opt", "opt-memory-report", "opt-timeline", "llc-obj", "llc-so", "llc-llvm", "llc-header", "run", "viz",
       "import-relay", "import-params"]


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    (tmp_path / "m.relay").write_text(PROGRAM)
    if ONNX:
        import numpy as np
        import onnx
        from onnx import helper, numpy_helper
        w = numpy_helper.from_array(np.ones((8,), np.float32), "w")
        graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [8])],
                                  [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [8])], [w])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "w.onnx"))
    return tmp_path


def _main(tool: str, args: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """The tool's exit status, run in process from `cwd`."""
    monkeypatch.chdir(cwd)
    status: int = importlib.import_module(TOOLS[tool]).main(args)
    return status


def _needs(tool: str, args: list[str]) -> None:
    if tool == "irtool-import" and not ONNX:
        pytest.skip("needs onnx")
    if "--memory-timeline" in args and importlib.util.find_spec("matplotlib") is None:
        pytest.skip("needs matplotlib")
    if "--emit=so" in args and shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("needs a C compiler")


@pytest.mark.parametrize(("tool", "args", "suffix", "looks_right"), CASES, ids=IDS)
def test_an_output_into_a_fifo_is_written_through(inputs: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], tool: str, args: list[str],
                                                  suffix: str, looks_right: object) -> None:
    _needs(tool, args)
    fifo = inputs / f"out{suffix}"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:
            received.append(f.read())
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    status = _main(tool, [str(fifo) if a == "OUT" else a for a in args], inputs, monkeypatch)
    if reader.is_alive():  # the tool never opened the FIFO: let the reader see an end of file
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    reader.join(timeout=30)
    assert status == 0, capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert len(received) == 1 and looks_right(received[0]), received  # type: ignore[operator]
    assert not [p for p in os.listdir(inputs) if p.endswith(".tmp")]


@pytest.mark.parametrize(("tool", "args"), [
    ("irtool-fmt", ["-i", "OUT"]),
    ("irtool-opt", ["OUT", "-o", "OUT"]),
], ids=["fmt-in-place", "opt-onto-its-input"])
def test_rewriting_a_file_through_a_symlink_keeps_the_link(inputs: Path, monkeypatch: pytest.MonkeyPatch,
                                                           tool: str, args: list[str]) -> None:
    (inputs / "real").mkdir()
    target = inputs / "real" / "m.relay"
    target.write_text(PROGRAM.replace("  nn.relu", "        nn.relu"))
    link = inputs / "link.relay"
    link.symlink_to("real/m.relay")
    assert _main(tool, [str(link) if a == "OUT" else a for a in args], inputs, monkeypatch) == 0
    assert link.is_symlink() and os.readlink(link) == "real/m.relay"
    assert target.read_text() == PROGRAM


def _can_write_dev_null() -> bool:
    return os.geteuid() == 0 or os.access("/dev/null", os.W_OK)


def _null_targets(directory: Path) -> list[str]:
    """A twin of /dev/null made here first (where a bug costs nothing), then /dev/null itself."""
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode), "/dev/null was no character device before the test"
    twin = directory / "null"
    try:
        os.mknod(twin, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:
        return ["/dev/null"]
    return [str(twin), "/dev/null"]


def _still_null(target: str) -> None:
    st = os.lstat(target)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3), f"{target} was replaced"


needs_dev_null = pytest.mark.skipif(not _can_write_dev_null(),
                                    reason="neither root nor allowed to write /dev/null")


@needs_dev_null
def test_irtool_opt_onto_dev_null_leaves_a_character_device(inputs: Path) -> None:
    for target in _null_targets(inputs):
        proc = run_tool("irtool-opt", "m.relay", "-o", target, cwd=inputs)
        assert proc.returncode == 0 and proc.stdout == "", proc.stderr
        _still_null(target)


@needs_dev_null
@pytest.mark.parametrize(("tool", "args"), [
    ("irtool-llc", ["m.relay", "--emit=obj", "--mcpu=x86-64", "-o", "OUT"]),
    ("irtool-run", ["m.relay", "-o", "OUT"]),
    ("irtool-opt", ["m.relay", "-p", "fuse-ops", "--memory-report-file", "OUT", "-o", "OUT"]),
], ids=["llc", "run", "opt-memory-report"])
def test_other_outputs_onto_dev_null_leave_a_character_device(inputs: Path, monkeypatch: pytest.MonkeyPatch,
                                                              tool: str, args: list[str]) -> None:
    for target in _null_targets(inputs):
        assert _main(tool, [target if a == "OUT" else a for a in args], inputs, monkeypatch) == 0
        _still_null(target)
