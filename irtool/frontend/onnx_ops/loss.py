"""The loss operators, which inference can compute too: NegativeLogLikelihoodLoss and
SoftmaxCrossEntropyLoss (opsets 12–22), as a batched gather of each target's score and
reductions.

`loss[n, d…] = −weight[t] · x[n, t, d…]` with `t = target[n, d…]`; a target equal to
`ignore_index` contributes 0 and no weight (it may lie outside [0, C), as exporters use −100).
`mean` divides by the summed weights of the targets that count (their number without
`weight`), as the specification states.
"""

from __future__ import annotations

import math

from irtool.frontend.onnx_values import Builder, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import converter, required, reshaped, scalar, transposed


def _class_last(b: Builder, x: Value) -> Value:
    """(N, C, d1…dk) → (N·d1…dk, C): each row holds one position's class scores."""
    moved = transposed(b, x, (0, *range(2, x.ndim), 1))
    return reshaped(b, moved, (math.prod(moved.shape[:-1]), x.shape[1]))


def _nll(b: Builder, node: Node, scores: Value) -> Value:
    """The loss of `scores` (log-probabilities) at the node's targets, weighted and reduced."""
    target, weight = required(node, 1, "target"), node.input(2)
    if scores.ndim < 2 or target.shape != (scores.shape[0],) + scores.shape[2:]:
        raise Unsupported(f"scores of shape {scores.shape} for targets of shape {target.shape}")
    if scores.shape[1] == 0:
        raise Unsupported(f"scores of shape {scores.shape}: no classes to pick from")
    if not target.dtype.startswith(("int", "uint")):
        raise Unsupported(f"{target.dtype} targets")
    if weight is not None and (weight.shape != (scores.shape[1],) or weight.dtype != scores.dtype):
        raise Unsupported(f"a weight of type {weight.type} for {scores.shape[1]} {scores.dtype} classes")
    reduction = str(node.attr("reduction", "mean"))
    if reduction not in ("none", "sum", "mean"):
        raise Unsupported(f"reduction {reduction!r}")
    ignore = node.attr("ignore_index")
    flat_target = reshaped(b, target, (math.prod(target.shape), 1))
    picked = b.call("take", [_class_last(b, scores), flat_target], axis=1, batch_dims=1)
    loss = b.call("negative", [reshaped(b, picked, target.shape)])
    counted: Value | None = None       # the weight of each position (None: all 1)
    if weight is not None:
        counted = b.call("take", [weight, target], axis=0)
    if ignore is not None:
        kept = b.call("not_equal", [target, scalar(b, int(ignore), target.dtype)])  # type: ignore[call-overload]
        zero = scalar(b, 0, scores.dtype)
        counted = b.call("where", [kept, counted if counted is not None else scalar(b, 1, scores.dtype), zero])
        loss = b.call("where", [kept, loss, zero])
    if counted is not None:
        loss = b.call("multiply", [loss, counted])
    if reduction == "none":
        return loss
    total = b.call("sum", [loss])
    if reduction == "sum":
        return total
    if counted is None:
        return b.call("divide", [total, scalar(b, math.prod(target.shape), scores.dtype)])
    return b.call("divide", [total, b.call("sum", [counted])])


@converter("NegativeLogLikelihoodLoss")
def _negative_log_likelihood_loss(b: Builder, node: Node) -> list[Value | None]:
    return [_nll(b, node, required(node, 0, "input"))]


@converter("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy_loss(b: Builder, node: Node) -> list[Value | None]:
    """NegativeLogLikelihoodLoss of the log-softmax over the class axis (1); the second output
    is that log-softmax."""
    scores = required(node, 0, "scores")
    if scores.ndim < 2:
        raise Unsupported(f"rank-{scores.ndim} scores")
    log_prob = b.call("nn.log_softmax", [scores], axis=1)
    return [_nll(b, node, log_prob), log_prob][:max(node.num_outputs, 1)]
