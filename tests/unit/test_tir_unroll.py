"""`unrolled` loops: schedules write register tiles with them, code generation expands them
(irtool/tir_transform/unroll.py) into the statements with constant indices that LLVM keeps in
registers; the printer breaks long statements so a kernel is lines of at most 120 columns."""

from __future__ import annotations

import numpy as np

from irtool.analysis.tir_verify import verify_primfunc
from irtool.eval.tir_interp import run_primfunc
from irtool.ir.tir import BufferLoad, BufferStore, For, IntImm, LetStmt, PrimFunc, Ramp
from irtool.ir.tir_equality import tir_structural_equal
from irtool.lower.schedules.dense import dense_tiled
from irtool.syntax.parser import parse_primfunc
from irtool.syntax.tir_layout import WIDTH
from irtool.syntax.tir_printer import print_primfunc
from irtool.tir_transform.mutator import stmt_parts, walk_exprs, walk_stmts
from irtool.tir_transform.unroll import expand_unrolled

COMPACT = """\
primfn @k(%A: Buffer[(4, 16), float32], %O: Buffer[(3, 16), float32]) {
  for %i in range(0, 2) {
    for %r in unrolled(0, 3) {
      for %c in unrolled(0, 2) {
        let %v: float32x8 = %A[%r, ramp(%c * 8, 1, 8)];
        %O[%r, ramp(%c * 8 + %i * 0, 1, 8)] = %v + broadcast(%A[%r + %c, %c], 8);
      }
    }
  }
}
"""

# The same kernel written out by hand: every index a literal (`%c * 8 + %i * 0` is `%i * 0` at
# c = 0 and `8 + %i * 0` at c = 1, the untouched `%i * 0` kept as written).
EXPANDED_STMT = """\
        let %v{n}: float32x8 = %A[{r}, ramp({off}, 1, 8)];
        %O[{r}, ramp({off_i}, 1, 8)] = %v{n} + broadcast(%A[{rc}, {c}], 8);
"""


def _expected() -> PrimFunc:
    stmts = []
    for r in range(3):
        for c in range(2):
            stmts.append(EXPANDED_STMT.format(n=f"{r}{c}", r=r, c=c, rc=r + c, off=8 * c,
                                              off_i="8 + %i * 0" if c else "%i * 0"))
    body = "".join(f"{{\n{s}}}\n" for s in stmts)   # braces end each `let`'s scope
    return parse_primfunc(
        "primfn @k(%A: Buffer[(4, 16), float32], %O: Buffer[(3, 16), float32]) {\n"
        f"  for %i in range(0, 2) {{\n{body}  }}\n}}\n", "expected.tir")


def test_expansion_substitutes_and_folds_each_iteration() -> None:
    compact = parse_primfunc(COMPACT, "compact.tir")
    expanded = expand_unrolled(compact)
    verify_primfunc(expanded)   # each copy binds its own `%v`
    assert tir_structural_equal(expanded, _expected())
    assert not any(isinstance(s, For) and s.kind == "unrolled" for s in walk_stmts(expanded.body))
    lets = [s for s in walk_stmts(expanded.body) if isinstance(s, LetStmt)]
    assert len({id(s.var) for s in lets}) == 6
    # Same values as the hand-written form, and the loop and its expansion compute the same.
    a = np.arange(64, dtype=np.float32).reshape(4, 16)
    outs = []
    for func in (compact, expanded, _expected()):
        out = np.zeros((3, 16), np.float32)
        run_primfunc(func, [a, out])
        outs.append(out)
    rows, cols = np.arange(3)[:, None], np.repeat(np.arange(2), 8)[None, :]
    expected = a[:3] + a[rows + cols, cols]
    for out in outs:
        np.testing.assert_array_equal(out, expected)


def test_expansion_gives_literal_offsets() -> None:
    expanded = expand_unrolled(parse_primfunc(COMPACT, "compact.tir"))
    loads = [e for s in walk_stmts(expanded.body) for e in walk_exprs(stmt_parts(s)[0]) if isinstance(e, BufferLoad)]
    assert sorted((ix[0].value, getattr(ix[1], "base", ix[1]).value) for ix in (ld.indices for ld in loads)) == \
        sorted([(r, 8 * c) for r in range(3) for c in range(2)] + [(r + c, c) for r in range(3) for c in range(2)])


def _accesses(func: PrimFunc, name: str) -> list[tuple]:
    out = []
    for s in walk_stmts(func.body):
        if isinstance(s, BufferStore) and s.buffer.name == name:
            out.append(s.indices)
        out += [e.indices for e in walk_exprs(stmt_parts(s)[0]) if isinstance(e, BufferLoad) and e.buffer.name == name]
    return out


def _literal(index: object) -> bool:
    if isinstance(index, Ramp):
        return isinstance(index.base, IntImm)
    return isinstance(index, IntImm)


def test_register_tile_is_compact_and_expands_to_constant_slots() -> None:
    """A 6 x 2 x 8 dense tile: the source indexes the accumulator with the unrolled loops' variables;
    the expansion, which codegen emits, only with literals (what keeps the tile in registers)."""
    from irtool.lower.schedules.tile import RegisterTile
    from irtool.lower.te import Builder, Placeholder
    from irtool.ir.tir import Buffer
    x, w, o = Buffer("x", (12, 20), "float32"), Buffer("w", (32, 20), "float32"), Buffer("out", (12, 32), "float32")
    sched = dense_tiled(Placeholder(x), Placeholder(w), "float32", tile=RegisterTile(8, 6))
    assert sched is not None
    func = PrimFunc((x, w, o), Builder().function_body([(sched, o)]), {})
    unrolled = [s for s in walk_stmts(func.body) if isinstance(s, For) and s.kind == "unrolled"]
    assert unrolled and any(not _literal(ix[0]) for ix in _accesses(func, "acc"))
    expanded = expand_unrolled(func)
    assert all(_literal(i) for ix in _accesses(expanded, "acc") for i in ix)
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((12, 20), np.float32), rng.standard_normal((32, 20), np.float32)
    for f in (func, expanded):
        out = np.zeros((12, 32), np.float32)
        run_primfunc(f, [xs, ws, out])
        np.testing.assert_allclose(out, xs @ ws.T, rtol=1e-5, atol=1e-5)


def test_long_statements_break_and_read_back() -> None:
    terms = " + ".join(f"%A[{i % 4}, {i % 8}]" for i in range(2000))   # a 2000-term chain
    text = ("primfn @k(%A: Buffer[(4, 8), float32], %O: Buffer[(4), float32]) {\n"
            f"  %O[0] = max({terms}, fma(%A[1, 1], %A[2, 2], %A[3, 3]));\n}}\n")
    func = parse_primfunc(text, "long.tir")
    printed = print_primfunc("k", func)
    lines = printed.splitlines()
    assert max(map(len, lines)) <= WIDTH and len(lines) > 2000 * 10 // WIDTH
    assert tir_structural_equal(parse_primfunc(printed, "printed.tir"), func)
    assert print_primfunc("k", parse_primfunc(printed, "printed.tir")) == printed


def test_deeply_nested_calls_print_without_deep_recursion() -> None:
    """3000 nested calls (a fused chain): the layout breaks the outer ones and prints the rest on
    one line, in a bounded number of frames; the text reads back the same."""
    import sys
    inner = "%A[0]"
    for i in range(3000):
        inner = f"max({inner}, %A[{i % 4}])"
    func = parse_primfunc("primfn @k(%A: Buffer[(4), float32], %O: Buffer[(4), float32]) {\n"
                          f"  %O[0] = {inner};\n}}\n", "deep.tir")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        printed = print_primfunc("k", func)
    finally:
        sys.setrecursionlimit(limit)
    assert len(printed.splitlines()) > 3
    assert tir_structural_equal(parse_primfunc(printed, "printed.tir"), func)
