"""`irtool-fmt`: put `.relay` files in the printer's canonical layout, keeping every comment.

    irtool-fmt FILE... [--check | --in-place]

Without a flag the formatted text goes to standard output. `--check` changes nothing and exits 1
listing the files that would change; `--in-place` rewrites changed files atomically (through a
symbolic link, its target: `irtool.tools.output`). A file that does not parse, whose comments
cannot be placed or that cannot be written is reported (`file:line:col: error: ...`) and left
alone; the others are still processed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from irtool import __version__
from irtool.editor.fmt import format_text
from irtool.core.diagnostics import DiagnosticError
from irtool.tools.common import EXIT_ERROR, EXIT_OK, cli_main, read_source, report
from irtool.tools.output import write_output

PROG = "irtool-fmt"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Format Relay text canonically without losing comments.")
    parser.add_argument("files", nargs="+", metavar="FILE", help="input files (`-` for standard input)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 and list the files that would change")
    mode.add_argument("--in-place", "-i", action="store_true", help="rewrite the files (atomically)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return cli_main(PROG, build_parser(), argv, _run)


def _run(args: argparse.Namespace) -> int:
    if args.in_place and "-" in args.files:
        raise DiagnosticError("--in-place needs files, not standard input")
    status = EXIT_OK
    changed: list[str] = []
    for path in args.files:
        try:
            name, text = read_source(path)
            formatted = format_text(text, name)
            if args.in_place and formatted != text:
                write_output(path, formatted)
        except DiagnosticError as exc:
            report(exc, PROG)
            status = EXIT_ERROR
            continue
        if args.check:
            if formatted != text:
                changed.append(name)
        elif not args.in_place:
            write_output(None, formatted)
    if changed:
        sys.stdout.write("".join(f"would reformat {name}\n" for name in changed))
        status = EXIT_ERROR
    return status


if __name__ == "__main__":
    sys.exit(main())
