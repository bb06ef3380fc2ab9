"""Adversarial inputs for the text format and type checking (issue #18, cases 3a, 6 and 7): each
once hung, ended in an `internal:` error, or was accepted although wrong, and is now checked in
linear time or refused at the token or expression concerned, with exit status 1.

Every tool runs as a user runs it (`run_tool`, in a subprocess outside the checkout); its
`timeout` is only a hang guard.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from support.adversarial import assert_clean_failure, assert_no_crash, run_tool, write


def doubling_chain(n: int) -> str:
    """The issue's generator: each tuple holds the previous one twice (2**n leaves written out)."""
    lets = "".join(f"  let %a{i} = (%a{i - 1}, %a{i - 1});\n" for i in range(1, n + 1))
    return f"def @main(%a0: float32) {{\n{lets}  %a{n}\n}}\n"


# ---- 3a: a type shared by a chain of tuples is checked once per link ----------------------------

def test_a_doubling_chain_of_depth_25_verifies_and_prints(tmp_path: Path) -> None:
    src = write(tmp_path, "chain25.relay", doubling_chain(25))
    proc = run_tool("irtool-opt", src, cwd=tmp_path, timeout=60)   # hung (> 120 s, 2.7 GB) before
    assert_no_crash(proc)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == '#[version = "0.0.5"]\n' + doubling_chain(25)


def test_printing_its_exponential_types_is_refused_at_the_first_too_long_one(tmp_path: Path) -> None:
    # The type of %a17 is 11 * 2**17 - 4 characters written out, the first above 1 MiB.
    src = write(tmp_path, "chain25.relay", doubling_chain(25))
    proc = run_tool("irtool-opt", src, "--print-types", cwd=tmp_path, timeout=60)
    assert_clean_failure(proc, says="type too long to print: more than 1048576 characters written out")
    assert proc.stderr.startswith(f"{src}:18:7: error: "), proc.stderr
    assert proc.stdout == ""


# ---- 6: names bound twice, deep nesting -----------------------------------------------------------

def test_duplicate_parameters_are_located_at_the_second(tmp_path: Path) -> None:
    src = write(tmp_path, "dup.relay", "def @main(%x: float32, %x: float32) { %x }\n")
    proc = run_tool("irtool-opt", src, cwd=tmp_path)
    assert_clean_failure(proc, says="error: duplicate parameter `%x`")
    assert proc.stderr.startswith(f"{src}:1:24: error: ") and f"{src}:1:11: note: first bound here" in proc.stderr


NESTING = 20_000   # far beyond Python's recursion limit; the 60k took longer to parse only


@pytest.mark.parametrize("tool", [["irtool-opt"], ["irtool-run"], ["irtool-llc", "--emit=llvm"], ["irtool-viz"]],
                         ids=lambda t: t[0])
def test_deeply_nested_tuples_are_refused_alike_by_every_tool(tmp_path: Path, tool: list[str]) -> None:
    src = write(tmp_path, "deep.relay", "def @main(%x: float32) {\n  " + "(" * NESTING + "%x" + ",)" * NESTING +
                "\n}\n")
    out = ["-o", tmp_path / "out.dot"] if tool[0] == "irtool-viz" else []
    proc = run_tool(tool[0], src, *tool[1:], *out, cwd=tmp_path, timeout=120)
    assert_clean_failure(proc, says="error: type of tuple nested too deeply (limit 100)")
    column = 3 + NESTING - 101   # the tuple 101 levels up from the innermost
    assert proc.stderr.startswith(f"{src}:2:{column}: error: "), proc.stderr[:200]


@pytest.mark.parametrize("tool", [["irtool-opt", "--no-verify"], ["irtool-fmt"]], ids=lambda t: t[0])
def test_deeply_nested_tuple_types_are_refused_by_the_parser(tmp_path: Path, tool: list[str]) -> None:
    src = write(tmp_path, "deept.relay", "def @main(%x: " + "(" * NESTING + "float32" + ",)" * NESTING +
                ") {\n  %x\n}\n")
    proc = run_tool(tool[0], src, *tool[1:], cwd=tmp_path, timeout=120)
    assert_clean_failure(proc, says="error: type nested too deeply (limit 100)")
    assert proc.stderr.startswith(f"{src}:1:{15 + NESTING - 101}: error: "), proc.stderr[:200]


# ---- 7: what the type system cannot hold ------------------------------------------------------------

def test_unknown_dtypes_are_refused_with_the_valid_ones(tmp_path: Path) -> None:
    src = write(tmp_path, "dtypes.relay", "def @main(%x: float33) { %x }\n// -----\n"
                "def @main(%x: Tensor[(2), int0]) { %x }\n// -----\ndef @main(%x: int99999999999) { %x }\n")
    proc = run_tool("irtool-opt", src, "--split-input-file", cwd=tmp_path)
    assert_clean_failure(proc)
    errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert [e.split(": error: ")[0] for e in errors] == [f"{src}:1:15", f"{src}:3:27", f"{src}:5:15"]
    for error, name in zip(errors, ["float33", "int0", "int99999999999"]):
        assert error.endswith(f"unknown dtype `{name}`; the dtypes are bool, int8, int16, int32, int64, uint8, "
                              "uint16, uint32, uint64, float16, float32, float64, bfloat16, and vectors of them "
                              "such as `float32x4` (at most 65535 lanes)")


def test_an_unknown_dtype_no_longer_compiles(tmp_path: Path) -> None:
    src = write(tmp_path, "f33.relay", "def @main(%x: Tensor[(4), float33]) { %x }\n")
    proc = run_tool("irtool-llc", src, "--emit=obj", "-o", tmp_path / "f33.o", cwd=tmp_path)
    assert_clean_failure(proc, says=f"{src}:1:27: error: unknown dtype `float33`")
    assert not (tmp_path / "f33.o").exists()


def test_an_adt_applied_to_too_many_arguments_is_refused(tmp_path: Path) -> None:
    src = write(tmp_path, "arity.relay", "type List[A] { Cons(A, List[A]), Nil }\n"
                "def @main(%x: List[float32, int32]) { %x }\n")
    proc = run_tool("irtool-opt", src, cwd=tmp_path)
    assert_clean_failure(proc, says=f"{src}:2:15: error: type `List` takes 1 type argument, got 2")


def test_float_max_as_numpy_prints_it_is_accepted(tmp_path: Path) -> None:
    src = write(tmp_path, "max.relay", "def @main() {\n  (3.4028235e38f, 3.4028235e+38f, 65504.0f16, 65519f16)\n}\n")
    proc = run_tool("irtool-run", src, "-o", tmp_path / "out.npz", cwd=tmp_path)
    assert_no_crash(proc)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        values = [out[f"output{i}"] for i in range(4)]
    assert [v.dtype for v in values] == [np.float32, np.float32, np.float16, np.float16]
    assert values[0] == values[1] == np.finfo(np.float32).max and values[2] == values[3] == np.finfo(np.float16).max
    bad = write(tmp_path, "inf.relay", "def @main() {\n  3.4028236e38f\n}\n")
    assert_clean_failure(run_tool("irtool-opt", bad, cwd=tmp_path),
                         says=f"{bad}:2:3: error: floating point number `3.4028236e38f` unrepresentable in width 32")
