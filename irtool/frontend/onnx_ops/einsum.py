"""Einsum as the operators that have fast kernels, when the equation allows.

One operand: a transpose, after summing the subscripts the result drops. Two operands: each
subscript is a batch (both operands and the result), contracted (both, not the result) or kept
(one operand and the result); a subscript only one operand has and the result drops is summed
first. Then A becomes (batch, M, K), B (batch, K, N), and the product is `nn.batch_matmul`, or
`nn.dense` without batch subscripts (its register-tiled schedule). Anything else, repeated
subscripts in one operand (diagonals), size-1 broadcasting, three or more operands, stays one
`einsum` call, whose kernel is a general reduction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from irtool.frontend.onnx_ops.common import reshaped, transposed
from irtool.frontend.onnx_values import Builder, Unsupported, Value
from irtool.ops.definitions.indexing import Labels, einsum_extents, parse_einsum
from irtool.ops.registry import TypeRelError


def einsum(b: Builder, equation: str, operands: Sequence[Value]) -> Value:
    try:
        subs, out = parse_einsum("einsum", equation, [v.ndim for v in operands])
        extents = einsum_extents("einsum", subs, [v.shape for v in operands])
    except TypeRelError as exc:
        raise Unsupported(str(exc)) from None
    plain = all(len(set(s)) == len(s) for s in subs) and all(
        extents[c] == d for s, v in zip(subs, operands) for c, d in zip(s, v.shape))
    if plain and len(operands) == 1:
        return _permuted(b, *_summed(b, operands[0], subs[0], out), out)
    if plain and len(operands) == 2:
        return _contraction(b, operands, subs, out, extents)
    return b.call("einsum", [b.tuple(list(operands))], equation=equation)


def _summed(b: Builder, x: Value, sub: Labels, keep: Sequence[str]) -> tuple[Value, Labels]:
    """x with the subscripts outside `keep` summed away."""
    drop = [i for i, c in enumerate(sub) if c not in keep]
    if not drop:
        return x, list(sub)
    return b.call("sum", [x], axis=tuple(drop)), [c for c in sub if c in keep]


def _permuted(b: Builder, x: Value, sub: Labels, order: Sequence[str]) -> Value:
    return transposed(b, x, [sub.index(c) for c in order])


def _grouped(b: Builder, x: Value, sub: Labels, groups: Sequence[Sequence[str]], extents: dict) -> Value:
    """x transposed to the subscripts of `groups` in order, each group merged into one axis."""
    order = [c for g in groups for c in g]
    return reshaped(b, _permuted(b, x, sub, order), [math.prod(extents[c] for c in g) for g in groups])


def _contraction(b: Builder, operands: Sequence[Value], subs: list[Labels], out: Labels,
                 extents: dict) -> Value:
    (a, sa), (w, sw) = (_summed(b, v, s, set(out) | set(subs[1 - i])) for i, (v, s) in enumerate(zip(operands, subs)))
    batch = [c for c in out if c in sa and c in sw]
    m = [c for c in out if c in sa and c not in sw]
    n = [c for c in out if c in sw and c not in sa]
    k = [c for c in sa if c in sw and c not in out]
    if not batch:
        rows = _grouped(b, a, sa, [m, k], extents)
        weight = _grouped(b, w, sw, [n, k], extents)  # nn.dense takes its weight as (units, in)
        product = b.call("nn.dense", [rows, weight], units=weight.shape[0])
    else:
        left = _grouped(b, a, sa, [batch, m, k], extents)
        right = _grouped(b, w, sw, [batch, k, n], extents)
        product = b.call("nn.batch_matmul", [left, right])
    order = batch + m + n
    result = reshaped(b, product, [extents[c] for c in order])
    return _permuted(b, result, order, out)
