"""Device annotations, memory operators and `call_lowered`: the ops lowering and planning add.

Device ops are identities on values (placement is the business of `plan-devices`). Memory ops
have real semantics in the reference implementation: storage is a byte buffer and
`memory.alloc_tensor` a view into it, so a memory plan that overlaps live tensors shows up as
wrong results when interpreted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from irtool.ir.expr import AttrValue
from irtool.ir.types import Any, FuncType, TensorType, TupleType, Type, TypeCall
from irtool.ops.attrs import non_negative
from irtool.ops.definitions._common import np_dtype, tensor_arg
from irtool.ops.registry import AttrField, OpDef, OpPattern, TypeRelError, Value, register

Attrs = Mapping[str, AttrValue]

# The type of a `memory.alloc_storage` result (TVM's extern ADT `Storage`).
STORAGE_TYPE = TypeCall("Storage")


def _same_type(types: Sequence[Type], attrs: Attrs) -> Type:
    return types[0]


def _identity(args: list[Value], attrs: Attrs) -> Value:
    return args[0]


register(OpDef(
    "on_device", 1,
    (AttrField("virtual_device", "device", None, optional=True),
     AttrField("constrain_result", "bool", False),
     AttrField("constrain_body", "bool", True)),
    OpPattern.OPAQUE, _same_type, _identity,
    description="annotates where a value lives; the identity on values",
    # Not a computation: fusion leaves it outside primitive functions (TVM's TNonComputational).
    extra={"non_computational": True}))

register(OpDef(
    "annotation.stop_fusion", 1, (),
    OpPattern.OPAQUE, _same_type, _identity,
    description="marks a fusion boundary; fuse-ops drops the call and never fuses across it",
    extra={"stop_fusion": True}))

register(OpDef(
    "device_copy", 1,
    (AttrField("src_virtual_device", "device", None, optional=True),
     AttrField("dst_virtual_device", "device", None, optional=True),
     # Where a memory plan of a lowered `main` placed the copy (as on `call_lowered`).
     AttrField("storage_id", "any", None, optional=True),
     AttrField("storage_offset", "any", None, optional=True)),
    OpPattern.OPAQUE, _same_type, lambda args, attrs: _copy_value(args[0]),
    description="copies a value between devices; the identity on values"))


def _copy_value(v: Value) -> Value:
    if isinstance(v, tuple):
        return tuple(_copy_value(x) for x in v)
    return np.array(v, copy=True)


def _scalar_int(op: str, t: Type, what: str) -> None:
    if not isinstance(t, TensorType) or t.ndim != 0 or not t.dtype.startswith(("int", "uint")):
        raise TypeRelError(f"{op}: {what} must be an integer scalar, got {t}")


def _alloc_storage_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    _scalar_int("memory.alloc_storage", types[0], "size")
    _scalar_int("memory.alloc_storage", types[2], "alignment")
    return STORAGE_TYPE


def _alloc_storage(args: list[Value], attrs: Attrs) -> Value:
    return np.zeros(int(args[0]), dtype=np.uint8)


register(OpDef(
    "memory.alloc_storage", 3,
    (AttrField("dtype", "dtype", "float32", doc="dtype hint"),
     AttrField("virtual_device", "device", None, optional=True)),
    OpPattern.OPAQUE, _alloc_storage_rel, _alloc_storage,
    description="allocates a block of bytes (size, shape hint, alignment)"))


def _alloc_tensor_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "memory.alloc_tensor"
    if types[0] != STORAGE_TYPE:
        raise TypeRelError(f"{op}: storage must have type Storage, got {types[0]}")
    _scalar_int(op, types[1], "offset")
    shape_t = tensor_arg(op, types, 2, "shape")
    if shape_t.ndim != 1 or not shape_t.dtype.startswith(("int", "uint")):
        raise TypeRelError(f"{op}: shape must be a 1-d integer tensor, got {shape_t}")
    dtype = str(attrs["dtype"])
    assert_shape = attrs["assert_shape"]
    if assert_shape is not None:
        rank = shape_t.shape[0]
        if isinstance(rank, int) and rank != len(assert_shape):  # type: ignore[arg-type]
            raise TypeRelError(f"{op}: assert_shape {list(assert_shape)} does not have rank {rank}")
        return TensorType(tuple(assert_shape), dtype)  # type: ignore[arg-type]
    rank = shape_t.shape[0]
    if not isinstance(rank, int):
        raise TypeRelError(f"{op}: the rank of the result is unknown; give assert_shape")
    return TensorType(tuple(Any() for _ in range(rank)), dtype)


def _alloc_tensor(args: list[Value], attrs: Attrs) -> Value:
    storage, offset, shape = args
    dtype = np_dtype(str(attrs["dtype"]))
    dims = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    start = int(offset)
    if start + nbytes > storage.size:
        raise ValueError(f"memory.alloc_tensor: {nbytes} bytes at offset {start} exceed a "
                         f"storage of {storage.size} bytes")
    return storage[start:start + nbytes].view(dtype).reshape(dims)


register(OpDef(
    "memory.alloc_tensor", 3,
    (AttrField("dtype", "dtype", "float32"),
     AttrField("const_shape", "meta", None, optional=True),
     AttrField("assert_shape", "int_list", None, optional=True, check=non_negative)),
    OpPattern.OPAQUE, _alloc_tensor_rel, _alloc_tensor,
    description="a tensor placed in a storage at a byte offset (storage, offset, shape)"))

register(OpDef(
    "memory.kill", 1, (), OpPattern.OPAQUE,
    lambda types, attrs: TupleType(()), lambda args, attrs: (),
    description="marks the end of a value's lifetime; returns ()"))


def _call_lowered_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    fn_t, args_t = types
    if not isinstance(fn_t, FuncType):
        raise TypeRelError(f"call_lowered: callee must be a function, got {fn_t}")
    if not isinstance(args_t, TupleType):
        raise TypeRelError(f"call_lowered: arguments must be a tuple, got {args_t}")
    if len(args_t.fields) != len(fn_t.arg_types):
        raise TypeRelError(f"call_lowered: {fn_t} takes {len(fn_t.arg_types)} arguments, "
                           f"got {len(args_t.fields)}")
    return fn_t.ret_type


def _call_lowered(args: list[Value], attrs: Attrs) -> Value:
    """Calls the callee value (any Python callable the evaluator uses for functions)."""
    fn, fn_args = args
    return fn(*fn_args)  # type: ignore[operator]


register(OpDef(
    "call_lowered", 2, (AttrField("metadata", "any", None, optional=True),
                        # Where plan-memory placed the result(s): storage id and byte offset
                        # (lists for a tuple result); codegen reads them.
                        AttrField("storage_id", "any", None, optional=True),
                        AttrField("storage_offset", "any", None, optional=True)),
    OpPattern.OPAQUE, _call_lowered_rel, _call_lowered,
    description="calls a lowered function with a tuple of arguments",
    # Already a kernel call: fusion must not wrap it into another primitive function.
    extra={"non_computational": True}))
