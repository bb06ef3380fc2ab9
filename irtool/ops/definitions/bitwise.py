"""Bit operations on integers (TVM's `bitwise_*`, `left_shift`, `right_shift`) and `logical_xor`.

A shift count outside [0, bits) shifts every bit out: `left_shift` gives 0 and `right_shift`
0 or -1 by the sign (numpy's rule; C leaves it undefined). `right_shift` is arithmetic for
signed integers and logical for unsigned ones.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from irtool.ops.definitions.broadcast import _binary_compute, broadcast_rel
from irtool.ops.definitions.elementwise import _unary_compute, identity_rel
from irtool.ops.registry import OpDef, OpPattern, register

# name -> numpy function; each broadcasts and keeps the (integer) dtype.
BITWISE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift, "right_shift": np.right_shift,
}

for _name, _fn in BITWISE.items():
    register(OpDef(_name, 2, (), OpPattern.BROADCAST, broadcast_rel(_name, "integer", False),
                   _binary_compute(_fn, False), description=f"broadcasting {_name.replace('_', ' ')}"))

register(OpDef("bitwise_not", 1, (), OpPattern.ELEMWISE, identity_rel("bitwise_not", "integer"),
               _unary_compute(np.invert), description="every bit inverted"))
register(OpDef("logical_xor", 2, (), OpPattern.BROADCAST, broadcast_rel("logical_xor", "any", False),
               _binary_compute(np.logical_xor, False), description="exactly one of the two is true (non-zero)"))
