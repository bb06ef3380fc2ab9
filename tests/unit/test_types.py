"""Relay types as DAGs: depth and holes known at construction, equality and hashing that visit
each shared part once, text written from a stack, and the dtype table. Expected texts and
counts are worked out by hand from the definitions (a doubling chain of depth k has 2**k leaves)."""

from __future__ import annotations

import pytest

from irtool.ir import Function, Var, structural_equal, structural_hash
from irtool.ir.types import (MAX_TYPE_DEPTH, FuncType, IncompleteType, RefType, TensorType, TupleType, Type, TypeCall,
                             TypeVar, parse_dtype, type_text_prefix, type_to_text)

F32 = TensorType((), "float32")
I32 = TensorType((), "int32")


def doubling(depth: int, leaf: Type = F32) -> Type:
    """`(t, t)` of `(t', t')` ... : one object per level, 2**depth leaves written out."""
    t = leaf
    for _ in range(depth):
        t = TupleType((t, t))
    return t


def single_chain(depth: int) -> Type:
    t: Type = F32
    for _ in range(depth):
        t = TupleType((t,))
    return t


def test_depth_and_holes_are_known_at_construction() -> None:
    assert F32.depth == 0 and TupleType(()).depth == 1 and TypeCall("Nil").depth == 1
    nested = FuncType((TupleType((F32, RefType(I32))),), TypeCall("List", (F32,)))
    assert nested.depth == 3   # fn → tuple → ref
    assert nested.complete and not IncompleteType().complete
    assert not FuncType((F32,), TupleType((IncompleteType(),))).complete
    assert doubling(60).depth == 60


def test_equality_and_hash_of_exponentially_long_types_visit_each_part_once() -> None:
    # Written out, these have 2**60 leaves: a tree walk would never finish.
    a, b = doubling(60), doubling(60)
    assert a is not b and a == b and hash(a) == hash(b)
    assert a != doubling(60, I32) and a != doubling(59)
    assert len({a, b, doubling(60, I32)}) == 2


def test_structural_equality_of_programs_annotated_with_shared_types() -> None:
    def identity(depth: int) -> Function:
        x = Var("x", doubling(depth))
        return Function([x], x, doubling(depth))

    assert structural_equal(identity(60), identity(60))
    assert structural_hash(identity(60)) == structural_hash(identity(60))
    assert not structural_equal(identity(60), identity(59))


def test_equality_compares_what_besides_the_parts_tells_types_apart() -> None:
    assert FuncType((F32,), F32, (TypeVar("A"),)) != FuncType((F32,), F32, (TypeVar("B"),))
    assert FuncType((F32, F32), F32) != FuncType((F32,), TupleType((F32, F32)))
    assert TypeCall("List", (F32,)) != TypeCall("Tree", (F32,))
    assert TupleType((F32,)) != RefType(F32)
    assert TupleType((IncompleteType(1),)) == TupleType((IncompleteType(2),))   # holes compare equal


def test_text_of_a_shared_type_writes_each_use() -> None:
    assert type_to_text(doubling(2)) == "((float32, float32), (float32, float32))"
    assert type_to_text(TupleType((F32,))) == "(float32,)"
    fn = FuncType((TensorType((1, 3), "int8"), TypeVar("A")), RefType(TypeCall("List", (TypeVar("A"),))),
                  (TypeVar("A"),))
    assert type_to_text(fn) == "fn [A](Tensor[(1, 3), int8], A) -> ref(List[A])"


def test_a_text_prefix_costs_its_length_not_the_whole_text() -> None:
    text, whole = type_text_prefix(doubling(60), 50)
    assert not whole and text == "(" * 50
    assert type_text_prefix(doubling(2), 41) == ("((float32, float32), (float32, float32))", True)
    shown = str(doubling(60))
    assert shown.endswith("...") and len(shown) == 2003


def test_deep_types_need_no_recursion(default_recursion_limit: None) -> None:
    deep = single_chain(50_000)
    assert deep.depth == 50_000 > MAX_TYPE_DEPTH
    assert deep == single_chain(50_000) and hash(deep) == hash(single_chain(50_000))
    text = type_to_text(deep)
    assert text == "(" * 50_000 + "float32" + ",)" * 50_000


@pytest.mark.parametrize("name, canonical", [
    ("bool", "bool"), ("uint1", "bool"), ("uint1x4", "boolx4"), ("bool1", "bool"),
    ("int", "int32"), ("int8", "int8"), ("int16", "int16"), ("int64", "int64"),
    ("uint", "uint32"), ("uint8", "uint8"), ("uint64", "uint64"),
    ("float", "float32"), ("float16", "float16"), ("float64", "float64"), ("bfloat16", "bfloat16"),
    ("bfloat", "bfloat16"), ("float32x4", "float32x4"), ("int8x1", "int8"), ("float32x65535", "float32x65535"),
])
def test_dtypes_irtool_supports(name: str, canonical: str) -> None:
    assert parse_dtype(name) == canonical


@pytest.mark.parametrize("name", [
    "float33", "int0", "int99999999999", "int1", "int4", "uint2", "float8", "float128", "bfloat32", "bool8",
    "int032", "float32x0", "float32x04", "float32x65536", "floaty", "Tensor",
])
def test_names_that_are_not_dtypes(name: str) -> None:
    assert parse_dtype(name) is None


def test_type_parts_visits_each_shared_part_once() -> None:
    """A doubling chain of depth 60 has 2^60 leaves written out: the walk sees its 61 nodes."""
    from irtool.ir.types import TupleType, TypeVar, type_parts
    t: object = TypeVar("a")
    chain = [t]
    for _ in range(60):
        t = TupleType((t, t))
        chain.append(t)
    parts = list(type_parts(t))  # type: ignore[arg-type]
    assert len(parts) == 61 and {id(p) for p in parts} == {id(c) for c in chain}
