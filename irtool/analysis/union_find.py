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
