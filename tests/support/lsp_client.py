"""A minimal language-server client for tests: the real `irtool-lsp` in a subprocess, spoken to
over its pipes with JSON-RPC and Content-Length framing, as an editor does."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading
from typing import Any

TIMEOUT = 60.0


class Client:
    """A minimal LSP client: framed JSON-RPC over the server's pipes; a reader thread queues
    every message so that reads can time out instead of hanging the test run."""

    def __init__(self) -> None:
        # Started outside the checkout, so `-m` imports the installed irtool, not the source tree.
        self.proc = subprocess.Popen([sys.executable, "-m", "irtool.tools.lsp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tempfile.gettempdir())
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        while True:
            headers: dict[str, str] = {}
            while True:
                line = stream.readline()
                if not line:
                    self.messages.put(None)
                    return
                if line in (b"\r\n", b"\n"):
                    break
                key, _, value = line.decode("ascii").partition(":")
                headers[key.strip().lower()] = value.strip()
            body = stream.read(int(headers["content-length"]))
            self.messages.put(json.loads(body))

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode("utf-8")
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"method": method, "params": params})

    def call(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """The whole response to a request: `result`, or `error` with `code` and `message`."""
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.wait(lambda m: m.get("id") == self.next_id and "method" not in m)

    def request(self, method: str, params: dict[str, Any] | None) -> Any:
        message = self.call(method, params)
        assert "error" not in message, message
        return message["result"]

    def initialize(self) -> dict[str, Any]:
        result = self.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        self.notify("initialized", {})
        return result

    def open(self, uri: str, text: str) -> list[dict[str, Any]]:
        """Open a document; the diagnostics the server publishes for it."""
        self.notify("textDocument/didOpen",
                    {"textDocument": {"uri": uri, "languageId": "relay", "version": 1, "text": text}})
        return self.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                         and m["params"]["uri"] == uri)["params"]["diagnostics"]

    def close(self) -> None:
        """Kill the server if it still runs, and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=TIMEOUT)

    def wait(self, wanted: Any) -> dict[str, Any]:
        while True:
            try:
                message = self.messages.get(timeout=TIMEOUT)
            except queue.Empty:
                raise AssertionError("the language server did not answer in time") from None
            if message is None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise AssertionError(f"the language server exited: {err}")
            if wanted(message):
                return message
