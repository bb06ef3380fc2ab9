"""`irtool-opt` and the helpers every tool shares (input, error reporting); output: test_tool_output.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from irtool.core.span import Span
from irtool.core.diagnostics import Diagnostic, DiagnosticError
from irtool.tools import common, opt, verify_diagnostics

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "samples").glob("*.relay"))
ERROR_LINE = re.compile(r"^(?P<file>\S+):(?P<line>\d+):(?P<col>\d+): error: ", re.M)

GOOD = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  add(%x, %x)
}
"""


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = opt.main(argv)
    out, err = capsys.readouterr()
    return status, out, err


# --- splitting and diagnostics checking (no parser involved) --------------------------------


def test_split_input_keeps_line_offsets() -> None:
    text = "a\nb\n// -----\nc\n  // -----  \nd\n// ------\ne"
    assert opt.split_input(text) == [("a\nb", 0), ("c", 3), ("d\n// ------\ne", 5)]


def test_split_input_without_marker_is_one_chunk() -> None:
    assert opt.split_input("x\ny\n") == [("x\ny\n", 0)]


def test_expectation_forms() -> None:
    text = "\n".join([
        "// expected-error {{same line}}",
        "// expected-error @+2 {{two below}}",
        "// expected-warning@-1 {{one above}}",
        "// expected-note @above {{the line above}}",
        "// expected-remark @below {{the line below}}",
        "// expected-error @unknown {{nowhere}}",
    ])
    expected, malformed = verify_diagnostics.parse_expectations(text, "f.relay", line_offset=10)
    assert malformed == []
    got = [(e.severity, e.text, e.line, e.annotation.line, e.annotation.col) for e in expected]
    assert got == [
        ("error", "same line", 11, 11, 4),
        ("error", "two below", 14, 12, 4),
        ("warning", "one above", 12, 13, 4),
        ("note", "the line above", 13, 14, 4),
        ("remark", "the line below", 16, 15, 4),
        ("error", "nowhere", None, 16, 4),
    ]


def test_malformed_expectation_is_located() -> None:
    expected, malformed = verify_diagnostics.parse_expectations("x\n  // expected-error @+1 missing braces", "f")
    assert expected == []
    assert len(malformed) == 1
    assert (malformed[0].span.line, malformed[0].span.col) == (2, 6)
    assert "malformed" in malformed[0].message


def _diag(message: str, line: int | None, severity: str = "error", source: str = "f") -> Diagnostic:
    span = None if line is None else Span(source, line, 3, line, 5)
    return Diagnostic(severity, message, span)


def test_check_matches_substrings_on_the_right_line() -> None:
    expected, _ = verify_diagnostics.parse_expectations("\n// expected-error @+1 {{undefined}}\n", "f")
    assert verify_diagnostics.check(expected, [_diag("use of undefined variable %y", 3)], "f") == []


def test_check_reports_both_kinds_of_mismatch() -> None:
    expected, _ = verify_diagnostics.parse_expectations("// expected-error {{wanted}}\n", "f")
    problems = verify_diagnostics.check(expected, [_diag("wanted", 2)], "f")  # right text, wrong line
    messages = sorted(p.message for p in problems)
    assert messages == ['expected error "wanted" was not produced', "unexpected error: wanted"]
    located = {p.message: (p.span.line, p.span.col) for p in problems}
    assert located['expected error "wanted" was not produced'] == (1, 4)  # at the annotation
    assert located["unexpected error: wanted"] == (2, 3)  # at the diagnostic


def test_check_severity_notes_and_unknown_locations() -> None:
    text = "x // expected-error {{boom}}\n// expected-note @-1 {{here}}\n// expected-error @unknown {{lost}}"
    expected, _ = verify_diagnostics.parse_expectations(text, "f")
    primary = Diagnostic("error", "boom!", Span("f", 1, 1, 1, 2), notes=[_diag("see here", 1, "note")])
    assert verify_diagnostics.check(expected, [primary, _diag("lost it", None)], "f") == []
    # a warning does not satisfy an expected error, and another file's line 1 is not this file's
    problems = verify_diagnostics.check(expected[:1], [_diag("boom", 1, "warning")], "f")
    assert [p.message for p in problems] == ["unexpected warning: boom", 'expected error "boom" was not produced']
    problems = verify_diagnostics.check(expected[:1], [_diag("boom", 1, source="<pipeline>")], "f")
    assert len(problems) == 2


# --- input and output ----------------------------------------------------------------------


def test_read_source_reports_bad_utf8_at_its_position(tmp_path: Path) -> None:
    path = tmp_path / "bad.relay"
    path.write_bytes(b"ok\n" + "αβ ".encode("utf-8") + b"\xff\n")
    with pytest.raises(DiagnosticError) as info:
        common.read_source(str(path))
    span = info.value.span
    assert (span.source, span.line, span.col) == (str(path), 2, 4)
    assert "0xff" in str(info.value)


def test_read_source_missing_file() -> None:
    with pytest.raises(DiagnosticError, match="cannot read 'no/such/file.relay'"):
        common.read_source("no/such/file.relay")


# --- the command ---------------------------------------------------------------------------


def test_version_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["--version"], capsys)
    assert (status, out.strip()) == (0, "irtool-opt 0.1.0")
    status, _, err = run([], capsys)
    assert status == 2 and "required: FILE" in err
    status, _, err = run(["x.relay", "--no-such-flag"], capsys)
    assert status == 2 and "unrecognized arguments" in err


def test_missing_input_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = run([str(tmp_path / "absent.relay")], capsys)
    assert status == 1 and out == ""
    assert err.startswith(f"irtool-opt: error: cannot read '{tmp_path / 'absent.relay'}'") and "Traceback" not in err


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_samples_verify_and_print_idempotently(sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, first, err = run([str(sample)], capsys)
    assert status == 0, err
    assert first.startswith('#[version = "0.0.5"]')
    again = tmp_path / "again.relay"
    again.write_text(first)
    status, second, err = run([str(again), "--print-types"], capsys)
    assert status == 0, err
    assert "/* ty=" in second
    status, third, err = run([str(again)], capsys)
    assert (status, third) == (0, first)


def test_samples_cover_their_topics() -> None:
    text = {p.name: p.read_text() for p in SAMPLES}
    assert {"mlp.relay", "resnet_block.relay", "inline.relay", "adt_list.relay"} <= set(text)
    for op in ("nn.dense", "nn.bias_add", "nn.relu", "nn.softmax"):
        assert op in text["mlp.relay"]
    for op in ("nn.conv2d", "nn.batch_norm", "nn.relu", "add(", ".0;", "(1, 64, 56, 56)"):
        assert op in text["resnet_block.relay"]
    assert text["inline.relay"].count("Inline=1") >= 2
    for construct in ("type List", "match", "if (", "@map", "@length"):
        assert construct in text["adt_list.relay"]


def test_output_file_replaces_input_only_on_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "prog.relay"
    path.write_text(GOOD.replace("add(%x, %x)", "add(%x,     %x)  // spacing is normalised"))
    status, out, err = run([str(path), "-o", str(path)], capsys)
    assert (status, out, err) == (0, "", "")
    rewritten = path.read_text()
    assert "add(%x, %x)" in rewritten and "spacing" not in rewritten
    broken = GOOD.replace("add(%x, %x)", "add(%x, %undefined)")
    path.write_text(broken)
    status, out, err = run([str(path), "-o", str(path)], capsys)
    assert status == 1 and out == ""
    assert path.read_text() == broken
    assert os.listdir(tmp_path) == ["prog.relay"]


def test_error_format_has_location_source_line_and_caret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.relay"
    path.write_text(GOOD.replace("add(%x, %x)", "add(%x, %y)"))
    status, out, err = run([str(path)], capsys)
    assert status == 1 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith(f"{path}:3:11: error: "), err
    assert "%y" in lines[0]
    assert lines[1] == "  add(%x, %y)"
    assert lines[2].startswith(" " * 10 + "^")


def test_split_input_file_reports_original_line_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "chunks.relay"
    bad = GOOD.replace("add(%x, %x)", "add(%x, %y)")
    path.write_text(GOOD + "// -----\n" + bad)
    status, out, err = run([str(path), "--split-input-file"], capsys)
    assert status == 1 and out == ""
    found = ERROR_LINE.findall(err)
    assert [(f, int(line)) for f, line, _ in found] == [(str(path), 4 + 1 + 3)]
    assert "  add(%x, %y)" in err.splitlines()

    path.write_text(GOOD + "// -----\n" + GOOD.replace("%x", "%z"))
    status, out, err = run([str(path), "--split-input-file"], capsys)
    assert status == 0, err
    first, second = out.split("// -----\n")
    assert "%x" in first and "%z" in second and "%x" not in second


def test_verify_diagnostics_success_and_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "diag.relay"
    chunk = GOOD.replace("  add(%x, %x)", "  // expected-error @+1 {{%y}}\n  add(%x, %y)")
    path.write_text(chunk + "// -----\n" + GOOD)
    status, out, err = run([str(path), "--split-input-file", "--verify-diagnostics"], capsys)
    assert (status, err) == (0, "")
    assert "add(%x, %x)" in out  # the chunk without errors is still printed

    path.write_text(chunk.replace("@+1", "@+2") + "// -----\n" + GOOD.replace("%x, %x", "%x, %w"))
    status, out, err = run([str(path), "--split-input-file", "--verify-diagnostics"], capsys)
    assert status == 1
    found = [(int(line), msg) for line, msg in re.findall(r"^\S+:(\d+):\d+: error: (.*)$", err, re.M)]
    assert (3, 'expected error "%y" was not produced') in found
    assert any(line == 4 and msg.startswith("unexpected error: ") and "%y" in msg for line, msg in found)
    assert any(line == 9 and msg.startswith("unexpected error: ") and "%w" in msg for line, msg in found)


def test_lone_expression_prints_but_takes_no_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "expr.relay"
    path.write_text("let %x = 1; %x + 2\n")
    status, out, err = run([str(path)], capsys)
    assert status == 0, err
    assert "%x" in out
    status, out, err = run([str(path), "-p", "inline"], capsys)
    assert status == 1 and out == ""
    assert ERROR_LINE.match(err) and "single expression" in err


def test_pass_flags_reach_the_manager(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["--list-passes"], capsys)
    assert status == 0 and "inline" in out
    status, out, err = run([str(ROOT / "samples" / "inline.relay"), "--pass=inline", "--print-ir-after=inline",
                            "--timing"], capsys)
    assert status == 0, err
    assert "@scale" not in out and "@affine" not in out and "@gelu_like" in out
    assert "After inline" in err and "inline" in err.split("Total Execution Time")[1]


def test_unknown_pass_is_located_in_the_pipeline(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run([str(SAMPLES[0]), "-p", "inlnie"], capsys)
    assert status == 1 and out == ""
    assert err.startswith("<pipeline>:1:1: error: unknown pass `inlnie`; did you mean `inline`?")


def test_internal_errors_are_one_line_not_tracebacks(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.relay"
    path.write_text(GOOD)

    def explode(*args: object, **kw: object) -> str:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(opt, "process", explode)
    status, out, err = run([str(path)], capsys)
    assert status == 1 and out == ""
    assert err.startswith("irtool-opt: error: internal: ") and "Traceback" not in err


def test_readme_example_parses_and_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```relay\n(.*?)```", readme, re.S)
    assert block is not None
    path = tmp_path / "readme.relay"
    path.write_text(block.group(1))
    status, out, err = run([str(path)], capsys)
    assert status == 0, err
    assert "@block" in out and "type List" in out


def test_pipeline_flags_run_in_command_line_order(capsys: pytest.CaptureFixture[str]) -> None:
    sample = str(ROOT / "samples" / "inline.relay")
    status, _, err = run([sample, "--pass", "dead-code", "-p", "inline", "--print-ir-after-all"], capsys)
    assert status == 0, err
    assert err.index("After dead-code") < err.index("After inline")
    status, _, err = run([sample, "-p", "inline", "--pass=dead-code", "--print-ir-before=dead-code"], capsys)
    assert status == 0, err
    assert "Before dead-code" in err and "After" not in err


@pytest.mark.parametrize("flags", [[], ["-p", "inline"]])
def test_a_misspelt_print_ir_pass_is_an_error_with_or_without_a_pipeline(
        flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`--print-ir-before=dead-cod` with no pipeline once printed the module and exited 0."""
    sample = str(ROOT / "samples" / "inline.relay")
    for flag in ("--print-ir-before", "--print-ir-after"):
        status, out, err = run([sample, *flags, f"{flag}=dead-cod"], capsys)
        assert status == 1 and out == "", err
        assert f"{flag}: unknown pass `dead-cod`; did you mean `dead-code`?" in err


def test_no_verify_skips_type_checking(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ill_typed.relay"
    path.write_text(GOOD.replace("Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32]",
                                 "Tensor[(2, 3), float32]) -> Tensor[(7), int8]"))
    status, out, err = run([str(path)], capsys)
    assert status == 1 and ERROR_LINE.match(err), err
    status, out, err = run([str(path), "--no-verify"], capsys)
    assert (status, err) == (0, "")
    assert "-> Tensor[(7), int8]" in out


DENSE = """#[version = "0.0.5"]
def @main(%x: Tensor[(8, 64), float32], %w: Tensor[(64, 64), float32]) {
  nn.dense(%x, %w)
}
"""


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "AMD64"), reason="x86 CPU names")
@pytest.mark.parametrize("cpu, lanes", [("haswell", 8), ("skylake-avx512", 16)])
def test_mcpu_pins_the_vector_width_lowering_prints(cpu: str, lanes: int, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "dense.relay"
    src.write_text(DENSE)
    status, out, err = run([f"--mcpu={cpu}", str(src), "-p", "fuse-ops,lower"], capsys)
    assert status == 0, err
    widths = {int(n) for n in re.findall(r"broadcast\(0f, (\d+)\)", out)}
    assert widths == {lanes}


def test_an_unknown_mcpu_is_a_usage_error_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "good.relay"
    src.write_text(GOOD)
    status, out, err = run(["--mcpu=no-such-cpu", str(src)], capsys)
    assert status == 2 and out == ""
    assert "--mcpu: unknown CPU 'no-such-cpu'" in err and "Traceback" not in err
