"""The global call graph: who refers to whom, callee-first order, recursive cycles."""

from __future__ import annotations

from irtool.ir.expr import Expr, Function, GlobalVar
from irtool.ir.visitor import post_order


def referenced_globals(func: Expr) -> set[str]:
    """Names of every global a function refers to (called or not), as TVM's call graph counts them.

    A lowered `primfn` refers to no globals.
    """
    if not isinstance(func, Function):
        return set()
    return {n.name_hint for n in post_order(func) if isinstance(n, GlobalVar)}


def callees_first(calls: dict[str, set[str]]) -> list[str]:
    """Globals ordered so that each comes after the globals it refers to (cycles broken arbitrarily)."""
    order: list[str] = []
    done: set[str] = set()
    for start in calls:
        if start in done:
            continue
        done.add(start)
        stack: list[tuple[str, list[str]]] = [(start, sorted(calls[start]))]
        while stack:
            name, pending = stack[-1]
            while pending and (pending[-1] in done or pending[-1] not in calls):
                pending.pop()
            if pending:
                nxt = pending.pop()
                done.add(nxt)
                stack.append((nxt, sorted(calls[nxt])))
            else:
                stack.pop()
                order.append(name)
    return order


def cyclic_globals(calls: dict[str, set[str]]) -> set[str]:
    """Globals on a cycle of the call graph (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    scc_stack: list[str] = []
    out: set[str] = set()
    counter = 0
    for root in calls:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = []
        index[root] = low[root] = counter
        counter += 1
        scc_stack.append(root)
        on_stack.add(root)
        work.append((root, sorted(c for c in calls[root] if c in calls)))
        while work:
            name, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    scc_stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(c for c in calls[nxt] if c in calls)))
                elif nxt in on_stack:
                    low[name] = min(low[name], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[name])
            if low[name] == index[name]:
                component = []
                while True:
                    member = scc_stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == name:
                        break
                if len(component) > 1 or name in calls[name]:
                    out.update(component)
    return out
