"""glibc's bytes in use, for the tests that many calls of native code free what they allocate."""

from __future__ import annotations

import ctypes

import pytest


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                              "uordblks", "fordblks", "keepcost")]


def heap_in_use() -> int:
    """Bytes malloc has handed out and not had back (skips the test without glibc's mallinfo2)."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _MallInfo2
    except (AttributeError, OSError):
        pytest.skip("glibc's mallinfo2 is not available")
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)
