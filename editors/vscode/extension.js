// Starts `irtool-lsp` (stdio) for .relay and .tir files. Highlighting works without it.
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const command = vscode.workspace.getConfiguration("irtool").get("server.path") || "irtool-lsp";
  client = new LanguageClient(
    "irtool",
    "irtool language server",
    { command, args: ["--stdio"] },
    { documentSelector: [{ language: "relay" }, { language: "tir" }] }
  );
  context.subscriptions.push(client);
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
