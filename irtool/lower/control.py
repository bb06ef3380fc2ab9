"""Lowering functions that are not pure dataflow: fused groups anywhere become kernels.

A body with `if`, `match`, closures, references, constructors or calls of other functions keeps
all of them (docs/native-relay.md: native code compiles the whole language); only what the
dataflow lowering (`irtool.lower.module`) does to a primitive call is done wherever one
appears — in branches, clauses and closure bodies. A call of a global marked `Primitive=1` (a
partitioned function) is lowered as one fused group, like a primitive literal.
The walk is iterative and does not enter primitive function literals.
"""

from __future__ import annotations

from irtool.ir.adt import Clause, Constructor
from irtool.ir.expr import (Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, RefRead,
                            RefWrite, Tuple, TupleGetItem, Var)
from irtool.ir.types import TensorType, TupleType, type_parts
from irtool.ir.visitor import post_order
from irtool.lower.module import ModuleLowering, _typed
from irtool.lower.primitive import type_of


def needs_control_lowering(fn: Function) -> bool:
    """Whether `fn` has anything the dataflow lowering does not take: control flow, closures,
    references, constructors, calls of globals or of closures, parameters that are not tensors
    of static shape."""
    if any(not isinstance(part, (TensorType, TupleType)) or (isinstance(part, TensorType) and not part.is_static)
           for p in fn.params for part in type_parts(type_of(p))):
        return True   # values of dynamic shape are boxed too (docs/native-relay.md)
    nodes = post_order(fn.body, _children)
    # A literal without operators called in place (fuse-ops wraps tuple plumbing so) is dataflow.
    plumbing = {id(n.op) for n in nodes if isinstance(n, Call) and isinstance(n.op, Function)
                and not any(isinstance(m, Call) and isinstance(m.op, Op) for m in post_order(n.op.body))}
    for node in nodes:
        if isinstance(node, (If, Match, RefCreate, RefRead, RefWrite, Constructor, GlobalVar)):
            return True
        if isinstance(node, Function) and not node.is_primitive and id(node) not in plumbing:
            return True
        if isinstance(node, Call) and not isinstance(node.op, (Op, Function)):
            return True
    return False


def lower_with_control_flow(lowering: ModuleLowering, fn: Function) -> Function:
    """`fn` with every primitive call lowered by `lowering` and everything else rebuilt as it was."""
    new: dict[int, Expr] = {}

    def n(e: Expr) -> Expr:
        return new.get(id(e), e)

    for node in post_order(fn, _children):
        out: Expr
        if isinstance(node, Call):
            out = _lower_call(lowering, node, [n(a) for a in node.args], n(node.op))
        elif isinstance(node, Function):
            out = node if node.is_primitive else Function(node.params, n(node.body), node.ret_type, node.type_params,
                                                          node.attrs, node.span)
        elif isinstance(node, Tuple):
            out = Tuple([n(f) for f in node.fields], node.span)
        elif isinstance(node, TupleGetItem):
            out = TupleGetItem(n(node.tuple_value), node.index, node.span)
        elif isinstance(node, Let):
            out = Let(node.var, n(node.value), n(node.body), node.span)
        elif isinstance(node, If):
            out = If(n(node.cond), n(node.true_branch), n(node.false_branch), node.span)
        elif isinstance(node, Match):
            out = Match(n(node.data), [Clause(c.lhs, n(c.rhs)) for c in node.clauses], node.complete, node.span)
        elif isinstance(node, RefCreate):
            out = RefCreate(n(node.value), node.span)
        elif isinstance(node, RefRead):
            out = RefRead(n(node.ref), node.span)
        elif isinstance(node, RefWrite):
            out = RefWrite(n(node.ref), n(node.value), node.span)
        else:   # variables, constants, globals, constructors, operators
            continue
        if out.checked_type is None:
            _typed(out, node)
        new[id(node)] = out
    result = new[id(fn)]
    assert isinstance(result, Function)
    return result


def _lower_call(lowering: ModuleLowering, call: Call, args: list[Expr], op: Expr) -> Expr:
    if isinstance(op, Op):
        return lowering.rewrite_call(call, args)
    if isinstance(op, Function) and op.is_primitive:
        return lowering.lower_primitive_call(op, args, call)
    if isinstance(op, GlobalVar):
        callee = lowering.mod.functions.get(op.name_hint)
        if isinstance(callee, Function) and callee.is_primitive:
            return lowering.lower_primitive_call(callee, args, call)
    return Call(op, args, call.attrs, call.span, call.type_args)


def _children(node: Expr) -> tuple[Expr, ...]:
    """Operands to lower first: primitive function literals are not entered (their call is lowered
    as a whole), nor are the callees of operator, global and constructor calls."""
    if isinstance(node, Call):
        if isinstance(node.op, (Op, GlobalVar, Constructor)) or (isinstance(node.op, Function)
                                                                  and node.op.is_primitive):
            return node.args
        return (node.op, *node.args)
    if isinstance(node, Function):
        return () if node.is_primitive else (node.body,)
    if isinstance(node, (Var, Constant)):
        return ()
    return node.children()
