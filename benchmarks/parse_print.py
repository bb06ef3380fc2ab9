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
    out = [f'"func.func"() ({{', f"^bb0({', '.join(args)}):"]
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


def timed(fn: Callable[[], object], repeat: int = 1) -> tuple[float, object]:
    """Best wall time of `repeat` runs (the machine is shared; the best run is the least disturbed)."""
    best = float("inf")
    result: object = None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def xdsl_parse_seconds(text: str) -> float | None:
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
    seconds, _ = timed(lambda: Parser(ctx, text).parse_module())
    return seconds


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
    parse_s, mod = timed(lambda: parse(text, "model.relay"), repeat)
    print_s, printed = timed(lambda: print_program(mod), repeat)   # type: ignore[arg-type]
    parse_rate = n_lines / parse_s
    print(f"model ({n_lines} lines): parse {parse_s:.3f} s = {parse_rate:,.0f} lines/s; "
          f"print {print_s:.3f} s = {str(printed).count(chr(10)) / print_s:,.0f} lines/s")

    mlir = mlir_text(lines - 1)
    xdsl_s = xdsl_parse_seconds(mlir)
    if xdsl_s is None:
        print("xDSL: not installed (pip install xdsl) - comparison skipped")
    else:
        xdsl_rate = mlir.count("\n") / xdsl_s
        print(f"xDSL ({mlir.count(chr(10))} lines, same op count): parse {xdsl_s:.3f} s = {xdsl_rate:,.0f} lines/s; "
              f"irtool/xDSL = {parse_rate / xdsl_rate:.2f}x (target >= 3x)")

    for name, make in (("let chain", let_chain), ("graph chain", graph_chain)):
        chain_text = make(chain)
        p_s, chain_mod = timed(lambda: parse(chain_text, name))
        q_s, _ = timed(lambda: print_program(chain_mod))   # type: ignore[arg-type]
        print(f"{name} ({chain:,} nodes): parse {p_s:.2f} s, print {q_s:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
