"""irtool-fmt on random programs with random comments: idempotent, and no comment is lost."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import modules

from irtool.editor.fmt import format_text, scan_comments
from irtool.ir import IRModule, structural_equal
from irtool.syntax.parser import parse
from irtool.syntax.printer import print_program

_WORDS = st.text(alphabet="abcxyz019 %@()=;,.-", max_size=12)


@st.composite
def commented_programs(draw: st.DrawFn) -> tuple[IRModule, str, list[str]]:
    """A printed random module with comments inserted above lines, at their ends and between
    lines, in every comment form; each comment text is unique (it carries a serial number)."""
    mod = draw(modules())
    lines = print_program(mod).split("\n")
    code_end = next((i for i, line in enumerate(lines) if line.startswith("#[metadata]")), len(lines))
    out: list[str] = []
    texts: list[str] = []
    for number, line in enumerate(lines):
        if number < code_end:
            for _ in range(draw(st.integers(0, 2))):
                text = _comment(draw, len(texts))
                texts.append(text)
                out.append(" " * draw(st.integers(0, 4)) + text)
        if number < code_end and line.strip() and draw(st.booleans()):
            text = _comment(draw, len(texts))
            texts.append(text)
            line += " " * draw(st.integers(1, 2)) + text   # `Cons//` would be one name
        out.append(line)
    return mod, "\n".join(out), texts


def _comment(draw: st.DrawFn, serial: int) -> str:
    body = f"{serial}:{draw(_WORDS)}"
    form = draw(st.sampled_from(["line", "block", "nested", "multiline"]))
    if form == "line":
        return f"// {body}"
    if form == "block":
        return f"/* {body} */"
    if form == "nested":
        return f"/* {body} /* inner {serial} */ */"
    return f"/* {body}\n   more {serial} */"


@settings()
@given(commented_programs())
def test_fmt_keeps_comments_and_is_idempotent(case: tuple[IRModule, str, list[str]]) -> None:
    mod, text, texts = case
    formatted = format_text(text, "commented.relay")
    assert Counter(c.text for c in scan_comments(formatted)) == Counter(texts)
    assert format_text(formatted, "formatted.relay") == formatted
    # The code is the printer's: without comments it is exactly the canonical text.
    assert structural_equal(parse(formatted, "formatted.relay"), mod)
    assert print_program(parse(formatted, "formatted.relay")) == print_program(mod)
