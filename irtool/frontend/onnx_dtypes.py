"""ONNX element types against irtool dtypes: the ones irtool computes with in both backends, and
the ONNX spelling of the others (`float8e4m3fn`, `bfloat16`, `int4`) for the errors about them."""

from __future__ import annotations

import numpy as np

from irtool.frontend.onnx_values import Unsupported, relay_dtype

# What the interpreter and native code both compute with; any other element type is refused
# at import (narrow floats and sub-byte integers have no numpy arithmetic and no LLVM lowering).
DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                    "float16", "float32", "float64"})


def onnx_type_name(elem_type: int) -> str:
    """`TensorProto.FLOAT8E4M3FN` → `float8e4m3fn`."""
    from onnx import TensorProto
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"element type {elem_type}"


def elem_type_named(name: str) -> int | None:
    """An element type given by name (opset 1's Cast writes `to="FLOAT"`), None if unknown."""
    from onnx import TensorProto
    try:
        return int(TensorProto.DataType.Value(name.upper()))
    except ValueError:
        return None


def dtype_of(elem_type: int) -> str | None:
    """The irtool dtype of an ONNX element type, or None when irtool does not compute with it."""
    from onnx import helper
    try:
        name = relay_dtype(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))
    except (KeyError, TypeError, ValueError):
        return None
    return name if name in DTYPES else None


def tensor_dtype(elem_type: int, what: str) -> str:
    """The irtool dtype of a tensor of ONNX element type `elem_type` (an initializer, an
    attribute's tensor); `Unsupported` naming `what` when irtool does not compute with it."""
    dtype = dtype_of(elem_type)
    if dtype is None:
        raise Unsupported(f"{what} of element type {onnx_type_name(elem_type)}")
    return dtype
