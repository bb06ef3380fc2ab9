"""The build's progress line: only on a terminal, only after the delay, rewritten in place and
cleared at the end; `irtool.build` reports its stages through it."""

from __future__ import annotations

import io
import os
import pty
import select

import pytest

import irtool
import irtool.core.progress as progress_mod
import irtool.runtime.native as native_mod
from irtool.core.progress import CLEAR, Progress
from irtool.syntax.parser import parse


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("pause, step, expected", [
    (0.5, 0.25, ""),   # every report before the delay: nothing, not even a clearing
    (1.5, 1.0, f"{CLEAR}irtool: compiling 0/2 (1.5 s){CLEAR}irtool: compiling 1/2 (2.5 s){CLEAR}"),
])
def test_shown_after_the_delay(pause: float, step: float, expected: str) -> None:
    stream, clock = Terminal(), Clock()
    report = Progress(stream, delay=1.0, clock=clock)
    report.start("lowering")
    clock.now += pause
    report.start("compiling", 2)
    clock.now += step
    report.advance()
    report.close()
    assert stream.getvalue() == expected


def test_nothing_when_not_a_terminal() -> None:
    stream, clock = io.StringIO(), Clock()
    report = Progress(stream, delay=0.0, clock=clock)
    report.start("compiling", 1)
    report.advance()
    report.close()
    assert stream.getvalue() == ""


def test_a_pseudo_terminal_is_a_terminal() -> None:
    leader, follower = pty.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as stream:
            report = Progress(stream, delay=0.0)
            report.start("lowering")
            report.close()
        written = ""
        while select.select([leader], [], [], 1.0)[0] and not written.endswith(CLEAR):
            written += os.read(leader, 1024).decode()
    finally:
        os.close(leader)
        os.close(follower)
    assert "irtool: lowering" in written and written.endswith(CLEAR)


TEXT = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(6, 8), float32]) {
  %0 = nn.dense(%x, %w, units=6);
  nn.softmax(%0)
}
"""


@pytest.mark.parametrize("stream_type", [Terminal, io.StringIO])
def test_build_reports_its_stages(monkeypatch: pytest.MonkeyPatch, stream_type: type[io.StringIO]) -> None:
    monkeypatch.setattr(progress_mod, "DELAY", 0.0)
    monkeypatch.setattr(native_mod, "_CACHE", {})
    stream = stream_type()
    irtool.build(parse(TEXT, "progress.relay"), progress=stream)
    written = stream.getvalue()
    if stream_type is io.StringIO:
        assert written == ""
        return
    stages = [line.split(" (")[0] for line in written.split(CLEAR) if line]
    assert stages[:2] == ["irtool: lowering", "irtool: generating code"]
    assert written.endswith(CLEAR)
