"""The benchmark harness (benchmarks/harness.py): the A/B order, the ratio statistics, the host
description; and the torch benchmark's behaviour without its optional extras (torch is never
imported here)."""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


harness = _load("harness")
# The scripts import it as `harness` (their folder is on sys.path when run).
sys.modules.setdefault("harness", harness)
torch_models = _load("torch_models")


class FakeClock:
    """Time that passes only when a benchmarked call says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def spend(self, ms: float) -> None:
        self.now += ms / 1e3


def timed_calls(clock: FakeClock, order: list[str], costs: dict[str, list[float]]) -> dict[str, object]:
    """One call per label, each appending its label to `order` and spending its next cost."""
    def call(label: str, cost):
        def run() -> None:
            order.append(label)
            clock.spend(next(cost))
        return run
    return {label: call(label, iter(ms)) for label, ms in costs.items()}


def test_alternate_calls_a_b_a_b_after_the_warmup_and_times_each_call() -> None:
    clock, order = FakeClock(), []
    calls = timed_calls(clock, order, {"a": [3.0] * 5, "b": [1.0] * 5})
    times = harness.alternate(calls, 3, warmup=2, clock=clock)
    assert order == ["a", "b"] * 5
    assert times == {"a": [pytest.approx(3.0)] * 3, "b": [pytest.approx(1.0)] * 3}


def test_alternate_lead_in_runs_each_entry_untimed_right_before_its_timed_call() -> None:
    clock, order = FakeClock(), []
    # The first call in each lead-in pair is untimed: its time (the odd calls') must not appear.
    calls = timed_calls(clock, order, {"a": [5.0, 3.0, 5.0, 3.0], "b": [7.0, 1.0, 7.0, 1.0]})
    times = harness.alternate(calls, 2, warmup=0, lead_in=1, clock=clock)
    assert order == ["a", "a", "b", "b"] * 2
    assert times == {"a": [pytest.approx(3.0)] * 2, "b": [pytest.approx(1.0)] * 2}
    with pytest.raises(ValueError, match="lead_in"):
        harness.alternate({"a": lambda: None}, 1, lead_in=-1)


def test_alternate_needs_a_round() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        harness.alternate({"a": lambda: None}, 0)


def test_versus_takes_the_median_of_per_round_ratios_and_the_ratio_of_minima() -> None:
    # Per-round ratios 2, 1, 3: median 2, whereas the ratio of the medians would be 4 / 3.
    result = harness.versus([2.0, 4.0, 9.0], [1.0, 4.0, 3.0])
    assert result.ratio == 2.0
    assert result.ms == 4.0 and result.baseline_ms == 3.0
    assert result.min_ms == 2.0 and result.baseline_min_ms == 1.0
    assert result.ratio_min == 2.0 and result.rounds == 3


def test_versus_refuses_unpaired_rounds() -> None:
    with pytest.raises(ValueError, match="same non-zero number of rounds"):
        harness.versus([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        harness.versus([], [])


def test_geomean() -> None:
    assert harness.geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert harness.geomean([1.0, 8.0]) == pytest.approx(8.0 ** 0.5)
    assert harness.geomean(iter([4.0])) == pytest.approx(4.0)
    assert harness.geomean([]) is None


def test_thread_counts() -> None:
    assert harness.thread_counts("1,2") == [1, 2]
    assert harness.thread_counts("2,2,1") == [2, 1]
    for bad in ("0", "1,-2", "one", "1,,2"):
        with pytest.raises(argparse.ArgumentTypeError):
            harness.thread_counts(bad)


def test_cpu_model_name_from_lscpu_or_cpuinfo() -> None:
    lscpu = "Architecture:   x86_64\nVendor ID:      AuthenticAMD\nModel name:     AMD EPYC 9R45\nCPU family: 26\n"
    assert harness.lscpu_model_name(lscpu) == "AMD EPYC 9R45"
    cpuinfo = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8581C CPU @ 2.30GHz\nflags\t\t: fpu\n"
    assert harness.lscpu_model_name(cpuinfo) == "Intel(R) Xeon(R) Platinum 8581C CPU @ 2.30GHz"
    assert harness.lscpu_model_name("Architecture: aarch64\nModel name:\n") is None


def test_isa_labels_keep_enabled_features_in_table_order() -> None:
    assert harness.isa_labels("+avx512vnni,-avx512f,+avx2,+sse4.2,+fma") == ["FMA", "AVX2", "AVX-512 VNNI"]
    assert harness.isa_labels("") == []


def test_host_line_names_cpu_llvm_cpu_isa_and_load() -> None:
    host = harness.Host(cpu="AMD EPYC", llvm_cpu="znver5", isa=("AVX2", "AVX-512F"), cpus=2, load_average=0.25)
    assert host.line() == "host: AMD EPYC (lscpu), LLVM host CPU znver5: AVX2, AVX-512F; 2 CPUs; load average 0.25"
    assert host.line(3.5).endswith("load average 0.25 at the start, 3.50 at the end")
    assert host.as_json()["isa"] == ["AVX2", "AVX-512F"]


def test_describe_host_reports_what_llvm_targets() -> None:
    from irtool.target import TargetOptions
    _, cpu, features = TargetOptions().resolved()
    host = harness.describe_host()
    assert host.llvm_cpu == cpu
    assert list(host.isa) == harness.isa_labels(features)
    assert host.cpu and host.cpus >= 1 and host.load_average >= 0


def test_models_summary_is_per_thread_count_over_timed_rows() -> None:
    models = _load("models")
    rows = [{"threads": 1, "ratio": 2.0, "ratio_min": 1.0}, {"threads": 1, "ratio": 0.5, "ratio_min": 4.0},
            {"threads": 2, "ratio": None, "ratio_min": None}, {"threads": 2, "ratio": 3.0, "ratio_min": 2.0}]
    means = models.summary(rows)
    assert means[1] == {"models": 2, "geomean_ratio": pytest.approx(1.0), "geomean_ratio_min": pytest.approx(2.0)}
    assert means[2] == {"models": 1, "geomean_ratio": pytest.approx(3.0), "geomean_ratio_min": pytest.approx(2.0)}


def test_torch_models_without_torch_says_what_to_install(tmp_path: Path) -> None:
    # `sys.modules['torch'] = None` makes `import torch` fail as if it were not installed.
    script = (f"import sys, runpy; sys.modules['torch'] = None; sys.path.insert(0, {str(BENCHMARKS)!r}); "
              f"sys.argv = ['torch_models.py', '--models', 'resnet18']; "
              f"runpy.run_path({str(BENCHMARKS / 'torch_models.py')!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "needs torch" in done.stderr and "pip install 'irtool[bench]'" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_torch_models_rejects_an_unknown_model_before_importing_anything(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "torch_models.py"), "--models", "resnet81"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "unknown model(s) resnet81" in done.stderr and "resnet18" in done.stderr


def test_the_bench_extra_holds_torch_and_the_test_extra_does_not() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names = {key: {re.split(r"[<>=!~ \[]", req, maxsplit=1)[0] for req in reqs} for key, reqs in extras.items()}
    assert {"torch", "torchvision", "transformers", "onnxscript"} <= names["bench"]
    assert not names["test"] & {"torch", "torchvision", "transformers", "onnxscript"}


def test_max_error_is_relative_to_the_reference_outputs_largest_value() -> None:
    import numpy as np
    ours = [np.array([1.0, 2.5], np.float32), np.array([[0.0]], np.float32)]
    theirs = [np.array([1.0, 2.0], np.float32), np.array([[-10.0]], np.float32)]
    # the largest difference (10, in the second output) over the largest |value| (10)
    assert torch_models.max_error(ours, theirs) == pytest.approx(1.0)
    assert torch_models.max_error(ours[:1], theirs[:1]) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="2 outputs"):
        torch_models.max_error(ours, theirs[:1])


def test_table_cells_shorten_node_lists_and_escape_pipes() -> None:
    message = ("m.onnx: cannot import the model:\n  unsupported operators: GatherElements (/emb/GatherElements); "
               "LayerNormalization (/a/LayerNormalization, /b/LayerNormalization, /c/LayerNormalization)\n  a|b")
    assert torch_models.cell(message) == (
        "m.onnx: cannot import the model:; unsupported operators: GatherElements (/emb/GatherElements); "
        "LayerNormalization (/a/LayerNormalization, … 3 nodes); a\\|b")


def test_a_failed_stage_is_a_diagnostic_or_a_crash() -> None:
    from irtool.core.diagnostics import DiagnosticError
    assert torch_models.stage_error("import", DiagnosticError("opset 99 is not supported")) == \
        "import: opset 99 is not supported"
    assert torch_models.stage_error("export", RuntimeError("aten::diff")) == "export: aten::diff"
    assert torch_models.stage_error("compile", KeyError("x")) == "compile: crash: KeyError: 'x'"


def test_loading_the_torch_benchmark_imports_no_optional_extra(tmp_path: Path) -> None:
    script = (f"import sys; sys.path.insert(0, {str(BENCHMARKS)!r}); import torch_models; "
              "print(sorted(set(torch_models.EXTRAS[:4]) & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_torch_table_has_one_geomean_per_exporter_and_thread_count() -> None:
    def row(model: str, threads: int, ratio: float) -> dict[str, object]:
        return {c: None for c in torch_models.COLUMNS} | {"model": model, "exporter": "dynamo", "threads": threads,
                                                          "ratio": ratio, "ratio_min": ratio}
    rows = [row("resnet18", 1, 0.5), row("resnet18", 2, 1.0), row("bert", 1, 2.0), row("bert", 2, 4.0)]
    geomeans = [line for line in torch_models.format_table(rows, "host").splitlines() if "geomean" in line]
    # sqrt(0.5 * 2) = 1 on one thread, sqrt(1 * 4) = 2 on two: the counts are not pooled
    assert [line.split(" | ")[2:3] + [line.split(" | ")[-3]] for line in geomeans] == [["1", "**1.000**"],
                                                                                         ["2", "**2.000**"]]


def test_alternate_lead_in_ms_repeats_untimed_calls_until_that_long_has_passed() -> None:
    clock, order = FakeClock(), []
    # a's calls take 8 ms: a lead-in of 20 ms is three untimed calls (8, 16, 24 ms), then the timed
    # one; b's 30 ms call covers it alone.
    calls = timed_calls(clock, order, {"a": [8.0, 8.0, 8.0, 3.0] * 2, "b": [30.0, 1.0] * 2})
    times = harness.alternate(calls, 2, warmup=0, lead_in=1, lead_in_ms=20.0, clock=clock)
    assert order == ["a"] * 4 + ["b"] * 2 + ["a"] * 4 + ["b"] * 2
    assert times == {"a": [pytest.approx(3.0)] * 2, "b": [pytest.approx(1.0)] * 2}
    with pytest.raises(ValueError, match="lead_in_ms"):
        harness.alternate({"a": lambda: None}, 1, lead_in_ms=-1.0)
