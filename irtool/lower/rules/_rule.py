"""The table of TIR compute rules (operator name -> rule), and the helpers every rule module shares."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from irtool.ir.expr import AttrValue
from irtool.ir.tir import PrimExpr
from irtool.ir.types import TensorType, Type
from irtool.lower.te import Compute, Element, Idx, Tensor, const
from irtool.ops.registry import get_op

Attrs = Mapping[str, AttrValue]
TEValue = Tensor | tuple
# A rule: (argument tensor expressions, full attributes, result type) -> tensor expression.
Rule = Callable[[list, Attrs, Type], TEValue]

# Filled by the `@rule` declarations of the family modules of this package (imported by its
# `__init__`); read through `irtool.lower.rules.compute_rule`.
RULES: dict[str, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    """Declares `fn` the TIR compute rule of the named operators (which must be registered)."""
    def attach(fn: Rule) -> Rule:
        for name in names:
            if get_op(name) is None or name in RULES:
                raise ValueError(f"compute rule for {'an unknown' if name not in RULES else 'a second'} "
                                 f"operator {name}")
            RULES[name] = fn
        return fn
    return attach


def out_tensor_type(out: Type) -> TensorType:
    assert isinstance(out, TensorType)
    return out


def shape_of(out: Type) -> tuple[int, ...]:
    return tuple(int(d) for d in out_tensor_type(out).shape)  # type: ignore[arg-type]


def broadcast_index(t: Tensor, idx: Idx) -> Idx:
    """The index of `t` that element `idx` of a (numpy) broadcast result reads."""
    lead = len(idx) - t.ndim
    return tuple(const(0) if d == 1 else idx[lead + k] for k, d in enumerate(t.shape))


def elementwise(out: Type, inputs: Sequence[Tensor], f: Callable[..., PrimExpr], name: str) -> Compute:
    """A broadcasting elementwise result; `f` gets one element of each input."""
    shape = shape_of(out)
    same = [t.shape == shape for t in inputs]

    def fcompute(ctx: Element, idx: Idx) -> PrimExpr:
        return f(*(ctx.load(t, idx if s else broadcast_index(t, idx)) for t, s in zip(inputs, same)))
    return Compute(shape, out_tensor_type(out).dtype, fcompute, name)


def float_type_for(dtype: str) -> str:
    """The float type numpy computes a math function of an integer array in."""
    return str(np.result_type(np.dtype(dtype), np.float16))


def elementwise_rules(functions: Mapping[str, Callable[..., PrimExpr]]) -> None:
    """Declares each named operator's rule: `fn` of one element of each (broadcast) input."""
    def declare(name: str, fn: Callable[..., PrimExpr]) -> None:
        rule(name)(lambda args, attrs, out: elementwise(out, args, fn, name))
    for name, fn in functions.items():
        declare(name, fn)


def sum_dtype(dtype: str) -> str:
    """What a sum is accumulated in, as numpy accumulates it: float16 in float32 (pairwise over
    float32 partial sums, rounded once), any other dtype in itself (ml_dtypes' bfloat16 sums
    round at each step)."""
    return "float32" if dtype == "float16" else dtype


def dot_dtype(dtype: str) -> str:
    """What a sum of products (conv2d, dense, batch_matmul) is accumulated in: float32 for both
    16-bit floats, as numpy's half and ml_dtypes' bfloat16 matmuls do; the dtype otherwise."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype
