"""argparse `type=` functions for the tools' option values: a bad value is a usage error (exit
status 2, `irtool-run: error: argument --seed: the seed must be at least 0, got -1`) before any
work is done."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from irtool.target import MAX_THREADS


def int_range(what: str, low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer in [low, high] (no upper bound for None); `what` names it in messages."""
    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got '{text}'") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{what} must be at least {low}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{what} must be at most {high}, got {value}")
        return value
    return parse


def non_empty(text: str) -> str:
    """Any text but the empty string (a name)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


seed = int_range("the seed", 0)
threads = int_range("the thread count", 1, MAX_THREADS)
repeat = int_range("the repeat count", 1)
