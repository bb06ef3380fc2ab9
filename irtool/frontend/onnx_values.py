"""What ONNX converters see and build with: `Value` (an ONNX tensor on the Relay side), `Node`,
the `Builder` of typed operator calls, and `Unsupported`. The importer (`irtool.frontend.onnx`)
drives the graph; the converters (`irtool.frontend.onnx_ops`) use only this module."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from irtool.ir.expr import Call, Constant, Expr, Op, Tuple, TupleGetItem
from irtool.ir.types import Any, Dim, TensorType, TupleType, Type
from irtool.ir.visitor import free_vars
from irtool.eval.interpreter import evaluate
from irtool.core.diagnostics import DiagnosticError
from irtool.ops.registry import OpDef, OpPattern, TypeRelError, get_op

if TYPE_CHECKING:
    import onnx


class Unsupported(Exception):
    """A node the importer cannot convert; all of them are reported together. `subject` names
    what is unsupported in place of the operator when that reads better (`Cast to int4`)."""

    def __init__(self, reason: str = "", subject: str | None = None) -> None:
        super().__init__(reason)
        self.subject = subject


class DynamicShape(Unsupported):
    """A converter needs a size that is a symbolic dimension (the importer names the inputs)."""


class ConstantNeeded(Unsupported):
    """A converter needs the contents of a graph input (a shape, axes, pads) at import time."""

    def __init__(self, reason: str, graph_input: str) -> None:
        super().__init__(reason)
        self.graph_input = graph_input


@dataclass(frozen=True)
class Size:
    """One entry of a shape computed from symbolic sizes: `factor` times the extents of the
    `?` dimensions in `symbols` (the `Any` objects of the types the sizes were read from, by
    identity; sorted by id so that equal products compare equal)."""

    factor: int
    symbols: tuple[Any, ...] = ()

    def times(self, other: Size) -> Size:
        return Size(self.factor * other.factor, tuple(sorted(self.symbols + other.symbols, key=id)))


@dataclass
class Value:
    """One ONNX tensor (or an intermediate of a converter) on the Relay side."""

    expr: Expr
    type: Type
    # The contents when known at import time.
    const: np.ndarray | None = None
    # Computed from a float initializer (a weight): kept as a computation, never folded here.
    from_param: bool = False
    # The ONNX name when this is a graph input (for errors about inputs that must be constant).
    graph_input: str | None = None
    # A shape read from a tensor with `?` axes (`Shape` and the arithmetic on it, onnx_sizes.py):
    # its entries; `expr` is then an unbound placeholder that only a `Reshape` may consume.
    sizes: tuple[Size, ...] | None = None

    @property
    def tensor(self) -> TensorType:
        assert isinstance(self.type, TensorType), self.type
        return self.type

    @property
    def dims(self) -> tuple[Dim, ...]:
        """The shape, symbolic dimensions (`?`) included."""
        return self.tensor.shape

    @property
    def shape(self) -> tuple[int, ...]:
        """The static shape; a converter that reads it needs every dimension known."""
        dims = self.tensor.shape
        if not all(isinstance(d, int) for d in dims):
            raise DynamicShape(f"it needs the static shape of a {self.tensor} tensor")
        return dims  # type: ignore[return-value]

    @property
    def dtype(self) -> str:
        return self.tensor.dtype

    @property
    def ndim(self) -> int:
        return len(self.tensor.shape)


@dataclass
class Node:
    """One ONNX node as converters see it."""

    op_type: str
    name: str
    inputs: list[Value | None]
    attrs: dict[str, object]
    num_outputs: int
    # Which outputs something downstream actually uses (graph outputs included).
    used_outputs: list[bool]

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def attr(self, key: str, default: object = None) -> object:
        return self.attrs.get(key, default)


def relay_dtype(np_dtype: np.dtype) -> str:
    return "bool" if np_dtype == np.bool_ else str(np_dtype)


class Builder:
    """The state converters use: opset, value construction, typed operator calls."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        # The ONNX name of each graph input's variable (by identity), for errors and for the
        # backend, which binds the inputs a converter needs as constants.
        self.graph_inputs: dict[int, str] = {}
        # Converts a body graph of If/Loop/Scan: (graph, its bound inputs, capture of the outer
        # values it reads) -> its outputs. The importer sets it.
        self.subgraph: Callable[[onnx.GraphProto, Mapping[str, Value], Callable[[Value], Value]], list[Value]] | None = None

    def const(self, data: np.ndarray | float | int, dtype: str | None = None) -> Value:
        array = np.asarray(data, dtype=dtype)
        array = array if array.flags.c_contiguous else array.copy(order="C")
        return Value(Constant(array), TensorType(array.shape, relay_dtype(array.dtype)), array)

    def call(self, op: str, args: Sequence[Value], **attrs: object) -> Value:
        """A typed call of a registered operator; the type comes from the op's type relation.

        An elementwise operator on values a reshape regrouped (a MatMul's rows put back into
        their batch axes) is applied before the reshape (`_under_reshape`), so that fuse-ops
        gives it to the product's kernel as its epilogue."""
        opdef = get_op(op)
        assert opdef is not None, op
        sunk = self._under_reshape(opdef, args)
        if sunk is None:
            return self._typed_call(opdef, op, args, attrs)
        operands, shape = sunk
        inner = self._typed_call(opdef, op, operands, attrs)
        return self._typed_call(_RESHAPE, "reshape", [inner], {"newshape": shape})

    def _under_reshape(self, opdef: OpDef, args: Sequence[Value]) -> tuple[list[Value], tuple[Dim, ...]] | None:
        """The operands of an elementwise call taken from before the reshape(s) that made them,
        and that reshape's shape, when the call can run there: every reshaped operand comes from
        the same static shape into the same static shape with the same last axis (only leading
        axes regrouped, so each row keeps its elements), and every other operand either has that
        whole shape (a residual: regrouped the same way) or broadcasts along the last axis only
        (a bias, a scalar: given as a vector of that axis). None otherwise, and for operators
        whose attributes name axes or shapes."""
        if opdef.pattern > OpPattern.BROADCAST or not args or any(f.name in _AXIS_ATTRS for f in opdef.attrs or ()):
            return None
        sources = [_regrouping(a) for a in args]
        shapes = {(s.tensor.shape, a.tensor.shape) for a, s in zip(args, sources) if s is not None}
        if len(shapes) != 1:
            return None
        ((inner, outer),) = shapes
        operands: list[Value] = []
        for a, source in zip(args, sources):
            dims = a.dims
            if source is not None:
                operands.append(source)
            elif a.sizes is not None:
                return None
            elif dims == outer:    # a whole operand (a residual): regrouped the same way, a view
                operands.append(self._typed_call(_RESHAPE, "reshape", [a], {"newshape": inner}))
            elif (len(dims) > len(outer) or any(d != 1 for d in dims[:-1])
                  or (dims and dims[-1] not in (1, outer[-1]))):
                return None
            else:
                operands.append(self._typed_call(_RESHAPE, "reshape", [a], {"newshape": dims[-1:]})
                                if len(dims) > 1 else a)
        return operands, outer

    def _typed_call(self, opdef: OpDef | None, op: str, args: Sequence[Value],
                    attrs: Mapping[str, object]) -> Value:
        """`call` as written, without looking at where the operands came from."""
        assert opdef is not None, op
        try:
            canonical = opdef.normalize_attrs(attrs)  # type: ignore[arg-type]
        except DiagnosticError as exc:   # an attribute the node's values make invalid: the node's error
            raise Unsupported(exc.diagnostics[0].message) from None
        assert opdef.type_rel is not None
        try:
            ty = opdef.type_rel([a.type for a in args], opdef.full_attrs(canonical))
        except TypeRelError as exc:
            raise Unsupported(str(exc)) from None
        expr = Call(Op(op), [a.expr for a in args], canonical)
        expr.checked_type = ty
        return Value(expr, ty, None, any(a.from_param for a in args))

    def tuple(self, values: Sequence[Value]) -> Value:
        return Value(Tuple([v.expr for v in values]), TupleType(tuple(v.type for v in values)),
                     None, any(v.from_param for v in values))

    def item(self, value: Value, index: int) -> Value:
        assert isinstance(value.type, TupleType)
        return Value(TupleGetItem(value.expr, index), value.type.fields[index], None, value.from_param)

    def static(self, value: Value | None, what: str) -> np.ndarray:
        """The import-time contents of an input that must be constant (shapes, axes, pads).

        A value computed from constants alone (not from weights) is evaluated now, so that a
        float computation on a bound graph input (a window's size cast to float) is static too;
        one computed from graph inputs names the first of them, which the backend then binds."""
        if value is not None and value.const is None and not value.from_param:
            used = free_vars(value.expr)
            inputs = [self.graph_inputs[id(v)] for v in used if id(v) in self.graph_inputs]
            if inputs:
                how = "is" if value.graph_input is not None else "is computed from"
                raise ConstantNeeded(f"{what} {how} the graph input '{inputs[0]}', but it must be a constant "
                                     "known at import time (give it an initializer)", inputs[0])
            if not used:
                result = evaluate(value.expr)
                assert isinstance(result, np.ndarray)
                value.const = result
        if value is None or value.const is None:
            raise Unsupported(f"{what} must be a constant known at import time (static shapes only)")
        return value.const


_RESHAPE = get_op("reshape")
_AXIS_ATTRS = ("axis", "shape", "num_newaxis")   # attributes an operator's axes depend on


def _regrouping(value: Value) -> Value | None:
    """The operand of the `reshape` that made `value` when it only regroups the leading axes of
    a static shape (the last axis and the order of the elements kept)."""
    e = value.expr
    if not (isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == "reshape" and value.sizes is None):
        return None
    source = getattr(e.args[0], "checked_type", None)
    dims = value.dims
    if not (isinstance(source, TensorType) and source.shape and dims and source.shape[-1] == dims[-1]
            and all(isinstance(d, int) and d > 0 for d in (*source.shape, *dims))):
        return None
    return Value(e.args[0], source, None, value.from_param)


Converter = Callable[[Builder, Node], list[Value | None]]
