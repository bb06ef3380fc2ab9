"""Running a tool the way a user does, and the contract every bad input must meet.

The adversarial suite (`tests/adversarial/`) feeds each tool inputs that once crashed, hung or
answered wrongly. Whatever the input, a tool ends within a bounded time, prints no Python
traceback and no `internal:` error, and a failure exits non-zero with a located message.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

# Console script → the module that `python -m` runs (the installed package, not the checkout).
TOOLS = {
    "irtool-opt": "irtool.tools.opt",
    "irtool-run": "irtool.tools.run",
    "irtool-llc": "irtool.tools.llc",
    "irtool-import": "irtool.tools.importer",
    "irtool-fmt": "irtool.tools.fmt",
    "irtool-viz": "irtool.tools.viz",
}

# `file:line:col: error:` for a place in a file, `NAME: error:` for a file or an argument.
LOCATED = re.compile(r"^\S+?(:\d+:\d+)?: error: \S", re.M)


def write(tmp_path: Path, name: str, text: str) -> Path:
    """`text` as the file `name` in `tmp_path` (the input a case hands a tool)."""
    path = tmp_path / name
    path.write_text(text)
    return path


def run_tool(tool: str, *args: str | Path, cwd: Path, stdin: str | bytes | None = None,
             timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run `tool` in a subprocess started in `cwd` (outside the checkout, so the installed
    package is imported); a run longer than `timeout` seconds fails the test."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    done = subprocess.run([sys.executable, "-m", TOOLS[tool], *map(str, args)], cwd=cwd,
                          input=data, capture_output=True, timeout=timeout)
    return subprocess.CompletedProcess(done.args, done.returncode,
                                       done.stdout.decode(errors="replace"),
                                       done.stderr.decode(errors="replace"))


def assert_no_crash(proc: subprocess.CompletedProcess[str]) -> None:
    """Neither a traceback nor an `internal:` error, whatever the exit status."""
    text = proc.stdout + proc.stderr
    assert "Traceback (most recent call last)" not in text, text
    assert "internal:" not in text and "internal parser error" not in text, text


def assert_clean_failure(proc: subprocess.CompletedProcess[str], *, says: str | None = None) -> None:
    """A refusal: exit status 1 or 2, a located `error:` line, and (if given) `says` in it."""
    assert_no_crash(proc)
    assert proc.returncode in (1, 2), (proc.returncode, proc.stderr)
    assert LOCATED.search(proc.stderr), proc.stderr
    if says is not None:
        assert says in proc.stderr, proc.stderr
