"""Disjoint sets over node numbers 0..n-1 kept as a parent list (fusion and device grouping use it)."""

from __future__ import annotations


def find_root(parent: list[int], x: int) -> int:
    """The representative of `x`'s set; the path behind it is compressed so later finds stay short."""
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:
        parent[x], x = root, parent[x]
    return root


class UnionFind:
    """Disjoint sets over 0..n-1; a union keeps the smaller number as the representative."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        return find_root(self.parent, x)

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)
