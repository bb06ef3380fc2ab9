"""The Pygments lexers: no Error token on any real program, and the token kinds editors colour."""

from __future__ import annotations

from pathlib import Path

import pytest
from pygments.token import Comment, Error, Keyword, Name, Number, Operator, String, Token

from irtool.editor.pygments_lexer import RelayLexer, TIRLexer, error_tokens

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared/corpus/tvm-relay"
SAMPLES = sorted((ROOT / "samples").glob("*.relay")) + sorted((ROOT / "samples").glob("*.tir"))


def corpus_files() -> list[Path]:
    return sorted(CORPUS.rglob("*.relay")) if CORPUS.is_dir() else []


def tokens(text: str, lexer: RelayLexer | None = None) -> list[tuple[object, str]]:
    """(token type, text) pairs without whitespace."""
    return [(tok, value) for tok, value in (lexer or RelayLexer()).get_tokens(text) if value.strip()]


def kind_of(text: str, word: str) -> object:
    """The token type given to the first token whose text is exactly `word`."""
    for tok, value in tokens(text):
        if value == word:
            return tok
    raise AssertionError(f"no token {word!r} in {tokens(text)}")


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples_have_no_error_tokens(path: Path) -> None:
    assert error_tokens(RelayLexer(), path.read_text()) == []


def test_corpus_has_no_error_tokens() -> None:
    files = corpus_files()
    if not files:
        pytest.skip(f"TVM corpus not found at {CORPUS}")
    lexer = RelayLexer()
    bad = {str(f.relative_to(CORPUS)): error_tokens(lexer, f.read_text())[:3] for f in files}
    assert {name: errs for name, errs in bad.items() if errs} == {}
    assert len(files) >= 200   # top level and the invalid/ and needs_metatable/ subfolders


def test_error_tokens_are_reported() -> None:
    # The helper the tests rely on must notice a character no rule accepts.
    assert [value for _, _, value in error_tokens(RelayLexer(), "def @f() { $ }")] == ["$"]


def test_relay_token_kinds() -> None:
    text = ('#[version = "0.0.5"]\n'
            'def @main(%x: Tensor[(1, ?), float32], %y: int64) -> float16 {\n'
            '  %0 = nn.conv2d(%x, %x, padding=[1, 1], data_layout="NCHW", out_dtype=None);\n'
            '  let %z: float32 = 1e-05f;\n'
            '  %1 = add(%0, -2i64) == 3f16;\n'
            '  if (True) { %0.0 } else { meta[relay.Constant][0] }\n'
            '}\n')
    assert kind_of(text, "def") in Keyword
    assert kind_of(text, "let") in Keyword
    assert kind_of(text, "if") in Keyword
    assert kind_of(text, "@main") in Name.Variable.Global
    assert kind_of(text, "%x") in Name.Variable
    assert kind_of(text, "%0") in Name.Variable.Anonymous
    assert kind_of(text, "nn.conv2d") in Name.Builtin
    assert kind_of(text, "add") in Name.Builtin
    assert kind_of(text, "padding") in Name.Attribute
    assert kind_of(text, "data_layout") in Name.Attribute
    assert kind_of(text, "Tensor") in Keyword.Type
    assert kind_of(text, "float32") in Keyword.Type
    assert kind_of(text, "int64") in Keyword.Type
    assert kind_of(text, "1e-05f") in Number.Float
    assert kind_of(text, "-2i64") in Number.Integer
    assert kind_of(text, "3f16") in Number.Float
    assert kind_of(text, '"NCHW"') in String
    assert kind_of(text, "None") in Keyword.Constant
    assert kind_of(text, "True") in Keyword.Constant
    assert kind_of(text, "==") in Operator
    assert kind_of(text, "->") in Operator
    assert kind_of(text, "meta") in Keyword.Pseudo
    assert kind_of(text, "version") in Keyword
    assert kind_of(text, "#[") in Comment.Preproc


def test_adt_and_match_tokens() -> None:
    text = "type List[A] { Nil, Cons(A, List[A]) }\ndef @f(%l: List[A]) { match? (%l) { Cons(_, %t) => 1, Nil => 0 } }"
    assert kind_of(text, "type") in Keyword
    assert kind_of(text, "List") in Name.Class
    assert kind_of(text, "Nil") in Name.Class
    assert kind_of(text, "Cons") in Name.Class   # also when applied: `Cons(_, %t)`
    assert kind_of(text, "match?") in Keyword
    assert kind_of(text, "_") in Keyword.Pseudo
    assert kind_of(text, "=>") in Operator


def test_nested_block_comment_is_one_comment() -> None:
    text = "/* outer /* inner */ still outer */ %x"
    toks = tokens(text)
    assert all(tok in Comment for tok, _ in toks[:-1])
    assert "".join(value for _, value in toks[:-1]) == "/* outer /* inner */ still outer */"
    assert toks[-1] == (Name.Variable, "%x")


def test_line_comment_and_unterminated_block() -> None:
    assert tokens("%a // c /* not a block\n%b") == [(Name.Variable, "%a"), (Comment.Single, "// c /* not a block"),
                                                   (Name.Variable, "%b")]
    # An unterminated block comment colours the rest of the file as comment, not as errors.
    assert all(tok in Comment for tok, _ in tokens("/* open /* deeper */ %x"))


def test_metadata_section_is_json() -> None:
    text = '%0\n#[metadata]\n{"relay.Constant": [{"dtype": "float32", "shape": [2], "data": [1.0, 2.5]}]}\n'
    toks = tokens(text)
    assert (Comment.Preproc, "#[metadata]") in toks
    assert any(tok in Token.Name.Tag and value == '"relay.Constant"' for tok, value in toks)
    assert not any(tok in Error for tok, _ in toks)


def test_tir_tokens() -> None:
    text = ("primfn @add(%A: Buffer[(64), float32], %B: Buffer[(64), float32, align=64], global_symbol=\"add\") {\n"
            "  for %i in vectorized(0, 64) {\n"
            "    allocate %t: Buffer[(16), float32x16, scope=\"local\"] {\n"
            "      %t[0] = broadcast(1f, 16) + float32(%i);\n"
            "      %B[ramp(0, 1, 16)] = %A[ramp(0, 1, 16)] * %t[0];\n"
            "    }\n"
            "  }\n"
            "  for %j in range(0, 4) { evaluate(floordiv(%j, 2)); }\n"
            "}\n")
    lexer = TIRLexer()
    assert error_tokens(lexer, text) == []
    assert kind_of(text, "primfn") in Keyword
    assert kind_of(text, "for") in Keyword
    assert kind_of(text, "in") in Keyword
    assert kind_of(text, "vectorized") in Keyword.Pseudo
    assert kind_of(text, "range") in Keyword.Pseudo
    assert kind_of(text, "allocate") in Keyword
    assert kind_of(text, "Buffer") in Keyword.Type
    assert kind_of(text, "float32x16") in Keyword.Type
    assert kind_of(text, "broadcast") in Name.Builtin
    assert kind_of(text, "ramp") in Name.Builtin
    assert kind_of(text, "align") in Name.Attribute
    assert kind_of(text, "evaluate") in Keyword


def test_tir_doc_example() -> None:
    text = ('#[version = "0.0.5"]\n'
            'primfn @f(%a: Buffer[(1, 64), float32, align=64], %out: Buffer[(1, 64), bfloat16], tir.noalias=True) {\n'
            '  for %j in unrolled(0, 4) {\n'
            '    let %lanes: int32x16 = ramp(%j * 16, 1, 16);\n'
            '    %out[0, %lanes] = if_then_else(%j < 2, max(%a[0, %lanes], broadcast(0f, 16)), bfloat16(1.5f));\n'
            '    assert(%j >= 0, "non-negative");\n'
            '  }\n'
            '}\n')
    assert error_tokens(TIRLexer(), text) == []
    assert kind_of(text, "tir.noalias") in Name.Attribute
    assert kind_of(text, "unrolled") in Keyword.Pseudo
    assert kind_of(text, "int32x16") in Keyword.Type
    assert kind_of(text, "bfloat16") in Keyword.Type
    assert kind_of(text, "if_then_else") in Name.Builtin
    assert kind_of(text, "assert") in Keyword


def test_lexer_metadata_for_registration() -> None:
    assert "relay" in RelayLexer.aliases and "*.relay" in RelayLexer.filenames
    assert "tir" in TIRLexer.aliases and "*.tir" in TIRLexer.filenames


def test_registered_through_the_pygments_entry_point() -> None:
    from importlib.metadata import entry_points

    from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
    names = {ep.name for ep in entry_points(group="pygments.lexers")}
    if "relay" not in names:
        pytest.skip("irtool is installed without its pygments.lexers entry point (reinstall: pip install -e .)")
    assert isinstance(get_lexer_by_name("relay"), RelayLexer)
    assert isinstance(get_lexer_by_name("tir"), TIRLexer)
    assert isinstance(get_lexer_for_filename("model.relay"), RelayLexer)
