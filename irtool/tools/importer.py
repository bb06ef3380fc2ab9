"""`irtool-import`: convert an ONNX model to Relay text.

    irtool-import model.onnx [-o model.relay] [--params model.npz | --embed-params]
                  [--input-shape NAME=D0,D1,...]... [--print-types] [-q]

The weights (float initializers) become parameters of `main` after the graph inputs and go to
an `.npz` keyed by parameter name (default: the output's name with `.npz`), which `irtool-run
--inputs` reads back; `--embed-params` puts them in the file's `#[metadata]` instead. Both
outputs are written atomically, after the whole import succeeded. On a terminal each stage's
time goes to standard error (`-q` silences it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.printer import print_program
from irtool.tools.common import add_input_shape_option, cli_main, parse_shapes
from irtool.tools.output import STDOUT, check_output, write_npz, write_output

PROG = "irtool-import"


def build_arg_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description="Import an ONNX model as a Relay module.")
    ap.add_argument("file", help="the .onnx model")
    ap.add_argument("-o", "--output", metavar="OUT.relay", help="where to write the Relay text (default: stdout)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--params", metavar="FILE.npz",
                       help="where to write the weights (default: the output's name with .npz)")
    where.add_argument("--embed-params", action="store_true",
                       help="embed the weights as meta[relay.Constant] constants instead")
    add_input_shape_option(ap)
    ap.add_argument("--print-types", action="store_true", help="annotate the output with /* ty=... */")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-stage timings on standard error")
    return ap


class StageTimer:
    """Per-stage timings on standard error, shown only on a terminal and without -q."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, stage: str, seconds: float) -> None:
        if self.enabled:
            sys.stderr.write(f"{PROG}: {stage:<11} {seconds:8.3f} s\n")
            sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    from irtool.frontend.onnx import import_file
    check_output(args.output)
    if args.params is not None:
        if args.params == STDOUT and args.output in (None, STDOUT):
            raise DiagnosticError("--params -: the Relay text already goes to standard output; name a file with -o")
        check_output(args.params, binary=True)
    timer = StageTimer(not args.quiet and sys.stderr.isatty())
    result = import_file(args.file, embed_params=args.embed_params,
                         input_shapes=parse_shapes(args.input_shape), progress=timer)
    params_path = args.params
    if result.params and not args.embed_params and params_path is None:
        if args.output in (None, STDOUT):
            raise DiagnosticError("the model has weights: name their file with --params FILE.npz "
                                  "(or use --embed-params) when writing to standard output")
        params_path = os.path.splitext(args.output)[0] + ".npz"
    started = time.perf_counter()
    text = print_program(result.module, show_types=args.print_types)
    timer("print", time.perf_counter() - started)
    started = time.perf_counter()
    if params_path is not None:
        write_npz(params_path, result.params)
    write_output(args.output, text)
    timer("write", time.perf_counter() - started)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli_main(PROG, build_arg_parser(), argv, run)


if __name__ == "__main__":
    sys.exit(main())
