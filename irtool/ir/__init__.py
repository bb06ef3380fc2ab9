"""The IR: Relay expressions, types, ADTs, modules, walkers and structural equality."""

from irtool.ir.adt import (Clause, Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar,
                           PatternWildcard, TypeData)
from irtool.ir.equality import structural_equal, structural_hash
from irtool.ir.expr import (EMPTY_ATTRS, Attrs, Call, Constant, Expr, Function, GlobalVar, If, Let, Match,
                            MetaRef, Op, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from irtool.ir.module import IRModule, Program
from irtool.core.span import Span
from irtool.ir.types import (Any, FuncType, IncompleteType, RefType, TensorType, TupleType, Type, TypeCall,
                             TypeVar, dtype_bytes, parse_dtype, scalar_type)
from irtool.ir.visitor import ExprMutator, free_vars, post_order, use_counts

__all__ = [
    "Any", "Attrs", "Call", "Clause", "Constant", "Constructor", "EMPTY_ATTRS", "Expr", "ExprMutator",
    "FuncType", "Function", "GlobalVar", "IRModule", "If", "IncompleteType", "Let", "Match", "MetaRef", "Op",
    "Pattern", "PatternConstructor", "PatternTuple", "PatternVar", "PatternWildcard", "Program", "RefCreate",
    "RefRead", "RefType", "RefWrite", "Span", "TensorType", "Tuple", "TupleGetItem", "TupleType", "Type",
    "TypeCall", "TypeData", "TypeVar", "Var", "dtype_bytes", "free_vars", "parse_dtype", "post_order",
    "scalar_type", "structural_equal", "structural_hash", "use_counts",
]
