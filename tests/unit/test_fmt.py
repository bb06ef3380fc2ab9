"""irtool-fmt: the printer's layout with every comment put back where it belongs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from irtool.editor import fmt
from irtool.editor.fmt import format_text, scan_comments
from irtool.core.diagnostics import DiagnosticError
from irtool.tools.fmt import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "samples").glob("*.relay"))
CORPUS = ROOT.parent / "shared/corpus/tvm-relay"


def test_scan_comments_matches_the_tokenizer() -> None:
    text = '%x /* a /* nested */ b */ + "//not" // tail\n/**/'
    assert [c.text for c in scan_comments(text)] == ["/* a /* nested */ b */", "// tail", "/**/"]


def test_comments_follow_their_code_when_the_printer_reorders_and_relayouts() -> None:
    text = ('#[version = "0.0.5"]\n'
            '// file comment\n'
            'def @z(%a: float32,   // the input\n'
            '       %b: float32) {\n'
            '  /* sum */ add(%a, %b)\n'
            '}\n'
            '\n'
            '// the callee\n'
            'def @a() -> float32 { 1f }   // one\n')
    expected = ('#[version = "0.0.5"]\n'
                '// file comment\n'
                '// the callee\n'
                'def @a() -> float32 {\n'
                '  1f\n'
                '}  // one\n'
                '\n'
                'def @z(%a: float32, %b: float32) {  // the input\n'
                '  /* sum */\n'
                '  add(%a, %b)\n'
                '}\n')
    assert format_text(text) == expected
    assert format_text(expected) == expected


def test_comments_inside_an_expanded_statement_go_above_it() -> None:
    # The printer splits the nested call into a binding; the comment stays before the code it
    # preceded, and the trailing comment stays on the statement's (last) line.
    text = 'free_var %x: float32;\n// compute\nnegative(add(%x, /* one */ 1f))  // done\n'
    assert format_text(text) == ('free_var %x: float32;\n'
                                 '// compute\n'
                                 '/* one */\n'
                                 '%0 = add(%x, 1f);\n'
                                 'negative(%0)  // done\n')


def test_several_trailing_comments_on_one_printed_line_keep_order() -> None:
    text = 'def @f(%a: float32, // first\n  %b: float32 /* second */\n) { %a }\n'
    out = format_text(text)
    assert out == ('#[version = "0.0.5"]\n'
                   '// first\n'
                   'def @f(%a: float32, %b: float32) {  /* second */\n'
                   '  %a\n'
                   '}\n')
    assert format_text(out) == out


def test_multiline_block_comment_is_never_trailing() -> None:
    text = 'def @f() { () } /* two\n lines */\n'
    out = format_text(text)
    assert "/* two\n lines */\n}" in out
    assert format_text(out) == out


def test_lost_comment_is_refused_not_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulate a placement bug: the safety net must refuse, located at the comment.
    real_emit = fmt._emit
    monkeypatch.setattr(fmt, "_emit", lambda lines, leading, trailing, at_end:
                        real_emit(lines, {}, trailing, at_end))
    with pytest.raises(DiagnosticError) as info:
        format_text('def @f() {\n  // lost\n  ()\n}\n', "lost.relay")
    span = info.value.span
    assert (span.source, span.line, span.col) == ("lost.relay", 2, 3)
    assert "cannot place this comment" in str(info.value)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples_keep_comments_and_format_idempotently(path: Path) -> None:
    text = path.read_text()
    out = format_text(text, path.name)
    assert sorted(c.text for c in scan_comments(out)) == sorted(c.text for c in scan_comments(text))
    assert format_text(out, path.name) == out


def test_cli_check_and_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copies = []
    for path in SAMPLES:
        shutil.copy(path, tmp_path / path.name)
        copies.append(str(tmp_path / path.name))
    before = {p: Path(p).read_text() for p in copies}
    needs_work = [p for p in copies if format_text(before[p], p) != before[p]]
    status = main(["--check", *copies])
    out = capsys.readouterr().out
    assert status == (1 if needs_work else 0)
    assert sorted(line.removeprefix("would reformat ") for line in out.splitlines()) == sorted(needs_work)
    assert {p: Path(p).read_text() for p in copies} == before   # --check writes nothing
    assert main(["--in-place", *copies]) == 0
    assert main(["--check", *copies]) == 0
    assert capsys.readouterr().out == ""
    for p in copies:
        assert sorted(c.text for c in scan_comments(Path(p).read_text())) == \
            sorted(c.text for c in scan_comments(before[p]))


def test_cli_prints_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "f.relay"
    path.write_text("def @f() { () } // end\n")
    assert main([str(path)]) == 0
    assert capsys.readouterr().out == '#[version = "0.0.5"]\ndef @f() {\n  ()\n}  // end\n'
    assert path.read_text() == "def @f() { () } // end\n"


def test_cli_reports_errors_and_leaves_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.relay"
    bad.write_text("def @f() {\n  %y // undefined\n}\n")
    good = tmp_path / "good.relay"
    good.write_text("def @g() { () }\n")
    assert main(["--in-place", str(bad), str(good)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2:3: error: undefined variable `%y`" in err
    assert bad.read_text() == "def @f() {\n  %y // undefined\n}\n"
    assert good.read_text() == '#[version = "0.0.5"]\ndef @g() {\n  ()\n}\n'


def test_cli_check_and_in_place_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", "--in-place", "x.relay"]) == 2
    assert "not allowed with" in capsys.readouterr().err


def test_file_comment_without_header_goes_below_the_added_header() -> None:
    out = format_text("// about this file\ndef @f() { () }\n")
    assert out == '#[version = "0.0.5"]\n// about this file\ndef @f() {\n  ()\n}\n'
    assert format_text(out) == out


def test_tvm_corpus_formats_idempotently_with_every_comment() -> None:
    # TVM's printed text is full of `/* ty=... */` comments inside lines; all must survive.
    files = sorted(CORPUS.glob("*.relay")) if CORPUS.is_dir() else []
    if not files:
        pytest.skip(f"TVM corpus not found at {CORPUS}")
    commented = 0
    for path in files:
        text = path.read_text()
        out = format_text(text, path.name)
        before = sorted(c.text for c in scan_comments(text))
        assert sorted(c.text for c in scan_comments(out)) == before, path.name
        assert format_text(out, path.name) == out, path.name
        commented += bool(before)
    assert commented >= 10   # the corpus has 15 files with comments
