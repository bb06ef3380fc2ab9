"""Analyses: type inference, well-formedness, liveness."""
