"""Per-step outputs of native loops (issue 15): each step writes its row once, in place when the
loop owns the stacked buffer (irtool/codegen/in_place.py), and a loop's captured dense weight is
bound packed (passes/alter_layout.py). Checked on the lowered module, the TIR interpreter and the
generated LLVM IR, which do not depend on the host, and against the interpreter and onnxruntime."""

from __future__ import annotations

import re

import numpy as np
import pytest

import irtool
from irtool.codegen.entry import generate_module
from irtool.driver import prepare
from irtool.eval.interpreter import flatten_value, run_function
from irtool.eval.tir_interp import run_primfunc
from irtool.ir.expr import Call, Expr, Function, GlobalVar, If, Let, Op
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.ir.visitor import post_order
from irtool.passes import run
from irtool.syntax.parser import parse
from irtool.target import TargetOptions

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

from irtool.frontend.onnx import import_model  # noqa: E402
from support.onnx_cases import assert_outputs, onnxruntime_outputs  # noqa: E402
from support.onnx_graphs import build  # noqa: E402

OPTIONS = TargetOptions(opt_level=0, cpu="x86-64", triple="x86_64-unknown-linux-gnu")
RNG = np.random.default_rng(151)
STEPS, BATCH, WIDTH, HIDDEN = 6, 2, 3, 16


def _layer(op: str, gates: int, embed: bool = True) -> tuple[IRModule, onnx.ModelProto, dict[str, np.ndarray]]:
    """One forward RNN/GRU/LSTM node with its weights as initializers (constants when `embed`)."""
    f = np.float32
    inits = {"w": RNG.standard_normal((1, gates * HIDDEN, WIDTH)).astype(f),
             "r": RNG.standard_normal((1, gates * HIDDEN, HIDDEN)).astype(f) * 0.3,
             "b": RNG.standard_normal((1, 2 * gates * HIDDEN)).astype(f)}
    outputs = ("y", "yh") + (("yc",) if op == "LSTM" else ())
    x = RNG.standard_normal((STEPS, BATCH, WIDTH)).astype(f)
    model = build([helper.make_node(op, ["x", "w", "r", "b"], list(outputs), hidden_size=HIDDEN)], {"x": x}, inits,
                  outputs, opset=17)
    return import_model(model, embed_params=embed).module, model, {"x": x}


def _loop(mod: IRModule) -> Function:
    """The module's one loop: a closure whose body tests the counter, then steps or returns."""
    loops = [n.value for n in post_order(mod.functions["main"]) if isinstance(n, Let)
             and isinstance(n.value, Function) and not n.value.is_primitive]
    assert len(loops) == 1 and isinstance(loops[0].body, If)
    return loops[0]


def _step(mod: IRModule) -> Expr:
    """The arm of the loop that runs a step and calls the loop again."""
    return _loop(mod).body.true_branch  # type: ignore[attr-defined]


def _kernels(mod: IRModule, expr: Expr) -> list[str]:
    """The kernels `expr` calls, by name without the numbering of same-named kernels."""
    return sorted(re.sub(r"_\d+$", "", n.args[0].name_hint) for n in post_order(expr)  # type: ignore[union-attr]
                  if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == "call_lowered"
                  and isinstance(n.args[0], GlobalVar) and isinstance(mod.functions[n.args[0].name_hint], PrimFunc))


def _scatter_kernel(mod: IRModule) -> PrimFunc:
    (name,) = [n.args[0].name_hint for n in post_order(_step(mod))  # type: ignore[union-attr]
               if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == "call_lowered"
               and n.args[0].name_hint.startswith("fused_scatter_nd")]  # type: ignore[union-attr]
    func = mod.functions[name]
    assert isinstance(func, PrimFunc)
    return func


def test_an_rnn_step_is_five_kernel_calls_none_over_all_steps() -> None:
    """A step is the loop test, the counter, the row of the input projection, the recurrent
    product with its gate, and one row written into the stacked output: no kernel reads or
    writes all T rows (before: a `where` over the whole (T, B, H) tensor every step)."""
    lowered = prepare(_layer("RNN", 1)[0], OPTIONS)
    assert _kernels(lowered, _loop(lowered).body) == ["fused_add", "fused_less", "fused_nn_dense_add_tanh",
                                                 "fused_scatter_nd", "fused_take"]


def test_the_in_place_twin_writes_only_the_row() -> None:
    """The scatter's twin, run by the TIR interpreter on a buffer already holding the data,
    changes row i alone (to the update), as the whole kernel computes it into a fresh buffer;
    an index out of range fails its assertion in both."""
    lowered = prepare(_layer("LSTM", 4)[0], OPTIONS)
    whole = _scatter_kernel(lowered)
    twin = lowered.functions[str(whole.attrs["in_place"])]
    assert isinstance(twin, PrimFunc)
    assert [tuple(p.shape) for p in twin.params] == [(1,), (BATCH, HIDDEN), (STEPS, BATCH, HIDDEN)]
    data = RNG.standard_normal((STEPS, BATCH, HIDDEN)).astype(np.float32)
    row = RNG.standard_normal((BATCH, HIDDEN)).astype(np.float32)
    for i in (0, 4, -1):
        index = np.array([i], np.int64)
        fresh = np.zeros_like(data)
        run_primfunc(whole, [data, index, row, fresh])
        buffer = data.copy()
        run_primfunc(twin, [index, row, buffer])
        want = data.copy()
        want[i] = row
        np.testing.assert_array_equal(buffer, want)
        np.testing.assert_array_equal(fresh, want)
    with pytest.raises(Exception, match="out of range"):
        run_primfunc(twin, [np.array([STEPS], np.int64), row, data.copy()])


def _loop_ir(text: str) -> str:
    ir = generate_module(prepare(parse(HEADER + text, "t.relay"), OPTIONS), "t", OPTIONS).ir
    (loop,) = re.findall(r"^define internal i32 @t_lambda.*?^}$", ir, re.S | re.M)
    return loop


HEADER = '#[version = "0.0.5"]\n'
# A loop collecting 2 * x[i] + 1 in %y. In LAST, the scatter is the last read of %y in a step;
# in READ_AFTER, the next argument reads %y after it (the old %y, as every value is pure). The
# updated %1 may be read again: by the argument after it (SHARED_AFTER), or by one before it,
# which evaluates the update first, into a temporary that the twin's copy fills (SHARED_BEFORE).
LOOP = """
def @main(%x: Tensor[(5, 3), float32]) -> (Tensor[(5, 3), float32], Tensor[(5, 3), float32]) {{
  let %loop = fn (%i: int64, {first}: Tensor[(5, 3), float32], {second}: Tensor[(5, 3), float32])
      -> (Tensor[(5, 3), float32], Tensor[(5, 3), float32]) {{
    if (less(%i, 5i64)) {{
      %0 = add(multiply(take(%x, %i, axis=0), 2f), 1f);
      %1 = scatter_nd(%y, reshape(%i, newshape=[1]), %0);
      %loop(add(%i, 1i64), {args})
    }} else {{
      (%y, %z)
    }}
  }};
  %loop(0i64, full(7f, shape=[5, 3], dtype="float32"), zeros(shape=[5, 3], dtype="float32"))
}}
"""
LAST = LOOP.format(first="%y", second="%z", args="%1, add(%z, 1f)")
READ_AFTER = LOOP.format(first="%y", second="%z", args="%1, add(%z, %y)")
SHARED_AFTER = LOOP.format(first="%y", second="%z", args="%1, add(%1, %z)")
SHARED_BEFORE = LOOP.format(first="%z", second="%y", args="add(%1, 0.5f), %1")


@pytest.mark.parametrize("text,in_place", [(LAST, True), (READ_AFTER, False), (SHARED_AFTER, True),
                                           (SHARED_BEFORE, True)])
def test_the_update_is_in_place_only_when_the_buffer_is_dead(text: str, in_place: bool) -> None:
    """Native results equal the interpreter's in both loops; the step calls the in-place twin
    (after copying the caller's initial buffer in on the first iteration only) exactly when
    nothing reads %y after the update, and the whole kernel into the other carry buffer
    otherwise, whose result %z needs the old %y."""
    mod = parse(HEADER + text, "t.relay")
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    want = flatten_value(run_function(mod, {"x": x}))
    got = flatten_value(irtool.build(mod)(x=x))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    np.testing.assert_allclose(got[0], 2 * x + 1, rtol=1e-6)
    loop = _loop_ir(text)
    twin_calls = re.findall(r"call i32 @t_fused_scatter_nd_in_place\(", loop)
    whole_calls = re.findall(r"call i32 @t_fused_scatter_nd\(", loop)
    assert (len(twin_calls), len(whole_calls)) == ((1, 0) if in_place else (0, 1))
    if text is LAST:   # the one copy of all rows is behind the test that %y is not yet the buffer
        copy = re.search(r"icmp eq ptr (%\w+), (%\w+)\n.*?br i1 %\w+, label %(in_place\d+), label %(copy\d+)\n"
                         r"\4:\n  call void @llvm\.memcpy[^\n]*i64 60,", loop, re.S)
        assert copy is not None, loop


@pytest.mark.parametrize("op,gates", [("RNN", 1), ("GRU", 3), ("LSTM", 4)])
def test_a_loops_constant_recurrent_weight_is_bound_packed(op: str, gates: int) -> None:
    """With the weights as constants, the recurrent products of a step read R in the dense
    tile's panels (packed once, before the loop); with weights passed at run time, R as given.
    Both match onnxruntime natively."""
    for embed in (True, False):
        mod, model, inputs = _layer(op, gates, embed)
        altered = run(mod, "alter-layout{lanes=8}")
        products = [n for n in post_order(_loop(altered).body) if isinstance(n, Call) and n.op == Op("nn.dense")]
        assert len(products) == (2 if op == "GRU" else 1)
        assert [n.attrs.get("weight_layout", "") for n in products] == ["NK16n" if embed else ""] * len(products)
        native = irtool.build(mod)
        args = list(inputs.values()) + ([] if embed else [numpy_helper.to_array(t)[...]
                                                          for t in model.graph.initializer])
        assert_outputs(list(flatten_value(native(*args))), onnxruntime_outputs(model, list(inputs.values())),
                       1e-5, 1e-5)


def test_a_let_bound_weight_read_by_anything_but_dense_is_not_repacked() -> None:
    """`alter-layout` binds a constant-derived `let` weight packed only when dense products are
    its only readers; the meaning is kept either way."""
    text = HEADER + """
def @main(%x: Tensor[(2, 4), float32]) {{
  let %w = multiply(ones(shape=[16, 4], dtype="float32"), 0.5f);
  {result}
}}
"""
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    for result, packed in (("nn.dense(%x, %w)", True), ("(nn.dense(%x, %w), %w)", False)):
        mod = parse(text.format(result=result), "t.relay")
        altered = run(mod, "alter-layout{lanes=4}")
        lets = [n for n in post_order(altered["main"]) if isinstance(n, Let)]
        assert len(lets) == 1 and lets[0].var.checked_type is not None
        shape = tuple(lets[0].var.checked_type.shape)  # type: ignore[union-attr]
        assert shape == ((2, 4, 8) if packed else (16, 4))
        for a, b in zip(flatten_value(run_function(altered, {"x": x})), flatten_value(run_function(mod, {"x": x})),
                        strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)


def _let(text: str) -> Let:
    mod = parse(HEADER + text, "t.relay")
    (let,) = [n for n in post_order(mod["main"]) if isinstance(n, Let) and n.var.name_hint == "f"]
    return let


@pytest.mark.parametrize("use,borrowed", [
    ("%f(%x)", True),                                       # called only
    ("%f(%f(%x))", True),
    ("%f", False),                                          # the result
    ("ref_read(ref(%f))(%x)", False),                       # stored in a reference
    ("(fn (%y: Tensor[(2,), float32]) { %f(%y) })(%x)", False),   # captured by another literal
])
def test_a_closure_borrows_its_captures_only_when_its_variable_is_only_called(use: str, borrowed: bool) -> None:
    from irtool.codegen.captures import only_called
    text = f"""
def @main(%x: Tensor[(2,), float32], %w: Tensor[(2,), float32]) {{
  let %f = fn (%v: Tensor[(2,), float32]) -> Tensor[(2,), float32] {{ add(%v, %w) }};
  {use}
}}
"""
    assert only_called(_let(text)) is borrowed


ESCAPING = """
def @main(%x: Tensor[(5, 3), float32]) -> Tensor[(5, 3), float32] {
  let %f = fn (%i: int64) -> Tensor[(5, 3), float32] { add(%x, cast(%i, dtype="float32")) };
  let %r = ref(%f);
  %0 = ref_read(%r);
  %0(2i64)
}
"""


@pytest.mark.parametrize("text,borrowed", [(LAST, True), (ESCAPING, False)])
def test_a_loop_closure_holds_pointers_to_its_captures_an_escaping_one_copies(text: str, borrowed: bool) -> None:
    """The loop's closure object is its header and a pointer to %x (5 x 3 floats it reads); a
    closure stored in a reference, which may outlive its maker, holds a copy of %x. Both runs
    equal the interpreter's."""
    mod = parse(HEADER + text, "t.relay")
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    for g, w in zip(flatten_value(irtool.build(mod)(x=x)), flatten_value(run_function(mod, {"x": x})), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    ir = generate_module(prepare(parse(HEADER + text, "t.relay"), OPTIONS), "t", OPTIONS).ir
    main = re.search(r"^define internal i32 @t_fn_main.*?^}$", ir, re.S | re.M)
    assert main is not None
    closure = int(re.findall(r"call ptr @irtool_rt_alloc\(i64 (\d+),", main.group(0))[0])
    assert closure == 24 + 8 if borrowed else closure >= 24 + 60   # the header, then %x's pointer or data
