"""irtool-lsp driven over its real protocol: a subprocess speaking JSON-RPC with Content-Length
framing on stdin/stdout, as an editor would."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pygls", reason="the language server is an optional extra (pip install 'irtool[lsp]')")

from support.lsp_client import TIMEOUT, Client  # noqa: E402

URI = "file:///tmp/lsp_test.relay"
# Line numbers below are 0-based, as LSP counts them.
TEXT = ('#[version = "0.0.5"]\n'                                                      # 0
        'def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32]) {\n'     # 1
        '  %0 = nn.dense(%x, %w, units=4);\n'                                          # 2
        '  add(%0, @double(%x))   // (2, 4) + (2, 3): a type error\n'                  # 3
        '}\n'                                                                         # 4
        '\n'                                                                          # 5
        'def @double(%y: Tensor[(2, 3), float32]) {\n'                                 # 6
        '  %1 = multiply(%y, 2f);\n'                                                   # 7
        '  add(%1, %y)\n'                                                              # 8
        '}\n')                                                                        # 9


@pytest.fixture()
def client() -> Iterator[Client]:
    c = Client()
    try:
        yield c
    finally:
        c.close()


def position(line: int, character: int) -> dict[str, Any]:
    return {"textDocument": {"uri": URI}, "position": {"line": line, "character": character}}


def test_language_server_session(client: Client) -> None:
    init = client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    caps = init["capabilities"]
    assert caps["hoverProvider"] and caps["definitionProvider"] and caps["documentFormattingProvider"]
    assert caps["referencesProvider"] and caps["documentSymbolProvider"]
    assert "." in caps["completionProvider"]["triggerCharacters"]
    client.notify("initialized", {})

    client.notify("textDocument/didOpen",
                  {"textDocument": {"uri": URI, "languageId": "relay", "version": 1, "text": TEXT}})
    published = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")["params"]
    assert published["uri"] == URI
    [diag] = published["diagnostics"]
    assert diag["severity"] == 1
    assert "broadcast" in diag["message"]
    # The whole call `add(%0, @double(%x))` on line 3, columns 2 up to 22.
    assert diag["range"] == {"start": {"line": 3, "character": 2}, "end": {"line": 3, "character": 22}}

    # Hover: %1's type is not written anywhere; it is inferred.
    hover = client.request("textDocument/hover", position(8, 7))
    assert "%1: Tensor[(2, 3), float32]" in hover["contents"]["value"]
    assert hover["range"] == {"start": {"line": 8, "character": 6}, "end": {"line": 8, "character": 8}}
    # Hover on an operator: its signature with attribute defaults.
    hover = client.request("textDocument/hover", position(2, 10))
    assert "nn.dense(" in hover["contents"]["value"] and "units=None" in hover["contents"]["value"]

    # Definition of %y (used on line 7) is the parameter on line 6; of @double, its def line.
    definition = client.request("textDocument/definition", position(7, 17))
    assert definition == {"uri": URI, "range": {"start": {"line": 6, "character": 12},
                                                "end": {"line": 6, "character": 14}}}
    definition = client.request("textDocument/definition", position(3, 12))
    assert definition == {"uri": URI, "range": {"start": {"line": 6, "character": 4},
                                                "end": {"line": 6, "character": 11}}}

    refs = client.request("textDocument/references", {**position(6, 13), "context": {"includeDeclaration": True}})
    assert sorted((r["range"]["start"]["line"], r["range"]["start"]["character"]) for r in refs) == \
        [(6, 12), (7, 16), (8, 10)]

    symbols = client.request("textDocument/documentSymbol", {"textDocument": {"uri": URI}})
    assert [(s["name"], s["kind"]) for s in symbols] == [("@main", 12), ("@double", 12)]

    completion = client.request("textDocument/completion", position(2, 30))
    labels = {item["label"] for item in completion["items"]}
    assert "out_dtype" in labels and "units" not in labels   # `units=` is already given

    edits = client.request("textDocument/formatting",
                           {"textDocument": {"uri": URI}, "options": {"tabSize": 2, "insertSpaces": True}})
    [edit] = edits
    assert edit["range"]["start"] == {"line": 0, "character": 0}
    assert edit["newText"].startswith('#[version = "0.0.5"]\ndef @double(')   # the printer sorts defs
    assert "// (2, 4) + (2, 3): a type error" in edit["newText"]

    # Fixing the error clears the diagnostics.
    fixed = TEXT.replace("%w: Tensor[(4, 3), float32]", "%w: Tensor[(3, 3), float32]").replace("units=4", "units=3")
    client.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": 2},
                                             "contentChanges": [{"text": fixed}]})
    published = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")["params"]
    assert published["diagnostics"] == []

    assert client.request("shutdown", None) is None
    client.notify("exit", None)
    assert client.proc.wait(timeout=TIMEOUT) == 0


def test_several_syntax_errors_are_reported(client: Client) -> None:
    client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    client.notify("initialized", {})
    # One error per definition: a syntax error, a name error, and (once the rest parses) an arity error.
    text = ("def @f() {\n  %0 = add(1f 2f);\n  %0\n}\n"
            "def @g(%a: float32) -> float32 { %b }\n"
            "def @h() { add(1f) }\n")
    client.notify("textDocument/didOpen",
                  {"textDocument": {"uri": URI, "languageId": "relay", "version": 1, "text": text}})
    diags = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")["params"]["diagnostics"]
    starts = [(d["range"]["start"]["line"], d["range"]["start"]["character"]) for d in diags]
    assert starts == [(1, 14), (4, 33), (5, 11)]
    assert "unexpected `2f`" in diags[0]["message"]
    assert "undefined variable `%b`" in diags[1]["message"]
    assert "add takes 2 arguments" in diags[2]["message"]
    # A note ("previous definition is here") arrives as related information in the same file.
    client.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": 2},
                                             "contentChanges": [{"text": "def @a() { () }\ndef @a() { () }\n"}]})
    [diag] = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")["params"]["diagnostics"]
    assert diag["range"]["start"] == {"line": 1, "character": 4}
    [note] = diag["relatedInformation"]
    assert note["location"]["uri"] == URI and note["location"]["range"]["start"] == {"line": 0, "character": 0}
    assert note["message"] == "previous definition is here"
    client.request("shutdown", None)
    client.notify("exit", None)
