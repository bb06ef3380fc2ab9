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


def array_type_name(array: np.ndarray) -> str:
    """The ONNX name of an array's element type (numpy's name when ONNX has none)."""
    from onnx import helper
    try:
        return onnx_type_name(helper.np_dtype_to_tensor_dtype(array.dtype))
    except (KeyError, TypeError, ValueError):
        return str(array.dtype)


def supported_array(array: np.ndarray, what: str) -> np.ndarray:
    """`array` if irtool computes with its element type; otherwise `Unsupported` naming `what`."""
    if relay_dtype(array.dtype) not in DTYPES:
        raise Unsupported(f"{what} of element type {array_type_name(array)}")
    return array
