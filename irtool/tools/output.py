"""Where a tool's output goes (`-o` and every other output option), with the semantics of LLVM's
tools, so that no tool can destroy what its output path names.

- A regular file, or a path that does not exist yet, is replaced atomically: the output is
  written to a temporary file in the target's own directory (a rename never crosses file
  systems), flushed to disk, given its mode and renamed over the target. A failure, or an
  interruption, leaves the old file as it was, so `-o` may name the input. A new file gets the
  mode the umask leaves of 0666 (0777 for an executable); an existing file keeps its mode. A
  read-only file is refused rather than replaced.
- A symbolic link is followed and its final target replaced (a dangling link creates its target).
- Anything else but a directory (a character device such as /dev/null, a FIFO, a Unix socket) is
  written through in place, never replaced.
- `-` is standard output, binary outputs included (`irtool-llc --emit=obj -o - | ...`), except that
  binary output is never written to a terminal.

`check_output` is the same resolution without writing: tools call it on every output option
before doing any work, so a bad path fails in a moment, not after a long compile.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Literal

from irtool.core.diagnostics import DiagnosticError

if TYPE_CHECKING:
    import numpy as np

STDOUT = "-"


@dataclass(frozen=True)
class Destination:
    """What an output path names, once symbolic links are followed."""

    path: str  # as the user wrote it: what messages show
    target: str  # the file that is written (the final target of a link)
    kind: Literal["stdout", "file", "stream", "socket"]
    mode: int | None  # an existing regular file's permission bits; None for a new file


def cannot_write(path: str, why: OSError | str) -> DiagnosticError:
    reason = why if isinstance(why, str) else (why.strerror or str(why))
    return DiagnosticError(f"cannot write '{path}': {reason}")


def check_output(path: str | None, *, binary: bool = False) -> Destination:
    """Where `path` (None or `-`: standard output) would be written; a `DiagnosticError` when it
    cannot be (a directory, a missing or unwritable directory, a read-only file, a link loop,
    binary output to a terminal)."""
    if path is None or path == STDOUT:
        if binary and sys.stdout.isatty():
            raise DiagnosticError("refusing to write binary output to a terminal; "
                                  "redirect standard output or name a file")
        return Destination(STDOUT, STDOUT, "stdout", None)
    if path == "":
        raise cannot_write(path, "the file name is empty")
    target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise cannot_write(path, exc) from None
    if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        kind: Literal["stream", "socket"] = "socket" if stat.S_ISSOCK(st.st_mode) else "stream"
        return Destination(path, target, kind, None)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise cannot_write(path, "it is a directory")
    directory = os.path.dirname(target)
    try:
        dir_st = os.stat(directory)
    except OSError as exc:
        raise cannot_write(path, exc) from None
    if not stat.S_ISDIR(dir_st.st_mode):
        raise cannot_write(path, f"'{directory}' is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK) or (st is not None and not os.access(target, os.W_OK)):
        raise cannot_write(path, "Permission denied")
    return Destination(path, target, "file", None if st is None else stat.S_IMODE(st.st_mode))


def write_output(path: str | None, data: str | bytes, *, executable: bool = False) -> None:
    """Write text (UTF-8) or bytes to `path` (None or `-`: standard output)."""
    if (path is None or path == STDOUT) and isinstance(data, str):
        sys.stdout.write(data)
        sys.stdout.flush()
        return
    payload = data.encode("utf-8") if isinstance(data, str) else data

    def produce(temp: str) -> None:
        with open(temp, "wb") as f:
            f.write(payload)
    write_file(path, produce, executable=executable)


def write_file(path: str | None, produce: Callable[[str], None], *, executable: bool = False) -> None:
    """`produce(name)` writes the whole output into the (new, empty) file `name`; it then becomes
    `path` as the module docstring says. For outputs that a library or a program writes by file
    name (numpy, matplotlib, the linker, Graphviz)."""
    dest = check_output(path, binary=True)
    if dest.kind == "file":
        _replace(dest, produce, executable)
        return
    with tempfile.TemporaryDirectory(prefix="irtool-out-") as scratch:
        temp = os.path.join(scratch, "output")
        produce(temp)
        try:
            with open(temp, "rb") as src, _sink(dest) as sink:
                shutil.copyfileobj(src, sink)
        except OSError as exc:
            raise cannot_write(dest.path, exc) from None


def _replace(dest: Destination, produce: Callable[[str], None], executable: bool) -> None:
    directory, name = os.path.split(dest.target)
    try:
        fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise cannot_write(dest.path, exc) from None
    try:
        produce(temp)
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(temp, dest.mode if dest.mode is not None else _new_file_mode(executable))
        os.replace(temp, dest.target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(exc, OSError):
            raise cannot_write(dest.path, exc) from None
        raise


def _new_file_mode(executable: bool) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if executable else 0o666) & ~umask


@contextlib.contextmanager
def _sink(dest: Destination) -> Iterator[BinaryIO]:
    """The open stream that a non-regular destination is written through."""
    if dest.kind == "stdout":
        sys.stdout.flush()
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
    elif dest.kind == "socket":
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(dest.target)
            with sock.makefile("wb") as stream:
                yield stream
    else:
        with open(dest.target, "wb") as stream:
            yield stream


def write_npz(path: str | None, arrays: Mapping[str, np.ndarray]) -> None:
    """Named arrays as an `.npz` archive (what `irtool-run --inputs` reads back)."""
    import numpy as np

    def produce(temp: str) -> None:
        with open(temp, "wb") as f:  # a file object: given a name, numpy would append `.npz`
            np.savez(f, **arrays)
    write_file(path, produce)
