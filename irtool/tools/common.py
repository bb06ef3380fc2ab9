"""What every irtool command-line tool shares: reading input, writing output atomically, and
turning errors into `file:line:col: error: ...` text with the right exit status.

Exit statuses: 0 success, 1 an error in the input (or any other failure), 2 a usage error
(argparse's own convention), 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from typing import TextIO

from irtool.core.span import Span
from irtool.core.diagnostics import SOURCES, DiagnosticError, render_error

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

STDIN_NAME = "<stdin>"

# Set to see the Python traceback behind an "internal" error (for irtool developers).
TRACEBACK_ENV = "IRTOOL_TRACEBACK"


def add_input_shape_option(ap: argparse.ArgumentParser) -> None:
    """`--input-shape NAME=D0,D1,...` (repeatable): the sizes of an ONNX graph input's axes."""
    ap.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                    help="with an .onnx model: the shape of a graph input whose axes are symbolic (repeatable)")


def parse_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """The `--input-shape` values by input name."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
        except ValueError:
            shape = (-1,)
        if not sep or not name or any(d < 0 for d in shape):
            raise DiagnosticError(f"--input-shape expects NAME=D0,D1,... with non-negative sizes, got `{item}`")
        shapes[name] = shape
    return shapes


def read_source(path: str) -> tuple[str, str]:
    """(name used in diagnostics, text) of FILE, or of standard input for `-`."""
    try:
        if path == "-":
            name, data = STDIN_NAME, sys.stdin.buffer.read()
        else:
            name = path
            with open(path, "rb") as f:
                data = f.read()
    except OSError as exc:
        raise DiagnosticError(f"cannot read '{path}': {exc.strerror or exc}") from None
    return name, decode_source(name, data)


def decode_source(name: str, data: bytes) -> str:
    """UTF-8 text of a file; a bad byte is a located error like any other."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[:exc.start]
        line = before.count(b"\n") + 1
        line_start = before.rfind(b"\n") + 1
        good = data[:exc.start].decode("utf-8", errors="replace")
        SOURCES.add(name, good + data[exc.start:].decode("utf-8", errors="replace"))
        col = len(data[line_start:exc.start].decode("utf-8", errors="replace")) + 1
        message = f"invalid UTF-8 byte 0x{data[exc.start]:02x}; irtool reads UTF-8 text"
        raise DiagnosticError(message, Span(name, line, col, line, col + 1)) from None


def write_output(path: str | None, text: str) -> None:
    """Write `text` to `path` (standard output for None or `-`), never leaving a partial file.

    The text goes to a temporary file in the target's directory that then replaces the target in
    one `os.replace`, so a failure (or `-o` naming the input) leaves the old file intact.
    """
    if path is None or path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = os.path.abspath(path)
    try:
        mode = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    except OSError as exc:
        raise DiagnosticError(f"cannot write '{path}': {exc.strerror or exc}") from None
    replace_file(path, lambda temp: _write_text(temp, text), mode)


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def replace_file(path: str, produce: Callable[[str], None], mode: int) -> None:
    """`produce(temp)` writes a temporary file beside `path`, which then replaces `path` at once.

    On any failure the temporary file is removed and the old `path` is left as it was.
    """
    target = os.path.abspath(path)
    try:
        fd, temp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.",
                                    suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise DiagnosticError(f"cannot write '{path}': {exc.strerror or exc}") from None
    try:
        produce(temp)
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException as exc:
        try:
            os.unlink(temp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise DiagnosticError(f"cannot write '{path}': {exc.strerror or exc}") from None
        raise


def report(err: DiagnosticError, stream: TextIO | None = None) -> None:
    """Print a diagnostic (with its source line and caret) to standard error."""
    stream = sys.stderr if stream is None else stream
    stream.write(render_error(err) + "\n")


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """Parsed arguments, or the exit status argparse wanted (`--help`, `--version`, usage errors)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


def cli_main(prog: str, parser: argparse.ArgumentParser, argv: Sequence[str] | None,
             body: Callable[[argparse.Namespace], int]) -> int:
    """The usual `main`: parse the arguments, then run `body(args)` under `run_tool`."""
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    return run_tool(prog, lambda: body(args))


def run_tool(prog: str, body: Callable[[], int]) -> int:
    """Run a tool's body and turn every way it can fail into a message and an exit status.

    Located errors are the normal case. Anything else is an irtool bug, but the user still gets
    one line instead of a traceback (`IRTOOL_TRACEBACK=1` shows it).
    """
    try:
        return body()
    except DiagnosticError as exc:
        report(exc)
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`irtool-opt f | head`); don't complain while flushing at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 -- last resort: never show a user a traceback
        if os.environ.get(TRACEBACK_ENV):
            traceback.print_exc()
        what = "input too deeply nested" if isinstance(exc, RecursionError) else f"{type(exc).__name__}: {exc}"
        sys.stderr.write(f"{prog}: error: internal: {what} (this is an irtool bug; "
                         f"set {TRACEBACK_ENV}=1 to see the traceback)\n")
        return EXIT_ERROR
