"""The on-disk cache of compiled kernels (`irtool.build(..., cache_dir=...)`): a second build
compiles nothing and computes the same outputs (checked against numpy), a changed kernel or
target misses, an entry that is not whole is ignored and rebuilt, writes leave no partial
entry, and a cache directory that cannot be made is a clear error."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import irtool
import irtool.runtime.native as native_mod
from irtool.codegen.object_cache import MAGIC, ObjectCache
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse
from irtool.target import TargetOptions

# Two kernels (dense, then softmax, which does not fuse into it), so the build compiles modules.
TEXT = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(6, 8), float32]) {
  %0 = nn.dense(%x, %w, units=6);
  nn.softmax(%0)
}
"""


def _reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    y = x.astype(np.float64) @ w.T.astype(np.float64)
    e = np.exp(y - y.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


class Spy:
    """Counts the module texts the build compiles (the ones not found in the cache)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.compiled = 0
        real = ObjectCache.load

        def counting(cache: ObjectCache, text: str) -> bytes | None:
            obj = real(cache, text)
            self.compiled += obj is None
            return obj
        monkeypatch.setattr(ObjectCache, "load", counting)
        self.monkeypatch = monkeypatch

    def build(self, text: str, cache: Path, **kwargs: object) -> np.ndarray:
        # A fresh in-memory engine cache, so that every build reaches the compiler or the disk.
        self.monkeypatch.setattr(native_mod, "_CACHE", {})
        rng = np.random.default_rng(0)
        x, w = rng.standard_normal((4, 8), np.float32), rng.standard_normal((6, 8), np.float32)
        out = irtool.build(parse(text, "cache.relay"), cache_dir=cache, **kwargs)(x=x, w=w)
        np.testing.assert_allclose(out, _reference(x, w), rtol=1e-5, atol=1e-6)
        return out


def test_second_build_hits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(monkeypatch)
    first = spy.build(TEXT, tmp_path)
    compiled = spy.compiled
    entries = sorted(tmp_path.iterdir())
    assert compiled >= 1 and len(entries) == compiled
    second = spy.build(TEXT, tmp_path)
    assert spy.compiled == compiled   # nothing compiled again
    np.testing.assert_array_equal(first, second)
    assert sorted(tmp_path.iterdir()) == entries


def test_changed_kernel_and_options_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(monkeypatch)
    spy.build(TEXT, tmp_path)
    compiled = spy.compiled
    spy.build(TEXT.replace("nn.softmax(%0)", "nn.softmax(%0, axis=1)").replace("units=6", "units=6 "), tmp_path)
    assert spy.compiled == compiled   # the same program, written differently: the same kernels
    changed = TEXT.replace("nn.softmax(%0)", "nn.log_softmax(%0)")
    spy.monkeypatch.setattr(native_mod, "_CACHE", {})
    irtool.build(parse(changed, "cache.relay"), cache_dir=tmp_path)
    assert spy.compiled > compiled
    compiled = spy.compiled
    spy.build(TEXT, tmp_path, opt_level=2)
    assert spy.compiled > compiled


def test_target_is_part_of_the_key(tmp_path: Path) -> None:
    text = "define i32 @f() {\n  ret i32 0\n}\n"
    paths = {ObjectCache(tmp_path, TargetOptions(cpu=cpu, triple="x86_64-unknown-linux-gnu")).path(text)
             for cpu in ("skylake", "znver3", "x86-64")}
    assert len(paths) == 3
    assert ObjectCache(tmp_path, TargetOptions()).path(text) != ObjectCache(tmp_path, TargetOptions()).path(text + " ")


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "header"])
def test_damaged_entry_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    spy = Spy(monkeypatch)
    first = spy.build(TEXT, tmp_path)
    compiled = spy.compiled
    for entry in tmp_path.iterdir():
        data = entry.read_bytes()
        entry.write_bytes({"truncate": data[:len(data) // 2], "flip": data[:-1] + bytes([data[-1] ^ 1]),
                           "empty": b"", "header": b"x" + data[1:]}[damage])
    second = spy.build(TEXT, tmp_path)
    assert spy.compiled == 2 * compiled   # every damaged entry compiled again ...
    np.testing.assert_array_equal(first, second)
    third = spy.build(TEXT, tmp_path)
    assert spy.compiled == 2 * compiled   # ... and replaced by a whole one
    np.testing.assert_array_equal(first, third)


def test_store_is_whole_or_absent(tmp_path: Path) -> None:
    cache = ObjectCache(tmp_path, TargetOptions())
    (tmp_path / ".tmp-left-by-a-crashed-writer").write_bytes(MAGIC + b"half")
    assert cache.load("module") is None
    cache.store("module", b"first object")
    cache.store("module", b"second")
    assert cache.load("module") == b"second"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([".tmp-left-by-a-crashed-writer", cache.path("module").name])


def test_unusable_directory_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_mod, "_CACHE", {})
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(DiagnosticError, match="cannot use .* as the compile cache"):
        irtool.build(parse(TEXT, "cache.relay"), cache_dir=blocker / "cache")


def _run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    """`irtool-run` in a fresh interpreter outside the checkout (the installed irtool)."""
    return subprocess.run([sys.executable, "-m", "irtool.tools.run", "-", *args], input=TEXT, capture_output=True,
                          text=True, check=False, cwd=tempfile.gettempdir())


def test_command_line_cache_dir(tmp_path: Path) -> None:
    interp = _run_tool("--seed", "1")
    first = _run_tool("--seed", "1", "--backend=native", "--cache-dir", str(tmp_path))
    entries = {p: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    second = _run_tool("--seed", "1", "--backend=native", "--cache-dir", str(tmp_path))
    assert interp.returncode == first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert entries and {p: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == entries   # read, not rewritten
    assert first.stdout == second.stdout
    # The summaries print each output's statistics and first values: the interpreter's agree.
    number = r"(?<![\w.])-?\d[\d.]*(?:e[-+]?\d+)?(?=[,\] ]|$)"
    numbers = [[float(v) for v in re.findall(number, out.stdout.split("min=", 1)[1])] for out in (first, interp)]
    assert len(numbers[0]) == len(numbers[1]) >= 9
    np.testing.assert_allclose(numbers[0], numbers[1], rtol=1e-4)
    wrong = _run_tool("--cache-dir", str(tmp_path))
    assert wrong.returncode == 1 and "--cache-dir" in wrong.stderr and "--backend=native" in wrong.stderr
