"""Type inference and the well-formedness check over every top-level program of the TVM corpus.

Policy (the corpus mixes `parse` modules, which TVM type-checks, with `parse_expr` snippets,
which TVM never type-checks):
- a program using an operator that is not registered, or has no type relation, is skipped with
  the reason (run pytest with `-rs` to list them; `test_summary` prints the counts);
- every other program must pass `check_well_formed` and `infer_types`, leaving a complete type on
  every expression, except the snippets listed in `ILL_TYPED`: expressions TVM only parses, which
  are not well-typed (e.g. `let %_ : int8 = (); ()`). Those must fail with a located error whose
  message names the problem; a lone expression's free variables take their annotations.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from irtool.analysis.typecheck import infer_types
from irtool.analysis.wellformed import check_well_formed
from irtool.ir import Expr, IRModule, Op, post_order
from irtool.ops.registry import get_op
from irtool.passes.self_typed import is_complete
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse

CORPUS = Path(__file__).resolve().parents[2].parent / "shared/corpus/tvm-relay"
PROGRAMS = sorted(CORPUS.glob("*.relay")) if CORPUS.is_dir() else []

_UNIT_LET = "type mismatch: expected {}, found ()"
# file -> a fragment of the expected error message (why the snippet is ill-typed).
ILL_TYPED: dict[str, str] = {
    "031_test_op_assoc.relay": "equal: ",          # (1 * 1 + 1 < 1) == 1 compares bool with int32
    "032_test_op_assoc.relay": "equal: ",          # 1 == (1 < ...): int32 with bool
    "034_test_vars.relay": "operator nn.global_avg_pool2d used as a value",  # a bare operator
    "039_test_tuple_proj.relay": "cannot call %x: it has type float32",     # calls a float32
    "040_test_func.relay": "cannot infer type of %x",  # fn (%x, %y) { %x + %y }: nothing fixes %x
    "050_test_builtin_types.relay": _UNIT_LET.format("int8"),
    "051_test_builtin_types.relay": _UNIT_LET.format("uint64"),
    "052_test_builtin_types.relay": _UNIT_LET.format("float16"),
    "053_test_builtin_types.relay": _UNIT_LET.format("bool"),
    "054_test_builtin_types.relay": _UNIT_LET.format("int8x4"),
    "055_test_builtin_types.relay": _UNIT_LET.format("boolx4"),   # TVM spells a bool `uint1`
    "056_test_builtin_types.relay": _UNIT_LET.format("float16x4"),
    "057_test_tensor_type.relay": _UNIT_LET.format("Tensor[(1), float32]"),
    "058_test_tensor_type.relay": _UNIT_LET.format("Tensor[(?, 1), float32]"),
}


def _roots(prog: IRModule | Expr) -> list[Expr]:
    return list(prog.functions.values()) if isinstance(prog, IRModule) else [prog]


def _untypable_ops(prog: IRModule | Expr) -> tuple[list[str], list[str]]:
    """(unregistered operators, registered operators without a type relation) the program uses."""
    unknown: set[str] = set()
    no_rel: set[str] = set()
    for root in _roots(prog):
        for node in post_order(root):
            if isinstance(node, Op):
                opdef = get_op(node.name)
                if opdef is None:
                    unknown.add(node.name)
                elif opdef.type_rel is None:
                    no_rel.add(node.name)
    return sorted(unknown), sorted(no_rel)


def _classify(path: Path) -> tuple[IRModule | Expr, str | None]:
    """The parsed program, and a skip reason when its operators cannot all be typed."""
    prog = parse(path.read_text(), path.name)
    unknown, no_rel = _untypable_ops(prog)
    if unknown:
        return prog, f"unregistered operators: {', '.join(unknown)}"
    if no_rel:
        return prog, f"operators without a type relation: {', '.join(no_rel)}"
    return prog, None


@pytest.mark.skipif(not PROGRAMS, reason=f"corpus not found at {CORPUS}")
@pytest.mark.parametrize("path", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_program_types(path: Path) -> None:
    prog, skip = _classify(path)
    if skip:
        pytest.skip(skip)
    check_well_formed(prog)
    expected_error = ILL_TYPED.get(path.name)
    if expected_error is not None:
        with pytest.raises(DiagnosticError) as info:
            infer_types(prog)
        assert expected_error in str(info.value)
        assert info.value.span is not None and info.value.span.source == path.name
        return
    infer_types(prog)
    for root in _roots(prog):
        for node in post_order(root):
            if isinstance(node, Op):
                continue  # operator callees are typed per call by their relation
            assert node.checked_type is not None, (path.name, node)
            assert is_complete(node.checked_type), (path.name, node, node.checked_type)


@pytest.mark.skipif(not PROGRAMS, reason=f"corpus not found at {CORPUS}")
def test_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """Counts of typed, expectedly ill-typed and skipped programs (shown with `-s` or `-rP`)."""
    counts = {"typed": 0, "ill-typed as expected": 0, "skipped: unregistered operators": 0,
              "skipped: operators without a type relation": 0}
    for path in PROGRAMS:
        _, skip = _classify(path)
        if skip is None:
            counts["ill-typed as expected" if path.name in ILL_TYPED else "typed"] += 1
        elif skip.startswith("unregistered"):
            counts["skipped: unregistered operators"] += 1
        else:
            counts["skipped: operators without a type relation"] += 1
    with capsys.disabled():
        print("\ncorpus type inference: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    assert sum(counts.values()) == len(PROGRAMS)
    assert counts["typed"] >= 150  # of the 177 top-level programs, all but the ill-typed snippets
