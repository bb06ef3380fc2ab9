"""The `irtool-lsp` language server (pygls, stdio): diagnostics as you type, hover, definitions,
references, outline, completion and formatting for `.relay` files.

Every request reads a `Document` analysed once per text version; positions are converted
between the client's units (UTF-16 by default) and the code points irtool's spans count.
"""

from __future__ import annotations

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
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


class IRLanguageServer(LanguageServer):
    """A pygls server that keeps the latest analysis of each open document."""

    def __init__(self) -> None:
        super().__init__("irtool-lsp", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Full)
        self.analyses: dict[str, tuple[int | None, str, Document]] = {}

    def analysis(self, uri: str) -> tuple[TextDocument, Document]:
        doc = self.workspace.get_text_document(uri)
        cached = self.analyses.get(uri)
        if cached is None or cached[0] != doc.version or cached[1] != doc.source:
            cached = (doc.version, doc.source, Document(doc.source, _display_name(uri)))
            self.analyses[uri] = cached
        return doc, cached[2]

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


def _symbol(doc: TextDocument, item: Outline) -> lsp.DocumentSymbol:
    return lsp.DocumentSymbol(name=item.name, kind=_SYMBOL_KIND[item.kind], range=_to_client(doc, item.range),
                              selection_range=_to_client(doc, item.selection),
                              children=[_symbol(doc, child) for child in item.children] or None)


def build_server() -> IRLanguageServer:
    server = IRLanguageServer()

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: IRLanguageServer, params: lsp.DidOpenTextDocumentParams) -> None:
        ls.publish(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: IRLanguageServer, params: lsp.DidChangeTextDocumentParams) -> None:
        ls.publish(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: IRLanguageServer, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.analyses.pop(params.text_document.uri, None)
        ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=params.text_document.uri,
                                                                          diagnostics=[]))

    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(ls: IRLanguageServer, params: lsp.HoverParams) -> lsp.Hover | None:
        doc, analysis = ls.analysis(params.text_document.uri)
        pos = _from_client(doc, params.position)
        text = analysis.hover(pos)
        occ = analysis.at(pos)
        if text is None or occ is None:
            return None
        return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, text), _to_client(doc, occ.range))

    @server.feature(lsp.TEXT_DOCUMENT_DEFINITION)
    def definition(ls: IRLanguageServer, params: lsp.DefinitionParams) -> lsp.Location | None:
        doc, analysis = ls.analysis(params.text_document.uri)
        rng = analysis.definition(_from_client(doc, params.position))
        return None if rng is None else lsp.Location(doc.uri, _to_client(doc, rng))

    @server.feature(lsp.TEXT_DOCUMENT_REFERENCES)
    def references(ls: IRLanguageServer, params: lsp.ReferenceParams) -> list[lsp.Location]:
        doc, analysis = ls.analysis(params.text_document.uri)
        ranges = analysis.references(_from_client(doc, params.position), params.context.include_declaration)
        return [lsp.Location(doc.uri, _to_client(doc, rng)) for rng in ranges]

    @server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    def symbols(ls: IRLanguageServer, params: lsp.DocumentSymbolParams) -> list[lsp.DocumentSymbol]:
        doc, analysis = ls.analysis(params.text_document.uri)
        return [_symbol(doc, item) for item in analysis.outline]

    @server.feature(lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=[".", "(", ",", " "]))
    def completion(ls: IRLanguageServer, params: lsp.CompletionParams) -> lsp.CompletionList:
        doc = ls.workspace.get_text_document(params.text_document.uri)
        line, col = _from_client(doc, params.position)
        items = [lsp.CompletionItem(label=c.label, kind=_COMPLETION_KIND[c.kind], detail=c.detail or None,
                                    insert_text=c.insert_text) for c in complete(doc.source, line, col)]
        return lsp.CompletionList(is_incomplete=False, items=items)

    @server.feature(lsp.TEXT_DOCUMENT_FORMATTING)
    def formatting(ls: IRLanguageServer, params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit] | None:
        doc = ls.workspace.get_text_document(params.text_document.uri)
        try:
            formatted = format_text(doc.source, _display_name(doc.uri))
        except DiagnosticError:
            return None   # the diagnostics already say why; leave the text alone
        if formatted == doc.source:
            return []
        end = (len(doc.lines), 0)
        return [lsp.TextEdit(_to_client(doc, ((0, 0), end)), formatted)]

    return server
