"""The grammars of irtool's text formats, installed as package data (`irtool.grammar`)."""

from pathlib import Path

GRAMMAR_DIR = Path(__file__).resolve().parent


def grammar_text(name: str) -> str:
    """The text of `grammar/<name>.lark`."""
    return (GRAMMAR_DIR / f"{name}.lark").read_text(encoding="utf-8")
