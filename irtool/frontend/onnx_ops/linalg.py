"""Det: the determinant of each (M, M) matrix in the last two axes.

Cofactor expansion along the rows, sharing minors: the minor of the last k rows on a column
set S is Σ over j ∈ S of ±a[M−k, j] times the minor of the last k − 1 rows on S ∖ {j}, so the
whole expansion is M·2^(M−1) products of elementwise operations over the batch (one fused
kernel), exact in real arithmetic. That grows with 2^M, so matrices up to 6×6 are taken.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from irtool.frontend.onnx_values import Builder, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import converter, required

LARGEST = 6


@converter("Det")
def _det(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "X")
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise Unsupported(f"the determinant of a {x.tensor} tensor (it needs square matrices in the last two axes)")
    if not x.dtype.startswith("float"):
        raise Unsupported(f"the determinant of {x.dtype} matrices")
    m = x.shape[-1]
    if m > LARGEST:
        raise Unsupported(f"the determinant of {m}x{m} matrices (irtool expands up to {LARGEST}x{LARGEST})")
    if m == 0:
        return [b.call("ones", [], shape=x.shape[:-2], dtype=x.dtype)]
    rows = [b.call("take", [x, b.const(np.array(i, dtype=np.int64))], axis=x.ndim - 2) for i in range(m)]
    a = [[b.call("take", [row, b.const(np.array(j, dtype=np.int64))], axis=x.ndim - 2) for j in range(m)]
         for row in rows]
    minors: dict[tuple[int, ...], Value] = {(j,): a[m - 1][j] for j in range(m)}
    for k in range(2, m + 1):
        r = m - k
        for columns in combinations(range(m), k):
            total: Value | None = None
            for position, j in enumerate(columns):
                term = b.call("multiply", [a[r][j], minors[columns[:position] + columns[position + 1:]]])
                if total is None:
                    total = term
                else:
                    total = b.call("subtract" if position % 2 else "add", [total, term])
            assert total is not None
            minors[columns] = total
    return [minors[tuple(range(m))]]
