"""Native code gives the interpreter's answer on the TVM corpus (`shared/corpus/tvm-relay`, outside
the checkout; skipped when it is absent): every program whose `main` the interpreter runs with
`--seed 0` inputs, except the ones listed here, each of which is refused with a located error
naming what is not compiled. The samples: tests/unit/test_driver.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import irtool
from irtool.core.diagnostics import DiagnosticError, render_error
from irtool.eval.interpreter import entry_function, run_function
from irtool.eval.values import flatten_value
from irtool.tools.run import load_module, random_inputs

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared/corpus/tvm-relay"

# Corpus programs the interpreter runs that native code refuses, and why (docs/native-relay.md).
NOT_NATIVE: dict[str, str] = {}


def _close(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    """Equal, up to float32 rounding: sums run in another order than numpy's, so a convolution's
    outputs differ by an amount that scales with their magnitude."""
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if g.shape != w.shape or g.dtype != w.dtype:
            return False
        scale = float(np.abs(w).max(initial=0)) if w.dtype.kind == "f" else 0.0
        if not np.allclose(g, w, rtol=1e-4, atol=1e-5 + 1e-4 * scale, equal_nan=True):
            return False
    return True


def _native_matches(path: Path) -> bool | None:
    """None when the interpreter does not run `main` on `--seed 0` inputs; else whether native
    code gives its answer (a DiagnosticError propagates)."""
    try:
        mod = load_module(path.name, path.read_text(), "main")
        inputs = random_inputs("main", entry_function(mod, "main"), 0)
        want = flatten_value(run_function(mod, inputs))
    except DiagnosticError:
        return None
    return _close(flatten_value(irtool.build(mod)(**inputs)), want)


def test_the_native_backend_of_irtool_run_prints_what_the_interpreter_prints(tmp_path: Path) -> None:
    sample = str(ROOT / "samples/adt_list.relay")
    runs = [subprocess.run([sys.executable, "-m", "irtool.tools.run", sample, "--seed", "3", *extra],
                           cwd=tmp_path, capture_output=True, text=True, check=False)
            for extra in ([], ["--backend=native"])]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    assert runs[0].stdout == runs[1].stdout and "output1: int32" in runs[0].stdout


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"TVM corpus not found at {CORPUS}")
def test_the_corpus_runs_natively_with_the_interpreters_answers() -> None:
    runnable, wrong, refused = 0, [], {}
    for path in sorted(CORPUS.glob("*.relay")):
        try:
            matches = _native_matches(path)
        except DiagnosticError as e:
            refused[path.name] = render_error(e)
            continue
        if matches is None:
            continue
        runnable += 1
        if not matches:
            wrong.append(path.name)
    assert runnable + len(refused) == 130   # the programs whose main the interpreter runs
    assert wrong == []
    assert set(refused) == set(NOT_NATIVE), refused
    for name, message in refused.items():
        assert message.startswith(f"{name}:") and NOT_NATIVE[name] in message, message
