"""Runs the lit/FileCheck suite in `tests/filecheck/` as one pytest test per lit file.

lit runs once per pytest session (in parallel, over the lit files this session selected); each
test then reports its own file's result, with lit's output as the failure message.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parent / "filecheck"
SUFFIXES = (".relay", ".tir")


def lit_files() -> list[Path]:
    return sorted(p for p in SUITE.rglob("*") if p.suffix in SUFFIXES and "Inputs" not in p.relative_to(SUITE).parts)


def _selected_files(session: pytest.Session) -> list[Path]:
    selected = []
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        if item.module is not None and item.module.__name__.endswith("test_filecheck") and callspec is not None:
            selected.append(SUITE / callspec.params["relpath"])
    return selected


@pytest.fixture(scope="session")
def lit_results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """lit's JSON result for every selected file, keyed by its path relative to the suite."""
    files = _selected_files(request.session)
    work = tmp_path_factory.mktemp("lit")
    report = work / "results.json"
    command = [sys.executable, "-c", "import sys; from lit.main import main; sys.exit(main())",
               "--no-progress-bar", "-q", f"--param=exec_root={work / 'exec'}", f"--output={report}",
               *map(str, files)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if not report.exists():
        pytest.fail(f"lit did not run (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    results = json.loads(report.read_text())["tests"]
    # lit names a test "<suite> :: <path relative to the suite>".
    return {r["name"].split(" :: ", 1)[1]: r for r in results}


@pytest.mark.parametrize("relpath", [str(p.relative_to(SUITE)) for p in lit_files()])
def test_lit(relpath: str, lit_results: dict[str, dict]) -> None:
    result = lit_results.get(relpath)
    assert result is not None, f"lit did not report {relpath}"
    if result["code"] == "UNSUPPORTED":
        pytest.skip(f"{relpath}: unsupported here")
    assert result["code"] in ("PASS", "XFAIL"), f"{relpath}: {result['code']}\n{result['output']}"
