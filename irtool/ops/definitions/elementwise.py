"""Elementwise unary operators: one table row per math function, plus the ones with attributes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from irtool.ir.expr import AttrValue
from irtool.ir.types import TensorType, Type
from irtool.ops.definitions._common import as_array, check_domain, tensor_arg
from irtool.ops.registry import AttrField, OpDef, OpPattern, TypeRelError, Value, register

Attrs = Mapping[str, AttrValue]


def identity_rel(name: str, domain: str = "any") -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        return check_domain(name, tensor_arg(name, types, 0), domain)
    return rel


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """TVM's `round` is C's round (half away from zero), unlike numpy's half-to-even."""
    t = np.trunc(x)
    return t + np.sign(x) * (np.abs(x - t) >= 0.5)


_ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
                -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf without scipy: Taylor series near 0, Chebyshev-fitted erfc elsewhere (rel. err < 2e-7).

    The accuracy matches float32 (what models use); float64 results carry the same ~1e-7 error.
    """
    z = np.abs(x.astype(np.float64))
    # Taylor: erf(z) = 2/sqrt(pi) * sum (-1)^n z^(2n+1) / (n! (2n+1)); 14 terms reach 1e-17 for z < 0.5.
    term = z.copy()
    series = z.copy()
    z2 = z * z
    for n in range(1, 14):
        term = term * (-z2) / n
        series = series + term / (2 * n + 1)
    small = series * (2.0 / np.sqrt(np.pi))
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.zeros_like(z)
    for c in reversed(_ERFC_COEFFS[1:]):
        poly = (poly + c) * t
    erfc = t * np.exp(-z2 + _ERFC_COEFFS[0] + poly)
    result = np.where(z < 0.5, small, 1.0 - erfc)
    return np.sign(x) * result


# name -> (numpy function, dtype domain); each is ElemWise with the identity type relation.
# Math functions accept integers too, as TVM's IdentityRel does (the TVM corpus takes `log` of
# an int); the result is computed in floating point and converted back to the dtype.
UNARY_MATH: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    "negative": (np.negative, "numeric"),
    "abs": (np.abs, "numeric"),
    "exp": (np.exp, "numeric"),
    "log": (np.log, "numeric"),
    "sqrt": (np.sqrt, "numeric"),
    "rsqrt": (lambda x: x.dtype.type(1) / np.sqrt(x), "numeric"),
    "tanh": (np.tanh, "numeric"),
    "sigmoid": (lambda x: x.dtype.type(1) / (x.dtype.type(1) + np.exp(-x)), "numeric"),
    "erf": (_erf, "numeric"),
    "floor": (np.floor, "numeric"),
    "ceil": (np.ceil, "numeric"),
    "round": (_round_half_away, "numeric"),
    "nearbyint": (np.rint, "numeric"),  # halves to even (C's nearbyint; ONNX Round)
    "nn.relu": (lambda x: np.maximum(x, x.dtype.type(0)), "numeric"),
    "logical_not": (np.logical_not, "any"),
    "copy": (np.copy, "any"),
}


def _unary_compute(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[list[Value], Attrs], Value]:
    def compute(args: list[Value], attrs: Attrs) -> Value:
        x = args[0]
        with np.errstate(all="ignore"):
            return as_array(fn(x), str(x.dtype))
    return compute


for _name, (_fn, _domain) in UNARY_MATH.items():
    register(OpDef(_name, 1, (), OpPattern.ELEMWISE, identity_rel(_name, _domain),
                   _unary_compute(_fn),
                   description=f"elementwise {_name}"))


def _leaky_relu(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    alpha = float(attrs["alpha"])  # type: ignore[arg-type]
    # A Python float keeps float32 math in float32 (NEP 50) and lifts integers to float64.
    return as_array(np.where(x > 0, x, x * alpha), str(x.dtype))


register(OpDef("nn.leaky_relu", 1, (AttrField("alpha", "float", 0.25),), OpPattern.ELEMWISE,
               identity_rel("nn.leaky_relu", "numeric"), _leaky_relu,
               description="x if x > 0 else alpha * x"))


def _clip_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    if attrs["a_min"] > attrs["a_max"]:  # type: ignore[operator]
        raise TypeRelError(f"clip: a_min {attrs['a_min']} is greater than a_max {attrs['a_max']}")
    return check_domain("clip", tensor_arg("clip", types, 0), "numeric")


def _clip(args: list[Value], attrs: Attrs) -> Value:
    x = args[0]
    lo, hi = np.asarray(attrs["a_min"]), np.asarray(attrs["a_max"])
    if np.issubdtype(x.dtype, np.integer):
        lo, hi = np.ceil(lo), np.floor(hi)
    return as_array(np.clip(x, lo.astype(x.dtype), hi.astype(x.dtype)), str(x.dtype))


register(OpDef("clip", 1, (AttrField("a_min", "float", required=True),
                           AttrField("a_max", "float", required=True)),
               OpPattern.ELEMWISE, _clip_rel, _clip, description="clamp into [a_min, a_max]"))


def _not_empty(v: AttrValue) -> str | None:
    return "must name a dtype" if v == "" else None


def _cast_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    x = tensor_arg("cast", types, 0)
    return TensorType(x.shape, str(attrs["dtype"]))


def _cast(args: list[Value], attrs: Attrs) -> Value:
    with np.errstate(all="ignore"):
        return as_array(args[0], str(attrs["dtype"]))


register(OpDef("cast", 1, (AttrField("dtype", "dtype", required=True, check=_not_empty),),
               OpPattern.ELEMWISE, _cast_rel, _cast, description="convert to another dtype"))
