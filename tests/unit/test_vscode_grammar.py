"""The VS Code extension files: valid JSON, a consistent manifest, and TextMate grammars whose
scopes (applied here by a small TextMate-style matcher) colour the samples and key tokens."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
VSCODE = ROOT / "editors/vscode"
CORPUS = ROOT.parent / "shared/corpus/tvm-relay"
SAMPLES = sorted((ROOT / "samples").glob("*.relay"))


def load(name: str) -> Any:
    return json.loads((VSCODE / name).read_text())


class Grammar:
    """Enough of TextMate's rules for these grammars: `match` rules with captures, `begin`/`end`
    rules with nested patterns, `#repository` and cross-grammar includes, applied line by line;
    at each position the rule matching earliest wins, ties going to the first listed."""

    def __init__(self, grammars: dict[str, dict[str, Any]], scope: str) -> None:
        self.grammars = grammars
        self.root = scope

    def rules(self, patterns: list[dict[str, Any]], grammar: str) -> list[tuple[dict[str, Any], str]]:
        out: list[tuple[dict[str, Any], str]] = []
        stack = [(p, grammar) for p in reversed(patterns)]
        while stack:
            rule, owner = stack.pop()
            include = rule.get("include")
            if include is None:
                out.append((rule, owner))
            elif include.startswith("#"):
                target = self.grammars[owner]["repository"][include[1:]]
                stack += [(p, owner) for p in reversed(target.get("patterns", []))] if "patterns" in target and \
                    "begin" not in target and "match" not in target else [(target, owner)]
            elif include in self.grammars:
                stack += [(p, include) for p in reversed(self.grammars[include]["patterns"])]
        return out

    def tokenize(self, text: str) -> list[tuple[int, int, int, list[str]]]:
        """(line, start, end, scopes) for every matched piece of text."""
        out: list[tuple[int, int, int, list[str]]] = []
        stack: list[tuple[dict[str, Any], str]] = []   # open begin/end rules
        for number, line in enumerate(text.split("\n")):
            pos = 0
            while pos <= len(line):
                if stack:
                    rule, owner = stack[-1]
                    candidates = [({"match": rule["end"], "name": rule.get("name"), "_end": True}, owner)]
                    candidates += self.rules(rule.get("patterns", []), owner)
                else:
                    candidates = self.rules(self.grammars[self.root]["patterns"], self.root)
                best = None
                for rule, owner in candidates:
                    found = re.compile(rule.get("match") or rule["begin"]).search(line, pos)
                    if found and (best is None or found.start() < best[0].start()):
                        best = (found, rule, owner)
                if best is None:
                    if stack:
                        out.append((number, pos, len(line), [stack[-1][0].get("name", "")]))
                    break
                found, rule, owner = best
                if stack and found.start() > pos:
                    out.append((number, pos, found.start(), [stack[-1][0].get("name", "")]))
                outer = [r.get("name", "") for r, _ in stack]
                if "begin" in rule:
                    stack.append((rule, owner))
                    out.append((number, found.start(), found.end(), outer + [rule.get("name", "")]))
                else:
                    out.append((number, found.start(), found.end(), outer + [rule.get("name") or ""]))
                    for group, capture in rule.get("captures", {}).items():
                        if found.group(int(group)) is not None:
                            out.append((number, found.start(int(group)), found.end(int(group)),
                                        outer + [capture["name"]]))
                    if rule.get("_end"):
                        stack.pop()
                pos = max(found.end(), pos + (found.end() == found.start()))
        return out


@pytest.fixture(scope="module")
def relay() -> Grammar:
    grammars = {g["scopeName"]: g for g in (load("syntaxes/relay.tmLanguage.json"),
                                            load("syntaxes/tir.tmLanguage.json"))}
    grammars["source.json"] = {"scopeName": "source.json", "patterns": [{"name": "source.json.any", "match": ".+"}]}
    return Grammar(grammars, "source.relay")


def scope_of(grammar: Grammar, text: str, word: str) -> list[str]:
    """All scopes given to the first exact occurrence of `word` (innermost capture last)."""
    at = text.index(word)
    line = text.count("\n", 0, at)
    col = at - (text.rfind("\n", 0, at) + 1)
    return [s for n, start, end, scopes in grammar.tokenize(text) if n == line and start <= col and
            col + len(word) <= end for s in scopes if s]


def test_manifest_points_at_real_files() -> None:
    manifest = load("package.json")
    ids = {lang["id"] for lang in manifest["contributes"]["languages"]}
    assert ids == {"relay", "tir"}
    for lang in manifest["contributes"]["languages"]:
        assert (VSCODE / lang["configuration"]).is_file()
    for grammar in manifest["contributes"]["grammars"]:
        assert grammar["language"] in ids
        assert load(grammar["path"])["scopeName"] == grammar["scopeName"]
    assert (VSCODE / manifest["main"]).is_file()


def test_language_configuration() -> None:
    config = load("language-configuration.json")
    assert config["comments"] == {"lineComment": "//", "blockComment": ["/*", "*/"]}
    assert {tuple(pair) for pair in config["brackets"]} == {("{", "}"), ("[", "]"), ("(", ")")}
    assert {pair["open"] for pair in config["autoClosingPairs"]} >= {"{", "[", "(", '"'}
    for key in ("start", "end"):
        re.compile(config["folding"]["markers"][key])
    word = re.compile(config["wordPattern"])
    assert word.fullmatch("%conv1_weight") and word.fullmatch("nn.conv2d") and word.fullmatch("@main")


def test_all_grammar_regexes_compile() -> None:
    for name in ("syntaxes/relay.tmLanguage.json", "syntaxes/tir.tmLanguage.json"):
        stack: list[Any] = [load(name)]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                for key in ("match", "begin", "end"):
                    if key in item:
                        re.compile(item[key])
                stack += item.values()
            elif isinstance(item, list):
                stack += item


def test_key_scopes(relay: Grammar) -> None:
    text = ('#[version = "0.0.5"]\n'
            'def @main(%x: Tensor[(1, 3), float32]) -> float16 { /* outer /* inner */ still */\n'
            '  %0 = nn.conv2d(%x, %x, padding=[1, 1], layout="NCHW");  // done\n'
            '  let %y = -2i64; if (True) { Cons(1e-05f, %0) } else { meta[relay.Constant][0] }\n'
            '}\n')
    assert "entity.name.function.relay" in scope_of(relay, text, "@main")
    assert "storage.type.function.relay" in scope_of(relay, text, "def")
    assert "variable.other.local.relay" in scope_of(relay, text, "%x")
    assert "variable.other.graph.relay" in scope_of(relay, text, "%0")
    assert "support.type.tensor.relay" in scope_of(relay, text, "Tensor")
    assert "support.type.dtype.relay" in scope_of(relay, text, "float32")
    assert "support.function.operator.relay" in scope_of(relay, text, "nn.conv2d")
    assert "entity.other.attribute-name.relay" in scope_of(relay, text, "padding")
    assert "string.quoted.double.relay" in scope_of(relay, text, '"NCHW"')
    assert "comment.line.double-slash.relay" in scope_of(relay, text, "// done")
    assert "constant.numeric.integer.relay" in scope_of(relay, text, "-2i64")
    assert "constant.numeric.float.relay" in scope_of(relay, text, "1e-05f")
    assert "constant.language.relay" in scope_of(relay, text, "True")
    assert "keyword.control.relay" in scope_of(relay, text, "let")
    assert "entity.name.type.relay" in scope_of(relay, text, "Cons")
    assert "keyword.other.meta.relay" in scope_of(relay, text, "meta")
    assert "keyword.other.directive.relay" in scope_of(relay, text, "version")
    # Nested block comments: `still` is inside the outer comment after the inner one closed.
    assert "comment.block.relay" in scope_of(relay, text, "still")
    assert "support.function.operator.relay" not in scope_of(relay, text, "still")


def test_tir_scopes(relay: Grammar) -> None:
    tir = Grammar(relay.grammars, "source.tir")
    text = ("primfn @f(%A: Buffer[(16), float32x16]) {\n"
            "  for %i in parallel(0, 16) { %A[ramp(0, 1, 16)] = broadcast(1f, 16); }\n"
            "}\n")
    assert "keyword.other.loop-kind.tir" in scope_of(tir, text, "parallel")
    assert "support.function.builtin.tir" in scope_of(tir, text, "ramp")
    assert "storage.type.tir" in scope_of(tir, text, "primfn")
    assert "support.type.tensor.relay" in scope_of(tir, text, "Buffer")
    assert "support.type.dtype.relay" in scope_of(tir, text, "float32x16")


def _uncoloured(grammar: Grammar, text: str) -> list[str]:
    lines = text.split("\n")
    covered = [[False] * len(line) for line in lines]
    for number, start, end, scopes in grammar.tokenize(text):
        if any(scopes):
            for col in range(start, end):
                covered[number][col] = True
    return [f"{n + 1}:{c + 1}:{lines[n][c]!r}" for n, row in enumerate(covered) for c, ok in enumerate(row)
            if not ok and not lines[n][c].isspace()]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_sample_character_gets_a_scope(relay: Grammar, path: Path) -> None:
    assert _uncoloured(relay, path.read_text()) == []


def test_every_corpus_character_gets_a_scope(relay: Grammar) -> None:
    files = sorted(CORPUS.rglob("*.relay")) if CORPUS.is_dir() else []
    if not files:
        pytest.skip(f"TVM corpus not found at {CORPUS}")
    bad = {str(f.relative_to(CORPUS)): _uncoloured(relay, f.read_text())[:3] for f in files}
    assert {name: chars for name, chars in bad.items() if chars} == {}
