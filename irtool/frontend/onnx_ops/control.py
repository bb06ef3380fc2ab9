"""If, Loop and Scan: their body graphs convert (through `Builder.subgraph`) to the branches of a
Relay `if` or the body of a `loops.counted_loop`.

- If: a condition known at import time imports only the branch it takes; otherwise both
  branches become the arms of `if`, which must give the same types.
- Loop: the iteration number and the loop-carried values are the loop's state. The trip count
  must be a constant; the condition is part of the loop's test unless it provably stays true
  (the initial condition is a true constant and the body passes it through). Scan outputs need
  a static number of iterations, so they need that too.
- Scan (opset 8 and 9+): the scan inputs' axes move first (reversed for reverse directions), the
  body reads row `i`; scan outputs are stacked and moved to their axes. Opset 8's batch axis is
  a loop at import time over the batch entries (it is static).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from irtool.frontend.onnx_values import Builder, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import converter, norm_axis, reshaped, required, transposed
from irtool.frontend.onnx_ops.loops import Captures, counted_loop, reversed_rows, row
from irtool.ir.expr import If, Tuple
from irtool.ir.types import TupleType

if TYPE_CHECKING:
    import onnx


def _body(b: Builder, node: Node, key: str) -> onnx.GraphProto:
    graph = node.attr(key)
    if graph is None:
        raise Unsupported(f"no {key} graph")
    assert b.subgraph is not None, "the importer sets Builder.subgraph"
    return graph  # type: ignore[return-value]


def _same_types(first: Sequence[Value], second: Sequence[Value], what: str) -> None:
    for k, (x, y) in enumerate(zip(first, second)):
        if str(x.type) != str(y.type):
            raise Unsupported(f"{what} {k} is {x.type} in one place and {y.type} in the other (static types only)")


def _scalar_bool(b: Builder, v: Value, what: str) -> Value:
    if v.dtype != "bool" or int(np.prod(v.shape)) != 1:
        raise Unsupported(f"{what} of type {v.type} (a bool of one element)")
    return reshaped(b, v, ())


@converter("If")
def _if(b: Builder, node: Node) -> list[Value | None]:
    cond = required(node, 0, "cond")
    then_graph, else_graph = _body(b, node, "then_branch"), _body(b, node, "else_branch")
    assert b.subgraph is not None
    if cond.const is not None:
        return list(b.subgraph(then_graph if bool(cond.const.reshape(-1)[0]) else else_graph, {}, lambda v: v))
    flag = _scalar_bool(b, cond, "cond")
    captures = Captures()
    then_out, else_out = b.subgraph(then_graph, {}, captures), b.subgraph(else_graph, {}, captures)
    if len(then_out) != len(else_out):
        raise Unsupported(f"branches with {len(then_out)} and {len(else_out)} outputs")
    _same_types(then_out, else_out, "output")
    ty = TupleType(tuple(v.type for v in then_out))
    expr = captures.wrap(If(flag.expr, Tuple([v.expr for v in then_out]), Tuple([v.expr for v in else_out])))
    joined = Value(expr, ty, None, any(v.from_param for v in then_out + else_out))
    return [b.item(joined, k) for k in range(len(then_out))]


def _passes_condition_through(body: onnx.GraphProto) -> bool:
    """Whether the body's condition output is its condition input (directly or by Identity)."""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    if cond_in == cond_out:
        return True
    return any(n.op_type == "Identity" and list(n.output) == [cond_out] and list(n.input) == [cond_in]
               for n in body.node)


@converter("Loop")
def _loop(b: Builder, node: Node) -> list[Value | None]:
    body = _body(b, node, "body")
    carried = node.inputs[2:]
    if any(v is None for v in carried):
        raise Unsupported("a missing loop-carried input")
    if len(body.input) != 2 + len(carried) or len(body.output) < 1 + len(carried):
        raise Unsupported(f"a body with {len(body.input)} inputs and {len(body.output)} outputs "
                          f"for {len(carried)} loop-carried values")
    trip = node.input(0)
    steps = None if trip is None else int(b.static(trip, "the trip count M").reshape(-1)[0])
    given = node.input(1)
    scanned = len(body.output) - 1 - len(carried)
    if scanned and given is not None:   # the scan outputs' length must be static
        b.static(given, "cond (the loop has scan outputs, whose length must be static)")
    cond = b.const(np.bool_(True)) if given is None else _scalar_bool(b, given, "cond")
    always = cond.const is not None and bool(cond.const) and _passes_condition_through(body)
    if cond.const is not None and not bool(cond.const):
        steps = 0
    if scanned and (steps is None or not always):
        raise Unsupported("scan outputs of a loop whose number of iterations is decided at run time")
    if steps is None and always:
        raise Unsupported("a loop without a trip count whose condition never changes (it never ends)")
    captures = Captures()
    assert b.subgraph is not None
    subgraph = b.subgraph

    def step(i: Value, state: list[Value]) -> tuple[list[Value], list[Value]]:
        names = [info.name for info in body.input]
        outs = subgraph(body, dict(zip(names, [i, *state])), captures)
        flag = _scalar_bool(b, outs[0], "the body's condition output")
        return [flag, *outs[1:1 + len(carried)]], outs[1 + len(carried):]

    init = [cond, *(v for v in carried if v is not None)]
    try:
        state, stacked = counted_loop(b, steps, init, step, captures, cond=None if always else 0, name="loop")
    except Unsupported:
        if not always or steps is None or not 0 < steps <= UNROLL_LIMIT:
            raise
        return _unrolled(b, body, steps, init, len(carried))   # the body may need `i` as a constant
    return [*state[1:], *stacked]


# A Loop whose body needs the iteration number as an import-time constant (a Slice at `i`, whose
# bounds must be static) is unrolled when it runs at most this many times.
UNROLL_LIMIT = 64


def _unrolled(b: Builder, body: onnx.GraphProto, steps: int, init: list[Value], carried: int) -> list[Value | None]:
    """The loop's iterations one after the other, each body with its iteration number a constant."""
    assert b.subgraph is not None
    names = [info.name for info in body.input]
    state, rows = init, []
    for k in range(steps):
        outs = b.subgraph(body, dict(zip(names, [b.const(np.int64(k)), *state])), lambda v: v)
        state = [state[0], *outs[1:1 + carried]]
        rows.append(outs[1 + carried:])
    stacked = [b.call("concatenate", [b.tuple([b.call("expand_dims", [r[j]], axis=0, num_newaxis=1) for r in rows])],
                      axis=0) for j in range(len(rows[0]))]
    return [*state[1:], *stacked]


@converter("Scan")
def _scan(b: Builder, node: Node) -> list[Value | None]:
    body = _body(b, node, "body")
    scan_inputs = int(node.attr("num_scan_inputs"))  # type: ignore[call-overload]
    if b.opset < 9:
        if node.input(0) is not None:
            raise Unsupported("sequence_lens (opset 8)")
        return _scan_batched(b, node, body, scan_inputs)
    inputs = [required(node, k, "input") for k in range(len(node.inputs))]
    states = inputs[:len(inputs) - scan_inputs]
    outs = _scan_once(b, node, body, states, inputs[len(states):], "scan_input_directions")
    return list(outs)


def _scan_batched(b: Builder, node: Node, body: onnx.GraphProto, scan_inputs: int) -> list[Value | None]:
    """Scan-8: every input has a batch axis first; the body sees one batch entry."""
    inputs = [required(node, k, "input") for k in range(1, len(node.inputs))]
    batch = inputs[0].shape[0]
    per_entry = []
    for e in range(batch):
        entry = [b.call("take", [v, b.const(np.int64(e))], axis=0) for v in inputs]
        per_entry.append(_scan_once(b, node, body, entry[:len(entry) - scan_inputs], entry[len(entry) - scan_inputs:],
                                    "directions"))
    return [b.call("concatenate", [b.tuple([b.call("expand_dims", [r[k]], axis=0, num_newaxis=1) for r in per_entry])],
                   axis=0) for k in range(len(per_entry[0]))]


def _scan_once(b: Builder, node: Node, body: onnx.GraphProto, states: list[Value], xs: list[Value],
               directions_key: str) -> list[Value]:
    if len(body.input) != len(states) + len(xs) or len(body.output) < len(states):
        raise Unsupported(f"a body with {len(body.input)} inputs and {len(body.output)} outputs for "
                          f"{len(states)} states and {len(xs)} scan inputs")
    in_axes = [int(a) for a in node.attr("scan_input_axes", [0] * len(xs))]  # type: ignore[union-attr]
    in_dirs = [int(a) for a in node.attr(directions_key, [0] * len(xs))]  # type: ignore[union-attr]
    scanned = len(body.output) - len(states)
    out_axes = [int(a) for a in node.attr("scan_output_axes", [0] * scanned)]  # type: ignore[union-attr]
    out_dirs = [int(a) for a in node.attr("scan_output_directions", [0] * scanned)]  # type: ignore[union-attr]
    moved = []
    for x, axis, backward in zip(xs, in_axes, in_dirs):
        axis = norm_axis(axis, x.ndim)
        order = [axis] + [a for a in range(x.ndim) if a != axis]
        x = transposed(b, x, order)
        moved.append(reversed_rows(b, x) if backward else x)
    lengths = {x.shape[0] for x in moved}
    if len(lengths) != 1:
        raise Unsupported(f"scan inputs of different lengths {sorted(lengths)}")
    steps = lengths.pop()
    captures = Captures()
    sequences = [captures(x) for x in moved]
    assert b.subgraph is not None
    subgraph = b.subgraph

    def step(i: Value, state: list[Value]) -> tuple[list[Value], list[Value]]:
        names = [info.name for info in body.input]
        outs = subgraph(body, dict(zip(names, [*state, *(row(b, x, i) for x in sequences)])), captures)
        return outs[:len(states)], outs[len(states):]

    final, stacked = counted_loop(b, steps, states, step, captures, name="scan")
    results = list(final)
    for y, axis, backward in zip(stacked, out_axes, out_dirs):
        y = reversed_rows(b, y) if backward else y
        axis = norm_axis(axis, y.ndim)
        order = list(range(1, axis + 1)) + [0] + list(range(axis + 1, y.ndim))
        results.append(transposed(b, y, order))
    return results

