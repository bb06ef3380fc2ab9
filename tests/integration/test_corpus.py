"""TVM's own Relay test programs (`shared/corpus/tvm-relay`, outside the checkout; skipped when
absent): every top-level program parses and round-trips, every `invalid/` one but `65505f16` is rejected
with a located error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from irtool.ir import structural_equal
from irtool.core.diagnostics import DiagnosticError, render_error
from irtool.syntax.parser import parse
from irtool.syntax.printer import print_program

CORPUS = Path(__file__).resolve().parents[2].parent / "shared/corpus/tvm-relay"
VALID = sorted(CORPUS.glob("*.relay"))
INVALID = sorted((CORPUS / "invalid").glob("*.relay"))

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"TVM corpus not found at {CORPUS}")


def test_corpus_has_the_expected_programs() -> None:
    assert len(VALID) == 177
    assert len(INVALID) == 11


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_program_parses_and_round_trips(path: Path) -> None:
    program = parse(path.read_text(), path.name)
    text = print_program(program)
    reparsed = parse(text, f"printed-{path.name}")
    assert structural_equal(reparsed, program), text
    assert print_program(reparsed) == text


# `65505f16`: TVM refuses a float literal above its width's maximum, irtool only one that rounds to
# infinity; this one is float16's largest value (tests/unit/test_parser.py checks it).
ROUNDS_TO_MAX = "067_test_float_literal.relay"


@pytest.mark.parametrize("path", [p for p in INVALID if p.name != ROUNDS_TO_MAX], ids=lambda p: p.name)
def test_invalid_program_is_rejected_with_a_located_error(path: Path) -> None:
    with pytest.raises(DiagnosticError) as info:
        parse(path.read_text(), path.name)
    rendered = render_error(info.value)
    assert re.match(rf"^{re.escape(path.name)}:\d+:\d+: error: ", rendered), rendered


def test_printer_output_in_the_corpus_is_reproduced_exactly() -> None:
    # Three corpus files are TVM printer output, byte for byte; our printer writes the same text
    # (modulo the blank line and indentation TVM's test string had in 094).
    for name in ("091_test_call_node_order.relay", "092_test_let_inlining.relay", "093_test_let_inlining.relay"):
        text = (CORPUS / name).read_text()
        header, body = text.split("\n", 1)
        assert print_program(parse(text, name)) == body.rstrip("\n") + "\n", name
    unapplied = (CORPUS / "094_test_unapplied_constructor.relay").read_text()
    expected = [line.strip() for line in unapplied.splitlines() if line.strip()]
    printed = [line.strip() for line in print_program(parse(unapplied, "094")).splitlines() if line.strip()]
    assert printed == expected
