"""The TIR interpreter on hand-written kernels, checked against numpy computed independently."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from irtool.eval.tir_interp import INTRINSIC_IMPLS, compile_primfunc, run_primfunc
from irtool.ir.tir import INTRINSICS
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse_primfunc

RNG = np.random.default_rng(7)


def run(text: str, *buffers: np.ndarray) -> None:
    run_primfunc(parse_primfunc(text, "kernel.tir"), list(buffers))


def test_elementwise_add() -> None:
    a = RNG.standard_normal((3, 5)).astype(np.float32)
    b = RNG.standard_normal((3, 5)).astype(np.float32)
    c = np.zeros((3, 5), np.float32)
    run("""primfn @add(%a: Buffer[(3, 5), float32], %b: Buffer[(3, 5), float32], %c: Buffer[(3, 5), float32]) {
  for %i in parallel(0, 3) {
    for %j in range(0, 5) {
      %c[%i, %j] = %a[%i, %j] + %b[%i, %j];
    }
  }
}""", a, b, c)
    np.testing.assert_array_equal(c, a + b)


MATMUL = """primfn @matmul(%A: Buffer[(4, 6), float32], %B: Buffer[(6, 8), float32], %C: Buffer[(4, 8), float32]) {
  for %i in range(0, 4) {
    allocate %acc: Buffer[(8), float32, scope="local"] {
      for %j in range(0, 8) {
        %acc[%j] = 0f;
      }
      for %k in range(0, 6) {
        for %j in unrolled(0, 8) {
          %acc[%j] = %acc[%j] + %A[%i, %k] * %B[%k, %j];
        }
      }
      for %j in range(0, 8) {
        %C[%i, %j] = %acc[%j];
      }
    }
  }
}"""


def test_matmul_with_a_local_accumulator() -> None:
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    b = RNG.standard_normal((6, 8)).astype(np.float32)
    c = np.full((4, 8), 99, np.float32)
    run(MATMUL, a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)
    # Bit-exact against the same float32 summation order done by numpy one k at a time.
    expected = np.zeros((4, 8), np.float32)
    for k in range(6):
        expected = expected + a[:, k:k + 1] * b[k]
    np.testing.assert_array_equal(c, expected)


def test_matmul_with_a_vector_register_tile() -> None:
    # C = A @ B with a 2x2 tile of float32x4 accumulators (2 rows x 8 columns): per k, two
    # broadcasts of A and two vector loads of B feed four fma's, as scheduled code does.
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    b = RNG.standard_normal((6, 8)).astype(np.float32)
    c = np.zeros((4, 8), np.float32)
    run("""primfn @tile(%A: Buffer[(4, 6), float32], %B: Buffer[(6, 8), float32], %C: Buffer[(4, 8), float32]) {
  for %io in range(0, 2) {
    allocate %acc: Buffer[(2, 2), float32x4, scope="local"] {
      for %r in unrolled(0, 2) {
        for %v in unrolled(0, 2) {
          %acc[%r, %v] = broadcast(0f, 4);
        }
      }
      for %k in range(0, 6) {
        for %r in unrolled(0, 2) {
          let %a: float32x4 = broadcast(%A[%io * 2 + %r, %k], 4);
          for %v in unrolled(0, 2) {
            %acc[%r, %v] = fma(%a, %B[%k, ramp(%v * 4, 1, 4)], %acc[%r, %v]);
          }
        }
      }
      for %r in range(0, 2) {
        for %v in vectorized(0, 2) {
          %C[%io * 2 + %r, ramp(%v * 4, 1, 4)] = %acc[%r, %v];
        }
      }
    }
  }
}""", a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_compiled_function_runs_repeatedly() -> None:
    kernel = compile_primfunc(parse_primfunc(MATMUL, "kernel.tir"), "matmul")
    for _ in range(2):
        a = RNG.standard_normal((4, 6)).astype(np.float32)
        b = RNG.standard_normal((6, 8)).astype(np.float32)
        c = np.zeros((4, 8), np.float32)
        kernel([a, b, c])
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_conv2d_with_padding_as_a_guarded_loop_nest() -> None:
    # NCHW 1x2x5x5, OIHW 3x2x3x3, padding 1, stride 1; out-of-image taps are skipped by an `if`.
    x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    y = np.zeros((1, 3, 5, 5), np.float32)
    run("""primfn @conv(%x: Buffer[(1, 2, 5, 5), float32], %w: Buffer[(3, 2, 3, 3), float32], %y: Buffer[(1, 3, 5, 5), float32]) {
  for %oc in range(0, 3) {
    for %oh in range(0, 5) {
      for %ow in range(0, 5) {
        allocate %sum: Buffer[(), float32, scope="local"] {
          %sum[] = 0f;
          for %ic in range(0, 2) {
            for %kh in range(0, 3) {
              for %kw in range(0, 3) {
                let %ih: int32 = %oh + %kh - 1;
                let %iw: int32 = %ow + %kw - 1;
                if (and(and(0 <= %ih, %ih < 5), and(0 <= %iw, %iw < 5))) {
                  %sum[] = %sum[] + %x[0, %ic, %ih, %iw] * %w[%oc, %ic, %kh, %kw];
                }
              }
            }
          }
          %y[0, %oc, %oh, %ow] = max(%sum[], 0f);
        }
      }
    }
  }
}""", x, w, y)
    padded = np.pad(x[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    expected = np.zeros((3, 5, 5))
    for oc in range(3):
        for oh in range(5):
            for ow in range(5):
                expected[oc, oh, ow] = np.sum(padded[:, oh:oh + 3, ow:ow + 3] * w[oc])
    np.testing.assert_allclose(y[0], np.maximum(expected, 0), rtol=1e-5, atol=1e-5)


def test_if_then_else_guards_out_of_bounds_loads_and_select_does_not() -> None:
    # 1-d padding by 2 inlined into the consumer: only the chosen side of if_then_else runs.
    x = RNG.standard_normal(4).astype(np.float32)
    y = np.zeros(8, np.float32)
    text = """primfn @pad(%x: Buffer[(4), float32], %y: Buffer[(8), float32]) {
  for %i in range(0, 8) {
    %y[%i] = CHOICE(and(2 <= %i, %i < 6), %x[%i - 2], -1f);
  }
}"""
    run(text.replace("CHOICE", "if_then_else"), x, y)
    np.testing.assert_array_equal(y, np.pad(x, 2, constant_values=-1))
    with pytest.raises(DiagnosticError, match="index -2 is out of bounds for dimension 0 of `%x`"):
        run(text.replace("CHOICE", "select"), x, y)


def test_vectorized_loop_with_ramp_and_broadcast() -> None:
    # relu(a * b + c) on 16 elements, 4 lanes at a time; c is a scalar broadcast to every lane.
    a = RNG.standard_normal(16).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    c = np.array([0.25], np.float32)
    out = np.zeros(16, np.float32)
    run("""primfn @fma_relu(%a: Buffer[(16), float32], %b: Buffer[(16), float32], %c: Buffer[(1), float32], %out: Buffer[(16), float32]) {
  for %v in vectorized(0, 4) {
    let %lanes: int32x4 = ramp(%v * 4, 1, 4);
    %out[%lanes] = max(%a[%lanes] * %b[%lanes] + broadcast(%c[0], 4), broadcast(0f, 4));
  }
}""", a, b, c, out)
    np.testing.assert_array_equal(out, np.maximum(a * b + c[0], np.float32(0)))


def test_strided_ramp_and_vector_dtype_buffers() -> None:
    # Gather the even elements into a float32x4 buffer (numpy: a trailing axis of 4 lanes).
    a = np.arange(16, dtype=np.float32)
    packed = np.zeros((2, 4), np.float32)
    run("""primfn @pack(%a: Buffer[(16), float32], %p: Buffer[(2), float32x4]) {
  for %k in range(0, 2) {
    %p[%k] = %a[ramp(%k * 8, 2, 4)];
  }
}""", a, packed)
    np.testing.assert_array_equal(packed, [[0, 2, 4, 6], [8, 10, 12, 14]])


def test_integer_division_truncates_and_floordiv_floors() -> None:
    # (-2**31, 2) is a regression: truncation through abs() wrapped INT_MIN to a positive result.
    pairs = [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-1, 5), (-2**31, 2), (-2**31, 7)]
    a = np.array([p[0] for p in pairs], np.int32)
    b = np.array([p[1] for p in pairs], np.int32)
    out = np.zeros((3, len(pairs)), np.int32)
    run(f"""primfn @div(%a: Buffer[({len(pairs)}), int32], %b: Buffer[({len(pairs)}), int32], %out: Buffer[(3, {len(pairs)}), int32]) {{
  for %i in range(0, {len(pairs)}) {{
    %out[0, %i] = %a[%i] / %b[%i];
    %out[1, %i] = floordiv(%a[%i], %b[%i]);
    %out[2, %i] = floormod(%a[%i], %b[%i]);
  }}
}}""", a, b, out)
    assert out[0].tolist() == [math.trunc(x / y) for x, y in pairs]
    assert out[1].tolist() == [math.floor(x / y) for x, y in pairs]
    assert out[2].tolist() == [x - y * math.floor(x / y) for x, y in pairs]


def test_vector_integer_division() -> None:
    a = np.array([-7, 7, -8, 9], np.int32)
    out = np.zeros((2, 4), np.int32)
    run("""primfn @vdiv(%a: Buffer[(4), int32], %out: Buffer[(2, 4), int32]) {
  %out[0, ramp(0, 1, 4)] = %a[ramp(0, 1, 4)] / broadcast(-2, 4);
  %out[1, ramp(0, 1, 4)] = floordiv(%a[ramp(0, 1, 4)], broadcast(-2, 4));
}""", a, out)
    assert out.tolist() == [[3, -3, 4, -4], [3, -4, 4, -5]]


def test_float32_arithmetic_rounds_to_float32_and_ints_wrap() -> None:
    out = np.zeros(2, np.float64)
    ints = np.zeros(1, np.int32)
    run("""primfn @k(%out: Buffer[(2), float64], %ints: Buffer[(1), int32]) {
  %out[0] = float64(1f / 3f);
  %out[1] = 1f64 / 3f64;
  %ints[0] = 2147483647 + 1;
}""", out, ints)
    assert out[0] == float(np.float32(1) / np.float32(3)) and out[0] != 1 / 3
    assert out[1] == 1 / 3
    assert ints[0] == -2**31


def test_let_if_select_and_casts() -> None:
    a = np.array([-2.5, -0.5, 0.5, 3.75], np.float32)
    out = np.zeros((3, 4), np.int32)
    run("""primfn @k(%a: Buffer[(4), float32], %out: Buffer[(3, 4), int32]) {
  for %i in range(0, 4) {
    let %x: float32 = %a[%i];
    if (%x < 0f) {
      %out[0, %i] = -1;
    } else {
      %out[0, %i] = 1;
    }
    %out[1, %i] = int32(%x);
    %out[2, %i] = select(not(%x > 0f), int32(floor(%x)), int32(ceil(%x)));
  }
}""", a, out)
    assert out.tolist() == [[-1, -1, 1, 1], [-2, 0, 0, 3], [-3, -1, 1, 4]]


def test_scratch_memory_starts_as_nan() -> None:
    out = np.zeros(2, np.float32)
    run("""primfn @k(%out: Buffer[(2), float32]) {
  allocate %t: Buffer[(2), float32] {
    %t[0] = 1f;
    %out[0] = %t[0];
    %out[1] = %t[1];
  }
}""", out)
    assert out[0] == 1 and np.isnan(out[1])


INTRINSIC_REFERENCES = {
    "exp": math.exp, "exp2": lambda x: 2.0 ** x, "log": math.log, "log2": math.log2, "log10": math.log10,
    "sqrt": math.sqrt, "rsqrt": lambda x: 1 / math.sqrt(x), "tanh": math.tanh,
    "sigmoid": lambda x: 1 / (1 + math.exp(-x)), "erf": math.erf, "fabs": abs, "floor": math.floor,
    "ceil": math.ceil, "round": round, "trunc": math.trunc, "sin": math.sin, "cos": math.cos, "tan": math.tan,
    "asin": math.asin, "acos": math.acos, "atan": math.atan, "sinh": math.sinh, "cosh": math.cosh,
    "asinh": math.asinh, "acosh": math.acosh, "atanh": math.atanh, "pow": math.pow, "fmod": math.fmod,
    "fma": lambda a, b, c: a * b + c,
}
# Arguments inside the domain of the functions that are not defined on the default ones.
INTRINSIC_ARGUMENTS = {"asin": [0.5, -0.25, 0.75, 0.125], "acos": [0.5, -0.25, 0.75, 0.125],
                       "atanh": [0.5, -0.25, 0.75, 0.125], "acosh": [1.5, 1.25, 2.5, 3.0]}


def test_every_intrinsic_has_an_implementation_and_a_reference() -> None:
    assert set(INTRINSIC_IMPLS) == set(INTRINSICS) == set(INTRINSIC_REFERENCES)


@pytest.mark.parametrize("name", sorted(INTRINSICS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_intrinsics_match_math(name: str, dtype: str) -> None:
    values = np.array(INTRINSIC_ARGUMENTS.get(name, [0.5, 1.25, 2.5, 3.0]), dtype)   # 2.5: round-half-to-even
    arity = INTRINSICS[name]
    args = ", ".join(["%a[%i]"] * arity)
    vec_args = ", ".join(["%a[ramp(0, 1, 4)]"] * arity)
    out = np.zeros((2, 4), dtype)
    run(f"""primfn @k(%a: Buffer[(4), {dtype}], %out: Buffer[(2, 4), {dtype}]) {{
  for %i in range(0, 4) {{
    %out[0, %i] = {name}({args});
  }}
  %out[1, ramp(0, 1, 4)] = {name}({vec_args});
}}""", values, out)
    expected = [INTRINSIC_REFERENCES[name](*[float(v)] * arity) for v in values]
    rtol = 1e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(out[0], expected, rtol=rtol)
    np.testing.assert_array_equal(out[1], out[0])
    assert out.dtype == np.dtype(dtype)


@pytest.mark.parametrize(("body", "message", "line", "col"), [
    ("%a[%n] = 0f;", "index 4 is out of bounds for dimension 0 of `%a` (extent 4)", 3, 3),
    ("%a[0] = %a[%n - 5];", "index -1 is out of bounds for dimension 0 of `%a` (extent 4)", 3, 11),
    ("%a[ramp(0, 2, 4)] = broadcast(0f, 4);", "index 4 is out of bounds", 3, 3),
    ("%a[0] = float32(%n / (%n - 4));", "integer division by zero", 3, 19),
    ("%a[0] = float32(floormod(%n, 0));", "integer division by zero", 3, 19),
    ("assert(%n < 4, \"n must be below 4\");", "n must be below 4", 3, 3),
])
def test_runtime_errors_are_located(body: str, message: str, line: int, col: int) -> None:
    text = f"primfn @k(%a: Buffer[(4), float32]) {{\n  let %n: int32 = 4;\n  {body}\n}}\n"
    with pytest.raises(DiagnosticError) as info:
        run(text, np.zeros(4, np.float32))
    assert message in str(info.value)
    span = info.value.span
    assert (span.source, span.line, span.col) == ("kernel.tir", line, col)


@pytest.mark.parametrize("loop", ["range(0, 5)", "range(-1, 4)", "range(1, %n + 1)"])
def test_loops_that_leave_the_buffer_are_caught(loop: str) -> None:
    text = f"primfn @k(%a: Buffer[(4), float32]) {{\n  let %n: int32 = 4;\n  for %i in {loop} {{\n    %a[%i] = 1f;\n  }}\n}}\n"
    with pytest.raises(DiagnosticError, match="out of bounds for dimension 0 of `%a`") as info:
        run(text, np.zeros(4, np.float32))
    assert info.value.span.line == 4


def test_arguments_are_checked() -> None:
    func = parse_primfunc("primfn @k(%a: Buffer[(4), float32]) {\n}\n", "kernel.tir")
    with pytest.raises(DiagnosticError, match="takes 1 buffer"):
        run_primfunc(func, [])
    with pytest.raises(DiagnosticError, match=r"`%a` needs a float32 array of shape \(4,\), got a float64 array"):
        run_primfunc(func, [np.zeros(4)])
    with pytest.raises(DiagnosticError, match="read-only"):
        frozen = np.zeros(4, np.float32)
        frozen.flags.writeable = False
        run_primfunc(func, [frozen])


def test_dtypes_without_a_numpy_type_are_reported() -> None:
    func = parse_primfunc("primfn @k(%a: Buffer[(4), bfloat16]) {\n}\n", "kernel.tir")
    with pytest.raises(DiagnosticError, match="no numpy type for bfloat16") as info:
        run_primfunc(func, [np.zeros(4, np.float32)])
    assert info.value.span.line == 1


def test_ill_typed_functions_are_rejected_before_running() -> None:
    func = parse_primfunc("primfn @k(%a: Buffer[(4), float32]) {\n  %a[0] = 1;\n}\n", "kernel.tir")
    with pytest.raises(DiagnosticError, match="storing a int32 value"):
        run_primfunc(func, [np.zeros(4, np.float32)])


def test_long_let_chains_do_not_recurse() -> None:
    lets = "".join(f"  let %x{i}: int32 = %x{i - 1} + 1;\n" for i in range(1, 3000))
    out = np.zeros(1, np.int32)
    run(f"primfn @k(%out: Buffer[(1), int32]) {{\n  let %x0: int32 = 0;\n{lets}  %out[0] = %x2999;\n}}\n", out)
    assert out[0] == 2999


# ---- random elementwise kernels: scalar and vectorized TIR against numpy on whole arrays ----------

_EXACT_BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "min": np.minimum,
                 "max": np.maximum}

_leaves = st.sampled_from(["a", "b"]) | st.floats(-4, 4, width=32).map(lambda v: ("lit", v))


def _trees(leaves: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(leaves, lambda sub: st.one_of(
        st.tuples(st.sampled_from(sorted(_EXACT_BINARY)), sub, sub),
        st.tuples(st.just("fabs"), sub),
        st.tuples(st.just("select<"), sub, sub, sub, sub)), max_leaves=12)


def _text(tree: object, vector: bool) -> str:
    """The tree as a TIR expression over `%a[idx]`, `%b[idx]` (lanes of 4 when `vector`)."""
    index = "ramp(%v * 4, 1, 4)" if vector else "%i"
    if tree in ("a", "b"):
        return f"%{tree}[{index}]"
    op, *args = tree  # type: ignore[misc]
    if op == "lit":
        text = f"{np.format_float_scientific(np.float32(args[0]), unique=True)}f"
        return f"broadcast({text}, 4)" if vector else text
    parts = [_text(arg, vector) for arg in args]
    if op in ("+", "-", "*", "/"):
        return f"({parts[0]} {op} {parts[1]})"
    if op == "select<":
        return f"select({parts[0]} < {parts[1]}, {parts[2]}, {parts[3]})"
    return f"{op}({', '.join(parts)})"


def _numpy(tree: object, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if tree == "a":
        return a
    if tree == "b":
        return b
    op, *args = tree  # type: ignore[misc]
    if op == "lit":
        return np.full(a.shape, np.float32(args[0]))
    vals = [_numpy(arg, a, b) for arg in args]
    if op == "fabs":
        return np.abs(vals[0])
    if op == "select<":
        return np.where(vals[0] < vals[1], vals[2], vals[3])
    return _EXACT_BINARY[op](vals[0], vals[1])


@settings()
@given(_trees(_leaves), st.lists(st.floats(-8, 8, width=32), min_size=16, max_size=16),
       st.lists(st.floats(-8, 8, width=32), min_size=16, max_size=16))
def test_random_elementwise_kernels_match_numpy(tree: object, a_values: list[float], b_values: list[float]) -> None:
    a = np.array(a_values, np.float32)
    b = np.array(b_values, np.float32)
    out = np.zeros((2, 16), np.float32)
    run(f"""primfn @k(%a: Buffer[(16), float32], %b: Buffer[(16), float32], %out: Buffer[(2, 16), float32]) {{
  for %i in range(0, 16) {{
    %out[0, %i] = {_text(tree, False)};
  }}
  for %v in vectorized(0, 4) {{
    %out[1, ramp(%v * 4, 1, 4)] = {_text(tree, True)};
  }}
}}""", a, b, out)
    with np.errstate(all="ignore"):
        expected = _numpy(tree, a, b)
    np.testing.assert_array_equal(out[0], expected)
    np.testing.assert_array_equal(out[1], expected)
