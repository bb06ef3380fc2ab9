"""Shared subexpressions of a lowered store become `let`s, so TIR stays as small as its DAG.

The builder (`te.Builder`) memoises elements, so a fused group that reuses a value
(`%1 = add(%0, %0); %2 = add(%1, %1); ...`) yields an expression DAG whose tree is exponential
in the group's depth. Every later walk that sees a tree (structural hashing, printing, the TIR
passes, codegen) would pay for the tree. Where a store's tree is much larger than its DAG, each
shared node that is evaluated unconditionally gets a `let` right before the store; a kernel
without such sharing (every kernel of an ordinary model) is returned unchanged. The test is cheap
on such kernels: tree sizes are memoised over the whole kernel (register tiles share most of
their loads between stores), expressions are not rebuilt, and a store's DAG is only walked when
its tree is large.
"""

from __future__ import annotations

from irtool.ir.tir import BufferStore, IfExpr, LetStmt, PrimExpr, Stmt, Var, children, lanes_of
from irtool.ir.visitor import post_order
from irtool.tir_transform.mutator import TirRewriter, rebuild_expr

# A store is rewritten when its tree has more than BLOWUP times the nodes of its DAG, and more
# than MIN_TREE nodes; within it, a node used twice or more is bound when its tree has at least
# MIN_BOUND nodes (smaller shared values, such as one load, stay inline).
BLOWUP = 2
MIN_TREE = 256
MIN_BOUND = 4


def bind_shared(body: Stmt) -> Stmt:
    """`body` with every store whose value expands into a large tree rewritten over `let`s."""
    out = _Binder().rewrite_stmt(body)
    assert out is not None   # the binder drops nothing
    return out


class _Binder(TirRewriter):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        # Tree size by node id, over the whole kernel (its nodes live as long as the walk).
        self.tree: dict[int, int] = {}

    def rewrite_expr(self, root: PrimExpr) -> PrimExpr:
        return root   # only stores change, in `post`

    def post(self, original: Stmt, rebuilt: Stmt) -> Stmt | None:
        if not isinstance(rebuilt, BufferStore):
            return rebuilt
        roots = (*rebuilt.indices, rebuilt.value)
        size = sum(_tree_size(r, self.tree) for r in roots)
        if size <= MIN_TREE:
            return rebuilt
        order, uses, eager = _dag(roots)
        if size <= BLOWUP * len(order):
            return rebuilt
        tree = self.tree
        new: dict[int, PrimExpr] = {}
        bindings: list[tuple[Var, PrimExpr]] = []
        for node in order:
            kids = children(node)
            value = rebuild_expr(node, [new[id(k)] for k in kids]) if kids else node
            if (uses[id(node)] > 1 and id(node) in eager and tree[id(node)] >= MIN_BOUND
                    and lanes_of(node.dtype) == 1):
                var = Var(f"s{self.count}", node.dtype, node.span)
                self.count += 1
                bindings.append((var, value))
                value = var
            new[id(node)] = value
        stmt: Stmt = BufferStore(rebuilt.buffer, [new[id(i)] for i in rebuilt.indices], new[id(rebuilt.value)],
                                 rebuilt.span)
        for var, value in reversed(bindings):
            stmt = LetStmt(var, value, stmt, rebuilt.span)
        return stmt


def _tree_size(root: PrimExpr, memo: dict[int, int]) -> int:
    """How many nodes `root` has as a tree, from the sizes of the nodes already in `memo`."""
    todo: list[PrimExpr] = [root]
    while todo:
        node = todo[-1]
        if id(node) in memo:
            todo.pop()
            continue
        kids = children(node)
        missing = [k for k in kids if id(k) not in memo]
        if missing:
            todo.extend(missing)   # type: ignore[arg-type]
            continue
        todo.pop()
        memo[id(node)] = 1 + sum(memo[id(k)] for k in kids)
    return memo[id(root)]


def _dag(roots: tuple[PrimExpr, ...]) -> tuple[list[PrimExpr], dict[int, int], set[int]]:
    """The distinct nodes under `roots` in post-order, how many distinct parents (or roots) use
    each, and the ids of those evaluated whatever the conditions (not only inside an
    `if_then_else` arm, where hoisting a load could read out of bounds)."""
    order: list[PrimExpr] = []
    done: set[int] = set()
    for root in roots:
        for node in post_order(root, children):  # type: ignore[arg-type]
            if id(node) not in done:
                done.add(id(node))
                order.append(node)  # type: ignore[arg-type]
    uses: dict[int, int] = {}
    for node in (*roots, *(kid for parent in order for kid in children(parent))):
        uses[id(node)] = uses.get(id(node), 0) + 1
    eager: set[int] = set()
    todo = list(roots)
    while todo:
        node = todo.pop()
        if id(node) in eager:
            continue
        eager.add(id(node))
        kids = children(node)
        todo.extend(kids[:1] if isinstance(node, IfExpr) else kids)
    return order, uses, eager
