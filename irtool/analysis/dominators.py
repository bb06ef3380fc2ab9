"""The indexed dataflow graph of a Relay function and its post-dominator tree.

This is TVM's `IndexedForwardGraph` + `DominatorTree::PostDom`, the analysis operator fusion
stands on: every dataflow node gets an index in post-DFS order, forward edges to its consumers
labelled with a fusion pattern kind, and an `extern_ref` flag when something that is not plain
dataflow (a function body, `let`, `if`, `match`, a reference) uses it. The post-dominator tree
gives each node the closest node that every one of its forward paths passes through.

Everything here is iterative: models are chains of 100k+ nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from irtool.analysis.box_rows import is_box_row
from irtool.ir.expr import (Call, Constant, Expr, Function, If, Let, Match, Op, RefCreate, RefRead, RefWrite,
                            Tuple, TupleGetItem, Var)
from irtool.ir.types import TensorType, TupleType
from irtool.ir.visitor import post_order
from irtool.ops.registry import OpPattern, get_op

# Pattern kinds as plain ints (hot loops compare them); the values are `OpPattern`'s.
ELEMWISE = int(OpPattern.ELEMWISE)
BROADCAST = int(OpPattern.BROADCAST)
INJECTIVE = int(OpPattern.INJECTIVE)
COMM_REDUCE = int(OpPattern.COMM_REDUCE)
OUT_ELEMWISE_FUSABLE = int(OpPattern.OUT_ELEMWISE_FUSABLE)
TUPLE = int(OpPattern.TUPLE)
OPAQUE = int(OpPattern.OPAQUE)

# Dtypes of scalar constants that code generators inline into a fused kernel (TVM's rule).
_SIMPLE_CONST_DTYPES = frozenset({"int32", "int64", "float32", "float64", "bool"})

# Expression kinds that become graph nodes; functions, operators, globals and constructors do not.
_GRAPH_KINDS = (Var, Constant, Call, Tuple, TupleGetItem, Let, If, RefCreate, RefRead, RefWrite, Match)


def is_opaque_function(fn: Function) -> bool:
    """Functions whose insides fusion leaves alone: already fused, or owned by an external compiler."""
    return fn.is_primitive or "Compiler" in fn.attrs


def _visit_children(node: Expr) -> tuple[Expr, ...]:
    """Operands in TVM's visiting order; pattern variables of `match` are not visited on their own."""
    if isinstance(node, Function):
        return () if is_opaque_function(node) else (*node.params, node.body)
    if isinstance(node, Match):
        return (node.data, *(c.rhs for c in node.clauses))
    return node.children()


def dataflow_post_order(root: Expr) -> list[Expr]:
    """Distinct nodes under `root`, children first, in the order TVM's visitors reach them.

    The insides of primitive and external-compiler functions are not entered.
    """
    return post_order(root, _visit_children)


@dataclass
class DataflowGraph:
    """Nodes in post-DFS order with their forward edges (consumer index, edge pattern)."""

    nodes: list[Expr] = field(default_factory=list)
    index: dict[int, int] = field(default_factory=dict)  # id(expr) -> position in `nodes`
    pattern: list[int] = field(default_factory=list)
    extern_ref: list[bool] = field(default_factory=list)
    outputs: list[list[tuple[int, int]]] = field(default_factory=list)

    def node_of(self, expr: Expr) -> int | None:
        return self.index.get(id(expr))

    def __len__(self) -> int:
        return len(self.nodes)


def _call_pattern(call: Call) -> int:
    if not isinstance(call.op, Op) or is_box_row(call):
        return OPAQUE
    op_def = get_op(call.op.name)
    return OPAQUE if op_def is None else int(op_def.pattern)


def _constant_pattern(const: Constant) -> int:
    data = const.data
    return ELEMWISE if data.ndim == 0 and str(data.dtype) in _SIMPLE_CONST_DTYPES else OPAQUE


def build_dataflow_graph(func: Expr, order: list[Expr] | None = None) -> DataflowGraph:
    """The indexed forward graph of `func` (needs `checked_type` on its nodes).

    `order` may pass a precomputed `dataflow_post_order(func)`. Edge patterns: a call's operands
    get the operator's pattern, except that a broadcast operand whose shape equals the result's
    counts as elementwise; tuple fields and projected tuples are injective; operands of `let`,
    `if`, `match`, references, function bodies and parameters are marked extern (never fused).
    """
    graph = DataflowGraph()
    pattern, extern, outputs, index = graph.pattern, graph.extern_ref, graph.outputs, graph.index

    def mark_extern(expr: Expr) -> None:
        i = index.get(id(expr))
        if i is not None:
            extern[i] = True

    def add_edge(expr: Expr, consumer: int, kind: int) -> None:
        i = index.get(id(expr))
        if i is not None:
            outputs[i].append((consumer, kind))

    if isinstance(func, Function) and is_opaque_function(func):
        return graph
    for node in order if order is not None else dataflow_post_order(func):
        if isinstance(node, Function):
            if is_opaque_function(node):
                continue
            for param in node.params:
                mark_extern(param)
            mark_extern(node.body)
            continue
        if not isinstance(node, _GRAPH_KINDS):
            continue
        me = len(graph.nodes)
        index[id(node)] = me
        graph.nodes.append(node)
        extern.append(False)
        outputs.append([])
        kind = OPAQUE
        if isinstance(node, Constant):
            kind = _constant_pattern(node)
        elif isinstance(node, Call):
            kind = _call_pattern(node)
            if not isinstance(node.op, Op):
                add_edge(node.op, me, OPAQUE)
            mark_extern(node.op)
            rtype = node.checked_type
            for arg in node.args:
                edge = kind
                if (edge == BROADCAST and isinstance(rtype, TensorType)
                        and isinstance(arg.checked_type, TensorType) and arg.checked_type.shape == rtype.shape):
                    edge = ELEMWISE
                add_edge(arg, me, edge)
        elif isinstance(node, Tuple):
            kind = TUPLE
            for f in node.fields:
                if isinstance(f.checked_type, TensorType):
                    add_edge(f, me, INJECTIVE)
                else:
                    mark_extern(f)
        elif isinstance(node, TupleGetItem):
            ttype = node.tuple_value.checked_type
            if isinstance(ttype, TupleType) and all(isinstance(t, TensorType) for t in ttype.fields):
                kind = INJECTIVE
                add_edge(node.tuple_value, me, INJECTIVE)
            else:
                mark_extern(node.tuple_value)
        elif isinstance(node, Match):
            mark_extern(node.data)
            for clause in node.clauses:
                mark_extern(clause.rhs)
        elif not isinstance(node, Var):  # let, if, references: no fusion through them
            for child in node.children():
                mark_extern(child)
        pattern.append(kind)
    return graph


_NO_PARENT = -1


@dataclass
class PostDominatorTree:
    """Immediate post-dominator of every graph node (`parent`, -1 for none), TVM's construction.

    `pattern[i]` is the strongest edge or node pattern met on the way from node i to its
    post-dominator: the fusion rules use it to know what lies between them.
    """

    parent: list[int]
    depth: list[int]
    pattern: list[int]

    @classmethod
    def build(cls, graph: DataflowGraph) -> PostDominatorTree:
        n = len(graph)
        parent = [_NO_PARENT] * n
        depth = [1] * n
        pattern = [OPAQUE] * n
        # Skew-binary jump pointers (the jump target's depth is a function of depth alone) make each
        # LCA query O(log n) with O(1) space per node; `jump_pattern` is the max pattern of the
        # nodes from a node up to, but excluding, its jump target.
        jump = list(range(n))
        jump_pattern = [OPAQUE] * n

        def lift(a: int, target_depth: int, acc: int) -> tuple[int, int]:
            while depth[a] > target_depth:
                j = jump[a]
                if j != a and depth[j] >= target_depth:
                    acc = max(acc, jump_pattern[a])
                    a = j
                else:
                    acc = max(acc, pattern[a])
                    a = parent[a]
            return a, acc

        def lca(a: int, b: int, acc: int) -> tuple[int, int]:
            if depth[a] > depth[b]:
                a, acc = lift(a, depth[b], acc)
            elif depth[b] > depth[a]:
                b, acc = lift(b, depth[a], acc)
            while a != b:
                if parent[a] == _NO_PARENT:  # both are roots of different trees
                    return _NO_PARENT, acc
                ja, jb = jump[a], jump[b]
                if ja != jb and ja != a:
                    acc = max(acc, jump_pattern[a], jump_pattern[b])
                    a, b = ja, jb
                else:
                    acc = max(acc, pattern[a], pattern[b])
                    a, b = parent[a], parent[b]
            return a, acc

        outputs, extern = graph.outputs, graph.extern_ref
        for i in range(n - 1, -1, -1):
            if extern[i] or not outputs[i]:
                continue
            edges = outputs[i]
            node, acc = edges[0]
            for consumer, kind in edges[1:]:
                if node == _NO_PARENT:
                    break
                node, acc = lca(node, consumer, max(acc, kind))
            if node == _NO_PARENT:
                continue
            parent[i] = node
            depth[i] = depth[node] + 1
            pattern[i] = acc
            p_jump = jump[node]
            if p_jump != node and depth[node] - depth[p_jump] == depth[p_jump] - depth[jump[p_jump]]:
                jump[i] = jump[p_jump]
                jump_pattern[i] = max(acc, jump_pattern[node], jump_pattern[p_jump])
            else:
                jump[i] = node
                jump_pattern[i] = acc
        return cls(parent, depth, pattern)
