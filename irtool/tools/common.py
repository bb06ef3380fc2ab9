"""What every irtool command-line tool shares: reading input, and turning errors into
`file:line:col: error: ...` text (`irtool-xxx: error: ...` when an error concerns no place in a
file) with the right exit status. Output goes through `irtool.tools.output`.

Exit statuses: 0 success, 1 an error in the input (or any other failure), 2 a usage error
(argparse's own convention), 130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TextIO

from irtool.core.span import Span
from irtool.core.diagnostics import SOURCES, DiagnosticError, render

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


def report(err: DiagnosticError, prog: str, stream: TextIO | None = None) -> None:
    """Print the diagnostics (with source line and caret) to standard error; one that concerns no
    place in a file is prefixed with the tool's name, as LLVM's tools do (`irtool-run: error: ...`)."""
    stream = sys.stderr if stream is None else stream
    for diag in err.diagnostics:
        if diag.span is None:  # (a message that already starts with the name keeps one)
            diag = dataclasses.replace(diag, message=diag.message.removeprefix(f"{prog}: "))
        stream.write((render(diag) if diag.span is not None else f"{prog}: {render(diag)}") + "\n")


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """Parsed arguments, or the exit status argparse wanted (`--help`, `--version`, usage errors)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    """argparse's usage message and exit status for a check argparse cannot express."""
    try:
        parser.error(message)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return EXIT_USAGE


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
        report(exc, prog)
        return EXIT_ERROR
    except MemoryError as exc:
        # Not a bug: the program asked for more memory than the machine has.
        sys.stderr.write(f"{prog}: error: out of memory" + (f": {exc}" if str(exc) else "") + "\n")
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
