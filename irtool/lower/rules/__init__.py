"""TIR compute rules, one module per operator family; importing this package fills the rule
table that `compute_rule` reads (lowering owns it: the operator registry knows nothing of TIR)."""

from irtool.lower.rules import broadcast, elementwise, nn, reduce, transform
from irtool.lower.rules import quantize  # noqa: F401
from irtool.lower.rules._rule import RULES, Rule


def compute_rule(name: str) -> Rule | None:
    """The TIR compute rule of operator `name`, or None when it does not become a kernel."""
    return RULES.get(name)


__all__ = ["Rule", "broadcast", "compute_rule", "elementwise", "nn", "reduce", "transform"]
