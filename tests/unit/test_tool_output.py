"""Where every tool's output goes (`irtool.tools.output`): regular files are replaced atomically
with the right mode, links are followed, and nothing else (a FIFO, a socket, a device) is ever
replaced: each is written through, in place (issue #18, case 2)."""

from __future__ import annotations

import io
import os
import socket
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from irtool.core.diagnostics import DiagnosticError
from irtool.tools import output

DATA = b"payload \xce\xb1\n" * 1000  # larger than a pipe's buffer: the writer must wait for the reader


@pytest.fixture
def umask_027() -> Iterator[None]:
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def test_a_new_file_gets_the_mode_the_umask_leaves(tmp_path: Path, umask_027: None) -> None:
    output.write_output(str(tmp_path / "plain.txt"), "text\n")
    output.write_output(str(tmp_path / "lib.so"), b"\x7fELF", executable=True)
    assert (tmp_path / "plain.txt").read_text() == "text\n"
    assert stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "lib.so").stat().st_mode) == 0o750
    assert sorted(os.listdir(tmp_path)) == ["lib.so", "plain.txt"]  # no temporary file left


def test_an_existing_file_is_replaced_and_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "out.relay"
    target.write_text("old")
    target.chmod(0o604)
    inode = target.stat().st_ino
    output.write_output(str(target), "new\n")
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o604
    assert target.stat().st_ino != inode  # replaced by a rename, not rewritten in place
    assert os.listdir(tmp_path) == ["out.relay"]


def test_a_failure_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.relay"
    target.write_text("old")

    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output.os, "replace", fail)
    with pytest.raises(DiagnosticError, match=f"cannot write '{target}': No space left on device"):
        output.write_output(str(target), "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.relay"]


def test_a_failing_producer_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "graph.svg"
    target.write_text("old")

    def produce(temp: str) -> None:
        Path(temp).write_text("half")
        raise DiagnosticError("Graphviz failed")

    with pytest.raises(DiagnosticError, match="Graphviz failed"):
        output.write_file(str(target), produce)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["graph.svg"]


@pytest.mark.parametrize(("path", "says"), [
    ("adir", "it is a directory"),
    ("missing/out.relay", "No such file or directory"),
    ("afile/out.relay", "Not a directory"),
    ("", "the file name is empty"),
])
def test_unwritable_paths_are_refused_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     path: str, says: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("")
    with pytest.raises(DiagnosticError) as info:
        output.check_output(path)
    assert str(info.value) == f"cannot write '{path}': {says}"


def test_a_read_only_file_is_refused_not_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "locked.relay"
    target.write_text("keep")
    target.chmod(0o444)
    # root may write anything, so the permission test itself is what is replaced for root
    monkeypatch.setattr(output.os, "access", lambda path, mode: os.path.realpath(path) != str(target))
    with pytest.raises(DiagnosticError, match="Permission denied"):
        output.write_output(str(target), "new")
    assert target.read_text() == "keep"


def test_a_symlink_is_followed_and_its_target_replaced(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "f.relay"
    target.write_text("old")
    target.chmod(0o600)
    (tmp_path / "hop").symlink_to("real/f.relay")
    link = tmp_path / "link.relay"
    link.symlink_to("hop")  # a chain of two links
    output.write_output(str(link), "new")
    assert link.is_symlink() and os.readlink(link) == "hop" and os.readlink(tmp_path / "hop") == "real/f.relay"
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.listdir(tmp_path / "real") == ["f.relay"]  # the temporary file was beside the target


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    link = tmp_path / "link.o"
    link.symlink_to("d/new.o")
    output.write_output(str(link), b"\x00\x01")
    assert link.is_symlink() and (tmp_path / "d" / "new.o").read_bytes() == b"\x00\x01"


def test_a_symlink_loop_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(DiagnosticError, match="cannot write '.*a': "):
        output.write_output(str(tmp_path / "a"), "x")
    assert (tmp_path / "a").is_symlink() and (tmp_path / "b").is_symlink()


def _reader(path: Path, into: list[bytes]) -> threading.Thread:
    def read() -> None:
        with open(path, "rb") as f:
            into.append(f.read())
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("kind", ["text", "bytes", "produced"])
def test_a_fifo_is_written_through_not_replaced(tmp_path: Path, kind: str) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = _reader(fifo, received)
    if kind == "text":
        output.write_output(str(fifo), DATA.decode())
    elif kind == "bytes":
        output.write_output(str(fifo), DATA)
    else:
        output.write_file(str(fifo), lambda temp: Path(temp).write_bytes(DATA))
    reader.join(timeout=30)
    assert received == [DATA]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["pipe"]


def test_a_symlink_to_a_fifo_writes_the_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "link").symlink_to("pipe")
    received: list[bytes] = []
    reader = _reader(fifo, received)
    output.write_output(str(tmp_path / "link"), DATA)
    reader.join(timeout=30)
    assert received == [DATA] and stat.S_ISFIFO(os.lstat(fifo).st_mode) and (tmp_path / "link").is_symlink()


def test_a_unix_socket_is_written_through(tmp_path: Path) -> None:
    path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
            received.append(b"".join(chunks))
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        output.write_output(str(path), DATA)
        thread.join(timeout=30)
    finally:
        server.close()
    assert received == [DATA] and stat.S_ISSOCK(os.lstat(path).st_mode)


def test_a_character_device_is_written_through(tmp_path: Path) -> None:
    """A twin of /dev/null made here, so that a bug replaces only the twin."""
    null = tmp_path / "null"
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        with open(null, "wb") as f:
            f.write(b"probe")
    except OSError as exc:
        pytest.skip(f"cannot make or open a character device here: {exc}")
    output.write_output(str(null), "text")
    output.write_file(str(null), lambda temp: Path(temp).write_bytes(DATA))
    assert stat.S_ISCHR(os.lstat(null).st_mode) and os.lstat(null).st_rdev == os.makedev(1, 3)
    assert os.listdir(tmp_path) == ["null"]


class _Stdout(io.TextIOWrapper):
    def __init__(self, tty: bool) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8")
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_dash_is_standard_output_binary_too(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = _Stdout(tty=False)
    monkeypatch.setattr(sys, "stdout", stdout)
    output.write_output("-", "text ")
    output.write_output(None, b"\x00bytes")
    output.write_file("-", lambda temp: Path(temp).write_bytes(b" produced"))
    assert stdout.buffer.getvalue() == b"text \x00bytes produced"  # type: ignore[attr-defined]


def test_binary_output_is_never_written_to_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = _Stdout(tty=True)
    monkeypatch.setattr(sys, "stdout", stdout)
    output.write_output("-", "text is fine\n")
    with pytest.raises(DiagnosticError, match="refusing to write binary output to a terminal"):
        output.write_output("-", b"\x7fELF")
    with pytest.raises(DiagnosticError, match="terminal"):
        output.check_output(None, binary=True)
    assert stdout.buffer.getvalue() == b"text is fine\n"  # type: ignore[attr-defined]


def test_npz_outputs_keep_their_name(tmp_path: Path) -> None:
    """numpy appends `.npz` to a file name without it: the archive must still land at the path."""
    import numpy as np
    output.write_npz(str(tmp_path / "weights.bin"), {"w": np.arange(3)})
    assert os.listdir(tmp_path) == ["weights.bin"]
    with np.load(tmp_path / "weights.bin") as data:
        assert data["w"].tolist() == [0, 1, 2]
