"""`irtool-llc`: a lowered module (or any module, lowered on the way) to LLVM IR, assembly,
an object file, a C header or a shared library (LLVM's `llc`).

    irtool-llc FILE|- [-o OUT] --emit=llvm|asm|obj|header|so [-O0..-O3] [--mcpu=native|NAME]
               [--mtriple=T] [--mattr=+f,-g] [--fast-math] [--threads N] [--prefix NAME] [--pipeline P | --no-pipeline]

Text outputs go to standard output unless `-o` is given; `obj` and `so` default to
`<stem>.o` / `<stem>.so` in the working directory, and go to standard output with `-o -` (never
onto a terminal). Outputs are written as `irtool.tools.output` says.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from irtool.codegen.compile import compile_module, emit_asm, emit_llvm, emit_object, link_shared
from irtool.codegen.entry import generate_module, sanitize
from irtool.driver.prepare import DEFAULT_PIPELINE, prepare
from irtool.codegen.header import emit_header
from irtool.target import TargetError, TargetOptions
from irtool.ir.module import IRModule
from irtool.core.diagnostics import DiagnosticError
from irtool.tools import argtypes
from irtool.tools.common import STDIN_NAME, add_input_shape_option, parse_args, parse_shapes, read_source, run_tool
from irtool.tools.output import check_output, write_file, write_output
from irtool.tools.run import load_module

PROG = "irtool-llc"
EMITS = ("llvm", "asm", "obj", "header", "so")


def build_arg_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description="Compile a Relay/TIR module to LLVM IR, assembly, "
                                 "an object file, a C header or a shared library.")
    ap.add_argument("file", help="the .relay/.tir file, or - for standard input")
    ap.add_argument("-o", "--output", metavar="OUT", help="output file (text outputs default to standard output)")
    ap.add_argument("--emit", choices=EMITS, default="obj", help="what to produce (default: obj)")
    ap.add_argument("-O", dest="opt_level", type=int, choices=range(4), default=3, metavar="0..3",
                    help="optimisation level, -O0 .. -O3 (default: 3)")
    ap.add_argument("--mcpu", default="native", help="target CPU: native (the host, default) or an LLVM CPU name")
    ap.add_argument("--mtriple", default=None, help="target triple (default: the host's)")
    ap.add_argument("--mattr", default=None, help="target features, e.g. +avx2,-avx512f (default: the host's "
                    "when --mcpu=native)")
    ap.add_argument("--fast-math", action="store_true", help="allow LLVM's fast-math reassociation and contraction")
    ap.add_argument("--threads", type=argtypes.threads, default=1, metavar="N",
                    help="run parallel loops on N threads (pthreads; link with -pthread); 1 (default) is serial")
    ap.add_argument("--prefix", default=None, help="prefix of the C symbols (default: the input file's stem)")
    lowering = ap.add_mutually_exclusive_group()
    lowering.add_argument("--pipeline", default=DEFAULT_PIPELINE,
                          help=f"passes that lower input that is not lowered yet (default: {DEFAULT_PIPELINE})")
    lowering.add_argument("--no-pipeline", action="store_true", help="require lowered input")
    add_input_shape_option(ap)
    return ap


def default_prefix(path: str) -> str:
    if path == "-" or path == STDIN_NAME:
        return "module"
    return sanitize(Path(path).stem)


# The flag of each `TargetOptions` field a `TargetError` may concern.
TARGET_FLAGS = {"cpu": "--mcpu", "features": "--mattr", "triple": "--mtriple", "opt_level": "-O",
                "threads": "--threads"}


def target_options(args: argparse.Namespace) -> TargetOptions:
    """The target the flags name, checked before LLVM sees it (`TargetError` otherwise)."""
    return TargetOptions(cpu=args.mcpu, triple=args.mtriple, features=args.mattr, opt_level=args.opt_level,
                         fast_math=args.fast_math, threads=args.threads)


def output_path(args: argparse.Namespace, prefix: str) -> str | None:
    """Where the output goes: `-o`, else standard output for text and `<prefix>.o`/`.so` for binaries."""
    if args.output is not None or args.emit in ("llvm", "asm", "header"):
        return args.output
    return f"{prefix}.{'o' if args.emit == 'obj' else 'so'}"


def compile_file(mod: IRModule, args: argparse.Namespace, prefix: str) -> None:
    options = target_options(args)
    out = output_path(args, prefix)
    mod = prepare(mod, options, None if args.no_pipeline else args.pipeline)
    if args.emit == "header":
        generated = generate_module(mod, prefix, options)
        if generated.abi is None:
            raise DiagnosticError("irtool-llc: --emit=header needs a `main` function")
        write_output(out, emit_header(generated.abi))
        return
    art = compile_module(mod, prefix, options)
    if args.emit == "llvm":
        write_output(out, emit_llvm(art))
    elif args.emit == "asm":
        write_output(out, emit_asm(art))
    elif args.emit == "obj":
        write_output(out, emit_object(art))
    else:
        obj = emit_object(art)
        write_file(out, lambda temp: link_shared(obj, temp), executable=True)


def run(args: argparse.Namespace) -> int:
    prefix = args.prefix if args.prefix is not None else default_prefix(args.file)
    check_output(output_path(args, prefix), binary=args.emit in ("obj", "so"))
    if args.file.endswith(".onnx"):
        # An ONNX model compiles in one step: imported with its weights as constants.
        from irtool.frontend.onnx import import_file
        mod = import_file(args.file, embed_params=True, input_shapes=parse_shapes(args.input_shape),
                          static_shapes=True).module
    else:
        if args.input_shape:
            raise DiagnosticError("--input-shape applies to .onnx models")
        name, text = read_source(args.file)
        mod = load_module(name, text, "main")
    compile_file(mod, args, prefix)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(build_arg_parser(), argv)
    if isinstance(args, int):
        return args
    if args.prefix is not None and sanitize(args.prefix) != args.prefix:
        sys.stderr.write(f"{PROG}: error: --prefix must be a C identifier, got `{args.prefix}`\n")
        return 2
    try:
        target_options(args)
    except TargetError as exc:
        sys.stderr.write(f"{PROG}: error: {TARGET_FLAGS[exc.option]}: {exc}\n")
        return 2
    return run_tool(PROG, lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
