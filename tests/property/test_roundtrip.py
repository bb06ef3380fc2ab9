"""Round trips through the text: print → parse gives a structurally equal program, and printing
what was parsed reproduces the text exactly (the printer's output is a fixed point)."""

from __future__ import annotations

from hypothesis import given, settings
from support.strategies import dataflow_programs, expressions, modules

from irtool.analysis.typecheck import infer_types
from irtool.ir import Expr, IRModule, structural_equal
from irtool.syntax.parser import parse
from irtool.syntax.printer import print_program


def assert_round_trips(prog: IRModule | Expr, show_types: bool = False) -> None:
    text = print_program(prog, show_types=show_types)
    parsed = parse(text, "printed.relay")
    assert isinstance(parsed, type(prog) if isinstance(prog, IRModule) else Expr)
    assert structural_equal(parsed, prog), text
    assert print_program(parsed, show_types=False) == print_program(prog, show_types=False)


@settings()
@given(modules())
def test_modules_round_trip(mod: IRModule) -> None:
    assert_round_trips(mod)


@settings()
@given(expressions())
def test_expressions_round_trip(expr: Expr) -> None:
    assert_round_trips(expr)


@settings()
@given(dataflow_programs())
def test_dataflow_programs_are_well_typed_and_round_trip_with_types_shown(mod: IRModule) -> None:
    main = mod["main"]
    infer_types(mod)
    assert main.body.checked_type == main.ret_type
    # `/* ty=... */` annotations are comments: the annotated text reads back to the same program.
    assert_round_trips(mod, show_types=True)
    assert "/* ty=" in print_program(mod, show_types=True)
