"""Operators: one declaration per operator (see `registry.py`)."""

from irtool.ops.registry import AttrField, OpDef, OpPattern, TypeRelError, get_op, op_names, register

__all__ = ["AttrField", "OpDef", "OpPattern", "TypeRelError", "get_op", "op_names", "register"]
