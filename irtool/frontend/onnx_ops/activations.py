"""The activations of today's models as compositions of elementwise Relay operators (TVM's
ONNX frontend decomposes them too): fuse-ops puts them in the producing kernel's epilogue.

HardSigmoid, HardSwish (MobileNetV3), Gelu (BERT, ViT; `approximate="tanh"` in GPT-2), Swish
(EfficientNet's SiLU), Mish, Celu, ThresholdedRelu and Shrink; the smooth ones are written with
one `exp` each, the cheapest transcendental natively, in forms that keep their digits in both
tails. `softplus` serves elementwise.py's Softplus as well.
"""

from __future__ import annotations

import math

from irtool.frontend.onnx_values import Builder, Converter, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import converter, required, scalar
from irtool.ops.definitions.elementwise import _ERFC_COEFFS as ERFC_COEFFS


def _times(b: Builder, x: Value, factor: float) -> Value:
    return b.call("multiply", [x, scalar(b, factor, x.dtype)])


def _plus(b: Builder, x: Value, term: float) -> Value:
    return b.call("add", [x, scalar(b, term, x.dtype)])


def _hard_sigmoid(b: Builder, x: Value, alpha: float, beta: float) -> Value:
    """clip(alpha·x + beta, 0, 1)."""
    return b.call("clip", [_plus(b, _times(b, x, alpha), beta)], a_min=0.0, a_max=1.0)


def log1p(b: Builder, u: Value) -> Value:
    """log(1 + u) to full precision for tiny u: log(w)·u / (w − 1) with w = 1 + u (exact when
    w rounds to 1, where it is u itself); log(1 + u) alone loses all digits below 1 ulp of 1."""
    w = _plus(b, u, 1.0)
    step = b.call("subtract", [w, scalar(b, 1.0, u.dtype)])
    scaled = b.call("divide", [b.call("multiply", [b.call("log", [w]), u]), step])
    return b.call("where", [b.call("equal", [step, scalar(b, 0.0, u.dtype)]), u, scaled])


def softplus(b: Builder, x: Value) -> Value:
    """log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(−|x|))."""
    positive = b.call("maximum", [x, scalar(b, 0.0, x.dtype)])
    return b.call("add", [positive, log1p(b, b.call("exp", [b.call("negative", [b.call("abs", [x])])]))])


def _in_float32(convert: Converter) -> Converter:
    """float16 and bfloat16 computed in float32 and rounded once at the end (as the ONNX
    reference does for bfloat16): their short mantissas would lose digits at every step of a
    composition."""
    def wrapped(b: Builder, node: Node) -> list[Value | None]:
        x = node.input(0)
        if x is None or x.dtype not in ("float16", "bfloat16"):
            return convert(b, node)
        wide = Node(node.op_type, node.name, [b.call("cast", [x], dtype="float32"), *node.inputs[1:]], node.attrs,
                    node.num_outputs, node.used_outputs)
        return [None if out is None else b.call("cast", [out], dtype=x.dtype) for out in convert(b, wide)]
    return wrapped


def _attr(node: Node, key: str, default: float) -> float:
    return float(node.attr(key, default))  # type: ignore[arg-type]


@converter("HardSigmoid")
@_in_float32
def _hard_sigmoid_op(b: Builder, node: Node) -> list[Value | None]:
    return [_hard_sigmoid(b, required(node, 0, "X"), _attr(node, "alpha", 0.2), _attr(node, "beta", 0.5))]


@converter("HardSwish")
@_in_float32
def _hard_swish(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "X")
    return [b.call("multiply", [x, _hard_sigmoid(b, x, 1 / 6, 0.5)])]


def _gelu_erf(b: Builder, x: Value) -> Value:
    """x·Φ(x) = x/2·erfc(−x/√2). erfc(a) = t·exp(−a² + P(t)) with t = 1/(1 + a/2) for a ≥ 0 (the
    Chebyshev fit of the registry's `erf`, relative error below 1.2e-7) and erfc(−a) = 2 − erfc(a):
    a few multiply-adds and one exp, which vectorise (erf is a libm call per element), and no
    cancellation in the negative tail, where 1 + erf(x/√2) loses the digits."""
    a = _times(b, b.call("abs", [x]), 1 / math.sqrt(2))
    t = b.call("divide", [scalar(b, 1.0, x.dtype), _plus(b, _times(b, a, 0.5), 1.0)])
    poly = scalar(b, ERFC_COEFFS[-1], x.dtype)
    for c in reversed(ERFC_COEFFS[:-1]):
        poly = _plus(b, b.call("multiply", [poly, t]), c)
    tail = b.call("multiply", [t, b.call("exp", [b.call("subtract", [poly, b.call("multiply", [a, a])])])])
    positive = b.call("greater", [x, scalar(b, 0.0, x.dtype)])
    erfc = b.call("where", [positive, b.call("subtract", [scalar(b, 2.0, x.dtype), tail]), tail])
    return b.call("multiply", [_times(b, x, 0.5), erfc])


@converter("Gelu")
@_in_float32
def _gelu(b: Builder, node: Node) -> list[Value | None]:
    """approximate="tanh": x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))), computed as the equal
    x·sigmoid(2√(2/π)·(x + 0.044715·x³)) (one exp, no tanh branch; both are inline code natively)."""
    x = required(node, 0, "X")
    approximate = str(node.attr("approximate", "none"))
    if approximate == "none":
        return [_gelu_erf(b, x)]
    if approximate != "tanh":
        raise Unsupported(f"approximate='{approximate}' (none or tanh)")
    cube = b.call("multiply", [b.call("multiply", [x, x]), x])
    inner = _times(b, b.call("add", [x, _times(b, cube, 0.044715)]), 2 * math.sqrt(2 / math.pi))
    return [b.call("multiply", [x, b.call("sigmoid", [inner])])]


@converter("Swish")
@_in_float32
def _swish(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "X")
    alpha = _attr(node, "alpha", 1.0)
    return [b.call("multiply", [x, b.call("sigmoid", [x if alpha == 1.0 else _times(b, x, alpha)])])]


@converter("Mish")
@_in_float32
def _mish(b: Builder, node: Node) -> list[Value | None]:
    """x·tanh(softplus(x)) = x·m/(m + 2) with m = n(n + 2), n = exp(x): one exp instead of exp,
    log and tanh. Above x = 20 the ratio is 1 in float32, so exp(min(x, 20)) cannot overflow."""
    x = required(node, 0, "X")
    n = b.call("exp", [b.call("minimum", [x, scalar(b, 20.0, x.dtype)])])
    m = b.call("multiply", [n, _plus(b, n, 2.0)])
    return [b.call("multiply", [x, b.call("divide", [m, _plus(b, m, 2.0)])])]


@converter("Celu")
@_in_float32
def _celu(b: Builder, node: Node) -> list[Value | None]:
    """max(0, x) + min(0, alpha·(exp(x/alpha) − 1))."""
    x = required(node, 0, "X")
    alpha = _attr(node, "alpha", 1.0)
    zero = scalar(b, 0.0, x.dtype)
    expm1 = _plus(b, b.call("exp", [_times(b, x, 1 / alpha)]), -1.0)
    negative = b.call("minimum", [zero, _times(b, expm1, alpha)])
    return [b.call("add", [b.call("maximum", [zero, x]), negative])]


@converter("ThresholdedRelu")
@_in_float32
def _thresholded_relu(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "X")
    above = b.call("greater", [x, scalar(b, _attr(node, "alpha", 1.0), x.dtype)])
    return [b.call("where", [above, x, scalar(b, 0.0, x.dtype)])]


@converter("Shrink")
@_in_float32
def _shrink(b: Builder, node: Node) -> list[Value | None]:
    """x + bias below −lambd, x − bias above lambd, 0 between; integers computed in float64 (as
    the ONNX reference does) and converted back."""
    x = required(node, 0, "input")
    lambd, bias = _attr(node, "lambd", 0.5), _attr(node, "bias", 0.0)
    wide = x if x.dtype.startswith(("float", "bfloat")) else b.call("cast", [x], dtype="float64")
    below = b.call("less", [wide, scalar(b, -lambd, wide.dtype)])
    above = b.call("greater", [wide, scalar(b, lambd, wide.dtype)])
    zero = scalar(b, 0.0, wide.dtype)
    out = b.call("where", [below, _plus(b, wide, bias), b.call("where", [above, _plus(b, wide, -bias), zero])])
    return [out if out.dtype == x.dtype else b.call("cast", [out], dtype=x.dtype)]
