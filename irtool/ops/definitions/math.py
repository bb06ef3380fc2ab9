"""Trigonometric and hyperbolic functions, sign, NaN/infinity tests and the two remainders.

The functions are elementwise unary ops like `exp` (integers computed in floating point and
converted back); `mod` is C's remainder (the sign of the dividend, `fmod`) and `floor_mod`
Python's (the sign of the divisor), as in TVM. An integer remainder by zero is 0, as numpy's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from irtool.ir.expr import AttrValue
from irtool.ir.types import TensorType, Type
from irtool.ops.definitions._common import as_array, check_domain, tensor_arg
from irtool.ops.definitions.broadcast import _binary_compute, broadcast_rel
from irtool.ops.definitions.elementwise import _unary_compute, identity_rel
from irtool.ops.registry import OpDef, OpPattern, Value, register

Attrs = Mapping[str, AttrValue]

# name -> numpy function; each is ElemWise with the identity type relation.
TRIG: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
}

for _name, _fn in TRIG.items():
    register(OpDef(_name, 1, (), OpPattern.ELEMWISE, identity_rel(_name, "numeric"), _unary_compute(_fn),
                   description=f"elementwise {_name}"))


register(OpDef("sign", 1, (), OpPattern.ELEMWISE, identity_rel("sign", "numeric"), _unary_compute(np.sign),
               description="-1, 0 or 1 by the sign of x (+0 for either zero, NaN for NaN)"))


def _predicate_rel(name: str) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        x = check_domain(name, tensor_arg(name, types, 0), "numeric")
        return TensorType(x.shape, "bool")
    return rel


def _predicate(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[list[Value], Attrs], Value]:
    return lambda args, attrs: as_array(fn(args[0]), "bool")


for _name, _fn, _what in (("isnan", np.isnan, "NaN"), ("isinf", np.isinf, "infinite")):
    register(OpDef(_name, 1, (), OpPattern.ELEMWISE, _predicate_rel(_name), _predicate(_fn),
                   description=f"whether each element is {_what} (never for integers)"))


def _remainder(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def apply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if np.issubdtype(a.dtype, np.integer):
            return np.where(b == 0, a.dtype.type(0), fn(a, np.where(b == 0, b.dtype.type(1), b)))
        return fn(a, b)
    return apply


for _name, _fn, _what in (("mod", np.fmod, "the dividend"), ("floor_mod", np.mod, "the divisor")):
    register(OpDef(_name, 2, (), OpPattern.BROADCAST, broadcast_rel(_name, "numeric", False),
                   _binary_compute(_remainder(_fn), False), description=f"remainder with the sign of {_what}"))
