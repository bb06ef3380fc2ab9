"""The parallel-loop dependence test and the marking codegen applies for more than one thread:
which loops are chosen (written out by hand for small kernels), which are refused and why."""

from __future__ import annotations

import numpy as np
import pytest

from irtool.driver import build_kernels
from irtool.ir.tir import For, PrimFunc
from irtool.passes import run
from irtool.runtime import aligned_empty
from irtool.syntax.parser import parse_module
from irtool.syntax.tir_printer import print_primfunc
from irtool.tir_transform.mutator import walk_stmts
from irtool.tir_transform.dependence import iterations_disjoint
from irtool.tir_transform.parallel import choose_parallel_loops, parallelize


def kernel(body: str, params: str = "%a: Buffer[(64, 32), float32], %out: Buffer[(64, 32), float32]") -> PrimFunc:
    text = f'#[version = "0.0.5"]\nprimfn @k({params}) {{\n{body}\n}}\n'
    func = parse_module(text, "k.tir").functions["k"]
    assert isinstance(func, PrimFunc)
    return func


def loop(func: PrimFunc, name: str) -> For:
    return next(s for s in walk_stmts(func.body) if isinstance(s, For) and s.var.name == name)


def parallel_names(func: PrimFunc) -> list[str]:
    return [s.var.name for s in walk_stmts(func.body) if isinstance(s, For) and s.kind == "parallel"]


ELEMENTWISE = """
  for %i in range(0, 64) {
    for %j in range(0, 32) {
      %out[%i, %j] = %a[%i, %j] * 2f;
    }
  }"""


def test_elementwise_outer_loop_is_chosen() -> None:
    func = kernel(ELEMENTWISE)
    assert iterations_disjoint(loop(func, "i")) is None
    assert iterations_disjoint(loop(func, "j")) is None
    assert parallel_names(parallelize(func, min_work=1)) == ["i"]   # the outermost one only


def test_a_reduction_over_the_loop_is_refused() -> None:
    func = kernel("""
  for %i in range(0, 64) {
    for %j in range(0, 32) {
      %out[0, %j] = %out[0, %j] + %a[%i, %j];
    }
  }""")
    assert "same elements of `%out`" in iterations_disjoint(loop(func, "i"))  # type: ignore[operator]
    assert iterations_disjoint(loop(func, "j")) is None
    # The outer loop is a reduction with 64 iterations: nothing inside it is started per iteration.
    assert parallel_names(parallelize(func, min_work=1)) == []


def test_a_full_sum_is_not_marked() -> None:
    func = kernel("""
  for %i in range(0, 64) {
    for %j in range(0, 32) {
      %s[] = %s[] + %a[%i, %j];
    }
  }""", "%a: Buffer[(64, 32), float32], %s: Buffer[(), float32]")
    assert parallel_names(parallelize(func, min_work=1)) == []


def test_a_local_accumulator_inside_the_loop_is_private() -> None:
    func = kernel("""
  for %i in range(0, 64) {
    allocate %acc: Buffer[(1), float32, scope="local"] {
      %acc[0] = 0f;
      for %j in range(0, 32) {
        %acc[0] = %acc[0] + %a[%i, %j];
      }
      %out[%i, 0] = %acc[0];
    }
  }""")
    assert parallel_names(parallelize(func, min_work=1)) == ["i"]


def test_a_shared_accumulator_outside_the_loop_is_refused() -> None:
    func = kernel("""
  allocate %acc: Buffer[(1), float32, scope="local"] {
    for %i in range(0, 64) {
      %acc[0] = %a[%i, 0];
      %out[%i, 0] = %acc[0] * 2f;
    }
  }""")
    assert "`%acc`" in iterations_disjoint(loop(func, "i"))  # type: ignore[operator]
    assert parallel_names(parallelize(func, min_work=1)) == []


def test_reading_a_neighbour_row_that_another_iteration_writes_is_refused() -> None:
    func = kernel("""
  for %i in range(0, 63) {
    for %j in range(0, 32) {
      %out[%i + 1, %j] = %out[%i, %j] + %a[%i, %j];
    }
  }""")
    assert iterations_disjoint(loop(func, "i")) is not None
    assert iterations_disjoint(loop(func, "j")) is None     # columns stay independent


def test_a_register_tile_storing_several_rows_per_iteration_is_chosen() -> None:
    # What the conv/dense schedules write: one iteration of %mo stores rows 4*mo .. 4*mo+3 with
    # vector lanes, from separate statements.
    func = kernel("""
  for %mo in range(0, 16) {
    for %no in range(0, 2) {
      %out[%mo * 4, ramp(%no * 16, 1, 16)] = %a[%mo * 4, ramp(%no * 16, 1, 16)];
      %out[%mo * 4 + 1, ramp(%no * 16, 1, 16)] = %a[%mo * 4 + 1, ramp(%no * 16, 1, 16)];
      %out[%mo * 4 + 3, ramp(%no * 16, 1, 16)] = %a[%mo * 4 + 3, ramp(%no * 16, 1, 16)];
    }
  }""")
    assert iterations_disjoint(loop(func, "mo")) is None
    assert iterations_disjoint(loop(func, "no")) is None     # separated by the lanes' column block


def test_overlapping_tiles_are_refused() -> None:
    # Rows 3*mo .. 3*mo+3: neighbouring iterations share a row.
    func = kernel("""
  for %mo in range(0, 16) {
    %out[%mo * 3, 0] = %a[0, 0];
    %out[%mo * 3 + 3, 0] = %a[0, 1];
  }""")
    assert iterations_disjoint(loop(func, "mo")) is not None


def test_a_flattened_pixel_index_counts_as_one_dimension() -> None:
    # floordiv(p, 32), floormod(p, 32) over the two dimensions of %out is the pixel p itself.
    func = kernel("""
  for %s in range(0, 64) {
    for %k in range(0, 32) {
      %out[floordiv(%s * 32 + %k, 32), floormod(%s * 32 + %k, 32)] = %a[0, %k];
    }
  }""")
    assert iterations_disjoint(loop(func, "s")) is None
    # A stride smaller than the tile: pixels of neighbouring iterations overlap.
    func = kernel("""
  for %s in range(0, 64) {
    for %k in range(0, 32) {
      %out[floordiv(%s * 16 + %k, 32), floormod(%s * 16 + %k, 32)] = %a[0, %k];
    }
  }""")
    assert iterations_disjoint(loop(func, "s")) is not None


def test_weight_packing_into_channel_blocks_is_chosen() -> None:
    # %p[floordiv(o, 16), k, floormod(o, 16)]: dimensions 0 and 2 together are o itself.
    func = kernel("""
  for %o in range(0, 64) {
    for %k in range(0, 32) {
      %p[floordiv(%o, 16), %k, floormod(%o, 16)] = %a[%o, %k];
    }
  }""", "%a: Buffer[(64, 32), float32], %p: Buffer[(4, 32, 16), float32]")
    assert iterations_disjoint(loop(func, "o")) is None
    assert iterations_disjoint(loop(func, "k")) is None
    # floordiv by 32 but floormod by 16: o = 0 and o = 16 store to the same element.
    func = kernel("""
  for %o in range(0, 64) {
    %p[floordiv(%o, 32), 0, floormod(%o, 16)] = %a[%o, 0];
  }""", "%a: Buffer[(64, 32), float32], %p: Buffer[(2, 32, 16), float32]")
    assert iterations_disjoint(loop(func, "o")) is not None


def test_a_data_dependent_index_is_refused() -> None:
    func = kernel("""
  for %i in range(0, 64) {
    %out[%idx[%i], 0] = %a[%i, 0];
  }""", "%a: Buffer[(64, 32), float32], %idx: Buffer[(64), int32], %out: Buffer[(64, 32), float32]")
    assert iterations_disjoint(loop(func, "i")) is not None


def test_one_iteration_loops_are_entered_and_nests_chosen_one_by_one() -> None:
    func = kernel("""
  for %n in range(0, 1) {
    for %c in range(0, 64) {
      %out[%c, 0] = %a[%c, 0];
    }
    for %r in range(0, 32) {
      %out[0, 0] = %out[0, 0] + %a[0, %r];
    }
    for %c2 in range(0, 32) {
      %out[1, %c2] = %a[1, %c2];
    }
  }""")
    assert sorted(parallel_names(parallelize(func, min_work=1))) == ["c", "c2"]


def test_one_iteration_loops_around_a_chosen_loop_become_their_value() -> None:
    # A batch of 1: the worker gets the index 0 itself, not a variable it knows nothing of.
    func = kernel("""
  for %n in range(0, 1) {
    for %c in range(0, 64) {
      %out[%n * 64 + %c, 0] = %a[%c, %n];
    }
  }""", "%a: Buffer[(64, 32), float32], %out: Buffer[(64, 32), float32]")
    marked = parallelize(func, min_work=1)
    assert parallel_names(marked) == ["c"]
    assert "%n" not in print_primfunc("k", marked) and "%out[0 * 64 + %c, 0] = %a[%c, 0]" in print_primfunc("k", marked)
    a = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    for f, threads in ((func, 1), (marked, 2)):
        out = aligned_empty((64, 32), np.float32)
        out[...] = 0
        lib = build_kernels(parse_module(f'#[version = "0.0.5"]\n{print_primfunc("k", f)}', "k.tir"), threads=threads)
        assert lib["k"](np.ascontiguousarray(a), out) == 0
        np.testing.assert_array_equal(out[:, 0], a[:, 0])


def test_small_nests_stay_serial() -> None:
    func = kernel(ELEMENTWISE)
    assert choose_parallel_loops(func, min_work=64 * 32) == {id(loop(func, "i"))}
    assert choose_parallel_loops(func, min_work=64 * 32 + 1) == set()


def test_kernels_with_a_parallel_loop_of_their_own_are_left_alone() -> None:
    func = kernel(ELEMENTWISE.replace("for %j in range(0, 32)", "for %j in parallel(0, 32)"))
    assert parallelize(func, min_work=1) is func


def test_vectorized_loops_are_never_marked() -> None:
    func = kernel("""
  for %i in vectorized(0, 64) {
    %out[%i, 0] = %a[%i, 0];
  }""")
    assert parallel_names(parallelize(func, min_work=1)) == []


@pytest.mark.parametrize("min_work", [1, 10**9])
def test_the_pass_marks_lowered_kernels(min_work: int) -> None:
    relay = """#[version = "0.0.5"]
def @main(%x: Tensor[(8, 64), float32], %y: Tensor[(8, 64), float32]) {
  (nn.relu(add(%x, %y)), sum(%x, axis=[1]), sum(%x))
}
"""
    mod = run(parse_module(relay, "m.relay"), f"fuse-ops,lower,tir-parallelize{{min-work={min_work}}}")
    marked = {name: parallel_names(f) for name, f in mod.functions.items() if isinstance(f, PrimFunc)}
    # relu(add) and the row sums have independent rows; the full sum reduces into one element.
    want = {"i0": 1} if min_work == 1 else {}
    assert {name: len(v) for name, v in marked.items()} == {"fused_add_nn_relu": len(want), "fused_sum": len(want),
                                                            "fused_sum_1": 0}


# Four row blocks of four channel blocks: rows 4*s+no of %out, from a main statement and, for
# the sibling case, a second loop over the same channel blocks writing the columns after them.
BLOCKS = """
  for %s in range(0, 4) {
    for %no in range(0, 4) {
      for %j in range(0, 8) {
        %out[%s * 4 + %no, %j] = %a[%s * 4 + %no, %j] * 2f + float32(%s);
      }
    }REMAINDER
  }"""
SIBLING = """
    for %no_1 in range(0, 4) {
      %out[%s * 4 + %no_1, 8] = float32(%no_1);
    }"""
BLOCK_PARAMS = "%a: Buffer[(16, 9), float32], %out: Buffer[(16, 9), float32]"


def _fused(func: PrimFunc) -> For:
    (fused,) = [s for s in walk_stmts(func.body) if isinstance(s, For) and s.kind == "parallel"]
    return fused


def _runs_like_numpy(func: PrimFunc, sibling: bool) -> None:
    """The marked kernel, compiled for 2 threads, computes the rows (and column 8) numpy does."""
    mod = parse_module(f'#[version = "0.0.5"]\nprimfn @k({BLOCK_PARAMS}) {{\n}}\n', "k.tir")
    mod.functions["k"] = func
    a = aligned_empty((16, 9), np.float32)
    a[...] = np.random.default_rng(3).standard_normal((16, 9))
    out = aligned_empty((16, 9), np.float32)
    out[...] = -1
    assert build_kernels(mod, 1, threads=2)["k"](a, out) == 0
    want = a * 2 + (np.arange(16) // 4)[:, None].astype(np.float32)
    want[:, 8] = np.tile(np.arange(4, dtype=np.float32), 4) if sibling else -1
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("threads, fused", [(1, "s"), (2, "s_no"), (4, "s_no"), (8, "s_no_j")])
def test_a_short_parallel_loop_is_fused_with_the_loops_inside(threads: int, fused: str) -> None:
    # 4 row blocks give 2 threads 2 chunks each: fused with the channel blocks (and for 8
    # threads with the columns too) until there are at least 4 iterations per thread.
    func = parallelize(kernel(BLOCKS.replace("REMAINDER", ""), BLOCK_PARAMS), min_work=1, threads=threads)
    loop = _fused(func)
    assert loop.var.name == fused
    assert loop.end.value == {"s": 4, "s_no": 16, "s_no_j": 128}[fused]  # type: ignore[attr-defined]
    if threads == 2:
        text = print_primfunc("k", func)
        assert "let %s: int32 = floordiv(%s_no, 4);" in text and "let %no: int32 = floormod(%s_no, 4);" in text
        _runs_like_numpy(func, sibling=False)


def test_sibling_loops_over_one_range_are_fused_as_one() -> None:
    func = parallelize(kernel(BLOCKS.replace("REMAINDER", SIBLING), BLOCK_PARAMS), min_work=1, threads=2)
    loop = _fused(func)
    assert loop.var.name == "s_no" and loop.end.value == 16  # type: ignore[attr-defined]
    text = print_primfunc("k", func)
    assert "let %no_1: int32 = %no_2;" in text or "let %no_1: int32 = %no" in text
    _runs_like_numpy(func, sibling=True)


@pytest.mark.parametrize("inner", [
    # a reduction over the inner loop: its iterations are not disjoint
    "for %r in range(0, 8) { %out[%s, 0] = %out[%s, 0] + %a[%s, %r]; }",
    # siblings over different ranges
    "for %j in range(0, 8) { %out[%s, %j] = %a[%s, %j]; } for %k in range(0, 4) { %out[%s, %k] = 0f; }",
    # not directly inside: a statement between
    "%out[%s, 8] = 0f; for %j in range(0, 8) { %out[%s, %j] = %a[%s, %j]; }",
])
def test_fusion_stops_where_the_inner_loops_do_not_qualify(inner: str) -> None:
    func = parallelize(kernel(f"for %s in range(0, 2) {{ {inner} }}", BLOCK_PARAMS), min_work=1, threads=2)
    assert parallel_names(func) == ["s"]
