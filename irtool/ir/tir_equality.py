"""Structural equality and hashing of PrimFuncs, modulo the names of variables and buffers.

Both are computed from one canonical form: a flat pre-order list of node keys in which a
variable or buffer is replaced by the order of its first appearance (a buffer's declaration is
spelled out there). Two functions are equal iff their forms are, so hash and equality agree by
construction. Spans are ignored; floats compare by bit pattern (`-0.0 != 0.0`, NaN == NaN).
The walk uses an explicit stack, so long `let` chains and deep expressions are fine.
"""

from __future__ import annotations

from irtool.ir.tir import (Allocate, AssertStmt, BinaryOp, Broadcast, Buffer, BufferLoad, BufferStore, Call,
                           Cast, FloatImm, For, IntImm, Node, PrimFunc, Ramp, Var,
                           children)


def tir_structural_equal(a: PrimFunc, b: PrimFunc) -> bool:
    return a is b or canonical_form(a) == canonical_form(b)


def tir_structural_hash(func: PrimFunc) -> int:
    return hash(canonical_form(func))


def canonical_form(func: PrimFunc) -> tuple[object, ...]:
    """The function as a tuple of hashable keys, identical for functions equal up to renaming."""
    numbers: dict[int, int] = {}
    out: list[object] = [("attrs", func.attrs)]

    def binder(obj: Var | Buffer) -> None:
        number = numbers.get(id(obj))
        if number is not None:
            out.append(("ref", number))
            return
        numbers[id(obj)] = len(numbers)
        if type(obj) is Buffer:
            out.append(("buffer", obj.shape, obj.dtype, obj.strides, obj.align, obj.scope))
        else:
            out.append(("var", obj.dtype))

    for param in func.params:
        binder(param)
    stack: list[Node] = [func.body]
    while stack:
        node = stack.pop()
        if isinstance(node, Var):
            binder(node)
            continue
        if isinstance(node, IntImm):
            out.append(("int", node.value, node.dtype))
            continue
        if isinstance(node, FloatImm):
            out.append(("float", node.value.hex(), node.dtype))
            continue
        kids = children(node)
        out.append((type(node).__name__, len(kids), _own_fields(node)))
        if isinstance(node, (BufferLoad, BufferStore, Allocate)):
            binder(node.buffer)
        stack.extend(reversed(kids))
    return tuple(out)


def _own_fields(node: Node) -> object:
    """The non-child fields that make two nodes of one class differ."""
    if isinstance(node, BinaryOp):
        return node.op
    if isinstance(node, Cast):
        return node.dtype
    if isinstance(node, (Ramp, Broadcast)):
        return node.lanes
    if isinstance(node, Call):
        return node.name
    if isinstance(node, For):
        return node.kind
    if isinstance(node, AssertStmt):
        return node.message
    return None
