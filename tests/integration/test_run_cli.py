"""`irtool-run` driven as a separate process, the way scripts use it.

Output files are checked against numpy computed here; error cases check the message, the exit
status, that no traceback escapes and that no output file is left behind.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
HEADER = '#[version = "0.0.5"]\n'
SUMMARY = re.compile(r"^output(\d+): (\S.*?) (?:min=(\S+) max=(\S+) mean=(\S+) )?sha256=([0-9a-f]{12})$")


def irtool_run(*args: str | Path, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "irtool.tools.run", *map(str, args)], cwd=cwd,
                          input=stdin, capture_output=True, text=True, timeout=600)


def write(path: Path, text: str) -> Path:
    path.write_text(HEADER + text)
    return path


def summaries(stdout: str) -> list[re.Match[str]]:
    return [m for m in map(SUMMARY.match, stdout.splitlines()) if m]


def failed(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr


def test_mlp_sample_with_npz_inputs_matches_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    inputs = {"x": (1, 784), "w1": (128, 784), "b1": (128,), "w2": (10, 128), "b2": (10,)}
    arrays = {k: rng.uniform(-1, 1, s).astype(np.float32) for k, s in inputs.items()}
    np.savez(tmp_path / "in.npz", **arrays)
    proc = irtool_run(SAMPLES / "mlp.relay", "--inputs", "in.npz", "-o", "out.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "out.npz").stat().st_mode) == 0o666 & ~umask  # as every tool: not 0600
    with np.load(tmp_path / "out.npz") as out:
        assert out.files == ["output0"]
        result = out["output0"]
    a = arrays
    logits = np.maximum(a["x"] @ a["w1"].T + a["b1"], 0) @ a["w2"].T + a["b2"]
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    assert result.dtype == np.float32 and result.shape == (1, 10)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)

    (line,) = summaries(proc.stdout)
    assert line.group(1) == "0" and line.group(2) == "Tensor[(1, 10), float32]"
    assert float(line.group(3)) == pytest.approx(float(expected.min()), rel=1e-5)
    assert float(line.group(4)) == pytest.approx(float(expected.max()), rel=1e-5)
    assert float(line.group(5)) == pytest.approx(0.1, rel=1e-5)  # softmax sums to one over 10
    assert line.group(6) == hashlib.sha256(result.tobytes()).hexdigest()[:12]
    assert "values: [" in proc.stdout


def test_resnet_block_sample_runs(tmp_path: Path) -> None:
    sample = SAMPLES / "resnet_block.relay"
    # Random inputs: the batch norms' variances are drawn from [0, 1), so the result is finite.
    proc = irtool_run(sample, "-o", "random.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (line,) = summaries(proc.stdout)
    assert line.group(2) == "Tensor[(1, 64, 56, 56), float32]"
    with np.load(tmp_path / "random.npz") as out:
        assert np.isfinite(out["output0"]).all() and out["output0"].max() > 0

    rng = np.random.default_rng(0)
    vectors = [f"bn{i}_{k}" for i in (1, 2) for k in ("gamma", "beta", "mean", "var")]
    arrays = {name: rng.uniform(0.5, 1.5, 64).astype(np.float32) for name in vectors}
    arrays["data"] = rng.uniform(-1, 1, (1, 64, 56, 56)).astype(np.float32)
    for name in ("conv1_weight", "conv2_weight"):
        arrays[name] = rng.uniform(-0.1, 0.1, (64, 64, 3, 3)).astype(np.float32)
    np.savez(tmp_path / "in.npz", **arrays)
    proc = irtool_run(sample, "--inputs", "in.npz", "-o", "out.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        result = out["output0"]
    assert result.shape == (1, 64, 56, 56) and result.dtype == np.float32
    assert np.isfinite(result).all() and result.min() == 0 and result.max() > 0  # ends in relu


def test_random_inputs_are_seeded_and_follow_the_types(tmp_path: Path) -> None:
    prog = write(tmp_path / "echo.relay", """
    def @main(%a: Tensor[(2000), float32], %i: Tensor[(2000), int64], %b: Tensor[(2000), bool], %s: float16) {
      (%a, %i, %b, %s)
    }""")
    runs = {}
    for seed in ("1", "1", "2"):
        out_file = tmp_path / f"out{len(runs)}.npz"
        proc = irtool_run(prog, "--seed", seed, "-o", out_file, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        with np.load(out_file) as out:
            runs[len(runs)] = {k: out[k] for k in out.files}
    first, again, other = runs[0], runs[1], runs[2]
    a, i, b, s = (first[f"output{k}"] for k in range(4))
    assert (a.dtype, i.dtype, b.dtype, s.dtype) == (np.float32, np.int64, np.bool_, np.float16)
    assert s.shape == ()
    assert -1 <= a.min() and a.max() < 1 and a.std() > 0.4
    assert 0 <= i.min() and i.max() < 8 and len(np.unique(i)) > 1
    assert 0.3 < b.mean() < 0.7
    for k in range(4):
        np.testing.assert_array_equal(first[f"output{k}"], again[f"output{k}"])
    assert not np.array_equal(first["output0"], other["output0"])


def test_random_variances_are_recognised_by_name(tmp_path: Path) -> None:
    """A parameter whose name's last word is `var` or `variance` is drawn from [0, 1), however
    it is used; every other float keeps [-1, 1), even in batch norm's variance slot."""
    prog = write(tmp_path / "bn.relay", """
    def @main(%x: Tensor[(1, 500), float32], %g: Tensor[(500), float32], %b: Tensor[(500), float32],
              %m: Tensor[(500), float32], %bn1_var: Tensor[(500), float32], %v: Tensor[(500), float32],
              %running_var: Tensor[(500), float32], %bn_moving_variance: Tensor[(500), float32],
              %covar: Tensor[(500), float32]) {
      (nn.batch_norm(%x, %g, %b, %m, %bn1_var, axis=1).0, %m, %bn1_var, %running_var, %bn_moving_variance,
       nn.batch_norm(%x, %g, %b, %m, %v, axis=1).0, %v, %covar)
    }""")
    proc = irtool_run(prog, "-o", "out.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        y, mean, *variances, y_v, v, covar = (out[f"output{k}"] for k in range(8))
    for var in variances:
        assert 0 <= var.min() and var.max() < 1
    assert np.isfinite(y).all()
    for other in (mean, v, covar):  # 500 draws from [-1, 1) each
        assert -1 <= other.min() < -0.5 and 0.5 < other.max() < 1
    assert np.isnan(y_v).any()  # a negative variance: what the name rule avoids


def test_random_inputs_depend_on_the_signature_not_the_body(tmp_path: Path) -> None:
    """Issue #18, case 8: after `simplify-inference,fuse-ops` (which removes the batch norms that
    once told which parameters were variances) the same seed draws the same inputs, so the
    outputs agree and stay finite."""
    from irtool.eval.interpreter import entry_function
    from irtool.tools.run import load_module, random_inputs
    fused = tmp_path / "fused.relay"
    done = subprocess.run([sys.executable, "-m", "irtool.tools.opt", SAMPLES / "resnet_block.relay",
                           "-p", "simplify-inference,fuse-ops", "-o", fused], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "nn.batch_norm" not in fused.read_text()
    drawn = []
    for path in (SAMPLES / "resnet_block.relay", fused):
        mod = load_module(str(path), path.read_text(), "main")
        drawn.append(random_inputs("main", entry_function(mod, "main"), 7))
    assert list(drawn[0]) == list(drawn[1]) and len(drawn[0]) == 11
    for name in drawn[0]:
        np.testing.assert_array_equal(drawn[0][name], drawn[1][name])
    outputs = []
    for path in (SAMPLES / "resnet_block.relay", fused):
        proc = irtool_run(path, "--seed", "7", "-o", f"{path.stem}.npz", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "nan" not in proc.stdout
        with np.load(tmp_path / f"{path.stem}.npz") as out:
            outputs.append(out["output0"])
    assert np.isfinite(outputs[0]).all() and outputs[0].max() > 0
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-4, atol=1e-3)


def test_a_tensor_draws_the_same_values_whatever_else_the_signature_holds(tmp_path: Path) -> None:
    """Each tensor has a generator of its own: adding, removing or reordering other parameters
    does not change `%x`, and a tuple's elements are drawn as `t.0`, `t.1`."""
    from irtool.eval.interpreter import entry_function
    from irtool.tools.run import load_module, random_inputs

    def draw(params: str, seed: int) -> dict:
        mod = load_module("f", HEADER + f"def @main({params}) {{ 0 }}", "main")
        return random_inputs("main", entry_function(mod, "main"), seed)
    a = draw("%x: Tensor[(50), float32], %y: Tensor[(9), int32]", 3)
    b = draw("%t: (Tensor[(50), float32], float32), %x: Tensor[(50), float32]", 3)
    np.testing.assert_array_equal(a["x"], b["x"])
    assert not np.array_equal(b["t"][0], b["x"])  # another name, another stream
    assert not np.array_equal(draw("%x: Tensor[(50), float32]", 4)["x"], a["x"])


def test_tuple_results_flatten_depth_first(tmp_path: Path) -> None:
    prog = write(tmp_path / "tuple.relay", """
    def @main(%x: Tensor[(2), float32]) {
      ((%x + 1f, (%x * 2f,)), (), %x - 3f)
    }""")
    x = np.array([1.0, -4.0], np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = irtool_run(prog, "--input", "x=x.npy", "-o", "out.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        assert out.files == ["output0", "output1", "output2"]
        np.testing.assert_array_equal(out["output0"], x + 1)
        np.testing.assert_array_equal(out["output1"], x * 2)
        np.testing.assert_array_equal(out["output2"], x - 3)
    assert [m.group(1) for m in summaries(proc.stdout)] == ["0", "1", "2"]


def test_scalar_inputs_and_entry_from_stdin(tmp_path: Path) -> None:
    text = HEADER + """
    def @main(%x: float32) -> float32 { %x }
    def @poly(%x: float32, %n: int32) -> float32 { %x * %x + cast(%n, dtype="float32") }
    """
    np.savez(tmp_path / "in.npz", x=np.float32(1.5), n=np.int32(4))
    proc = irtool_run("-", "--entry", "poly", "--inputs", "in.npz", "-o", "out.npz", cwd=tmp_path, stdin=text)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        assert out["output0"].shape == () and float(out["output0"]) == 1.5 * 1.5 + 4
    assert summaries(proc.stdout)[0].group(2) == "float32"


def test_single_input_overrides_npz_entry(tmp_path: Path) -> None:
    prog = write(tmp_path / "sub.relay", "def @main(%a: int32, %b: int32) -> int32 { %a - %b }")
    np.savez(tmp_path / "in.npz", a=np.int32(10), b=np.int32(1))
    np.save(tmp_path / "b.npy", np.int32(4))
    proc = irtool_run(prog, "--inputs", "in.npz", "--input", "%b=b.npy", "-o", "out.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        assert int(out["output0"]) == 6


def test_tuple_parameter_takes_dotted_names(tmp_path: Path) -> None:
    prog = write(tmp_path / "pair.relay", """
    def @main(%t: (float32, Tensor[(2), int32])) -> Tensor[(2), int32] { %t.1 * 2 }""")
    np.savez(tmp_path / "in.npz", **{"t.0": np.float32(1), "t.1": np.array([3, -5], np.int32)})
    proc = irtool_run(prog, "--inputs", "in.npz", "-o", "out.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["output0"], np.array([6, -10], np.int32))
    np.savez(tmp_path / "partial.npz", **{"t.0": np.float32(1)})
    err = failed(irtool_run(prog, "--inputs", "partial.npz", cwd=tmp_path))
    assert err.strip() == "irtool-run: error: main expects %t: (float32, Tensor[(2), int32]); missing input `t.1`"


def test_adt_program_runs_from_the_command_line(tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", a=np.float32(0.5), b=np.float32(2.5), c=np.float32(4.0))
    proc = irtool_run(SAMPLES / "adt_list.relay", "--inputs", "in.npz", "-o", "out.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        assert (int(out["output0"]), int(out["output1"])) == (3, 2)


@pytest.mark.parametrize("inputs, problem", [
    ({"x": np.zeros((2, 3), np.float32)}, "input `x` has shape (2, 3)"),
    ({"x": np.zeros((1, 3), np.float64)}, "input `x` has dtype float64"),
    ({}, "missing input `x`"),
    ({"x": np.zeros((1, 3), np.float32), "y": np.zeros(1)}, "unexpected input `y`"),
])
def test_wrong_inputs_list_what_main_expects(tmp_path: Path, inputs: dict[str, np.ndarray], problem: str) -> None:
    prog = write(tmp_path / "f.relay", "def @main(%x: Tensor[(1, 3), float32]) { %x }")
    np.savez(tmp_path / "in.npz", **inputs)
    (tmp_path / "out.npz").write_bytes(b"old")
    err = failed(irtool_run(prog, "--inputs", "in.npz", "-o", "out.npz", cwd=tmp_path))
    assert err.strip() == f"irtool-run: error: main expects %x: Tensor[(1, 3), float32]; {problem}"
    assert (tmp_path / "out.npz").read_bytes() == b"old"


def test_parse_and_type_errors_are_located(tmp_path: Path) -> None:
    bad_syntax = write(tmp_path / "syntax.relay", "def @main(%x: float32) {\n  %x +\n}")
    err = failed(irtool_run(bad_syntax, cwd=tmp_path))
    assert re.match(r"^\S*syntax\.relay:\d+:\d+: error: ", err)
    bad_types = write(tmp_path / "types.relay",
                      "def @main(%x: Tensor[(2), float32], %y: Tensor[(3), float32]) {\n  add(%x, %y)\n}")
    err = failed(irtool_run(bad_types, "-o", "out.npz", cwd=tmp_path))
    assert re.match(r"^\S*types\.relay:3:3: error: .*add", err)
    assert not (tmp_path / "out.npz").exists()


def test_runtime_error_is_located_and_leaves_no_output(tmp_path: Path) -> None:
    prog = write(tmp_path / "head.relay", """type List[A] { Cons(A, List[A]), Nil }
def @main(%x: float32) -> float32 {
  let %empty: List[float32] = Nil;
  match? (%empty) { Cons(%h, _) => %h + %x }
}""")
    err = failed(irtool_run(prog, "-o", "out.npz", cwd=tmp_path))
    assert re.match(r"^\S*head\.relay:5:3: error: no clause of this match accepts", err)
    assert list(tmp_path.iterdir()) == [prog]


def test_usage_problems_are_reported(tmp_path: Path) -> None:
    prog = write(tmp_path / "f.relay", "def @main(%x: float32) { %x }\ndef @g() { 1f }")
    assert "cannot read" in failed(irtool_run(tmp_path / "missing.relay", cwd=tmp_path))
    assert "no function @nope" in failed(irtool_run(prog, "--entry", "nope", cwd=tmp_path))
    assert "@main, @g" in failed(irtool_run(prog, "--entry", "nope", cwd=tmp_path))
    assert "--input expects NAME=FILE.npy" in failed(irtool_run(prog, "--input", "x.npy", cwd=tmp_path))
    assert ("irtool-run: error: --input x: cannot read 'nothere.npy': No such file or directory"
            in failed(irtool_run(prog, "--input", "x=nothere.npy", cwd=tmp_path)))
    np.save(tmp_path / "single.npy", np.zeros(3))
    err = failed(irtool_run(prog, "--inputs", "single.npy", cwd=tmp_path))
    assert "--inputs: cannot read 'single.npy': an .npy file holds one array" in err


def test_adt_parameter_cannot_be_random(tmp_path: Path) -> None:
    prog = write(tmp_path / "len.relay", """type List[A] { Cons(A, List[A]), Nil }
def @main(%xs: List[float32]) -> int32 { 0 }""")
    err = failed(irtool_run(prog, cwd=tmp_path))
    assert "cannot make a random input for %xs: it has type List[float32]" in err


@pytest.mark.skipif(shutil.which("irtool-run") is None, reason="console script not installed")
def test_console_script_entry_point(tmp_path: Path) -> None:
    prog = write(tmp_path / "f.relay", "def @main() -> int32 { 6 * 7 }")
    proc = subprocess.run(["irtool-run", str(prog)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("output0: int32 min=42 max=42 mean=42 sha256=")
