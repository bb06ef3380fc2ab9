"""The one loop-dependence analysis: whether distinct iterations of a loop touch disjoint
elements of what they write (`iterations_disjoint`: the test behind `parallel` and `vectorized`
loops, marked by hand with `tir-parallelize{loop=i}`/`tir-vectorize` or chosen by `tir-parallelize`),
and which loops of a nest pick the element a statement updates (`element_pickers`: what
`tir-reorder` must keep in order). Both read the same table of accesses (`written_accesses`).

Disjoint iterations: a loop `%v` is safe when every buffer its body writes (other than scratch
allocated inside the body) has a dimension in which *every* access, load or store, indexes
`c * %v + inv + r`: the same coefficient `c != 0`, the same loop-invariant part `inv` (literals,
variables bound outside the loop), and a remainder `r` that is a linear combination of inner
loop variables and vector lanes whose combined range over all accesses is narrower than `|c|`.
Scheduled kernels write one output from several statements (a register tile stores
`%out[%b, %mo * 6 + 1, %oy, ...]`, `%out[%b, %mo * 6 + 2, %oy, ...]`, ...), which this covers.
Two dimensions may also count as one (`i * W + j`, W the second's extent: lowered kernels that
walk a flattened pixel index store at `[floordiv(p, W), floormod(p, W)]`, which is `p`, and
weight packing at `[floordiv(o, 16), k, floormod(o, 16)]`; accesses are in bounds, so `j < W`).
Then the elements iteration `v` touches in that dimension lie in `c * v + inv + [lo, hi]`,
disjoint for distinct `v`. A reduction over `%v` (`%acc[i] = %acc[i] + ...`) has `c = 0` and is
refused.

Element pickers (reorder): when every buffer the nest writes is accessed at one and the same
index tuple throughout the body, the loops whose variable is a whole dimension of that tuple pick
*which* element is touched; iterations touching one element differ only in the other loops, so
a reorder is safe if it keeps those other loops in their relative order (`%C[i, j] = %C[i, j] +
...` may swap `i` and `j`, and the reduction loop may move as long as it stays in order among the
non-spatial loops).
"""

from __future__ import annotations

from irtool.ir.tir import (Allocate, BinaryOp, Broadcast, Buffer, BufferLoad, BufferStore, Cast, FloatImm, For,
                           IntImm, LetStmt, PrimExpr, Ramp, Stmt, Var, children, int_range, is_int)
from irtool.tir_transform.mutator import stmt_parts, walk_exprs, walk_stmts

def expr_key(expr: PrimExpr) -> tuple[object, ...]:
    """A hashable key equal for structurally identical expressions over the same variables."""
    out: list[object] = []
    for node in walk_exprs([expr]):
        if isinstance(node, (Var, Buffer)):
            out.append(id(node))
        elif isinstance(node, IntImm):
            out.append(("int", node.dtype, node.value))
        elif isinstance(node, FloatImm):
            out.append(("float", node.dtype, node.value.hex()))
        else:
            out.append((type(node).__name__, node.dtype, getattr(node, "op", None), getattr(node, "name", None),
                        getattr(node, "lanes", None), id(getattr(node, "buffer", None)), len(children(node))))
    return tuple(out)



def written_accesses(body: Stmt) -> list[tuple[Buffer, list[tuple[PrimExpr, ...]]]]:
    """Each buffer `body` writes (not allocated inside it), with the index tuples of all its
    accesses there, loads and stores, in program order."""
    local: set[int] = set()
    accesses: dict[int, list[tuple[PrimExpr, ...]]] = {}
    written: dict[int, Buffer] = {}
    for stmt in walk_stmts(body):
        if isinstance(stmt, Allocate):
            local.add(id(stmt.buffer))
        elif isinstance(stmt, BufferStore):
            written[id(stmt.buffer)] = stmt.buffer
            accesses.setdefault(id(stmt.buffer), []).append(stmt.indices)
        for node in walk_exprs(stmt_parts(stmt)[0]):
            if isinstance(node, BufferLoad):
                accesses.setdefault(id(node.buffer), []).append(node.indices)
    return [(buf, accesses[key]) for key, buf in written.items() if key not in local]


def element_pickers(body: Stmt, loop_vars: list[Var]) -> tuple[list[tuple[Buffer, set[int]]], str | None]:
    """For each buffer `body` writes (not allocated inside it): the ids of the `loop_vars` that are
    a whole dimension of its one index tuple; or a reason why the accesses are not analysable."""
    var_ids = {id(v) for v in loop_vars}
    region = var_ids | {id(s.var) for s in walk_stmts(body) if isinstance(s, (For, LetStmt))}
    out: list[tuple[Buffer, set[int]]] = []
    for buf, tuples in written_accesses(body):
        if len({tuple(expr_key(i) for i in indices) for indices in tuples}) != 1:
            return [], f"`%{buf.name}` is accessed at different indices"
        picked = {id(v) for v in (_offset_var(i, region) for i in tuples[0]) if v is not None and id(v) in var_ids}
        out.append((buf, picked))
    return out, None


def _offset_var(index: PrimExpr, region: set[int]) -> Var | None:
    """`v` when the index is `v` plus or minus terms that are the same on every iteration of the
    region (no loads, no variable bound in it): then the index is a one-to-one function of `v`."""
    node, others = index, []
    while type(node) is BinaryOp and node.op in ("add", "sub"):
        a_has = any(type(n) is Var and id(n) in region for n in walk_exprs([node.a]))
        if node.op == "add" and not a_has:
            node, other = node.b, node.a
        else:
            node, other = node.a, node.b
        others.append(other)
    if type(node) is not Var or id(node) not in region:
        return None
    for n in walk_exprs(others):
        if type(n) is BufferLoad or (type(n) is Var and id(n) in region):
            return None
    return node


Linear = dict[object, int]   # atom -> coefficient; the atom 1 is the constant term


class _Region:
    """What the body of one loop binds: its inner loops' ranges, its lets, its vector lanes."""

    def __init__(self, loop: For) -> None:
        self.loop = loop
        self.ranges: dict[object, tuple[int, int]] = {}
        self.lets: dict[int, PrimExpr] = {}
        self.bound: set[int] = {id(loop.var)}
        for stmt in walk_stmts(loop.body):
            if isinstance(stmt, For):
                self.bound.add(id(stmt.var))
                if type(stmt.begin) is IntImm and type(stmt.end) is IntImm and stmt.end.value > stmt.begin.value:
                    self.ranges[id(stmt.var)] = (stmt.begin.value, stmt.end.value - 1)
            elif isinstance(stmt, LetStmt):
                self.bound.add(id(stmt.var))
                self.lets[id(stmt.var)] = stmt.value

    def invariant(self, expr: PrimExpr) -> bool:
        """No variable bound in the region (directly or through a let) and no load."""
        return not any(type(n) is BufferLoad or (type(n) is Var and id(n) in self.bound) for n in walk_exprs([expr]))

    def linear(self, root: PrimExpr) -> Linear | None:
        """`root` as a linear combination of atoms (region loop variables, vector lanes,
        loop-invariant subexpressions), or None. Post-order over an explicit stack; lets bound in
        the region are expanded."""
        results: list[Linear | None] = []
        todo: list[tuple[PrimExpr, bool]] = [(root, False)]
        while todo:
            node, ready = todo.pop()
            if type(node) is Var and id(node) in self.lets:
                todo.append((self.lets[id(node)], False))
                continue
            kids = self._operands(node)
            if not ready and kids:
                todo.append((node, True))
                todo.extend((k, False) for k in reversed(kids))
                continue
            args = results[len(results) - len(kids):] if kids else []
            if kids:
                del results[len(results) - len(kids):]
            results.append(self._combine(node, args))
        return results[0]

    def _operands(self, node: PrimExpr) -> tuple[PrimExpr, ...]:
        if type(node) is BinaryOp and node.op in ("add", "sub", "mul"):
            return (node.a, node.b)
        if type(node) is Ramp:
            return (node.base,)
        if type(node) is Broadcast:
            return (node.value,)
        if type(node) is Cast and is_int(node.dtype) and is_int(node.value.dtype) and _widens(node):
            return (node.value,)
        return ()

    def _combine(self, node: PrimExpr, args: list[Linear | None]) -> Linear | None:
        if any(a is None for a in args):
            return None
        forms: list[Linear] = args  # type: ignore[assignment]
        if type(node) is IntImm:
            return {1: node.value}
        if type(node) is Var and id(node) in self.bound:
            return {id(node): 1}
        if type(node) is Broadcast or type(node) is Cast and forms:
            return forms[0]
        if type(node) is Ramp:
            if type(node.stride) is not IntImm:
                return None
            lane = ("lane", id(node))
            self.ranges[lane] = (0, node.lanes - 1)
            return _add(forms[0], {lane: node.stride.value}, 1)
        if type(node) is BinaryOp and forms:
            a, b = forms
            if node.op in ("add", "sub"):
                return _add(a, b, 1 if node.op == "add" else -1)
            for x, y in ((a, b), (b, a)):
                if set(y) <= {1}:
                    return {k: c * y.get(1, 0) for k, c in x.items()}
        if self.invariant(node):
            return {("inv", expr_key(node)): 1}
        return None


def _widens(cast: Cast) -> bool:
    (lo, hi), (slo, shi) = int_range(cast.dtype), int_range(cast.value.dtype)
    return lo <= slo and shi <= hi


def _add(a: Linear, b: Linear, sign: int) -> Linear:
    out = dict(a)
    for k, c in b.items():
        out[k] = out.get(k, 0) + sign * c
    return {k: c for k, c in out.items() if c}


def _dense(buf: Buffer) -> bool:
    if buf.strides is None:
        return True
    acc, expect = 1, []
    for d in reversed(buf.shape):
        expect.append(acc)
        acc *= d
    return tuple(reversed(expect)) == buf.strides


def _separates(region: _Region, forms: list[Linear | None]) -> bool:
    """Whether the index forms (one per access, of one dimension) pin the loop's iteration."""
    var = id(region.loop.var)
    if any(f is None for f in forms):
        return False
    coeffs = {f.get(var, 0) for f in forms}  # type: ignore[union-attr]
    if len(coeffs) != 1 or 0 in coeffs:
        return False
    invariant = {tuple(sorted((repr(k), c) for k, c in f.items() if type(k) is tuple and k[0] == "inv"))
                 for f in forms}  # type: ignore[union-attr]
    if len(invariant) != 1:
        return False
    lo, hi = None, None
    for form in forms:
        a = b = form.get(1, 0)  # type: ignore[union-attr]
        for k, c in form.items():  # type: ignore[union-attr]
            if k == 1 or k == var or (type(k) is tuple and k[0] == "inv"):
                continue
            if k not in region.ranges:
                return False
            r0, r1 = region.ranges[k]
            a, b = a + min(c * r0, c * r1), b + max(c * r0, c * r1)
        lo = a if lo is None else min(lo, a)
        hi = b if hi is None else max(hi, b)
    return hi - lo < abs(next(iter(coeffs)))  # type: ignore[operator]


def iterations_disjoint(loop: For) -> str | None:
    """None when distinct iterations of `loop` touch disjoint elements of everything they
    write (so the loop may run on threads, or in vector lanes); otherwise the reason why not."""
    region = _Region(loop)
    for buf, tuples in written_accesses(loop.body):
        forms = [region.linear(i) for t in tuples for i in t]
        if all(f is not None and not f.get(id(loop.var)) for f in forms):
            return f"every iteration updates the same elements of `%{buf.name}`"
        if not _dense(buf):
            return f"`%{buf.name}` has custom strides"
        dims = range(len(buf.shape))
        pairs = [(d,) for d in dims] + [(d, e) for d in dims for e in dims if d < e]
        if not any(_separates(region, [region.linear(_pair_index(buf, t, pair)) for t in tuples]) for pair in pairs):
            return f"iterations may touch the same elements of `%{buf.name}`"
    return None


def _pair_index(buf: Buffer, indices: tuple[PrimExpr, ...], dims: tuple[int, ...]) -> PrimExpr:
    """The index of one dimension, or of two dimensions `d < e` taken as one (`i * W + j`, W the
    extent of `e`, which is one-to-one on in-bounds pairs; `floordiv(p, W), floormod(p, W)` is `p`
    itself: a flattened pixel index, or a packed channel block)."""
    if len(dims) == 1:
        return indices[dims[0]]
    hi, lo = indices[dims[0]], indices[dims[1]]
    width = buf.shape[dims[1]]
    if (type(hi) is BinaryOp and hi.op == "floordiv" and type(lo) is BinaryOp and lo.op == "floormod"
            and type(hi.b) is IntImm and type(lo.b) is IntImm and hi.b.value == lo.b.value == width
            and expr_key(hi.a) == expr_key(lo.a)):
        return hi.a
    return BinaryOp("add", BinaryOp("mul", hi, IntImm(width, hi.dtype)), lo)
