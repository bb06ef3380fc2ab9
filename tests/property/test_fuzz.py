"""Fuzzing `irtool-opt`'s core: mutated programs give either output or a located error, never a crash.

Programs (the samples, a few constructs the samples lack, and modules from the shared
strategies: well-typed dataflow ones and syntactically rich untyped ones) are broken by deleting, inserting, duplicating and swapping tokens and characters, with hypothesis
choosing what and where. Each result goes through `irtool.tools.opt.process`, the function the
command runs for every input, so "no traceback here" means no traceback from the command.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import event, given, settings
from hypothesis import strategies as st

from irtool.core.diagnostics import DiagnosticError, render_error
from irtool.syntax.printer import print_program
from irtool.tools.opt import OptOptions, process
from support.strategies import dataflow_programs, modules

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "samples").glob("*.relay"))
SOURCE = "fuzz.relay"
LOCATED = re.compile(r"^\S+:\d+:\d+: error: ")

# Constructs beyond the samples: let/closures, tuples, refs, match?, sequencing, literals,
# type annotations with unknown dimensions, metadata constants, a lone expression.
EXTRA_SEEDS = [
    '''#[version = "0.0.5"]
def @main(%x: Tensor[(?, 4), float32], %t: (int64, float16)) -> (Tensor[(?, 4), float32], int64) {
  let %r = ref(%t.1);
  let %f = fn (%y: Tensor[(?, 4), float32]) -> Tensor[(?, 4), float32] { %y * 2f };
  ref_write(%r, 3f16);
  (%f(%x), %t.0 + -2i64)
}
''',
    '''#[version = "0.0.5"]
type Option[A] {
  Some(A),
  Nothing,
}

def @get(%o: Option[int32]) -> int32 {
  match? (%o) {
    Some(%v) => %v,
  }
}

def @main(%c: Tensor[(2), float32]) -> Tensor[(2), float32] {
  add(%c, meta[relay.Constant][0])
}
#[metadata]
{"relay.Constant": [{"dtype": "float32", "shape": [2], "data": [1.0, -0.5]}]}
''',
    "let %a = (1, 2.5f, True); if (%a.2) { %a.0 } else { 0 }\n",
]

SEEDS = [p.read_text() for p in SAMPLES] + EXTRA_SEEDS

GENERATED = st.one_of(dataflow_programs(max_ops=6), modules(max_depth=2)).map(print_program)


@st.composite
def programs(draw: st.DrawFn) -> str:
    """Mostly the hand-written seeds (cheap to draw); one in five is a generated module."""
    if draw(st.integers(0, 4)) == 0:
        return draw(GENERATED)
    return draw(st.sampled_from(SEEDS))

# Tokens worth inserting: Relay's punctuation and keywords, suspicious literals, odd characters.
VOCABULARY = [
    "(", ")", "{", "}", "[", "]", ",", ";", ":", "=", "->", "=>", ".", "%", "@", "_", "?", "|",
    "%0", "%1", "%x", "%undefined", "@main", "@nope", "def", "fn", "let", "if", "else", "match",
    "match?", "type", "extern", "free_var", "ref", "ref_read", "Tensor", "float32", "int8", "bool",
    "List", "Nil", "Cons", "add", "nn.conv2d", "nn.con2d", "1", "-1", "0.5", "1.5f", "2f16", "3i16",
    "32768i16", "99999999999999999999", "1e99999f", "-", "+", "*", "/", "<=", "==", '"s"', '"',
    "/*", "*/", "//", "\n", " ", "\t", "\r", "\x00", "é", "#[", '#[version = "0.0.5"]', "#[metadata]",
    "meta", "meta[relay.Constant][7]", "Primitive=1", "padding=[1, 1]", "True", "None", "()",
]

_TOKEN = re.compile(r"\s+|[%@]\w*|[A-Za-z_][\w.]*|-?\d[\w.]*|/\*|\*/|//|->|=>|.", re.S)


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


@st.composite
def mutated_programs(draw: st.DrawFn) -> str:
    """A program with one to four token or character edits."""
    text = draw(programs())
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "swap", "duplicate", "char-delete", "char-insert",
                                     "char-replace"]))
        if kind.startswith("char"):
            at = draw(st.integers(0, max(len(text) - 1, 0)))
            char = draw(st.characters(codec="utf-8")) if kind != "char-delete" else ""
            text = text[:at] + char + text[at + (kind != "char-insert"):]
            continue
        toks = tokens(text)
        if not toks:
            toks = [""]
        i = draw(st.integers(0, len(toks) - 1))
        if kind == "delete":
            del toks[i]
        elif kind == "insert":
            toks.insert(i, draw(st.sampled_from(VOCABULARY)))
        elif kind == "duplicate":
            toks.insert(i, toks[i])
        else:
            j = draw(st.integers(0, len(toks) - 1))
            toks[i], toks[j] = toks[j], toks[i]
        text = "".join(toks)
    return text


def check_no_crash(text: str) -> None:
    """The tool's contract on one input: output that is stable when re-run, or a located error."""
    try:
        out = process(text, SOURCE, OptOptions())
    except DiagnosticError as exc:
        rendered = render_error(exc)
        assert LOCATED.match(rendered), f"diagnostic without a location:\n{rendered}"
        event("rejected with a located error")
        return
    event("accepted")
    # Accepted input: its canonical form must itself be accepted and print the same.
    assert process(out, SOURCE, OptOptions()) == out


def test_seeds_are_valid() -> None:
    for seed in SEEDS:
        out = process(seed, SOURCE, OptOptions())
        assert process(out, SOURCE, OptOptions()) == out


@settings(max_examples=5000)
@given(mutated_programs())
def test_mutated_programs_never_crash(text: str) -> None:
    check_no_crash(text)
