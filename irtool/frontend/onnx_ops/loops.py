"""The loop that RNN, GRU, LSTM, Scan and Loop import to: a self-recursive `let`-bound closure
over the iteration number and the loop state,

    let %loop = fn (%i: int64, %state..., %stacked...) {
      if (%i < steps) { %loop(%i + 1, new state..., stacked with this step's outputs) }
      else { (%state..., %stacked...) }
    };
    %loop(0i64, initial state..., zeros...)

The interpreter runs it as written; native code turns the self tail call into a jump (constant
stack, the state in two carry buffers; docs/native-relay.md). The number of steps is static; the
state may have a symbolic batch (`?`). Each per-step output is collected in a tensor of `steps` rows, which every iteration updates at row `i` with a
`scatter_nd` of one row: a new value for the interpreter, a write of one row in place for native
code, whose loop owns the buffer (O(1) per step); over a `?` batch native code copies the
whole tensor each step (boxes are never updated in place).

Values of the enclosing graph the body reads are `let`-bound in front of the loop, so that they
are computed once, outside it, and reach the closure as captured variables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from irtool.frontend.onnx_values import Builder, Unsupported, Value
from irtool.ir.expr import Call, Constant, Expr, Function, If, Let, Tuple, Var
from irtool.ir.types import FuncType, TensorType, TupleType

INDEX = TensorType((), "int64")

Step = Callable[[Value, list[Value]], tuple[list[Value], list[Value]]]
"""One iteration: (the iteration number, the state) -> (the next state, this step's outputs)."""


@dataclass
class Captures:
    """The enclosing graph's values a loop (or `if`) body reads, each bound once by a `let` in
    front of it; variables and constants need no binding and are used as they are."""

    bindings: list[tuple[Var, Expr]] = field(default_factory=list)
    seen: dict[int, Value] = field(default_factory=dict)

    def __call__(self, value: Value) -> Value:
        if isinstance(value.expr, (Var, Constant)):
            return value
        known = self.seen.get(id(value.expr))
        if known is None:
            var = Var(f"c{len(self.bindings)}", value.type)
            self.bindings.append((var, value.expr))
            known = self.seen[id(value.expr)] = Value(var, value.type, value.const, value.from_param)
        return known

    def wrap(self, expr: Expr) -> Expr:
        """`expr` inside the `let`s of the captured values."""
        for var, value in reversed(self.bindings):
            expr = Let(var, value, expr)
        return expr


def counted_loop(b: Builder, steps: int | None, init: Sequence[Value], step: Step, captures: Captures,
                 *, cond: int | None = None, name: str = "loop",
                 stacked_zeros: Sequence[Value] = ()) -> tuple[list[Value], list[Value]]:
    """Run `step` `steps` times (None: until the condition is false) from the state `init`;
    returns the final state and, per output of `step`, the outputs of all steps stacked on a new
    first axis. `cond` is the index of a boolean scalar in the state that must also hold for
    another iteration (ONNX Loop's condition). `captures` binds the outer values `step` reads
    (the caller applies it to them and to nothing of its own). A stacked output whose shape has a
    `?` (a symbolic batch) starts from the caller's zeros of that shape (`stacked_zeros`, in the
    order of the outputs), since `zeros` needs a static shape."""
    i = Var("i", INDEX)
    state_vars = [Var(f"s{k}", v.type) for k, v in enumerate(init)]
    next_state, outputs = step(Value(i, INDEX), [Value(v, t) for v, t in zip(state_vars, [s.type for s in init])])
    for k, (before, after) in enumerate(zip(init, next_state)):
        if str(before.type) != str(after.type):
            raise Unsupported(f"loop state {k} is {before.type} before an iteration and {after.type} after it "
                              "(static types only)")
    if outputs and steps is None:
        raise AssertionError("stacked outputs need a static number of steps")
    stacked_types = [TensorType((steps, *o.dims), o.dtype) for o in outputs]  # type: ignore[arg-type]
    stack_vars = [Var(f"y{k}", t) for k, t in enumerate(stacked_types)]
    stacked_next = [_write_row(b, Value(v, t), o, Value(i, INDEX)) for v, t, o in zip(stack_vars, stacked_types, outputs)]
    params = [i, *state_vars, *stack_vars]
    result_type = TupleType(tuple(v.type_annotation for v in params[1:]))  # type: ignore[misc]
    loop_var = Var(name, FuncType(tuple(v.type_annotation for v in params), result_type))  # type: ignore[misc]
    go = b.call("less", [Value(i, INDEX), b.const(np.int64(steps))]) if steps is not None else None
    if cond is not None:
        flag = Value(state_vars[cond], state_vars[cond].type_annotation)  # type: ignore[arg-type]
        go = flag if go is None else b.call("logical_and", [go, flag])
    assert go is not None, "a loop needs a trip count or a condition"
    one_more = b.call("add", [Value(i, INDEX), b.const(np.int64(1))])
    again = Call(loop_var, [one_more.expr, *(v.expr for v in next_state), *(v.expr for v in stacked_next)])
    done = Tuple(list(params[1:]))
    body = Function(params, If(go.expr, again, done), result_type)
    given = iter(stacked_zeros)
    zeros = [b.call("zeros", [], shape=t.shape, dtype=t.dtype) if t.is_static else next(given) for t in stacked_types]
    start = Call(loop_var, [Constant(np.array(0, np.int64)), *(v.expr for v in init), *(z.expr for z in zeros)])
    result = Value(captures.wrap(Let(loop_var, body, start)), result_type)
    fields = [b.item(result, k) for k in range(len(params) - 1)]
    return fields[:len(init)], fields[len(init):]


def _write_row(b: Builder, stacked: Value, row: Value, i: Value) -> Value:
    """`stacked` with row `i` replaced by `row`: a `scatter_nd` of one row, which native code
    performs in place when `stacked` is not read afterwards (docs/native-relay.md)."""
    return b.call("scatter_nd", [stacked, b.call("reshape", [i], newshape=(1,)), row], mode="update")


def reversed_rows(b: Builder, x: Value, axis: int = 0) -> Value:
    """x with the order along `axis` reversed (a `take` of the reversed positions)."""
    n = x.dims[axis]
    assert isinstance(n, int), "the reversed axis is static (the sequence)"
    return b.call("take", [x, b.const(np.arange(n - 1, -1, -1, dtype=np.int64))], axis=axis)


def row(b: Builder, x: Value, i: Value) -> Value:
    """x's slice at position `i` of its first axis (i a scalar computed at run time)."""
    return b.call("take", [x, i], axis=0)
