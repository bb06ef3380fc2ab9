"""Adversarial inputs for lowering and code generation (issue #18): each once hung, blew up or
compiled to wrong code, and is now compiled correctly or refused at the call.

Every tool runs as a user runs it (`run_tool`, in a subprocess outside the checkout); its
`timeout` is only a hang guard.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.adversarial import assert_clean_failure, run_tool


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- attribute-driven ranks are checked before anything is built ---------------------------

HUGE_RANK = {
    "expand_dims": "def @main(%x: Tensor[(2), float32]) {\n  expand_dims(%x, axis=0, num_newaxis=100000000)\n}\n",
    "reshape": "def @main(%x: Tensor[(2), float32]) {\n  reshape(%x, newshape=[" + "1, " * 70 + "2])\n}\n",
    "zeros": "def @main() {\n  zeros(shape=[" + ", ".join(["1"] * 65) + "], dtype=\"float32\")\n}\n",
}


@pytest.mark.parametrize("op", sorted(HUGE_RANK))
@pytest.mark.parametrize("command", [("irtool-llc", "--emit=llvm"), ("irtool-run", "--backend=native")],
                         ids=["llc", "run-native"])
def test_attribute_rank_is_refused_at_the_call(tmp_path: Path, op: str, command: tuple[str, str]) -> None:
    src = write(tmp_path, "rank.relay", HUGE_RANK[op])
    proc = run_tool(command[0], src, command[1], cwd=tmp_path, timeout=60)
    assert_clean_failure(proc, says="at most 64 dimensions are supported")
    assert "rank.relay:2:3: error:" in proc.stderr, proc.stderr
