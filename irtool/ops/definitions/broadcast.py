"""Broadcasting binary operators (numpy rules) and `where`, built by one factory."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from irtool.ir.expr import AttrValue
from irtool.ir.types import TensorType, Type
from irtool.ops.definitions._common import (
    as_array, broadcast_shapes, check_domain, same_dtype, tensor_arg)
from irtool.ops.registry import OpDef, OpPattern, Value, register

Attrs = Mapping[str, AttrValue]


def _trunc_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncates toward zero in TVM (C semantics), floats divide exactly."""
    if np.issubdtype(a.dtype, np.integer):
        q = np.floor_divide(a, b)
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        return q + fix
    return np.true_divide(a, b)


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        return np.power(a, np.maximum(b, 0)) * (b >= 0)
    return np.power(a, b)


# name -> (numpy function, dtype domain, result is bool)
BINARY: dict[str, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], str, bool]] = {
    "add": (np.add, "numeric", False),
    "subtract": (np.subtract, "numeric", False),
    "multiply": (np.multiply, "numeric", False),
    "divide": (_trunc_divide, "numeric", False),
    "power": (_power, "numeric", False),
    "maximum": (np.maximum, "any", False),
    "minimum": (np.minimum, "any", False),
    "logical_and": (np.logical_and, "any", False),
    "logical_or": (np.logical_or, "any", False),
    "equal": (np.equal, "any", True),
    "not_equal": (np.not_equal, "any", True),
    "less": (np.less, "any", True),
    "less_equal": (np.less_equal, "any", True),
    "greater": (np.greater, "any", True),
    "greater_equal": (np.greater_equal, "any", True),
}


def broadcast_rel(name: str, domain: str, to_bool: bool) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        a, b = tensor_arg(name, types, 0), tensor_arg(name, types, 1)
        shape = broadcast_shapes(name, a, b)
        dtype = same_dtype(name, a, b)
        check_domain(name, a, domain)
        return TensorType(shape, "bool" if to_bool else dtype)
    return rel


def _binary_compute(fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
                    to_bool: bool) -> Callable[[list[Value], Attrs], Value]:
    def compute(args: list[Value], attrs: Attrs) -> Value:
        a, b = args
        with np.errstate(all="ignore"):
            return as_array(fn(a, b), "bool" if to_bool else str(a.dtype))
    return compute


for _name, (_fn, _domain, _to_bool) in BINARY.items():
    register(OpDef(_name, 2, (), OpPattern.BROADCAST, broadcast_rel(_name, _domain, _to_bool),
                   _binary_compute(_fn, _to_bool), description=f"broadcasting {_name}"))


def _where_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    cond = tensor_arg("where", types, 0, "condition")
    x, y = tensor_arg("where", types, 1), tensor_arg("where", types, 2)
    dtype = same_dtype("where", x, y)
    xy = TensorType(broadcast_shapes("where", x, y), dtype)
    return TensorType(broadcast_shapes("where", cond, xy), dtype)


def _where(args: list[Value], attrs: Attrs) -> Value:
    cond, x, y = args
    return as_array(np.where(cond.astype(bool), x, y), str(x.dtype))


register(OpDef("where", 3, (), OpPattern.BROADCAST, _where_rel, _where,
               description="select x where condition holds, else y (all three broadcast)"))
