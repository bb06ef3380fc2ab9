"""lit configuration for irtool's FileCheck tests (`// RUN: irtool-opt %s | filecheck %s`).

Run by hand with `lit -v tests/filecheck`; `tests/test_filecheck.py` runs the same suite from
pytest. The tools always resolve to the Python that runs lit, even when its environment's
`bin/` directory is not on PATH.
"""

import os
import re
import shutil
import sys
import tempfile

import lit.formats

config.name = "irtool"
config.test_format = lit.formats.ShTest()  # lit's internal shell (`ShTest(True)` raises on lit 23)
config.suffixes = [".relay", ".tir"]
config.excludes = ["Inputs", "lit.cfg.py"]  # `Inputs/` holds files that RUN lines read, not tests
config.test_source_root = os.path.dirname(__file__)
# lit writes scratch files (%t) under the exec root; keep them out of the checkout.
config.test_exec_root = lit_config.params.get(
    "exec_root", os.path.join(tempfile.gettempdir(), f"irtool-lit-{os.getuid()}"))

bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bin_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])
# A checkout run with `PYTHONPATH=checkout` (a worktree beside an editable install) tests itself.
if "PYTHONPATH" in os.environ:
    config.environment["PYTHONPATH"] = os.environ["PYTHONPATH"]
# Deterministic output regardless of the caller's environment.
config.environment["PYTHONHASHSEED"] = "0"
config.environment["PYTHONIOENCODING"] = "utf-8"


def tool(name: str, module: str) -> str:
    """The console script beside this Python if installed there, else `python -m module`."""
    script = shutil.which(name, path=bin_dir)
    return f'"{script}"' if script else f'"{sys.executable}" -m {module}'


config.substitutions.append(("%python", f'"{sys.executable}"'))
for name, module in [("irtool-opt", "irtool.tools.opt"), ("irtool-run", "irtool.tools.run"),
                     ("filecheck", "filecheck")]:
    # Whole words only, so a file named `irtool-opt-cli.relay` is left alone.
    config.substitutions.append((rf"(?<![\w/.-]){re.escape(name)}(?![\w.-])", tool(name, module)))
