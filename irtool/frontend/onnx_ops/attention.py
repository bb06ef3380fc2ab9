"""Transformer blocks: Attention (opsets 23–25), RotaryEmbedding and SwiGLU, as compositions of
registered operators (batch matmuls, softmax, elementwise arithmetic, reshapes), so that native
code fuses the scaling, soft cap and masking into the matmul kernels' epilogues.

Attention masks are combined as the ONNX reference does: every boolean constraint (a boolean
`attn_mask`, the causal frontier, the sliding window, the padding of `nonpad_kv_seqlen`) adds
−inf where it disallows a key, a float `attn_mask` is added as it is, and a query row whose
combined bias is −inf everywhere yields zeros instead of NaN. Constraints known at import time
(causal and window masks without `nonpad_kv_seqlen`) are constants.
"""

from __future__ import annotations

import math

import numpy as np

from irtool.frontend.onnx_values import Builder, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import converter, onnx_dtype, required, reshaped, scalar, transposed
from irtool.frontend.onnx_ops.nn import matmul

_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _heads_first(b: Builder, x: Value, heads: int) -> Value:
    """(B, S, H·D) → (B, H, S, D)."""
    batch, seq, hidden = x.shape
    if hidden % heads:
        raise Unsupported(f"hidden size {hidden} is not a multiple of {heads} heads")
    return transposed(b, reshaped(b, x, (batch, seq, heads, hidden // heads)), (0, 2, 1, 3))


def _grouped(b: Builder, x: Value, kv_heads: int) -> Value:
    """(B, Hq, S, E) → (B, Hkv, Hq/Hkv·S, E): query head h uses key/value head h // (Hq/Hkv), so
    grouped-query attention is one batch matmul per key/value head, without repeating K or V."""
    batch, heads, seq, e = x.shape
    return reshaped(b, x, (batch, kv_heads, heads // kv_heads * seq, e))


def _and(b: Builder, x: Value | None, y: Value) -> Value:
    return y if x is None else b.call("logical_and", [x, y])


def _frontier(i: np.ndarray, j: np.ndarray, causal: bool, left: int, right: int, offset: int) -> np.ndarray:
    """Which keys j each query i may see when the query block starts at absolute position `offset`."""
    diff = i + offset - j
    allowed = np.ones(diff.shape, bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return allowed


def _allowed(b: Builder, q_len: int, kv_len: int, causal: bool, left: int, right: int, past: int,
             nonpad: Value | None) -> tuple[Value | None, np.ndarray | None]:
    """The boolean constraints other than `attn_mask`: a Value broadcasting to (B, 1, Sq, Skv)
    (or None when every key is allowed), and its contents when they are import-time constants."""
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    if nonpad is None:
        if not causal and left < 0 and right < 0:
            return None, None
        allowed = _frontier(i, j, causal, left, right, past)
        return b.const(allowed), allowed
    # An external cache: query block offset nonpad[b] - Sq, per batch, known only at run time.
    # Each bound is `constant(i, j) <= nonpad[b]` (or `>=`) with the constant computed here.
    if nonpad.dtype != "int64":
        nonpad = b.call("cast", [nonpad], dtype="int64")
    lengths = reshaped(b, nonpad, (nonpad.shape[0], 1, 1, 1))
    out = b.call("less", [b.const(np.broadcast_to(j, (1, kv_len)).astype(np.int64)), lengths])   # padding
    if causal:
        out = _and(b, out, b.call("less_equal", [b.const((j - i + q_len).astype(np.int64)), lengths]))
    if left >= 0:
        out = _and(b, out, b.call("less_equal", [lengths, b.const((j - i + q_len + left).astype(np.int64))]))
    if right >= 0:
        out = _and(b, out, b.call("less_equal", [b.const((j - i + q_len - right).astype(np.int64)), lengths]))
    return out, None


def _padded_mask(b: Builder, mask: Value, kv_len: int, dtype: str) -> Value:
    """`attn_mask` with its last axis padded to the total sequence length (with False / −inf)."""
    short = kv_len - mask.shape[-1]
    if short < 0:
        raise Unsupported(f"attn_mask of shape {mask.shape} is longer than the {kv_len} keys")
    if mask.dtype != "bool" and mask.dtype != dtype:
        raise Unsupported(f"a {mask.dtype} attn_mask for {dtype} attention")
    if short == 0:
        return mask
    fill = scalar(b, False if mask.dtype == "bool" else -np.inf, mask.dtype)
    width = tuple((0, 0) for _ in mask.shape[:-1]) + ((0, short),)
    return b.call("nn.pad", [mask, fill], pad_width=width)


@converter("Attention")
def _attention(b: Builder, node: Node) -> list[Value | None]:
    q, k, v = required(node, 0, "Q"), required(node, 1, "K"), required(node, 2, "V")
    mask, past_k, past_v = node.input(3), node.input(4), node.input(5)
    nonpad = node.input(6) if b.opset >= 24 else None
    dtype = q.dtype
    if dtype not in _FLOATS or k.dtype != dtype or v.dtype != dtype:
        raise Unsupported(f"attention of {q.dtype}, {k.dtype} and {v.dtype} tensors")
    if (past_k is None) != (past_v is None):
        raise Unsupported("past_key and past_value must be given together")
    if nonpad is not None and past_k is not None:
        raise Unsupported("nonpad_kv_seqlen together with past_key/past_value")
    three_d = q.ndim == 3
    if three_d:
        q_heads, kv_heads = int(node.attr("q_num_heads", 0)), int(node.attr("kv_num_heads", 0))  # type: ignore[call-overload]
        if q_heads <= 0 or kv_heads <= 0:
            raise Unsupported("3-d inputs need the q_num_heads and kv_num_heads attributes")
        q, k, v = _heads_first(b, q, q_heads), _heads_first(b, k, kv_heads), _heads_first(b, v, kv_heads)
    elif q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise Unsupported(f"attention of rank-{q.ndim}, {k.ndim} and {v.ndim} inputs")
    q_heads, kv_heads = q.shape[1], k.shape[1]
    if q_heads % kv_heads or v.shape[1] != kv_heads:
        raise Unsupported(f"{q_heads} query heads for {kv_heads} key and {v.shape[1]} value heads")
    present_k, present_v = k, v
    if past_k is not None and past_v is not None:
        present_k = b.call("concatenate", [b.tuple([past_k, k])], axis=2)
        present_v = b.call("concatenate", [b.tuple([past_v, v])], axis=2)
    batch, _, q_len, head = q.shape
    kv_len = present_k.shape[2]

    # Q·Kᵀ with Q and K each scaled by sqrt(scale), as the specification's pattern scales them.
    scale = float(node.attr("scale")) if node.attr("scale") is not None else (1 / math.sqrt(head) if head else 1.0)  # type: ignore[arg-type]
    if not scale > 0:
        raise Unsupported(f"scale={scale} (the queries and keys are scaled by its square root)")
    root = scalar(b, math.sqrt(scale), dtype)
    scores = matmul(b, _grouped(b, b.call("multiply", [q, root]), kv_heads), b.call("multiply", [present_k, root]),
                    transpose_b=True)
    scores = reshaped(b, scores, (batch, q_heads, q_len, kv_len))
    raw = scores
    softcap = float(node.attr("softcap", 0.0))  # type: ignore[arg-type]
    if softcap > 0:
        cap = scalar(b, softcap, dtype)
        scores = b.call("multiply", [b.call("tanh", [b.call("divide", [scores, cap])]), cap])
    capped = scores

    left, right = (int(node.attr(a, -1)) for a in ("left_window_size", "right_window_size"))  # type: ignore[call-overload]
    past = past_k.shape[2] if past_k is not None else 0
    allowed, static = _allowed(b, q_len, kv_len, bool(node.attr("is_causal", 0)), left, right, past, nonpad)
    bias: Value | None = None
    if mask is not None:
        padded = _padded_mask(b, mask, kv_len, dtype)
        if padded.dtype == "bool":
            allowed = _and(b, allowed, padded)
        else:
            bias = padded
        static = None
    if allowed is not None:
        forbid = b.call("where", [allowed, scalar(b, 0, dtype), scalar(b, -np.inf, dtype)])
        bias = forbid if bias is None else b.call("add", [bias, forbid])
    if bias is not None:
        scores = b.call("add", [scores, bias])
    biased = scores

    precision = node.attr("softmax_precision")
    if precision is not None:
        real = onnx_dtype(int(precision), "softmax_precision")  # type: ignore[call-overload]
        if real not in _FLOATS:
            raise Unsupported(f"softmax_precision {real}")
        scores = b.call("cast", [scores], dtype=real)
    probs = b.call("nn.softmax", [scores], axis=3)
    # A row whose bias forbids every key: zeros (its softmax is NaN).
    if static is not None:
        if not static.any(axis=-1).all():
            probs = b.call("where", [b.const(~static.any(axis=-1, keepdims=True)), scalar(b, 0, probs.dtype), probs])
    elif bias is not None:
        worst = b.call("max", [bias], axis=(bias.ndim - 1,), keepdims=True)
        dead = b.call("equal", [worst, scalar(b, -np.inf, dtype)])
        probs = b.call("where", [dead, scalar(b, 0, probs.dtype), probs])
    if probs.dtype != dtype:
        probs = b.call("cast", [probs], dtype=dtype)

    y = matmul(b, _grouped(b, probs, kv_heads), present_v)
    y = reshaped(b, y, (batch, q_heads, q_len, v.shape[3]))
    if three_d:
        y = reshaped(b, transposed(b, y, (0, 2, 1, 3)), (batch, q_len, q_heads * v.shape[3]))
    mode = int(node.attr("qk_matmul_output_mode", 0))  # type: ignore[call-overload]
    if not 0 <= mode <= 3:
        raise Unsupported(f"qk_matmul_output_mode={mode}")
    qk = (raw, capped, biased, probs)[mode]
    return [y, present_k, present_v, qk][:max(node.num_outputs, 1)]


@converter("SwiGLU")
def _swiglu(b: Builder, node: Node) -> list[Value | None]:
    """Y = A · sigmoid(alpha · A) · B."""
    gate, value = required(node, 0, "A"), required(node, 1, "B")
    if gate.shape != value.shape or gate.dtype != value.dtype:
        raise Unsupported(f"SwiGLU of {gate.type} and {value.type} (equal shapes and dtypes, no broadcast)")
    alpha = float(node.attr("alpha", 1.0))  # type: ignore[arg-type]
    inner = gate if alpha == 1.0 else b.call("multiply", [gate, scalar(b, alpha, gate.dtype)])
    return [b.call("multiply", [b.call("multiply", [gate, b.call("sigmoid", [inner])]), value])]


@converter("RotaryEmbedding")
def _rotary_embedding(b: Builder, node: Node) -> list[Value | None]:
    """Rotates pairs of features by position-dependent angles: the two halves of the rotated
    part (or its even and odd features, `interleaved`) become x1·cos − x2·sin and
    x2·cos + x1·sin; features past `rotary_embedding_dim` pass through."""
    x, cos, sin = required(node, 0, "X"), required(node, 1, "cos_cache"), required(node, 2, "sin_cache")
    positions = node.input(3)
    if x.ndim == 4:
        x4 = transposed(b, x, (0, 2, 1, 3))                              # (B, S, H, D)
    elif x.ndim == 3:
        heads = int(node.attr("num_heads", 0))  # type: ignore[call-overload]
        if heads <= 0 or x.shape[2] % heads:
            raise Unsupported(f"a 3-d input of shape {x.shape} needs num_heads dividing its hidden size")
        x4 = reshaped(b, x, (x.shape[0], x.shape[1], heads, x.shape[2] // heads))
    else:
        raise Unsupported(f"a rank-{x.ndim} input")
    batch, seq, heads, head = x4.shape
    dim = int(node.attr("rotary_embedding_dim", 0)) or head  # type: ignore[call-overload]
    if dim % 2 or dim > head:
        raise Unsupported(f"rotary_embedding_dim {dim} for heads of size {head}")
    if positions is not None:
        cos, sin = (b.call("take", [c, positions], axis=0) for c in (cos, sin))
    if cos.shape != (batch, seq, dim // 2) or sin.shape != cos.shape:
        raise Unsupported(f"cos/sin caches of shape {cos.shape} for {batch} x {seq} positions and "
                          f"{dim // 2} rotation angles")
    cos, sin = (reshaped(b, c, (batch, seq, 1, dim // 2)) for c in (cos, sin))
    rotated = x4 if dim == head else b.call("strided_slice", [x4], begin=(0,), end=(dim,), axes=(3,))
    if int(node.attr("interleaved", 0)):  # type: ignore[call-overload]
        pairs = reshaped(b, rotated, (batch, seq, heads, dim // 2, 2))
        x1, x2 = (reshaped(b, b.call("strided_slice", [pairs], begin=(i,), end=(i + 1,), axes=(4,)),
                           (batch, seq, heads, dim // 2)) for i in (0, 1))
    else:
        halves = b.call("split", [rotated], indices_or_sections=2, axis=3)
        x1, x2 = b.item(halves, 0), b.item(halves, 1)
    first = b.call("subtract", [b.call("multiply", [x1, cos]), b.call("multiply", [x2, sin])])
    second = b.call("add", [b.call("multiply", [x2, cos]), b.call("multiply", [x1, sin])])
    if int(node.attr("interleaved", 0)):  # type: ignore[call-overload]
        parts = [b.call("expand_dims", [p], axis=4) for p in (first, second)]
        out = reshaped(b, b.call("concatenate", [b.tuple(parts)], axis=4), (batch, seq, heads, dim))
    else:
        out = b.call("concatenate", [b.tuple([first, second])], axis=3)
    if dim < head:
        rest = b.call("strided_slice", [x4], begin=(dim,), end=(head,), axes=(3,))
        out = b.call("concatenate", [b.tuple([out, rest])], axis=3)
    if x.ndim == 4:
        return [transposed(b, out, (0, 2, 1, 3))]
    return [reshaped(b, out, x.shape)]
