"""What calling compiled code from Python needs around it: 64-byte-aligned numpy buffers (the
ABI requires them) and the meaning of a non-zero status returned by `_run` or a kernel."""

from __future__ import annotations

import math

import numpy as np

from irtool.codegen.boxes import STATUS_SHAPE_MISMATCH
from irtool.codegen.entry import ABI
from irtool.codegen.objects import STATUS_NO_MATCH, STATUS_STACK_OVERFLOW
from irtool.codegen.tir_to_llvm import STATUS_ASSERT_BASE, STATUS_MISALIGNED, STATUS_OUT_OF_MEMORY

ALIGN = 64


def aligned_empty(shape: tuple[int, ...], dtype: str | np.dtype, what: str = "a buffer") -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary. Too large a
    request (`what` names it) is a `MemoryError` that says how many bytes, whatever numpy says."""
    dt = np.dtype(dtype)
    nbytes = math.prod(int(d) for d in shape) * dt.itemsize
    try:
        raw = np.empty(nbytes + ALIGN, np.uint8)
    except (MemoryError, ValueError, OverflowError):
        raise MemoryError(f"cannot allocate {what}: {nbytes} bytes") from None
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes].view(dt).reshape(shape)


def describe_status(status: int, abi: ABI) -> str:
    if status == STATUS_MISALIGNED:
        return "an input or output buffer is not aligned to its element size"
    if status == STATUS_OUT_OF_MEMORY:
        return "out of memory (a kernel's scratch memory, an object, a frame or the thread of a recursive program)"
    if status == STATUS_STACK_OVERFLOW:
        return "recursion too deep for the stack (does the recursion terminate?)"
    if status == STATUS_NO_MATCH:
        return "no clause of a `match` accepts the value"
    if status == STATUS_SHAPE_MISMATCH:
        return ("a run-time shape does not fit (an input's static dimension, two batches that must be equal, or "
                "a `compress` condition longer than its axis)")
    k = status - STATUS_ASSERT_BASE
    if 0 <= k < len(abi.assert_messages):
        return f"assertion failed: {abi.assert_messages[k]}"
    return f"status {status}"
