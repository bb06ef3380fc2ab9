"""Parse and print throughput of the Relay text format, against xDSL parsing MLIR.

Measures, on generated model-like programs:
  * parse and print lines/s of a module of N lines (default 100,000) of conv2d/add/relu-like
    `%N = op(...) /* ty=... */;` lines with attributes and types (as TVM prints a network);
  * xDSL (if installed: `pip install xdsl`) parsing an MLIR module with the same op count;
  * parse and print time of a 1,000,000-node `let` chain and a 1,000,000-node `%N` graph chain
    (both run at the default recursion limit).
Targets (issue 2): parse >= 3x xDSL's lines/s, print >= 250k lines/s.

    python benchmarks/parse_print.py            # full run
    python benchmarks/parse_print.py --quick    # 20k lines, 100k-node chains
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
import time
from collections.abc import Callable

from irtool.syntax.parser import parse
from irtool.syntax.printer import print_program

TY = "Tensor[(1, 64, 56, 56), float32]"
WEIGHTS = 8


def model_text(lines: int) -> str:
    """A `def @main` of `lines` body lines: conv2d, bias add, relu, repeated (a ResNet-like chain)."""
    params = ["%data: " + TY]
    params += [f"%w{i}: Tensor[(64, 64, 3, 3), float32]" for i in range(WEIGHTS)]
    params += [f"%b{i}: Tensor[(1, 64, 1, 1), float32]" for i in range(WEIGHTS)]
    out = ['#[version = "0.0.5"]', f"def @main({', '.join(params)}) -> {TY} {{"]
    prev = "%data"
    for n in range(lines - 1):
        k = (n // 3) % WEIGHTS
        if n % 3 == 0:
            rhs = (f"nn.conv2d({prev}, %w{k}, padding=[1, 1, 1, 1], channels=64, kernel_size=[3, 3])"
                   f" /* ty={TY} */")
        elif n % 3 == 1:
            rhs = f"add({prev}, %b{k}) /* ty={TY} */"
        else:
            rhs = f"nn.relu({prev}) /* ty={TY} */"
        out.append(f"  %{n} = {rhs};")
        prev = f"%{n}"
    out.append(f"  {prev}")
    out.append("}")
    return "\n".join(out) + "\n"


def mlir_text(ops: int) -> str:
    """The same dataflow as MLIR generic ops (xDSL parses unregistered ops in generic form)."""
    tensor = "tensor<1x64x56x56xf32>"
    weight = "tensor<64x64x3x3xf32>"
    bias = "tensor<1x64x1x1xf32>"
    args = [f"%data: {tensor}"] + [f"%w{i}: {weight}" for i in range(WEIGHTS)] + \
           [f"%b{i}: {bias}" for i in range(WEIGHTS)]
    out = ['"func.func"() ({', f"^bb0({', '.join(args)}):"]
    prev = "%data"
    for n in range(ops):
        k = (n // 3) % WEIGHTS
        if n % 3 == 0:
            op = (f'"nn.conv2d"({prev}, %w{k}) {{padding = [1, 1, 1, 1], channels = 64 : i64, '
                  f'kernel_size = [3, 3]}} : ({tensor}, {weight}) -> {tensor}')
        elif n % 3 == 1:
            op = f'"nn.add"({prev}, %b{k}) : ({tensor}, {bias}) -> {tensor}'
        else:
            op = f'"nn.relu"({prev}) : ({tensor}) -> {tensor}'
        out.append(f"  %{n} = {op}")
        prev = f"%{n}"
    out.append(f'  "func.return"({prev}) : ({tensor}) -> ()')
    fn_type = f"({', '.join([tensor] + [weight] * WEIGHTS + [bias] * WEIGHTS)}) -> {tensor}"
    out.append(f'}}) {{sym_name = "main", function_type = {fn_type}}} : () -> ()')
    return "\n".join(out) + "\n"


def let_chain(n: int) -> str:
    lines = ['#[version = "0.0.5"]', "def @main(%x: float32) -> float32 {", "  let %v0 = %x;"]
    lines += [f"  let %v{i} = add(%v{i - 1}, 1f);" for i in range(1, n)]
    lines += [f"  %v{n - 1}", "}"]
    return "\n".join(lines) + "\n"


def graph_chain(n: int) -> str:
    lines = ['#[version = "0.0.5"]', "def @main(%x: float32) -> float32 {", "  %0 = add(%x, 1f);"]
    lines += [f"  %{i} = add(%{i - 1}, 1f);" for i in range(1, n)]
    lines += [f"  %{n - 1}", "}"]
    return "\n".join(lines) + "\n"


class Timing:
    """Best wall and CPU seconds over the runs (the machine may be shared: CPU time is the
    steadier figure when other processes compete for the cores)."""

    def __init__(self) -> None:
        self.wall = float("inf")
        self.cpu = float("inf")

    def rates(self, lines: int) -> str:
        return f"{lines / self.wall:,.0f} lines/s wall, {lines / self.cpu:,.0f} lines/s CPU"


def timed(fn: Callable[[], object], repeat: int = 1) -> tuple[Timing, object]:
    timing = Timing()
    result: object = None
    for _ in range(repeat):
        gc.collect()
        w0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        timing.wall = min(timing.wall, time.perf_counter() - w0)
        timing.cpu = min(timing.cpu, time.process_time() - c0)
    return timing, result


def xdsl_parse(text: str) -> Timing | None:
    try:
        from xdsl.context import Context
        from xdsl.dialects.builtin import Builtin
        from xdsl.parser import Parser
    except ImportError:
        try:   # older xDSL releases
            from xdsl.dialects.builtin import Builtin
            from xdsl.ir import MLContext as Context
            from xdsl.parser import Parser
        except ImportError:
            return None
    ctx = Context(allow_unregistered=True)
    ctx.load_dialect(Builtin)
    timing, _ = timed(lambda: Parser(ctx, text).parse_module())
    return timing


def rough_tokens(text: str) -> int:
    """An approximate token count (identifiers, sigiled names, numbers, punctuation)."""
    return len(re.findall(r"[%@^]?[A-Za-z_][\w.]*|%\d+|\d+|\S", text))


def lark_tree_parse(text: str) -> Timing:
    """Stock Lark (LALR, its own lexer, building a parse tree) on the same grammar: the baseline
    irtool's table-driven engine replaces. Whitespace/comment skipping is added for Lark's lexer."""
    import lark

    from irtool.grammar import grammar_text
    grammar = grammar_text("relay") + "\n%ignore /[ \\t\\r\\n]+/\n%ignore /\\/\\*(.|\\n)*?\\*\\//\n"
    parser = lark.Lark(grammar, parser="lalr", lexer="basic", start="module")
    timing, _ = timed(lambda: parser.parse(text))
    return timing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes for a fast check")
    ap.add_argument("--lines", type=int, help="lines in the model-like module (default 100000)")
    ap.add_argument("--chain", type=int, help="nodes in the let/graph chains (default 1000000)")
    opts = ap.parse_args(argv)
    lines = opts.lines or (20_000 if opts.quick else 100_000)
    chain = opts.chain or (100_000 if opts.quick else 1_000_000)
    repeat = 1 if opts.quick else 3
    print(f"Python {sys.version.split()[0]}, recursion limit {sys.getrecursionlimit()}")

    text = model_text(lines)
    n_lines = text.count("\n")
    parse("def @warm(%x: float32) { add(%x, %x) }")   # load the grammar table and op registry
    parse_t, mod = timed(lambda: parse(text, "model.relay"), repeat)
    print_t, printed = timed(lambda: print_program(mod), repeat)   # type: ignore[arg-type]
    print(f"irtool parse, model of {n_lines} lines: {parse_t.rates(n_lines)}")
    print(f"irtool print, model ({str(printed).count(chr(10))} lines out): "
          f"{print_t.rates(str(printed).count(chr(10)))}")

    lark_t = lark_tree_parse(text)
    print(f"stock Lark tree parse, same text and grammar: {lark_t.rates(n_lines)}; "
          f"irtool is {lark_t.cpu / parse_t.cpu:.1f}x faster (CPU)")

    mlir = mlir_text(lines - 1)
    xdsl = xdsl_parse(mlir)
    if xdsl is None:
        print("xDSL: not installed (pip install xdsl) - comparison skipped")
    else:
        m_lines = mlir.count("\n")
        print(f"xDSL parse, MLIR of {m_lines} lines (same op count): {xdsl.rates(m_lines)}")
        print(f"irtool / xDSL lines/s: {(n_lines / parse_t.wall) / (m_lines / xdsl.wall):.1f}x wall, "
              f"{(n_lines / parse_t.cpu) / (m_lines / xdsl.cpu):.1f}x CPU (target >= 3x)")
        # MLIR spells every operand and result type, Relay lines are shorter: per token too.
        relay_tokens, mlir_tokens = rough_tokens(re.sub(r"/\*.*?\*/", "", text)), rough_tokens(mlir)
        print(f"  per token: irtool {relay_tokens / parse_t.cpu:,.0f}/s CPU ({relay_tokens / n_lines:.0f} per line), "
              f"xDSL {mlir_tokens / xdsl.cpu:,.0f}/s CPU ({mlir_tokens / m_lines:.0f} per line)")

    for name, make in (("let chain", let_chain), ("graph chain", graph_chain)):
        chain_text = make(chain)
        p_t, chain_mod = timed(lambda text=chain_text, source=name: parse(text, source))
        q_t, _ = timed(lambda prog=chain_mod: print_program(prog))   # type: ignore[misc]
        print(f"{name} ({chain:,} nodes): parse {p_t.wall:.2f} s wall / {p_t.cpu:.2f} s CPU, "
              f"print {q_t.wall:.2f} s wall / {q_t.cpu:.2f} s CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
