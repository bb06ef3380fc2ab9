"""`irtool-lsp`: the Relay/TIR language server over standard input/output (for editors).

Needs the optional dependency pygls (`pip install 'irtool[lsp]'`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

PROG = "irtool-lsp"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        sys.stdout.write(f"usage: {PROG} [--stdio]\n\nA language server for .relay/.tir files, speaking LSP over "
                         "standard input and output.\n")
        return 0
    if args and args != ["--stdio"]:
        sys.stderr.write(f"{PROG}: error: unknown arguments: {' '.join(args)} (only --stdio is supported)\n")
        return 2
    try:
        from irtool.editor.lsp import build_server
    except ImportError as exc:
        sys.stderr.write(f"{PROG}: error: the language server needs pygls ({exc}); "
                         "install it with `pip install 'irtool[lsp]'` or `pip install pygls`\n")
        return 1
    build_server().start_io()
    return 0


if __name__ == "__main__":
    sys.exit(main())
