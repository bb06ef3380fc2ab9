"""Adversarial requests to the language server (issue #18, case 9), over its real protocol: the
`irtool-lsp` subprocess and a JSON-RPC client on its pipes (`support.lsp_client`), as an editor
runs it. Each case once answered a Python traceback in `error.data` or never answered at all.

Whatever arrives, every request gets an answer, no answer carries a traceback, and the server
keeps serving the next request.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pygls", reason="the language server is an optional extra (pip install 'irtool[lsp]')")

from support.lsp_client import Client  # noqa: E402

INVALID_PARAMS = -32602
SMALL_URI = "file:///tmp/adversarial_small.relay"
SMALL = "def @main(%x: float32) {\n  negative(%x)\n}\n"
DEPTH = 20000   # the 20k-30k; CPython's default recursion limit is 1000


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    """One server for the module (each start costs seconds); `assert_serving` after every case
    shows it still answers, and each case uses documents of its own."""
    c = Client()
    try:
        c.initialize()
        c.open(SMALL_URI, SMALL)
        yield c
    finally:
        c.close()


def at(uri: str, line: int, character: int) -> dict[str, Any]:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}


def assert_clean_error(reply: dict[str, Any], code: int, says: str) -> None:
    assert "result" not in reply, reply
    error = reply["error"]
    assert error["code"] == code, error
    assert says in error["message"], error
    assert error.get("data") is None, error   # pygls put the traceback there
    assert "Traceback" not in error["message"], error


def assert_serving(client: Client) -> None:
    """A valid request after the bad one is answered as usual."""
    hover = client.request("textDocument/hover", at(SMALL_URI, 1, 4))
    assert "negative(%arg0)" in hover["contents"]["value"]


@pytest.mark.parametrize("line,character,says", [
    (-1, 0, "Position.line should be in range [0:2147483647], but was -1"),
    (0, -5, "Position.character should be in range [0:2147483647], but was -5"),
    (2 ** 31, 0, "Position.line should be in range [0:2147483647], but was 2147483648"),
    (0, 2 ** 31, "Position.character should be in range [0:2147483647], but was 2147483648"),
], ids=["line-1", "character-5", "line-2^31", "character-2^31"])
def test_an_out_of_range_position_is_invalid_params(client: Client, line: int, character: int, says: str) -> None:
    """Once no reply at all: pygls dropped the message it could not convert."""
    for method in ("textDocument/hover", "textDocument/definition", "textDocument/completion"):
        reply = client.call(method, at(SMALL_URI, line, character))
        assert_clean_error(reply, INVALID_PARAMS, says)
        assert reply["error"]["message"].startswith(f"{method}: invalid params")
    assert_serving(client)


def test_a_position_past_the_end_is_answered_with_nothing(client: Client) -> None:
    assert client.request("textDocument/hover", at(SMALL_URI, 10 ** 6, 3)) is None
    assert client.request("textDocument/definition", at(SMALL_URI, 1, 10 ** 6)) is None


def test_requests_about_a_document_never_opened_name_it(client: Client) -> None:
    """Once a FileNotFoundError traceback (pygls tried to read the URI from disk)."""
    uri = "file:///tmp/adversarial_never_opened.relay"
    requests = {
        "textDocument/hover": at(uri, 0, 0),
        "textDocument/definition": at(uri, 0, 0),
        "textDocument/references": {**at(uri, 0, 0), "context": {"includeDeclaration": True}},
        "textDocument/documentSymbol": {"textDocument": {"uri": uri}},
        "textDocument/formatting": {"textDocument": {"uri": uri}, "options": {"tabSize": 2, "insertSpaces": True}},
        "textDocument/completion": at(uri, 0, 0),
    }
    for method, params in requests.items():
        reply = client.call(method, params)
        assert_clean_error(reply, INVALID_PARAMS, f"{uri} is not open (send textDocument/didOpen first)")
    assert_serving(client)


def test_a_percent_encoded_uri_is_the_open_document(client: Client) -> None:
    """Open documents are known by their decoded URI; the check must decode too."""
    uri = "file:///tmp/adversarial%20spaced.relay"
    assert client.open(uri, SMALL) == []
    assert "negative(%arg0)" in client.request("textDocument/hover", at(uri, 1, 4))["contents"]["value"]


# Nesting that recursed somewhere under the parser (type inference of nested function types and
# tuple types): every request answered -32603 RecursionError with a traceback in `data`.
DEEP = {
    "functions": "def @main() {\n  " + "fn () {" * DEPTH + "1f" + "}" * DEPTH + "\n}\n",
    "tuple-types": "def @main(%x: " + "(" * DEPTH + "float32" + ",)" * DEPTH + ") {\n  %x\n}\n",
}


@pytest.mark.parametrize("kind", sorted(DEEP))
def test_deep_nesting_is_a_located_diagnostic_and_every_request_answers(client: Client, kind: str) -> None:
    uri = f"file:///tmp/adversarial_deep_{kind}.relay"
    text = DEEP[kind]
    [diag] = client.open(uri, text)
    assert "nested too deeply" in diag["message"], diag
    line = diag["range"]["start"]["line"]
    assert line in (0, 1), diag   # at the nesting, which is on line 1 or 2 of the file
    assert diag["range"]["start"]["character"] > 0, diag
    requests = {
        "textDocument/hover": at(uri, 1, 4),
        "textDocument/definition": at(uri, 1, 4),
        "textDocument/references": {**at(uri, 1, 4), "context": {"includeDeclaration": True}},
        "textDocument/documentSymbol": {"textDocument": {"uri": uri}},
        "textDocument/formatting": {"textDocument": {"uri": uri}, "options": {"tabSize": 2, "insertSpaces": True}},
    }
    for method, params in requests.items():
        reply = client.call(method, params)
        assert "error" not in reply, (method, reply)
    assert client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})[0]["name"] == "@main"
    # The diagnostic stands for the text: formatting leaves a file it cannot analyse alone.
    assert client.request("textDocument/formatting", requests["textDocument/formatting"]) is None
    assert_serving(client)
