"""The step/tensor table of a dataflow `main` (`Liveness`, `Step`, `PlannedTensor`) and the
kinds and sizes in it: what `irtool.analysis.liveness` builds and device inference, memory
planning and code generation read."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from irtool.core.diagnostics import DiagnosticError
from irtool.core.span import Span
from irtool.ir.expr import AttrValue, Call, Constant, Function
from irtool.ir.types import TensorType, TupleType, Type, dtype_bytes

# A device as the annotations write it (`virtual_device=1`, a name, or `meta[VirtualDevice][i]`);
# None is the default device.
Device = AttrValue

KERNEL, ALIAS, COPY = "kernel", "alias", "copy"
CALL, PARAM, CONSTANT = "call", "param", "constant"
# A result of a hoisted step: computed once (from constants only), held outside the arenas.
HOISTED = "hoisted"


@dataclass
class PlannedTensor:
    """One flattened tensor value of `main`."""

    index: int
    kind: str  # CALL (a step's output), HOISTED (a hoisted step's output), PARAM or CONSTANT
    ttype: TensorType
    nbytes: int
    step: int  # producing step; -1 for parameters and constants
    first: int
    last: int
    name: str
    device: Device = None
    span: Span | None = None


@dataclass
class Step:
    """One call of `main`. `inputs` has one entry per flattened argument slot (repeats kept)."""

    index: int
    call: Call
    kind: str  # KERNEL, ALIAS (reshape-only / on_device) or COPY (device_copy)
    label: str  # the operators the callee runs, e.g. `nn.conv2d+nn.relu`
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    # Every operator of the callee is element-wise or broadcast: output element i reads only
    # element i of an input of the output's shape, so that input's bytes may be overwritten.
    elementwise: bool = False
    device_annotation: tuple[str, dict[str, AttrValue]] | None = None
    # For a step that only concatenates its inputs into contiguous slices of its result: the byte
    # offset of each input slot in the result (so producers could write there directly).
    concat_offsets: list[int] | None = None
    # A KERNEL step reading only constants and hoisted tensors: run once, its outputs are HOISTED.
    hoisted: bool = False


@dataclass
class Liveness:
    func: Function
    steps: list[Step]
    tensors: list[PlannedTensor]
    outputs: list[int]  # the tensors `main` returns, flattened
    params: list[list[int]] = field(default_factory=list)  # each parameter's tensors
    constants: dict[int, Constant] = field(default_factory=dict)  # tensor index -> its constant
    hoist_constants: bool = True  # whether constant-only steps were hoisted

    def planned(self) -> list[PlannedTensor]:
        """The tensors a memory plan places: outputs of steps that are not hoisted (parameters,
        constants and hoisted tensors are inputs to the plan)."""
        return [t for t in self.tensors if t.kind == CALL]

    def hoisted(self) -> list[PlannedTensor]:
        """Outputs of hoisted steps: computed once from constants, held outside the arenas."""
        return [t for t in self.tensors if t.kind == HOISTED]

    def hoisted_bytes(self) -> int:
        return sum(t.nbytes for t in self.hoisted())

    def devices(self) -> list[Device]:
        """Devices of the planned tensors, in first-seen order."""
        seen: dict[object, Device] = {}
        for t in self.planned():
            seen.setdefault(device_key(t.device), t.device)
        return list(seen.values())

    def lower_bound(self) -> dict[object, int]:
        """Per device key: the largest total of bytes live at one step, which no plan can beat."""
        delta: dict[object, list[int]] = {}
        n = len(self.steps)
        for t in self.planned():
            key = device_key(t.device)
            if key not in delta:
                delta[key] = [0] * (n + 1)
            d = delta[key]
            d[t.first] += t.nbytes
            d[t.last + 1] -= t.nbytes
        out: dict[object, int] = {}
        for key, d in delta.items():
            live = best = 0
            for v in d:
                live += v
                best = max(best, live)
            out[key] = best
        return out

    def no_reuse_bytes(self) -> int:
        return sum(t.nbytes for t in self.planned())


def device_key(device: Device) -> object:
    """Devices compare by value and kind (`1` and `"1"` differ)."""
    return (type(device).__name__, device)


@functools.cache
def _element_bytes(dtype: str) -> int:
    return dtype_bytes(dtype)


def tensor_bytes(t: TensorType, span: Span | None) -> int:
    """prod(shape) * ceil(bits * lanes / 8), TVM's `GetMemorySize`."""
    size = 1
    for dim in t.shape:
        if not isinstance(dim, int) or dim < 0:
            raise DiagnosticError(f"memory planning needs static shapes, got {t}", span)
        size *= dim
    return size * _element_bytes(t.dtype)


def flatten_type(t: Type | None, span: Span | None) -> list[TensorType]:
    """The tensors of a (nested) tuple type, left to right."""
    out: list[TensorType] = []
    stack: list[Type | None] = [t]
    while stack:
        cur = stack.pop()
        if isinstance(cur, TensorType):
            out.append(cur)
        elif isinstance(cur, TupleType):
            stack.extend(reversed(cur.fields))
        else:
            raise DiagnosticError(f"memory planning handles tensors and tuples of tensors, got {cur}", span)
    return out
