"""The `irtool-lsp` language server (pygls, stdio): diagnostics as you type, hover, definitions,
references, outline, completion and formatting for `.relay` files.

Every request reads a `Document` analysed once per text version; positions are converted
between the client's units (UTF-16 by default) and the code points irtool's spans count.

Whatever a client sends, a request gets an answer and no reply carries a Python traceback:
params that do not fit the protocol (a negative or 2^31 position) are `InvalidParams` for that
request, a document that was never opened is `InvalidParams` naming it, and an unexpected failure
in a handler is an `InternalError` with a one-line message; the traceback goes to the server's
log (standard error and the client's `window/logMessage`) only.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace import TextDocument

from irtool import __version__
from irtool.editor.completion import complete
from irtool.editor.document import Document, Outline, Range, span_range
from irtool.editor.fmt import format_text
from irtool.core.diagnostics import Diagnostic, DiagnosticError

__all__ = ["build_server"]

_SEVERITY = {"error": lsp.DiagnosticSeverity.Error, "warning": lsp.DiagnosticSeverity.Warning,
             "note": lsp.DiagnosticSeverity.Information, "remark": lsp.DiagnosticSeverity.Hint}
_SYMBOL_KIND = {"function": lsp.SymbolKind.Function, "primfn": lsp.SymbolKind.Function,
                "type": lsp.SymbolKind.Class, "constructor": lsp.SymbolKind.EnumMember}
_COMPLETION_KIND = {"operator": lsp.CompletionItemKind.Function, "attribute": lsp.CompletionItemKind.Property}

_log = logging.getLogger("irtool-lsp")
_Handler = TypeVar("_Handler", bound=Callable[..., Any])


class _Answered:
    """What `_Protocol` hands on for a request it has already answered with an error."""


class _Protocol(LanguageServerProtocol):
    """pygls' protocol, except that a request whose params do not fit the protocol's types is
    answered `InvalidParams` (pygls drops it unanswered, and the client waits forever)."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            msg_id, method = data.get("id"), data.get("method")
            if not isinstance(msg_id, (int, str)) or isinstance(msg_id, bool) or not isinstance(method, str):
                raise   # a notification or a response: nobody waits for an answer; pygls logs it
            reason = _validation_reason(exc)
            self._send_response(msg_id, error=lsp.ResponseError(
                code=JsonRpcInvalidParams.CODE, message=f"{method}: invalid params{': ' + reason if reason else ''}"))
            return _Answered()

    def handle_message(self, message: Any) -> None:
        if not isinstance(message, _Answered):
            super().handle_message(message)


def _validation_reason(exc: BaseException) -> str:
    """The innermost messages of a failed conversion (cattrs nests them in exception groups)."""
    reasons: list[str] = []
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        inner = list(getattr(e, "exceptions", ())) or ([e.__cause__] if e.__cause__ is not None else [])
        if inner:
            stack.extend(reversed(inner))
        elif str(e):
            reasons.append(str(e))
    return "; ".join(dict.fromkeys(reasons))


class IRLanguageServer(LanguageServer):
    """A pygls server that keeps the latest analysis of each open document."""

    def __init__(self) -> None:
        super().__init__("irtool-lsp", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Full,
                         protocol_cls=_Protocol)
        self.analyses: dict[str, tuple[int | None, str, Document]] = {}

    def text_document(self, uri: str) -> TextDocument:
        """An open document; any other is refused (pygls would read a file from disk, or fail)."""
        if unquote(uri) not in self.workspace.text_documents:   # pygls keys documents by the decoded URI
            raise JsonRpcInvalidParams(f"irtool-lsp: {uri} is not open (send textDocument/didOpen first)")
        return self.workspace.get_text_document(uri)

    def analysis(self, uri: str) -> tuple[TextDocument, Document]:
        doc = self.text_document(uri)
        cached = self.analyses.get(uri)
        if cached is None or cached[0] != doc.version or cached[1] != doc.source:
            cached = (doc.version, doc.source, Document(doc.source, _display_name(uri)))
            self.analyses[uri] = cached
        return doc, cached[2]

    def log_failure(self, method: str, exc: Exception) -> str:
        """Log an unexpected exception of a handler (traceback included) to standard error and the
        client's log; the one line the client is told."""
        what = ("the document nests too deeply to analyse" if isinstance(exc, RecursionError)
                else f"{type(exc).__name__}: {exc}")
        line = f"irtool-lsp: {method} failed: {what} (an irtool-lsp bug; the server log has the details)"
        _log.error("%s", line, exc_info=exc)
        try:
            self.window_log_message(lsp.LogMessageParams(type=lsp.MessageType.Error, message=line))
        except Exception:  # noqa: BLE001 -- the log must not fail the handler a second time
            _log.exception("irtool-lsp: cannot send window/logMessage")
        return line

    def publish(self, uri: str) -> None:
        doc, analysis = self.analysis(uri)
        diagnostics = [_diagnostic(doc, d) for d in sorted(analysis.diagnostics, key=_position)]
        self.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, version=doc.version, diagnostics=diagnostics))


def _display_name(uri: str) -> str:
    """The file name diagnostics and notes use (the URI itself for unsaved buffers)."""
    return to_fs_path(uri) or uri


def _position(diag: Diagnostic) -> tuple[int, int]:
    return (diag.span.line, diag.span.col) if diag.span else (0, 0)


def _to_client(doc: TextDocument, rng: Range) -> lsp.Range:
    (l1, c1), (l2, c2) = rng
    server = lsp.Range(lsp.Position(l1, c1), lsp.Position(l2, c2))
    return doc.position_codec.range_to_client_units(doc.lines, server)


def _from_client(doc: TextDocument, position: lsp.Position) -> tuple[int, int]:
    pos = doc.position_codec.position_from_client_units(doc.lines, position)
    return pos.line, pos.character


def _diagnostic(doc: TextDocument, diag: Diagnostic) -> lsp.Diagnostic:
    rng = span_range(diag.span) if diag.span else ((0, 0), (0, 1))
    related = [lsp.DiagnosticRelatedInformation(lsp.Location(_note_uri(doc, note.span.source),
                                                             _to_client(doc, span_range(note.span))), note.message)
               for note in diag.notes if note.span is not None]
    return lsp.Diagnostic(range=_to_client(doc, rng), message=diag.message, source="irtool",
                          severity=_SEVERITY.get(diag.severity, lsp.DiagnosticSeverity.Error),
                          related_information=related or None)


def _note_uri(doc: TextDocument, source: str) -> str:
    return doc.uri if source == _display_name(doc.uri) else from_fs_path(source) or doc.uri


def _symbol(doc: TextDocument, item: Outline, children: list[lsp.DocumentSymbol] | None = None) -> lsp.DocumentSymbol:
    return lsp.DocumentSymbol(name=item.name, kind=_SYMBOL_KIND[item.kind], range=_to_client(doc, item.range),
                              selection_range=_to_client(doc, item.selection), children=children or None)


def _guarded(method: str, handler: _Handler) -> _Handler:
    """`handler` answering a clean JSON-RPC error instead of raising anything unexpected: pygls
    would send the traceback as the error's `data`. A notification's failure is only logged."""
    @functools.wraps(handler)
    def run(ls: IRLanguageServer, params: Any) -> Any:
        try:
            return handler(ls, params)
        except JsonRpcException:
            raise   # already a clean error (no `data`)
        except Exception as exc:  # noqa: BLE001 -- last resort: never a traceback in a reply
            line = ls.log_failure(method, exc)
            if method in _NOTIFICATIONS:
                return None
            raise JsonRpcInternalError(line) from None
    return run  # type: ignore[return-value]


_REQUEST_FAILED = -32803  # LSP's RequestFailed: the request was valid, but answering it failed
_NOTIFICATIONS = {lsp.TEXT_DOCUMENT_DID_OPEN, lsp.TEXT_DOCUMENT_DID_CHANGE, lsp.TEXT_DOCUMENT_DID_CLOSE}


def build_server() -> IRLanguageServer:
    server = IRLanguageServer()

    def feature(method: str, options: Any = None) -> Callable[[_Handler], _Handler]:
        def register(handler: _Handler) -> _Handler:
            return server.feature(method, options)(_guarded(method, handler))
        return register

    @feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: IRLanguageServer, params: lsp.DidOpenTextDocumentParams) -> None:
        ls.publish(params.text_document.uri)

    @feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: IRLanguageServer, params: lsp.DidChangeTextDocumentParams) -> None:
        ls.publish(params.text_document.uri)

    @feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: IRLanguageServer, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.analyses.pop(params.text_document.uri, None)
        ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=params.text_document.uri,
                                                                          diagnostics=[]))

    @feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(ls: IRLanguageServer, params: lsp.HoverParams) -> lsp.Hover | None:
        doc, analysis = ls.analysis(params.text_document.uri)
        pos = _from_client(doc, params.position)
        text = analysis.hover(pos)
        occ = analysis.at(pos)
        if text is None or occ is None:
            return None
        return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, text), _to_client(doc, occ.range))

    @feature(lsp.TEXT_DOCUMENT_DEFINITION)
    def definition(ls: IRLanguageServer, params: lsp.DefinitionParams) -> lsp.Location | None:
        doc, analysis = ls.analysis(params.text_document.uri)
        rng = analysis.definition(_from_client(doc, params.position))
        return None if rng is None else lsp.Location(doc.uri, _to_client(doc, rng))

    @feature(lsp.TEXT_DOCUMENT_REFERENCES)
    def references(ls: IRLanguageServer, params: lsp.ReferenceParams) -> list[lsp.Location]:
        doc, analysis = ls.analysis(params.text_document.uri)
        ranges = analysis.references(_from_client(doc, params.position), params.context.include_declaration)
        return [lsp.Location(doc.uri, _to_client(doc, rng)) for rng in ranges]

    @feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    def symbols(ls: IRLanguageServer, params: lsp.DocumentSymbolParams) -> list[lsp.DocumentSymbol]:
        doc, analysis = ls.analysis(params.text_document.uri)
        return [_symbol(doc, item, [_symbol(doc, child) for child in item.children]) for item in analysis.outline]

    @feature(lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=[".", "(", ",", " "]))
    def completion(ls: IRLanguageServer, params: lsp.CompletionParams) -> lsp.CompletionList:
        doc = ls.text_document(params.text_document.uri)
        line, col = _from_client(doc, params.position)
        items = [lsp.CompletionItem(label=c.label, kind=_COMPLETION_KIND[c.kind], detail=c.detail or None,
                                    insert_text=c.insert_text) for c in complete(doc.source, line, col)]
        return lsp.CompletionList(is_incomplete=False, items=items)

    @feature(lsp.TEXT_DOCUMENT_FORMATTING)
    def formatting(ls: IRLanguageServer, params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit] | None:
        doc, analysis = ls.analysis(params.text_document.uri)
        try:
            formatted = format_text(doc.source, _display_name(doc.uri))
        except DiagnosticError as err:
            if any(d.severity == "error" for d in analysis.diagnostics):
                return None   # the diagnostics already say why; leave the text alone
            # Refused for another reason (nesting that would blow the text up): say which.
            raise JsonRpcException(f"irtool-lsp: {err.diagnostics[0].message}", code=_REQUEST_FAILED) from None
        if formatted == doc.source:
            return []
        end = (len(doc.lines), 0)
        return [lsp.TextEdit(_to_client(doc, ((0, 0), end)), formatted)]

    return server
