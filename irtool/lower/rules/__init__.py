"""TIR compute rules, one module per operator family; importing this package fills the rule
table that `compute_rule` reads (lowering owns it: the operator registry knows nothing of TIR)."""

from irtool.lower.rules import bitwise, broadcast, elementwise, math, nn, reduce, transform
from irtool.lower.rules import indexing, normalization, quantize, resample
from irtool.lower.rules._rule import RULES, Rule


def compute_rule(name: str) -> Rule | None:
    """The TIR compute rule of operator `name`, or None when it does not become a kernel."""
    return RULES.get(name)


__all__ = ["Rule", "bitwise", "broadcast", "compute_rule", "elementwise", "indexing", "math", "nn", "normalization", "quantize",
           "reduce", "resample", "transform"]
