"""Adversarial inputs for the passes and memory plans (issue #18, case 5): each pass once turned a
valid module into one its own verifier refused, or a broken plan read from text was compiled
and run to wrong numbers. Now the pass keeps the module valid, and every reader of a plan checks
it as strictly as `plan-memory`'s verify-each does.

Tools run as a user runs them (`run_tool`, in a subprocess outside the checkout).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from support.adversarial import assert_clean_failure, assert_no_crash, run_tool, write

SIMPLE_MATCH = """#[version = "0.0.5"]
type List[A] {
    Cons(A, List[A]),
    Nil,
}
def @main(%x: int) {
    let %l : List[int] = Nil;
    let %m = (match (%l) {
        Cons(%head, %rest) => {
            let %y = %x + 1;
            let %z = %y + %y;
            %z
        },
        Nil => -1,
    });
    %m
}
"""

ONE_LIVE_LET = """#[version = "0.0.5"]
def @main(%z: int) {
    let %x = 1;
    let %y = 2;
    %x + %x
}
"""

MLP = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 32), float32], %w1: Tensor[(16, 32), float32], %w2: Tensor[(8, 16), float32]) {
  %0 = nn.dense(%x, %w1);
  %1 = nn.relu(%0);
  %2 = nn.dense(%1, %w2);
  nn.softmax(%2)
}
"""


def opt_and_reverify(tmp_path: Path, src: Path, pipeline: str) -> str:
    """`irtool-opt -p PIPELINE` succeeds and its output verifies again as a fresh input."""
    out = tmp_path / "out.relay"
    proc = run_tool("irtool-opt", src, "-p", pipeline, "-o", out, cwd=tmp_path)
    assert_no_crash(proc)
    assert proc.returncode == 0, proc.stderr
    again = run_tool("irtool-opt", out, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    return out.read_text()


def test_graph_normal_form_keeps_the_annotation_that_types_nil(tmp_path: Path) -> None:
    """Once "cannot infer type of call to Nil" after the pass: it dropped `let %l: List[int]`."""
    text = opt_and_reverify(tmp_path, write(tmp_path, "match.relay", SIMPLE_MATCH), "to-graph-normal-form")
    assert "let %l: List[int32] = Nil;" in text
    assert "let %m" not in text and "let %y" not in text  # the other lets are pure and go


def test_interpreter_results_survive_graph_normal_form(tmp_path: Path) -> None:
    src = write(tmp_path, "match.relay", SIMPLE_MATCH)
    opt_and_reverify(tmp_path, src, "to-graph-normal-form")
    before = run_tool("irtool-run", src, "--seed", "0", cwd=tmp_path)
    after = run_tool("irtool-run", tmp_path / "out.relay", "--seed", "0", cwd=tmp_path)
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert "values: [-1]" in before.stdout  # the list is empty: the Nil clause
    assert after.stdout == before.stdout


def test_tvm_greedy_plan_of_an_unread_constant_verifies(tmp_path: Path) -> None:
    """Once "'constant_storage_ids' lists 1 storages for 2 tensors": `%y = 2` had no storage."""
    src = write(tmp_path, "let.relay", ONE_LIVE_LET)
    text = opt_and_reverify(tmp_path, src, "simplify-inference,fuse-ops,lower,plan-memory{algorithm=tvm-greedy}")
    assert "constant_storage_ids=[1, 2]" in text


@pytest.fixture(scope="module")
def planned_mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MLP lowered and planned by `irtool-opt` (made once: several tests edit it)."""
    tmp_path = tmp_path_factory.mktemp("mlp")
    src = write(tmp_path, "mlp.relay", MLP)
    return write(tmp_path, "planned.relay", opt_and_reverify(tmp_path, src,
                                                             "simplify-inference,fuse-ops,lower,plan-memory"))


def test_the_planned_mlp_runs_natively_to_the_interpreters_numbers(tmp_path: Path, planned_mlp: Path) -> None:
    outs = []
    for backend in ("interp", "native"):
        out = tmp_path / f"{backend}.npz"
        proc = run_tool("irtool-run", planned_mlp, f"--backend={backend}", "--seed", "0", "-o", out, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        with np.load(out) as data:
            outs.append(data["output0"])
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-7)
    assert abs(float(outs[0].sum()) - 1.0) < 1e-5  # a softmax


# Hand edits of the planned MLP. The first moves the second dense's result onto the first's,
# which is still live when it is written: irtool-llc and irtool-run --backend=native once took it
# and computed wrong numbers. Every tool reads plans through the one checked reader, so the
# summaries' checks are shown with irtool-llc alone.
CASES = [
    ("irtool-opt", ", storage_id=0, storage_offset=64)", ", storage_id=0, storage_offset=0)", "overlaps"),
    ("irtool-llc", ", storage_id=0, storage_offset=64)", ", storage_id=0, storage_offset=0)", "overlaps"),
    ("irtool-run", ", storage_id=0, storage_offset=64)", ", storage_id=0, storage_offset=0)", "overlaps"),
    ("irtool-llc", "workspace_bytes=", "workspace_bytes=1", "`workspace_bytes` is 1"),
    ("irtool-llc", "alignment=64", "alignment=64, in_place=7", "`in_place` must be true or false"),
]
TOOL_ARGS = {"irtool-opt": (), "irtool-llc": ("--emit=llvm",), "irtool-run": ("--backend=native",)}


@pytest.mark.parametrize("tool,old,new,says", CASES, ids=[f"{c[0]}-{c[3].split()[0]}" for c in CASES])
def test_a_broken_plan_from_text_is_refused_by_every_tool(tmp_path: Path, planned_mlp: Path, tool: str, old: str,
                                                        new: str, says: str) -> None:
    planned = planned_mlp.read_text()
    assert old in planned, planned
    bad = write(tmp_path, "bad.relay", planned.replace(old, new, 1))
    proc = run_tool(tool, bad, *TOOL_ARGS[tool], cwd=tmp_path)
    assert_clean_failure(proc, says=says)
    assert proc.returncode == 1
    assert "bad.relay:" in proc.stderr


def test_bind_params_of_a_scalar_keeps_the_module_valid(tmp_path: Path) -> None:
    """A 0-d weight became a `Tensor[(1), float32]` constant: "type mismatch ... ref(float32)"."""
    src = write(tmp_path, "ref.relay", "def @main(%x: float32) {\n  %0 = ref(%x);\n  ref_write(%0, 1f);\n"
                "  add(ref_read(%0), %x)\n}\n")
    np.savez(tmp_path / "x.npz", x=np.float32(0.5))
    text = opt_and_reverify(tmp_path, src, f"bind-params{{file={tmp_path / 'x.npz'}}}")
    assert "def @main() {" in text and "ref(0.5f)" in text
    proc = run_tool("irtool-run", tmp_path / "out.relay", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "values: [1.5]" in proc.stdout
