"""Adversarial inputs for lowering and code generation (issue #18): each once hung, blew up or
compiled to wrong code, and is now compiled correctly or refused at the call.

Every tool runs as a user runs it (`run_tool`, in a subprocess outside the checkout); its
`timeout` is only a hang guard.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from support.adversarial import assert_clean_failure, run_tool, write


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


# ---- a shared value is compiled once, not expanded into a tree -----------------------------

def doubling_chain(depth: int) -> str:
    lines = ["def @main(%x: Tensor[(4), float32]) {", "  %0 = add(%x, %x);"]
    lines += [f"  %{k} = add(%{k - 1}, %{k - 1});" for k in range(1, depth)]
    return "\n".join([*lines, f"  %{depth - 1}", "}", ""])


def test_doubling_dag_of_depth_200_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    """Once 34 s and 1.3 GB at depth 20 and a MemoryError at 200 (codegen expanded the DAG)."""
    src = write(tmp_path, "dag.relay", doubling_chain(200))
    llc = run_tool("irtool-llc", src, "--emit=llvm", "-o", tmp_path / "dag.ll", cwd=tmp_path, timeout=60)
    assert llc.returncode == 0, llc.stderr
    assert (tmp_path / "dag.ll").read_text().count("fadd") <= 200
    x = np.array([2.0 ** -149, 2.0 ** -140, -(2.0 ** -145), 0.0], np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    results = []
    for backend in ("native", "interp"):
        out = tmp_path / f"{backend}.npz"
        proc = run_tool("irtool-run", src, f"--backend={backend}", "--inputs", tmp_path / "in.npz", "-o", out,
                        cwd=tmp_path, timeout=60)
        assert proc.returncode == 0, proc.stderr
        with np.load(out) as data:
            results.append(data[data.files[0]])
    want = x * np.float32(2.0 ** 100) * np.float32(2.0 ** 100)   # x * 2^200, exact in float32
    np.testing.assert_array_equal(results[0], want)
    np.testing.assert_array_equal(results[1], want)


# ---- dimensions of 2^31 and more get 64-bit indices ----------------------------------------

def test_a_loop_over_more_than_int32_elements_is_compiled_with_int64(tmp_path: Path) -> None:
    """`Tensor[(2147483648), int8]` once compiled to a loop that never ran, and a dimension of
    99999999999 to one of 1215752191 iterations; both loops now count in i64. The native run
    reduces an inlined fill of 2^31 + 5 elements (cheap: no buffer is large)."""
    for n in (2147483648, 99999999999):
        src = write(tmp_path, "neg.relay", f"def @main(%x: Tensor[({n}), int8]) {{\n  negative(%x)\n}}\n")
        proc = run_tool("irtool-llc", src, "--emit=llvm", "-O0", "--mcpu=x86-64",
                        "--mtriple=x86_64-unknown-linux-gnu", cwd=tmp_path, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert f"icmp slt i64 %t1, {n}" in proc.stdout and " i32 %t1" not in proc.stdout, proc.stdout
    src = write(tmp_path, "sum.relay",
                'def @main(%v: Tensor[(), int64]) {\n  sum(full(%v, shape=[2147483653], dtype="int64"))\n}\n')
    np.savez(tmp_path / "in.npz", v=np.array(3, np.int64))
    proc = run_tool("irtool-run", src, "--backend=native", "--inputs", tmp_path / "in.npz", "-o", tmp_path / "out.npz",
                    cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as data:
        assert int(data[data.files[0]]) == 3 * 2147483653
