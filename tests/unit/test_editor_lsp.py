"""The language server's failure paths in-process (irtool.editor.lsp, .document, .fmt): what a
request gets when a handler fails unexpectedly or an analysis runs out of Python stack. The
protocol-level cases are in tests/adversarial/test_lsp_cases.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("pygls", reason="the language server is an optional extra (pip install 'irtool[lsp]')")

from lsprotocol import types as lsp  # noqa: E402
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.editor import document as document_module, fmt  # noqa: E402
from irtool.editor.document import Document  # noqa: E402
from irtool.editor.fmt import format_text, lex, nesting  # noqa: E402
from irtool.editor.lsp import IRLanguageServer, _guarded, _validation_reason, build_server  # noqa: E402


class Recorder(IRLanguageServer):
    """A server that records its window/logMessage notifications instead of sending them."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[str] = []

    def window_log_message(self, params: lsp.LogMessageParams) -> None:
        self.logged.append(params.message)


def test_an_unexpected_exception_is_a_clean_internal_error_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def broken(ls: Any, params: Any) -> None:
        raise KeyError("boom")

    server = Recorder()
    with caplog.at_level(logging.ERROR, logger="irtool-lsp"), pytest.raises(JsonRpcInternalError) as info:
        _guarded(lsp.TEXT_DOCUMENT_HOVER, broken)(server, None)
    error = info.value.to_response_error()
    assert error.code == -32603 and error.data is None   # pygls's own answer put a traceback in `data`
    assert error.message == ("irtool-lsp: textDocument/hover failed: KeyError: 'boom' "
                             "(an irtool-lsp bug; the server log has the details)")
    assert server.logged == [error.message]
    [record] = caplog.records
    assert record.exc_info is not None   # the traceback goes to the log (standard error) only


def test_a_failing_notification_is_only_logged() -> None:
    def broken(ls: Any, params: Any) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    server = Recorder()
    assert _guarded(lsp.TEXT_DOCUMENT_DID_OPEN, broken)(server, None) is None
    assert server.logged == ["irtool-lsp: textDocument/didOpen failed: the document nests too deeply to analyse "
                             "(an irtool-lsp bug; the server log has the details)"]


def test_clean_protocol_errors_pass_through_the_guard() -> None:
    def refusing(ls: Any, params: Any) -> None:
        raise JsonRpcInvalidParams("no such document")

    server = Recorder()
    with pytest.raises(JsonRpcInvalidParams, match="no such document"):
        _guarded(lsp.TEXT_DOCUMENT_HOVER, refusing)(server, None)
    assert server.logged == []


def test_every_feature_is_registered_behind_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """pygls binds the server to each handler; the bound function is the guarded one."""
    def broken(self: IRLanguageServer, uri: str) -> None:
        raise ValueError("analysis failed")

    monkeypatch.setattr(IRLanguageServer, "analysis", broken)
    monkeypatch.setattr(IRLanguageServer, "text_document", broken)
    monkeypatch.setattr(IRLanguageServer, "window_log_message", lambda self, params: None)
    features = build_server().protocol.fm.features
    methods = [lsp.TEXT_DOCUMENT_HOVER, lsp.TEXT_DOCUMENT_DEFINITION, lsp.TEXT_DOCUMENT_REFERENCES,
               lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL, lsp.TEXT_DOCUMENT_COMPLETION, lsp.TEXT_DOCUMENT_FORMATTING]
    params = SimpleNamespace(text_document=SimpleNamespace(uri="file:///a.relay"))
    for method in methods:
        with pytest.raises(JsonRpcInternalError) as info:
            features[method](params)
        assert info.value.data is None
        assert info.value.message.startswith(f"irtool-lsp: {method} failed: ValueError: analysis failed")
    for method in (lsp.TEXT_DOCUMENT_DID_OPEN, lsp.TEXT_DOCUMENT_DID_CHANGE):
        assert features[method](params) is None


def test_the_reason_of_a_failed_conversion_is_its_innermost_message() -> None:
    converter = build_server().protocol._converter
    with pytest.raises(Exception) as info:
        converter.structure({"textDocument": {"uri": "file:///a.relay"}, "position": {"line": 2, "character": -1}},
                            lsp.HoverParams)
    assert _validation_reason(info.value) == "Position.character should be in range [0:2147483647], but was -1."
    assert _validation_reason(JsonRpcException("plain")) == "plain"


NESTED = "def @main() {\n  let %a = ((1f, 2f), ((3f,), 4f));\n  %a\n}\n"


def test_nesting_counts_brackets_and_the_indentation_blocks_need() -> None:
    got = nesting(lex(NESTED, "n.relay")[0])
    # `@main()` closes; inside the `{` block, `((3f,)` opens three more: four at once.
    assert got.depth == 4
    assert got.deepest == NESTED.index("(3f,)")
    assert got.indent == 2   # one block, one level: two spaces
    blocks = nesting(lex("def @f() {\n  if (True) {\n    if (True) { 1f } else { 2f }\n  } else { 3f }\n}\n",
                         "b.relay")[0])
    assert blocks.indent == 2 * 1 + 2 * 2 + 2 * 3 + 2 * 3 + 2 * 2   # each `{` at its depth


def test_an_analysis_that_runs_out_of_stack_is_a_diagnostic_at_the_deepest_bracket(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def too_deep(prog: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(document_module, "infer_types", too_deep)
    doc = Document(NESTED, "n.relay")
    [diag] = doc.diagnostics
    assert diag.message == "nested too deeply to analyse (4 levels of brackets at the deepest, here)"
    assert diag.span is not None and (diag.span.line, diag.span.col) == (2, NESTED.split("\n")[1].index("(3f,)") + 1)
    assert doc.outline[0].name == "@main"   # the rest still answers
    assert doc.hover((0, 0)) is None


def test_formatting_refuses_text_it_would_blow_up_located_at_the_nesting(monkeypatch: pytest.MonkeyPatch) -> None:
    depth = 60
    text = "def @main(%c: bool) {\n  " + "if (%c) {" * depth + "1f" + "} else { 2f }" * depth + "\n}\n"
    monkeypatch.setattr(fmt, "MAX_INDENT_BYTES", 1000)   # the real bound is 64 MiB; the rule is the same
    with pytest.raises(DiagnosticError) as info:
        format_text(text, "deep.relay")
    [diag] = info.value.diagnostics
    assert diag.message.startswith("not formatted: brackets nest 61 deep here")
    # The first bracket 61 deep: the `(` of the innermost `if` (each `if (%c) {` is 9 characters).
    assert diag.span is not None and (diag.span.line, diag.span.col) == (2, 2 + 9 * (depth - 1) + 3 + 1)
    monkeypatch.setattr(fmt, "MAX_INDENT_BYTES", 64 * 2 ** 20)
    assert format_text(text, "deep.relay").count("if (%c) {") == depth   # under the bound it formats


def test_formatting_that_runs_out_of_stack_is_a_located_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def too_deep(prog: object) -> str:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(fmt, "print_program", too_deep)
    with pytest.raises(DiagnosticError) as info:
        format_text(NESTED, "n.relay")
    [diag] = info.value.diagnostics
    assert diag.message == "nested too deeply to format (4 levels of brackets at the deepest, here)"
    assert diag.span is not None and diag.span.line == 2
