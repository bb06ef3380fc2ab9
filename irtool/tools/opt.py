"""`irtool-opt`: read Relay text, verify it, run passes, print it back (LLVM's `opt`, MLIR's `mlir-opt`).

    irtool-opt FILE|- [-o OUT] [--split-input-file] [--verify-diagnostics] [--print-types]
               [-p PIPELINE] [--pass NAME]... [--list-passes] [--print-ir-after-all] ...

`process` is the whole job for one piece of text; the fuzz tests call it directly, so what they
check is exactly what the command does.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from irtool import __version__
from irtool.ir.module import IRModule, Program
from irtool.core.span import Span
from irtool.core.diagnostics import SOURCES, DiagnosticError
from irtool.syntax.parser import parse
from irtool.target import TargetError, TargetOptions, compiling_for
from irtool.syntax.printer import print_program
from irtool.passes.manager import run_pipeline, verify
from irtool.tools import argtypes, verify_diagnostics
from irtool.tools.common import EXIT_ERROR, EXIT_OK, parse_args, read_source, report, run_tool, usage_error
from irtool.tools.output import STDOUT, check_output, write_file, write_output

if TYPE_CHECKING:
    from irtool.passes.base import ModulePass
    from irtool.passes.manager import PassOption

PROG = "irtool-opt"

# A line holding only this separates the chunks of `--split-input-file` (in input and output).
SPLIT_MARKER = "// -----"
_SPLIT_LINE = re.compile(r"^[ \t]*// -----[ \t]*\r?$")


@dataclass
class OptOptions:
    """What to do with each parsed program (the command line minus input and output)."""

    verify: bool = True
    print_types: bool = False
    passes: list[ModulePass] = field(default_factory=list)
    verify_each: bool = True
    print_ir_before: tuple[str, ...] = ()
    print_ir_after: tuple[str, ...] = ()
    print_ir_after_all: bool = False
    timing: bool = False
    memory_report: str | None = None  # "text" or "json": report main's memory plan
    memory_report_file: str | None = None  # where the report goes (default: stderr)
    memory_timeline: str | None = None  # a PNG of the arena (offset against step), needs matplotlib
    target: TargetOptions = field(default_factory=TargetOptions)  # what lowering schedules for


def process(text: str, source_name: str, options: OptOptions, line_offset: int = 0) -> str:
    """Parse → verify → passes → print for one program; errors are `DiagnosticError`s."""
    prog = parse(text, source_name=source_name, line_offset=line_offset)
    verified = False
    if options.passes:
        if not isinstance(prog, IRModule):
            span = prog.span or Span(source_name, line_offset + 1, 1, line_offset + 1, 2)
            raise DiagnosticError("passes run on modules (`def @main(...) { ... }`), "
                                  "but this input is a single expression", span)
        if options.verify and not options.verify_each:
            verify(prog)
        with compiling_for(options.target):
            prog = run_pipeline(prog, options.passes, verify_each=options.verify_each,
                                print_ir_before=options.print_ir_before, print_ir_after=options.print_ir_after,
                                print_ir_after_all=options.print_ir_after_all, timing=options.timing,
                                err=sys.stderr)
        verified = options.verify_each
    elif options.verify:
        verify(prog)
        verified = True
    if options.print_types and not verified:
        from irtool.analysis.typecheck import infer_types
        infer_types(prog)
    if options.memory_report is not None or options.memory_timeline is not None:
        _memory_report(prog, source_name, line_offset, options)
    out = print_program(prog, show_types=options.print_types)
    return out if out.endswith("\n") else out + "\n"


def _memory_report(prog: Program, source_name: str, line_offset: int, options: OptOptions) -> None:
    """`--memory-report`: the plan on `main` (or a greedy-by-size plan made for the report)."""
    if not isinstance(prog, IRModule):
        raise DiagnosticError("--memory-report needs a module with `@main`",
                              prog.span or Span(source_name, line_offset + 1, 1, line_offset + 1, 2))
    from irtool.analysis.memory_report import draw_timeline, format_report, memory_report
    report = memory_report(prog)
    if options.memory_timeline is not None:
        path = options.memory_timeline
        write_file(path, lambda temp: draw_timeline(report, temp, f"{source_name}: {report['algorithm']}"))
    if options.memory_report is None:
        return
    text = format_report(report, options.memory_report)
    if options.memory_report_file is None:
        sys.stderr.write(text)
    else:
        write_output(options.memory_report_file, text)


def split_input(text: str) -> list[tuple[str, int]]:
    """The `// -----`-separated chunks of `text`, each with the number of lines before it."""
    chunks: list[tuple[str, int]] = []
    lines = text.split("\n")
    start = 0
    for index, line in enumerate(lines):
        if _SPLIT_LINE.match(line):
            chunks.append(("\n".join(lines[start:index]), start))
            start = index + 1
    chunks.append(("\n".join(lines[start:]), start))
    return chunks


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Parse a Relay program, verify it (well-formedness and types), optionally run "
                    "passes, and print it back in canonical form.")
    parser.add_argument("input", nargs="?", metavar="FILE", help="input file, or `-` for standard input")
    parser.add_argument("-o", dest="output", metavar="OUT",
                        help="write the result here (atomically) instead of to standard output")
    parser.add_argument("--split-input-file", action="store_true",
                        help=f"process each `{SPLIT_MARKER}`-separated chunk of the input on its own")
    parser.add_argument("--verify-diagnostics", action="store_true",
                        help="check the errors against `// expected-error {{...}}` annotations "
                             "instead of reporting them")
    parser.add_argument("--print-types", action="store_true", help="annotate expressions with `/* ty=... */`")
    parser.add_argument("--no-verify", dest="verify", action="store_false",
                        help="skip well-formedness and type checking (also between passes)")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    passes = parser.add_argument_group("passes")
    passes.add_argument("-p", "--pass-pipeline", dest="pipeline", action="append", default=[],
                        metavar="PIPELINE", help="passes to run, e.g. 'inline,fuse-ops{max-depth=64}'")
    passes.add_argument("--pass", dest="pipeline", action="append", metavar="NAME", type=argtypes.non_empty,
                        help="run one more pass (repeatable; runs in command-line order with -p)")
    passes.add_argument("--mcpu", default="native",
                        help="the CPU that lowering and alter-layout target: native (the host, default) or an LLVM "
                        "CPU name; pins the register tiles and vector widths the printed TIR shows")
    passes.add_argument("--mattr", default=None, help="target features, e.g. +avx2,-avx512f (with --mcpu)")
    passes.add_argument("--list-passes", action="store_true", help="list the passes and their options, then exit")
    passes.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass (stderr)")
    passes.add_argument("--print-ir-before", action="append", default=[], metavar="NAME",
                        help="print the IR before each run of this pass (stderr; repeatable)")
    passes.add_argument("--print-ir-after", action="append", default=[], metavar="NAME",
                        help="print the IR after each run of this pass (stderr; repeatable)")
    passes.add_argument("--verify-each", dest="verify_each", action="store_true", default=None,
                        help="verify the module after every pass (the default)")
    passes.add_argument("--no-verify-each", dest="verify_each", action="store_false",
                        help="do not verify between passes")
    passes.add_argument("--timing", action="store_true", help="print a per-pass wall-time table (stderr)")
    passes.add_argument("--memory-report", nargs="?", const="text", choices=("text", "json"), metavar="text|json",
                        help="report main's memory plan after the passes: arena, lower bound, no-reuse "
                             "bytes, per-tensor live ranges (stderr, or --memory-report-file)")
    passes.add_argument("--memory-report-file", metavar="F", help="write the memory report to F")
    passes.add_argument("--memory-timeline", metavar="F.png",
                        help="draw main's memory plan as a PNG: one rectangle per tensor, offset against step "
                             "(needs matplotlib, which irtool does not depend on)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    if args.input is None and not args.list_passes:
        return usage_error(parser, "the following arguments are required: FILE")
    on_stdout = [flag for flag, path in (("the module (no -o)", args.output or STDOUT),
                                         ("--memory-report-file", args.memory_report_file),
                                         ("--memory-timeline", args.memory_timeline)) if path == STDOUT]
    if len(on_stdout) > 1:
        return usage_error(parser, f"{' and '.join(on_stdout)} would both go to standard output")
    try:
        args.target = TargetOptions(cpu=args.mcpu, features=args.mattr)
    except TargetError as exc:
        return usage_error(parser, f"--{'mattr' if exc.option == 'features' else 'mcpu'}: {exc}")
    return run_tool(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if args.list_passes:
        from irtool.passes.manager import list_passes
        sys.stdout.write(format_pass_list(list_passes()))
        return EXIT_OK
    options = _options(args)
    check_output(args.output)
    check_output(args.memory_report_file)
    check_output(args.memory_timeline, binary=True)
    name, text = read_source(args.input)
    chunks = split_input(text) if args.split_input_file else [(text, 0)]
    outputs: list[str] = []
    failed = False
    for chunk, offset in chunks:
        if args.verify_diagnostics:
            expected, problems = verify_diagnostics.parse_expectations(chunk, name, offset)
        try:
            outputs.append(process(chunk, name, options, offset))
            produced = []
        except DiagnosticError as exc:
            produced = exc.diagnostics
        # The parser registered only the chunk; diagnostics quote lines of the whole file.
        SOURCES.add(name, text)
        if args.verify_diagnostics:
            problems += verify_diagnostics.check(expected, produced, name)
        else:
            problems = produced
        if problems:
            report(DiagnosticError(problems[0].message, diagnostics=problems), PROG)
            failed = True
    if failed:
        return EXIT_ERROR
    write_output(args.output, (SPLIT_MARKER + "\n").join(outputs))
    return EXIT_OK


def _options(args: argparse.Namespace) -> OptOptions:
    from irtool.passes.manager import check_pass_names
    check_pass_names(args.print_ir_before, "--print-ir-before")   # a misspelt name is an error even
    check_pass_names(args.print_ir_after, "--print-ir-after")     # when no pipeline runs
    passes: list[ModulePass] = []
    if args.pipeline:
        from irtool.passes.manager import parse_pipeline
        for pipeline in args.pipeline:
            passes.extend(parse_pipeline(pipeline))
    return OptOptions(
        verify=args.verify, print_types=args.print_types, passes=passes,
        verify_each=args.verify if args.verify_each is None else args.verify_each,
        print_ir_before=tuple(args.print_ir_before), print_ir_after=tuple(args.print_ir_after),
        print_ir_after_all=args.print_ir_after_all, timing=args.timing,
        memory_report=args.memory_report or ("text" if args.memory_report_file else None),
        memory_report_file=args.memory_report_file, memory_timeline=args.memory_timeline, target=args.target)


def format_pass_list(entries: Sequence[tuple[str, str, Sequence[PassOption]]]) -> str:
    """`--list-passes` text: each pass with its description, then its options with defaults."""
    from irtool.passes.manager import option_value_text as option_text
    if not entries:
        return "No passes are registered.\n"
    width = max(len(name) for name, _, _ in entries)
    lines = ["Available passes:"]
    for name, description, opts in entries:
        lines.append(f"  {name:<{width}}  {description}")
        for opt in opts:
            lines.append(f"  {'':<{width}}    {opt.name}={option_text(opt.default)}  ({opt.type})")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
