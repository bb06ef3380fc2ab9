"""RNN, GRU and LSTM as loops over time (`loops.counted_loop`: a self-recursive closure whose
state is the hidden state, and the cell state for LSTM).

Per direction, the input projection of every time step is one matrix product before the loop
(X·Wᵀ + biases, `(T·B, I) × (G·H, I)ᵀ`); each iteration takes its row with `take`, adds the
recurrent product h·Rᵀ and applies the gates. A reverse direction runs forward over the
reversed sequence (`reverse_sequence` per batch entry when `sequence_lens` is given) and
reverses its outputs back. With `sequence_lens`, a batch entry past its length keeps its state
and writes zeros to Y, as ONNX defines. `layout=1` (batch first) transposes in and out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from irtool.frontend.onnx_values import Builder, DynamicShape, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import converter, reshaped, required, scalar, transposed
from irtool.frontend.onnx_ops.loops import Captures, counted_loop, reversed_rows, row


@dataclass(frozen=True)
class Cell:
    """What distinguishes the three layers: gates per step, activations per direction."""

    gates: int
    activations: tuple[str, ...]
    states: int   # h, or h and c


CELLS = {"RNN": Cell(1, ("Tanh",), 1), "GRU": Cell(3, ("Sigmoid", "Tanh"), 1),
         "LSTM": Cell(4, ("Sigmoid", "Tanh", "Tanh"), 2)}

# ONNX's activation functions for recurrent layers, with the defaults of their parameters
# (those of the operators of the same name).
_ALPHA_BETA: dict[str, tuple[float | None, float | None]] = {
    "Relu": (None, None), "Tanh": (None, None), "Sigmoid": (None, None), "Softsign": (None, None),
    "Softplus": (None, None), "Affine": (1.0, 0.0), "LeakyRelu": (0.01, None),
    "ThresholdedRelu": (1.0, None), "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None),
}

Activation = Callable[[Value], Value]


def _activation(b: Builder, name: str, alpha: float | None, beta: float | None) -> Activation:
    def k(x: Value, v: float | None) -> Value:
        return scalar(b, float(v), x.dtype)  # type: ignore[arg-type]

    def apply(x: Value) -> Value:
        if name in ("Relu", "Tanh", "Sigmoid"):
            return b.call({"Relu": "nn.relu", "Tanh": "tanh", "Sigmoid": "sigmoid"}[name], [x])
        if name == "Softsign":
            return b.call("divide", [x, b.call("add", [b.call("abs", [x]), k(x, 1.0)])])
        if name == "Softplus":
            return b.call("log", [b.call("add", [b.call("exp", [x]), k(x, 1.0)])])
        if name == "Affine":
            return b.call("add", [b.call("multiply", [x, k(x, alpha)]), k(x, beta)])
        if name == "LeakyRelu":
            return b.call("nn.leaky_relu", [x], alpha=float(alpha))  # type: ignore[arg-type]
        if name == "ThresholdedRelu":
            return b.call("where", [b.call("greater", [x, k(x, alpha)]), x, k(x, 0.0)])
        if name == "ScaledTanh":
            return b.call("multiply", [b.call("tanh", [b.call("multiply", [x, k(x, beta)])]), k(x, alpha)])
        if name == "HardSigmoid":
            return b.call("clip", [b.call("add", [b.call("multiply", [x, k(x, alpha)]), k(x, beta)])],
                          a_min=0.0, a_max=1.0)
        assert name == "Elu"
        negative = b.call("multiply", [b.call("subtract", [b.call("exp", [x]), k(x, 1.0)]), k(x, alpha)])
        return b.call("where", [b.call("less", [x, k(x, 0.0)]), negative, x])
    return apply


def _activations(b: Builder, node: Node, cell: Cell, directions: int) -> list[list[Activation]]:
    """Per direction, the cell's activation functions. `activation_alpha`/`beta` are consumed
    in order by the functions that take the parameter (onnxruntime's rule)."""
    names = [str(n) for n in node.attr("activations", [])] or list(cell.activations) * directions  # type: ignore[union-attr]
    if len(names) == len(cell.activations) and directions == 2:
        names = names * 2
    if len(names) != len(cell.activations) * directions:
        raise Unsupported(f"{len(names)} activations for {directions} direction(s) of {len(cell.activations)}")
    alphas = [float(a) for a in node.attr("activation_alpha", [])]  # type: ignore[union-attr]
    betas = [float(a) for a in node.attr("activation_beta", [])]  # type: ignore[union-attr]
    functions: list[Activation] = []
    for name in names:
        canonical = next((known for known in _ALPHA_BETA if known.lower() == name.lower()), None)
        if canonical is None:
            raise Unsupported(f"activation {name}")
        alpha, beta = _ALPHA_BETA[canonical]
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        functions.append(_activation(b, canonical, alpha, beta))
    n = len(cell.activations)
    return [functions[d * n:(d + 1) * n] for d in range(directions)]


def _slice(b: Builder, x: Value, k: int, size: int, axis: int = 1) -> Value:
    """Block k of `size` along `axis` (gate k of a fused gate tensor)."""
    return b.call("strided_slice", [x], begin=(k * size,), end=((k + 1) * size,), axes=(axis,))


def _direction(b: Builder, v: Value | None, d: int) -> Value | None:
    """Direction d's part of a (num_directions, ...) input."""
    return None if v is None else b.call("take", [v, b.const(np.int64(d))], axis=0)


@dataclass
class Weights:
    """One direction's operands, as the step reads them (captured values)."""

    projected: Value            # (T, B, G·H): X·Wᵀ + the biases that do not depend on h
    recurrence: Value           # (G·H, H)
    recurrent_bias: Value | None  # GRU with linear_before_reset: Rb of the h gate
    candidate: Value | None     # GRU without linear_before_reset: R of the h gate, (H, H)
    peepholes: Value | None     # LSTM: (3, H)
    lengths: Value | None       # (B, 1) int64


def _step(b: Builder, op: str, w: Weights, f: list[Activation], clip: float | None, hidden: int,
          want_y: bool) -> Callable[[Value, list[Value]], tuple[list[Value], list[Value]]]:
    def gate(x: Value) -> Value:
        return x if clip is None else b.call("clip", [x], a_min=-clip, a_max=clip)

    def step(i: Value, state: list[Value]) -> tuple[list[Value], list[Value]]:
        h = state[0]
        x = row(b, w.projected, i)
        hr = b.call("nn.dense", [h, w.recurrence])
        if op == "RNN":
            new = [f[0](gate(b.call("add", [x, hr])))]
        elif op == "GRU":
            z = f[0](gate(b.call("add", [_slice(b, x, 0, hidden), _slice(b, hr, 0, hidden)])))
            r = f[0](gate(b.call("add", [_slice(b, x, 1, hidden), _slice(b, hr, 1, hidden)])))
            if w.candidate is None:   # linear_before_reset: r ⊙ (h·Rhᵀ + Rbh)
                assert w.recurrent_bias is not None
                hh = b.call("multiply", [r, b.call("add", [_slice(b, hr, 2, hidden), w.recurrent_bias])])
            else:
                hh = b.call("nn.dense", [b.call("multiply", [r, h]), w.candidate])
            candidate = f[1](gate(b.call("add", [_slice(b, x, 2, hidden), hh])))
            one = scalar(b, 1.0, h.dtype)
            new = [b.call("add", [b.call("multiply", [b.call("subtract", [one, z]), candidate]),
                                  b.call("multiply", [z, h])])]
        else:
            c = state[1]
            g = b.call("add", [x, hr])
            gi, go, gf, gc = (_slice(b, g, k, hidden) for k in range(4))
            if w.peepholes is not None:
                gi = b.call("add", [gi, b.call("multiply", [_slice(b, w.peepholes, 0, 1, 0), c])])
                gf = b.call("add", [gf, b.call("multiply", [_slice(b, w.peepholes, 2, 1, 0), c])])
            cell = b.call("add", [b.call("multiply", [f[0](gate(gf)), c]),
                                  b.call("multiply", [f[0](gate(gi)), f[1](gate(gc))])])
            if w.peepholes is not None:
                go = b.call("add", [go, b.call("multiply", [_slice(b, w.peepholes, 1, 1, 0), cell])])
            new = [b.call("multiply", [f[0](gate(go)), f[2](cell)]), cell]
        if w.lengths is not None:   # entries past their length keep the state and write zeros
            running = b.call("less", [i, w.lengths])
            new = [b.call("where", [running, n, s]) for n, s in zip(new, state)]
            out = b.call("where", [running, new[0], scalar(b, 0.0, h.dtype)])
        else:
            out = new[0]
        return new, [out] if want_y else []
    return step


@converter("RNN", "GRU", "LSTM")
def _recurrent(b: Builder, node: Node) -> list[Value | None]:
    op, cell = node.op_type, CELLS[node.op_type]
    x = required(node, 0, "X")
    if not x.dtype.startswith("float"):
        raise Unsupported(f"X of type {x.dtype}")
    layout = int(node.attr("layout", 0))  # type: ignore[call-overload]
    if layout:
        x = transposed(b, x, (1, 0, 2))
    steps, batch, width = x.dims
    if not isinstance(steps, int) or not isinstance(width, int):
        raise DynamicShape(f"it needs a static sequence length and input size (axes 0 and 2 of X, {x.type})")
    dynamic = not isinstance(batch, int)   # a symbolic batch (`?`): reshapes infer it (-1)
    entries = -1 if dynamic else int(batch)  # type: ignore[arg-type]
    if dynamic and steps == 0:
        raise DynamicShape(f"an empty sequence needs a static batch (X is {x.type})")
    weights, recurrence = required(node, 1, "W"), required(node, 2, "R")
    direction = str(node.attr("direction", "forward"))
    directions = {"forward": 1, "reverse": 1, "bidirectional": 2}.get(direction)
    if directions is None:
        raise Unsupported(f"direction '{direction}'")
    hidden = int(node.attr("hidden_size", recurrence.shape[-1]))  # type: ignore[call-overload]
    gh = cell.gates * hidden
    if weights.shape != (directions, gh, width) or recurrence.shape != (directions, gh, hidden):
        raise Unsupported(f"W {weights.shape} and R {recurrence.shape} for {directions} direction(s), "
                          f"hidden_size {hidden} and input size {width}")
    if op == "LSTM" and int(node.attr("input_forget", 0)):  # type: ignore[call-overload]
        raise Unsupported("input_forget=1")
    clip = node.attr("clip")
    before_reset = op == "GRU" and bool(int(node.attr("linear_before_reset", 0)))  # type: ignore[call-overload]
    bias, lengths = node.input(3), node.input(4)
    initial = [node.input(5), node.input(6) if op == "LSTM" else None][:cell.states]
    peepholes = node.input(7) if op == "LSTM" else None
    if layout:
        initial = [None if v is None else transposed(b, v, (1, 0, 2)) for v in initial]
    functions = _activations(b, node, cell, directions)
    if lengths is not None:
        lengths = b.call("cast", [lengths], dtype="int64")
    want_y = node.used_outputs[0] if node.used_outputs else True

    ys: list[Value] = []
    finals: list[list[Value]] = []
    for d in range(directions):
        backward = direction == "reverse" or d == 1
        xd = x
        if backward:
            xd = (b.call("reverse_sequence", [x, lengths], seq_axis=0, batch_axis=1) if lengths is not None
                  else reversed_rows(b, x))
        projected = b.call("nn.dense", [reshaped(b, xd, (-1 if dynamic else steps * entries, width)), _direction(b, weights, d)])  # type: ignore[list-item]
        rd = _direction(b, recurrence, d)
        assert rd is not None
        bd = _direction(b, bias, d)
        recurrent_bias = candidate = None
        if bd is not None:
            wb, rb = _slice(b, bd, 0, gh, 0), _slice(b, bd, 1, gh, 0)
            if before_reset:   # the h gate's Rb stays inside r ⊙ (...)
                recurrent_bias = _slice(b, rb, 2, hidden, 0)
                rb = b.call("concatenate", [b.tuple([_slice(b, rb, 0, 2 * hidden, 0),
                                                     b.call("zeros", [], shape=(hidden,), dtype=x.dtype)])], axis=0)
            projected = b.call("add", [projected, b.call("add", [wb, rb])])
        elif before_reset:
            recurrent_bias = b.call("zeros", [], shape=(hidden,), dtype=x.dtype)
        if op == "GRU" and not before_reset:
            candidate = _slice(b, rd, 2, hidden, 0)
        projected = reshaped(b, projected, (steps, entries, gh))
        zeros, stacked_zeros = _zeros(b, projected, hidden, dynamic)
        captures = Captures()
        w = Weights(captures(projected), captures(rd),
                    None if recurrent_bias is None else captures(recurrent_bias),
                    None if candidate is None else captures(candidate),
                    None if peepholes is None else captures(reshaped(b, _direction(b, peepholes, d), (3, hidden))),  # type: ignore[arg-type]
                    None if lengths is None else captures(reshaped(b, lengths, (entries, 1))))
        init = [_direction(b, v, d) if v is not None else zeros for v in initial]
        state, outputs = counted_loop(b, steps, init, _step(b, op, w, functions[d], clip, hidden, want_y),  # type: ignore[arg-type]
                                      captures, name=op.lower(), stacked_zeros=stacked_zeros if want_y else [])
        finals.append(state)
        if want_y:
            y = outputs[0]
            if backward:
                y = (b.call("reverse_sequence", [y, lengths], seq_axis=0, batch_axis=1) if lengths is not None
                     else reversed_rows(b, y))
            ys.append(y)
    results: list[Value | None] = [_stack(b, ys, 1, (2, 0, 1, 3) if layout else None) if want_y else None]
    for k in range(cell.states):
        results.append(_stack(b, [s[k] for s in finals], 0, (1, 0, 2) if layout else None))
    return results + [None] * (node.num_outputs - len(results))


def _zeros(b: Builder, projected: Value, hidden: int, dynamic: bool) -> tuple[Value, list[Value]]:
    """Zeros of one step's state, (B, H), and with a symbolic batch those of all steps' outputs,
    (T, B, H): `zeros` cannot name a `?`, so they are `zeros_like` a (T, B, H) slice of the
    projection and its first row (T ≥ 1 then). A static batch leaves the outputs' zeros to
    `counted_loop`."""
    _, batch, _ = projected.dims
    if not dynamic:
        return b.call("zeros", [], shape=(batch, hidden), dtype=projected.dtype), []
    outputs = b.call("zeros_like", [_slice(b, projected, 0, hidden, axis=2)])
    return row(b, outputs, b.const(np.int64(0))), [outputs]


def _stack(b: Builder, parts: Sequence[Value], axis: int, layout: tuple[int, ...] | None) -> Value:
    """The directions' results stacked on a new `axis` (then in batch-first order for layout=1)."""
    grown = [b.call("expand_dims", [p], axis=axis, num_newaxis=1) for p in parts]
    out = grown[0] if len(grown) == 1 else b.call("concatenate", [b.tuple(grown)], axis=axis)
    return out if layout is None else transposed(b, out, layout)
