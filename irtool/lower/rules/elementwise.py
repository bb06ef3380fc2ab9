"""Compute rules of the elementwise unary operators (irtool/ops/definitions/elementwise.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from irtool.ir.tir import BinaryOp, Call, Not, PrimExpr, is_bool, is_float
from irtool.ir.types import Type
from irtool.lower.rules._rule import Attrs, elementwise, float_type_for, out_tensor_type, rule
from irtool.lower.te import Tensor, cast, cmp, imm, select


def _neg(x: PrimExpr) -> PrimExpr:
    # x * -1 keeps numpy's -0.0 for floats; integers wrap as numpy's do.
    return BinaryOp("mul", x, imm(-1, x.dtype)) if is_float(x.dtype) else BinaryOp("sub", imm(0, x.dtype), x)


def _via_float(fn: Callable[[PrimExpr], PrimExpr]) -> Callable[[PrimExpr], PrimExpr]:
    """A math function: in the float type numpy uses for an integer input, then converted back."""
    def apply(x: PrimExpr) -> PrimExpr:
        if is_float(x.dtype):
            return fn(x)
        return cast(x.dtype, fn(cast(float_type_for(x.dtype), x)))
    return apply


def _intrinsic(name: str) -> Callable[[PrimExpr], PrimExpr]:
    return _via_float(lambda x: Call(name, (x,)))


def _round_half_away(x: PrimExpr) -> PrimExpr:
    """Relay's round (C `round`): trunc, plus one away from zero when the fraction is >= 1/2."""
    t = Call("trunc", (x,))
    frac = Call("fabs", (BinaryOp("sub", x, t),))
    step = select(cmp("lt", x, imm(0, x.dtype)), imm(-1, x.dtype), imm(1, x.dtype))
    return select(BinaryOp("ge", frac, imm(0.5, x.dtype)), BinaryOp("add", t, step), t)


def _sigmoid(x: PrimExpr) -> PrimExpr:
    if is_float(x.dtype):
        return Call("sigmoid", (x,))
    # numpy: dtype(1) / (dtype(1) + exp(-x)), with -x wrapping in the integer type.
    f = float_type_for(x.dtype)
    e = Call("exp", (cast(f, _neg(x)),))
    return cast(x.dtype, BinaryOp("div", imm(1, f), BinaryOp("add", imm(1, f), e)))


def _abs(x: PrimExpr) -> PrimExpr:
    if is_float(x.dtype):
        return Call("fabs", (x,))
    if x.dtype.startswith("uint"):
        return x
    return select(cmp("lt", x, imm(0, x.dtype)), _neg(x), x)


def _identity_on_ints(fn: Callable[[PrimExpr], PrimExpr]) -> Callable[[PrimExpr], PrimExpr]:
    """floor/ceil/round of an integer is the integer itself."""
    return lambda x: fn(x) if is_float(x.dtype) else x


def _logical_not(x: PrimExpr) -> PrimExpr:
    if is_bool(x.dtype):
        return Not(x)
    return cast(x.dtype, BinaryOp("eq", x, imm(0, x.dtype)))


UNARY: dict[str, Callable[[PrimExpr], PrimExpr]] = {
    "negative": _neg,
    "abs": _abs,
    "exp": _intrinsic("exp"),
    "log": _intrinsic("log"),
    "sqrt": _intrinsic("sqrt"),
    "rsqrt": _intrinsic("rsqrt"),
    "tanh": _intrinsic("tanh"),
    "sigmoid": _sigmoid,
    "erf": lambda x: Call("erf", (x,)) if is_float(x.dtype) else cast(x.dtype, Call("erf", (cast("float64", x),))),
    "floor": _identity_on_ints(lambda x: Call("floor", (x,))),
    "ceil": _identity_on_ints(lambda x: Call("ceil", (x,))),
    "round": _identity_on_ints(_round_half_away),
    "nearbyint": _identity_on_ints(lambda x: Call("round", (x,))),  # TIR `round` is half to even
    "nn.relu": lambda x: BinaryOp("max", x, imm(0, x.dtype)),
    "logical_not": _logical_not,
    "copy": lambda x: x,
}


def _unary_rule(name: str, fn: Callable[[PrimExpr], PrimExpr]) -> None:
    @rule(name)
    def lower(args: list, attrs: Attrs, out: Type) -> Tensor:
        return elementwise(out, args, fn, name.replace("nn.", ""))


for _name, _fn in UNARY.items():
    _unary_rule(_name, _fn)


@rule("nn.leaky_relu")
def _leaky_relu(args: list, attrs: Attrs, out: Type) -> Tensor:
    alpha = float(attrs["alpha"])  # type: ignore[arg-type]

    def f(x: PrimExpr) -> PrimExpr:
        # numpy: a Python float keeps float math in the dtype and lifts integers to float64.
        scaled = (BinaryOp("mul", x, imm(alpha, x.dtype)) if is_float(x.dtype)
                  else cast(x.dtype, BinaryOp("mul", cast("float64", x), imm(alpha, "float64"))))
        return select(cmp("gt", x, imm(0, x.dtype)), x, scaled)
    return elementwise(out, args, f, "leaky_relu")


@rule("clip")
def _clip(args: list, attrs: Attrs, out: Type) -> Tensor:
    dtype = out_tensor_type(out).dtype
    lo, hi = np.asarray(attrs["a_min"]), np.asarray(attrs["a_max"])
    if not is_float(dtype):
        lo, hi = np.ceil(lo), np.floor(hi)
    with np.errstate(all="ignore"):
        low, high = imm(lo.astype(dtype)[()], dtype), imm(hi.astype(dtype)[()], dtype)
    return elementwise(out, args, lambda x: BinaryOp("min", BinaryOp("max", x, low), high), "clip")


@rule("cast")
def _cast(args: list, attrs: Attrs, out: Type) -> Tensor:
    dtype = out_tensor_type(out).dtype

    def f(x: PrimExpr) -> PrimExpr:
        if is_bool(dtype) and not is_bool(x.dtype):
            return BinaryOp("ne", x, imm(0, x.dtype))
        return cast(dtype, x)
    return elementwise(out, args, f, "cast")
