"""`irtool-viz`: draw a function's dataflow graph (DOT always; SVG/PNG/PDF through Graphviz).

    irtool-viz FILE [-p PIPELINE] [--function main] [-o graph.dot|.svg|.png|.pdf]

The program is parsed, run through the optional pass pipeline (e.g. `-p fuse-ops` to see the
fused groups as clusters), type-checked for the shapes on the edges, and drawn. Without `-o`
the DOT text goes to standard output.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

from irtool import __version__
from irtool.analysis.typecheck import infer_types
from irtool.editor.viz import function_dot
from irtool.ir.expr import Function
from irtool.ir.module import IRModule
from irtool.core.diagnostics import DiagnosticError, suggest
from irtool.syntax.parser import parse
from irtool.tools import argtypes
from irtool.tools.common import EXIT_OK, cli_main, read_source
from irtool.tools.output import check_output, write_file, write_output

PROG = "irtool-viz"
_RENDERED = {".svg": "svg", ".png": "png", ".pdf": "pdf"}
_DOT_SUFFIXES = (".dot", ".gv")
INSTALL_HINT = ("Graphviz's `dot` program is needed to write {suffix} files and was not found on PATH; "
                "install it (`apt-get install graphviz`, `dnf install graphviz` or `brew install graphviz`), "
                "or write DOT with `-o graph.dot`")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Draw the dataflow graph of a Relay function.")
    parser.add_argument("input", metavar="FILE", help="input file (`-` for standard input)")
    parser.add_argument("-p", "--passes", metavar="PIPELINE", default="",
                        help="passes to run first, e.g. 'fuse-ops' or 'fuse-ops,plan-memory'")
    parser.add_argument("--function", default="main", type=argtypes.non_empty,
                        help="the function to draw (default: main)")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="output file: .dot/.gv (DOT), .svg/.png/.pdf (needs Graphviz); default: DOT on stdout")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return cli_main(PROG, build_parser(), argv, _run)


def graph_of(text: str, name: str, pipeline: str = "", function: str = "main") -> str:
    """The DOT text `irtool-viz` writes for a program."""
    prog = parse(text, name)
    if not isinstance(prog, IRModule):
        raise DiagnosticError(f"{name}: irtool-viz draws a function of a module; this file holds a lone expression")
    if pipeline:
        from irtool.passes.manager import parse_pipeline, run_pipeline
        prog = run_pipeline(prog, parse_pipeline(pipeline))
    func = prog.functions.get(function)
    if not isinstance(func, Function):
        hint = suggest(function, set(prog.functions))
        known = ", ".join(f"@{n}" for n in prog.functions) or "none"
        raise DiagnosticError(f"no function `@{function}` in {name}" + (f"; did you mean `@{hint}`?" if hint else "")
                              + f" (functions: {known})")
    infer_types(prog)
    return function_dot(func, function)


def _run(args: argparse.Namespace) -> int:
    output = args.output
    suffix = os.path.splitext(output)[1].lower() if output else ""
    if output and output != "-" and suffix not in _RENDERED and suffix not in _DOT_SUFFIXES:
        raise DiagnosticError(f"unknown output format `{suffix or output}`; use .dot, .gv, .svg, .png or .pdf")
    check_output(output, binary=suffix in _RENDERED)
    name, text = read_source(args.input)
    dot = graph_of(text, name, args.passes, args.function)
    if suffix in _RENDERED:
        render(dot, output, _RENDERED[suffix])
    else:
        write_output(output, dot)
    return EXIT_OK


def render(dot: str, path: str, fmt: str) -> None:
    """Graphviz draws the graph into a file that then becomes `path` (`irtool.tools.output`)."""
    program = shutil.which("dot")
    if program is None:
        raise DiagnosticError(INSTALL_HINT.format(suffix=f".{fmt}"))

    def produce(temp: str) -> None:
        done = subprocess.run([program, f"-T{fmt}", "-o", temp], input=dot.encode("utf-8"),
                              capture_output=True, check=False)
        if done.returncode != 0:
            raise DiagnosticError(f"Graphviz failed: {done.stderr.decode(errors='replace').strip()}")
    write_file(path, produce)


if __name__ == "__main__":
    sys.exit(main())
