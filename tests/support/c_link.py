"""Building a C program around a Relay model, as a user of the C ABI does: `irtool-llc` to an
object and a header, `cc main.c model.o -lm` (the C-link integration tests share it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def link_model(tmp_path: Path, program: str, driver: str) -> tuple[Path, str]:
    """`program` compiled to `model.o` + `model.h` with prefix `model`, linked with the C
    `driver`; the executable and the header's text."""
    (tmp_path / "model.relay").write_text(program)
    llc = [sys.executable, "-m", "irtool.tools.llc", str(tmp_path / "model.relay")]
    subprocess.run([*llc, "--emit=obj", "-o", str(tmp_path / "model.o")], check=True, cwd=tmp_path)
    subprocess.run([*llc, "--emit=header", "-o", str(tmp_path / "model.h")], check=True, cwd=tmp_path)
    (tmp_path / "main.c").write_text(driver)
    subprocess.run(["cc", "-O1", "-o", str(tmp_path / "prog"), str(tmp_path / "main.c"), str(tmp_path / "model.o"),
                    "-lm"], check=True, cwd=tmp_path)
    return tmp_path / "prog", (tmp_path / "model.h").read_text()
