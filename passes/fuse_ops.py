"""`fuse-ops`: group operators into primitive functions, with TVM's FuseOps rules.

The dataflow graph of each function and its post-dominator tree come from
`irtool.analysis.dominators`. A union-find partition then runs TVM's three phases over the nodes in
post-DFS order, each node trying to join the group of its immediate post-dominator:

- phase 0: an out-elementwise-fusable op (conv2d, dense, pooling, softmax) absorbs the
  elementwise/broadcast ops up to its post-dominator; elementwise/broadcast ops fuse forward when
  every path is at most injective (the sink may be a reduction or an anchored group);
- phase 1: the same elementwise rule, and injective ops and tuples fuse forward;
- phase 2: injective ops fuse into intermediate tuples that already joined an injective consumer.

A group never grows beyond `max_depth` nodes. Each group then becomes
`fn (%p0: T0, ..., Primitive=1) -> T { ... }` called in place on the group's outside inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from irtool.analysis.dominators import (BROADCAST, COMM_REDUCE, ELEMWISE, INJECTIVE, OPAQUE,
                                        OUT_ELEMWISE_FUSABLE, TUPLE, DataflowGraph, PostDominatorTree,
                                        build_dataflow_graph, dataflow_post_order, is_opaque_function)
from irtool.analysis.typecheck import infer_types
from irtool.analysis.union_find import find_root
from irtool.ir.expr import Attrs, Call, Expr, Function, Op, Tuple, TupleGetItem, Var
from irtool.ir.module import IRModule
from irtool.ir.types import Type
from irtool.ir.visitor import ExprMutator
from irtool.lower.primitive import type_of
from irtool.ops.registry import get_op
from irtool.passes.base import ModulePass
from irtool.core.diagnostics import DiagnosticError

PathCondition = Callable[[int, bool], bool]


def _at_most_injective(kind: int, is_sink: bool) -> bool:
    return kind <= INJECTIVE


def _at_most_broadcast(kind: int, is_sink: bool) -> bool:
    return kind <= BROADCAST


def _into_elemwise_sink(kind: int, is_sink: bool) -> bool:
    """Injective ops may sit on the paths; the sink may also be a reduction or an anchored group."""
    return kind <= OUT_ELEMWISE_FUSABLE if is_sink else kind <= INJECTIVE


class GraphPartitioner:
    """Union-find groups over the graph nodes and TVM's fusion phases.

    Every node starts as its own group record (index = node index). A record keeps the pattern
    and node count it had when it stopped being a root, exactly as TVM's records do: the phases
    read a node's own record, not only its root's.
    """

    def __init__(self, graph: DataflowGraph, tree: PostDominatorTree, max_depth: int) -> None:
        n = len(graph)
        self.graph = graph
        self.tree = tree
        self.max_depth = max_depth
        self.uf = list(range(n))
        self.pattern = list(graph.pattern)
        self.anchored = [p == OUT_ELEMWISE_FUSABLE for p in graph.pattern]
        self.num_nodes = [1] * n

    def find(self, g: int) -> int:
        return find_root(self.uf, g)

    def roots(self) -> list[int]:
        return [self.find(i) for i in range(len(self.uf))]

    def run(self, opt_level: int) -> list[int]:
        """The group root of every node (opt level 0: every node alone)."""
        if opt_level > 0:
            for phase in range(3):
                self._run_phase(phase)
        return self.roots()

    def _merge(self, child: int, parent: int) -> None:
        child, parent = self.find(child), self.find(parent)
        if child == parent:
            return
        self.num_nodes[parent] += self.num_nodes[child]
        self.uf[child] = parent
        if self.anchored[child]:
            self.anchored[parent] = True
            self.pattern[parent] = max(self.pattern[child], self.pattern[parent])

    def _between(self, src: int, sink: int) -> list[int]:
        """Nodes on the forward paths from `src` to its post-dominator `sink`, both excluded.

        The set depends only on the graph, so one walk serves the size limit, the path check and
        the merge of a fusion attempt.
        """
        outputs = self.graph.outputs
        if all(c == sink for c, _ in outputs[src]):
            return []
        seen: set[int] = {sink}
        stack = [c for c, _ in outputs[src]]
        order: list[int] = []
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            order.append(v)
            stack.extend(c for c, _ in outputs[v])
        return order

    def _check_path(self, between: list[int], sink: int, cond: PathCondition) -> bool:
        """Does every group met on the way to the post-dominator `sink` satisfy `cond`?"""
        pattern, find = self.pattern, self.find
        return cond(pattern[find(sink)], True) and all(cond(pattern[find(v)], False) for v in between)

    def _commit_fuse(self, src: int, between: list[int], sink: int) -> None:
        """Merge `src` and everything between it and `sink` into `sink`'s group."""
        self._merge(src, sink)
        for v in between:
            self._merge(v, sink)

    def _run_phase(self, phase: int) -> None:
        parent_of, dom_pattern, pattern, find = self.tree.parent, self.tree.pattern, self.pattern, self.find
        num_nodes = self.num_nodes
        for nid in range(len(self.uf)):
            kind = pattern[nid]
            sink = parent_of[nid]
            if kind == OPAQUE or sink < 0:
                continue
            between = self._between(nid, sink)
            # TVM's size limit: the sink's group, plus the records of `nid` and of the nodes between.
            size = num_nodes[find(sink)] + num_nodes[nid] + sum(num_nodes[v] for v in between)
            if size > self.max_depth:
                continue
            if phase == 2:
                # Injective producers join an intermediate tuple already fused into its consumer.
                if kind > INJECTIVE:
                    continue
                sink_root = find(sink)
                if pattern[sink_root] == TUPLE:
                    continue
                if (pattern[sink] == TUPLE and pattern[sink_root] <= INJECTIVE
                        and self._check_path(between, sink, _at_most_injective)):
                    self._commit_fuse(nid, between, sink)
                continue
            if find(nid) == find(sink) or pattern[sink] == TUPLE:
                continue
            if kind == OUT_ELEMWISE_FUSABLE:
                if (phase == 0 and dom_pattern[nid] == ELEMWISE
                        and self._check_path(between, sink, _at_most_broadcast)):
                    self._commit_fuse(nid, between, sink)
            elif kind <= BROADCAST:
                through = dom_pattern[nid]
                if ((through <= INJECTIVE or through == COMM_REDUCE)
                        and self._check_path(between, sink, _into_elemwise_sink)):
                    self._commit_fuse(nid, between, sink)
            elif kind in (INJECTIVE, TUPLE):
                # Deferred to phase 1 so that anchored ops finish absorbing their epilogues first.
                if phase == 1 and self._check_path(between, sink, _at_most_injective):
                    self._commit_fuse(nid, between, sink)
            # A reduction never fuses forward: it can only end a group.


class _GroupParams:
    """The parameters of one fused function: one per distinct outside argument expression."""

    def __init__(self) -> None:
        self.by_arg: dict[int, tuple[Var, Expr]] = {}
        self.has_call = False

    def param_for(self, arg: Expr, ty: Type) -> Var:
        entry = self.by_arg.get(id(arg))
        if entry is None:
            entry = (Var(f"p{len(self.by_arg)}", ty, arg.span), arg)
            self.by_arg[id(arg)] = entry
        return entry[0]


class FuseRewriter(ExprMutator):
    """Turns each group into a call of a `Primitive=1` function (TVM's FuseMutator)."""

    def __init__(self, graph: DataflowGraph, roots: list[int]) -> None:
        super().__init__()
        self.graph = graph
        self.roots = roots
        self.groups: dict[int, _GroupParams] = {}

    def run(self, order: Sequence[Expr]) -> Expr:
        for node in order:
            if id(node) not in self.memo:
                self.memo[id(node)] = self.rewrite(node)
        return self.memo[id(order[-1])]

    def _group_of(self, expr: Expr) -> int | None:
        i = self.graph.index.get(id(expr))
        return None if i is None else self.roots[i]

    def _inside(self, args: Sequence[Expr], group: int) -> list[Expr]:
        """Rewritten operands, with those computed outside `group` replaced by its parameters."""
        info = self.groups.setdefault(group, _GroupParams())
        out: list[Expr] = []
        for arg in args:
            new_arg = self.new(arg)
            out.append(new_arg if self._group_of(arg) == group else info.param_for(new_arg, type_of(arg, "fuse-ops")))
        return out

    def _make_function(self, group: int, root: Expr, body: Expr) -> Expr:
        info = self.groups[group]
        params = [p for p, _ in info.by_arg.values()]
        args = [a for _, a in info.by_arg.values()]
        fn = Function(params, body, type_of(root, "fuse-ops"), attrs=Attrs({"Primitive": int(info.has_call)}),
                      span=root.span)
        return Call(fn, args, span=root.span)

    def rewrite_call(self, node: Call) -> Expr:
        if not isinstance(node.op, Op):
            return super().rewrite_call(node)
        op_def = get_op(node.op.name)
        extra = op_def.extra if op_def is not None else {}
        if extra.get("non_computational"):
            return super().rewrite_call(node)
        if extra.get("stop_fusion"):
            return self.new(node.args[0])
        me = self.graph.index[id(node)]
        group = self.roots[me]
        new_call = Call(node.op, self._inside(node.args, group), node.attrs, node.span, node.type_args)
        self.groups[group].has_call = True
        return self._make_function(group, node, new_call) if group == me else new_call

    def rewrite_tuple(self, node: Tuple) -> Expr:
        me = self.graph.index[id(node)]
        group = self.roots[me]
        if group == me:  # a tuple ending a group stays outside, its fields fused separately
            return super().rewrite_tuple(node)
        return Tuple(self._inside(node.fields, group), node.span)

    def rewrite_tuple_get_item(self, node: TupleGetItem) -> Expr:
        me = self.graph.index[id(node)]
        group = self.roots[me]
        new_node = TupleGetItem(self._inside([node.tuple_value], group)[0], node.index, node.span)
        if group != me:
            return new_node
        if self._group_of(node.tuple_value) != group:  # projection of an opaque producer's tuple
            return super().rewrite_tuple_get_item(node)
        return self._make_function(group, node, new_node)

    def rewrite_function(self, node: Function) -> Expr:
        return node if is_opaque_function(node) else super().rewrite_function(node)


def fuse_function(fn: Function, max_depth: int = 256, opt_level: int = 2) -> Function:
    """`fn` with its operators grouped into primitive functions (types must be inferred)."""
    if is_opaque_function(fn):
        return fn
    order = dataflow_post_order(fn)
    graph = build_dataflow_graph(fn, order)
    roots = GraphPartitioner(graph, PostDominatorTree.build(graph), max_depth).run(opt_level)
    out = FuseRewriter(graph, roots).run(order)
    assert isinstance(out, Function)
    return out


@dataclass
class FuseOpsPass(ModulePass):
    """TVM's FuseOps: operators become calls of `Primitive=1` functions, one per fused group."""

    name: ClassVar[str] = "fuse-ops"
    description: ClassVar[str] = "fuse operators into primitive functions (TVM FuseOps rules)"
    max_depth: int = 256
    opt_level: int = 2

    def apply(self, mod: IRModule) -> IRModule:
        if self.max_depth < 1:
            raise DiagnosticError(f"fuse-ops: max-depth must be at least 1, got {self.max_depth}")
        if self.opt_level < 0:
            raise DiagnosticError(f"fuse-ops: opt-level must not be negative, got {self.opt_level}")
        infer_types(mod)
        out = mod.copy()
        for name, fn in mod.relay_functions():
            out.functions[name] = fuse_function(fn, self.max_depth, self.opt_level)
        return out
