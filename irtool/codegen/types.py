"""TIR dtypes as LLVM types and constants (textual IR).

Registers hold `i1` for `bool`; memory holds a byte per bool (numpy's layout), so loads and stores
convert. Float constants are written in LLVM's exact hex forms, so no value changes in transit.
"""

from __future__ import annotations

import struct
from functools import lru_cache

import numpy as np

from irtool.ir.tir import element_of, is_bool, is_float, lanes_of

_FLOATS = {"float16": "half", "bfloat16": "bfloat", "float32": "float", "float64": "double"}
# Suffixes of overloaded intrinsics (`llvm.exp.v16f32`).
_SUFFIX = {"half": "f16", "bfloat": "bf16", "float": "f32", "double": "f64"}


@lru_cache(maxsize=None)
def scalar_type(dtype: str) -> str:
    """The LLVM register type of one lane."""
    base = element_of(dtype)
    if base in _FLOATS:
        return _FLOATS[base]
    if is_bool(base):
        return "i1"
    return "i" + base.lstrip("uint")


@lru_cache(maxsize=None)
def value_type(dtype: str) -> str:
    lanes = lanes_of(dtype)
    scalar = scalar_type(dtype)
    return scalar if lanes == 1 else f"<{lanes} x {scalar}>"


@lru_cache(maxsize=None)
def memory_type(dtype: str) -> str:
    """The type a buffer element has in memory (bools are bytes)."""
    lanes = lanes_of(dtype)
    scalar = "i8" if is_bool(dtype) else scalar_type(dtype)
    return scalar if lanes == 1 else f"<{lanes} x {scalar}>"


@lru_cache(maxsize=None)
def element_bytes(dtype: str) -> int:
    """Bytes of one lane in memory."""
    base = element_of(dtype)
    if is_bool(base):
        return 1
    return int("".join(c for c in base if c.isdigit())) // 8


def intrinsic_suffix(dtype: str) -> str:
    lanes = lanes_of(dtype)
    scalar = scalar_type(dtype)
    one = _SUFFIX.get(scalar, scalar)
    return one if lanes == 1 else f"v{lanes}{one}"


def is_unsigned(dtype: str) -> bool:
    return element_of(dtype).startswith("uint")


def scalar_constant(dtype: str, value: float | int) -> str:
    """The text of a scalar constant of `dtype`."""
    base = element_of(dtype)
    if is_bool(base):
        return "true" if value else "false"
    if not is_float(base):
        return str(int(value))
    if base == "float16":
        return "0xH%04X" % int(np.array(value, np.float16).view(np.uint16))
    if base == "bfloat16":
        bits = int(np.array(value, np.float32).view(np.uint32))
        return "0xR%04X" % (bits >> 16)
    if base == "float32":
        value = float(np.float32(value))   # a float constant must be exactly representable
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(value)))[0]


def constant(dtype: str, value: float | int) -> str:
    """A constant of `dtype` (a splat for a vector dtype), without its type."""
    text = scalar_constant(dtype, value)
    if lanes_of(dtype) == 1:
        return text
    return f"splat ({scalar_type(dtype)} {text})"
