"""Runtime values of the Relay interpreter.

Tensors are numpy arrays (0-d for scalars) and tuples are Python tuples, so operator kernels and
callers see plain numpy. The other values (closures, ADT values, references) are small classes
defined here. Global functions are closures with an empty environment; a bare constructor or
operator used as a value is represented by its IR node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import numpy as np

from irtool.ir.adt import Constructor
from irtool.ir.expr import Function, Op
from irtool.core.diagnostics import DiagnosticError


class Closure:
    """A function value: the function and the values of its free variables (keyed by `id(var)`).

    Calling it from Python runs it with the interpreter that made it, so operators that take a
    function argument (`call_lowered`) can simply call their argument.
    """

    __slots__ = ("func", "env", "runner")

    def __init__(self, func: Function, env: dict[int, Value],
                 runner: Callable[[Closure, Sequence[Value]], Value]) -> None:
        self.func = func
        self.env = env
        self.runner = runner

    def __call__(self, *args: Value) -> Value:
        return self.runner(self, args)

    def __repr__(self) -> str:
        return f"Closure({len(self.func.params)} params)"


class ADTValue:
    """A constructed algebraic data value such as `Cons(1, Nil)`."""

    __slots__ = ("constructor", "fields")

    def __init__(self, constructor: Constructor, fields: tuple[Value, ...]) -> None:
        self.constructor = constructor
        self.fields = fields

    def __repr__(self) -> str:
        return f"ADTValue({self.constructor.name}, {len(self.fields)} fields)"


class RefValue:
    """A mutable cell made by `ref(v)`; `ref_write` replaces its content."""

    __slots__ = ("value",)

    def __init__(self, value: Value) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "RefValue(...)"


Value: TypeAlias = "np.ndarray | tuple | Closure | ADTValue | RefValue | Constructor | Op"


def describe(value: object) -> str:
    """A short phrase naming what kind of value this is, for error messages."""
    if isinstance(value, np.ndarray):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} fields"
    if isinstance(value, (Closure, Op)):
        return "a function"
    if isinstance(value, Constructor):
        return f"the constructor {value.name}"
    if isinstance(value, ADTValue):
        return f"an ADT value ({value.constructor.name})"
    if isinstance(value, RefValue):
        return "a reference"
    return f"a Python {type(value).__name__}"


def flatten_value(value: Value) -> list[np.ndarray]:
    """The tensors of a result, depth-first: tuple fields, ADT fields and reference contents in order.

    This is the order `irtool-run` names outputs `output0`, `output1`, ... Iterative, so a long
    list value does not hit Python's recursion limit.
    """
    out: list[np.ndarray] = []
    stack: list[object] = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, np.ndarray):
            out.append(v)
        elif isinstance(v, tuple):
            stack.extend(reversed(v))
        elif isinstance(v, ADTValue):
            stack.extend(reversed(v.fields))
        elif isinstance(v, RefValue):
            stack.append(v.value)
        else:
            raise DiagnosticError(f"the result contains {describe(v)}, which has no array form")
    return out


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a Relay dtype string; a DiagnosticError when numpy has none (bfloat16, vectors)."""
    try:
        return np.dtype(dtype)
    except TypeError:
        raise DiagnosticError(f"dtype {dtype} has no numpy equivalent") from None
