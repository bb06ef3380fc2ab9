"""Models of today: eight PyTorch architectures exported to ONNX, through irtool beside onnxruntime.

    python benchmarks/torch_models.py [--models resnet18,bert,...] [--exporters dynamo,torchscript]
                                      [--int8 qdq,qop] [--threads 1,2] [--cache DIR] [--refresh] [--repeat 15]
                                      [--warmup 2] [--json OUT]

The architectures have random weights (seeded; BatchNorm statistics measured on random batches,
see `_calibrated`) and are built locally, never downloaded:
torchvision's resnet18, mobilenet_v2, mobilenet_v3_small, efficientnet_b0, convnext_tiny and
vit_b_16 on one 1x3x224x224 image; a small BERT and a small GPT-2 built by `transformers` from a
config (2 layers, width 128, 2 heads) on `input_ids` of shape 1x32 (int64) with an all-ones
attention mask. Each is exported
with static shapes by both of torch's exporters: `dynamo` (`torch.onnx.export(..., dynamo=True)`,
torch's default, at its default opset) and `torchscript` (the legacy exporter, `dynamo=False,
opset_version=17`). The files (and the messages of exports that failed) are cached under
`--cache` (default `~/.cache/irtool-bench/torch-models`, one folder per torch version);
`--refresh` exports again.

Each file is then imported (weights embedded), compiled natively (`irtool.build`, one thread, or
each count of `--threads`), run on the same seeded input as onnxruntime (as many intra-op
threads, one inter-op thread), checked
(max |irtool - onnxruntime| over the outputs ≤ 1e-4 of onnxruntime's max |value|) and timed
beside it with `harness.alternate` (A/B rounds after a warm-up; `ratio` is the median of the
per-round ratios irtool / onnxruntime, `ratio_min` that of the fastest runs; with threads, each
side's timed run follows an untimed one of its own, so neither runs while the other's workers
still spin). One row per (model, exporter, thread count): the opset, whether import and compile succeeded, the error, both latencies
and the ratios, or the first stage that failed and its message; the geometric means and the
host (CPU, LLVM's CPU and ISA, load average) close the table.

`--int8 qdq,qop` adds int8 rows (`resnet18-int8-qdq`, ...) for the image models: the exported
file quantized by onnxruntime's `quantize_static` (uint8 activations, int8 weights per output
channel, calibrated on 8 seeded random images that are not the benchmark's input), in the QDQ
format (every operator the quantizer knows, QuantizeLinear/DequantizeLinear around float
operators) or the QOperator format (Conv, MatMul, Relu and MaxPool only: the quantizer writes
Add, pooling and Gemm as `com.microsoft` operators otherwise, which irtool refuses by name).
Both sides run the same int8 file. Their outputs may differ by rounding order: irtool requantizes
`round(acc · (s_x·s_w/s_y))` as onnxruntime does, but float products rounded differently can land
a value on the other side of a rounding boundary, and that code difference then travels on
through the later layers. onnxruntime itself disagrees with itself in the same way: the
same QDQ file run with its graph optimisations off (the QDQ graph as written, in float) and on
(fused int8 kernels) differs by up to 2 output steps in ~40 % of the outputs. So an int8 row
passes on the float criterion above, or, when the model's output is dequantized codes, when
irtool's largest difference from onnxruntime in output quantization steps (`steps`: max
|difference| / output scale) is at most 1 or at most onnxruntime's own (`ort_steps`: optimised
against unoptimised), and the argmax agrees (`top1`); `differ` is the fraction of outputs that
differ at all.

torch, torchvision, transformers and onnxscript are benchmark-only extras: `pip install
'irtool[bench]'`. Without them the script says so and exits with status 1.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"   # the configs are built here; nothing may come from a hub

import argparse  # noqa: E402
import contextlib  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from harness import LEAD_IN_MS, alternate, describe_host, geomean, load_average, thread_counts, versus  # noqa: E402

EXTRAS = ("torch", "torchvision", "transformers", "onnxscript", "onnx", "onnxruntime")
EXPORTERS = ("dynamo", "torchscript")
LEGACY_OPSET = 17
TOLERANCE = 1e-4       # of the reference output's max |value|
SEQUENCE = 32
IMAGE = (1, 3, 224, 224)
INT8_FORMS = ("qdq", "qop")
CALIBRATION_IMAGES = 8
COLUMNS = ["model", "exporter", "threads", "opset", "import", "import_s", "compile", "compile_s", "max_error", "steps",
           "ort_steps", "differ", "top1", "irtool_ms", "onnxruntime_ms", "ratio", "ratio_min", "error"]


@dataclass(frozen=True)
class Architecture:
    name: str
    build: Callable[[], Any]             # () -> torch.nn.Module in eval mode, random weights
    input_name: str
    shape: tuple[int, ...]
    vocab: int | None = None             # int64 token ids in [0, vocab); None: a float32 image


def _torchvision(name: str) -> Callable[[], Any]:
    def build() -> Any:
        import torchvision
        return _calibrated(getattr(torchvision.models, name)(weights=None))
    return build


def _calibrated(model: Any) -> Any:
    """Random weights as a trained model's activations would see them. With BatchNorm's initial
    statistics (mean 0, variance 1) the activations shrink layer after layer (EfficientNet-B0's
    logits come out near 1e-14, MobileNetV2's near 1e-9), so its running statistics are measured
    on a few random batches in training mode; and torchvision zero-initialises ViT's classifier,
    whose output would then be all zeros, so an all-zero Linear weight is drawn at random."""
    import torch
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None        # a plain average over the calibration batches
    if norms:
        generator = torch.Generator().manual_seed(1)
        model.train()
        with torch.no_grad():
            for _ in range(2):
                model(torch.randn(8, *IMAGE[1:], generator=generator))
    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear) and not layer.weight.any():
            torch.nn.init.normal_(layer.weight, std=0.02)
    return model.eval()


def _last_hidden_state(model: Any) -> Any:
    """The transformer as a one-input, one-output module: the all-ones attention mask a tokenizer
    gives one unpadded sequence (without a mask, transformers checks for packed sequences with
    `torch.diff`, which the legacy exporter cannot export), no cache, no pooler."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).last_hidden_state

    return LastHiddenState()


@contextlib.contextmanager
def _without_script_folder() -> Iterator[None]:
    """transformers (5.x) imports the hub's `kernels` package when it finds one; run as
    `python benchmarks/torch_models.py`, this folder is first on sys.path and its kernels.py
    (irtool's kernel benchmark) is found instead, so `import transformers` fails and the BERT and
    GPT-2 rows stop at export. The folder is left out while transformers is imported."""
    here = str(Path(__file__).resolve().parent)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != here]
    try:
        yield
    finally:
        sys.path[:] = saved


def _bert() -> Any:
    with _without_script_folder():
        from transformers import BertConfig, BertModel
    return _last_hidden_state(BertModel(BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                                   intermediate_size=512, max_position_embeddings=128)))


def _gpt2() -> Any:
    with _without_script_folder():
        from transformers import GPT2Config, GPT2Model
    return _last_hidden_state(GPT2Model(GPT2Config(n_embd=128, n_layer=2, n_head=2, n_positions=128,
                                                   use_cache=False)))


ARCHITECTURES = {a.name: a for a in [
    *(Architecture(name, _torchvision(name), "x", IMAGE) for name in
      ("resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny", "vit_b_16")),
    Architecture("bert", _bert, "input_ids", (1, SEQUENCE), vocab=30522),
    Architecture("gpt2", _gpt2, "input_ids", (1, SEQUENCE), vocab=50257),
]}


def missing_extras() -> list[str]:
    """The benchmark-only packages that are not installed (checked without importing them)."""
    return [name for name in EXTRAS if importlib.util.find_spec(name) is None]


def example_input(arch: Architecture) -> np.ndarray:
    """The seeded input both runtimes get (and the exporter traces with)."""
    rng = np.random.default_rng(0)
    if arch.vocab is None:
        return rng.standard_normal(arch.shape).astype(np.float32)
    return rng.integers(0, arch.vocab, size=arch.shape, dtype=np.int64)


_NODE_LIST = re.compile(r"\(([^()]*/[^()]*)\)")


def cell(message: str) -> str:
    """A message for a table cell: its lines joined, `|` escaped, and each importer's list of
    the nodes an operator stopped at shortened to its first and its count (the JSON has all)."""
    def shorten(match: re.Match[str]) -> str:
        nodes = match.group(1).split(", ")
        return f"({nodes[0]}, … {len(nodes)} nodes)" if len(nodes) > 2 else match.group(0)
    text = "; ".join(line.strip() for line in message.splitlines() if line.strip())
    return _NODE_LIST.sub(shorten, text).replace("|", "\\|")


def export(arch: Architecture, exporter: str, cache: Path, refresh: bool) -> Path:
    """The cached ONNX file of `arch` from `exporter`, exported first when needed. A failed export
    is cached as its message and raised as RuntimeError."""
    import torch
    folder = cache / f"torch-{torch.__version__}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{arch.name}.{exporter}.onnx"
    failed = path.with_suffix(".error.txt")
    if not refresh and path.exists():
        return path
    if not refresh and failed.exists():
        raise RuntimeError(failed.read_text(encoding="utf-8"))
    torch.manual_seed(0)
    model = arch.build().eval()
    args = (torch.from_numpy(example_input(arch)),)
    options: dict[str, Any] = ({"dynamo": True, "external_data": False} if exporter == "dynamo"
                               else {"dynamo": False, "opset_version": LEGACY_OPSET})
    partial = path.with_suffix(".partial.onnx")
    try:
        with _quiet():
            torch.onnx.export(model, args, str(partial), input_names=[arch.input_name], **options)
    except Exception as exc:  # noqa: BLE001 -- whatever torch raises is the row's finding
        message = f"{type(exc).__name__}: {exc}".strip()
        failed.write_text(message, encoding="utf-8")
        partial.unlink(missing_ok=True)
        raise RuntimeError(message) from None
    partial.replace(path)
    failed.unlink(missing_ok=True)
    return path


def quantized(arch: Architecture, source: Path, form: str, refresh: bool) -> Path:
    """The cached int8 file of `source` from onnxruntime's `quantize_static` in `form` (see the
    module doc), quantized first when needed."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    path = source.with_name(f"{source.stem}.int8-{form}.onnx")
    if path.exists() and not refresh:
        return path

    class Images(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(1)
            self.batches = iter([{arch.input_name: rng.standard_normal(arch.shape).astype(np.float32)}
                                 for _ in range(CALIBRATION_IMAGES)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)
    partial = path.with_suffix(".partial.onnx")
    with _quiet():
        quantize_static(str(source), str(partial), Images(),
                        quant_format=QuantFormat.QDQ if form == "qdq" else QuantFormat.QOperator,
                        op_types_to_quantize=None if form == "qdq" else ["Conv", "MatMul", "Relu", "MaxPool"],
                        per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    partial.replace(path)
    return path


def output_scales(model: Any) -> list[float | None]:
    """Per graph output, the scale of the per-tensor DequantizeLinear that produces it (None when
    the output is not dequantized codes)."""
    from onnx import numpy_helper
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producers = {out: node for node in model.graph.node for out in node.output}
    scales: list[float | None] = []
    for output in model.graph.output:
        node = producers.get(output.name)
        scale = constants.get(node.input[1]) if node is not None and node.op_type == "DequantizeLinear" else None
        scales.append(float(scale) if scale is not None and scale.size == 1 else None)
    return scales


def output_steps(ours: list[np.ndarray], theirs: list[np.ndarray], scales: list[float | None]) -> float | None:
    """max |difference| in output quantization steps (None without dequantized outputs)."""
    steps = [float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0)) / s
             for a, b, s in zip(ours, theirs, scales) if s]
    return round(max(steps), 2) if steps else None


def unoptimized_outputs(model: Any, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs with its graph optimisations off: the QDQ graph as written."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [np.asarray(a) for a in session.run(None, feed)]


def int8_agreement(ours: list[np.ndarray], theirs: list[np.ndarray], model: Any,
                   feed: dict[str, np.ndarray]) -> dict[str, Any]:
    """`steps` (irtool against onnxruntime), `ort_steps` (onnxruntime optimised against
    unoptimised), `differ` (fraction of outputs not equal), `top1` (the argmaxes agree)."""
    scales = output_scales(model)
    differ = sum(int(np.count_nonzero(a != b)) for a, b in zip(ours, theirs)) / max(1, sum(b.size for b in theirs))
    return {"steps": output_steps(ours, theirs, scales),
            "ort_steps": output_steps(unoptimized_outputs(model, feed), theirs, scales),
            "differ": float(f"{differ:.3g}"), "top1": bool(np.argmax(ours[0]) == np.argmax(theirs[0]))}


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silences an export: the exporters narrate their steps, warn, and on failure the legacy one
    prints its whole graph from C++ (so file descriptors 1 and 2 are redirected, not just
    sys.stdout); the exception says what failed."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink, warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _flat(result: Any) -> list[np.ndarray]:
    if isinstance(result, tuple):
        return [a for item in result for a in _flat(item)]
    return [np.asarray(result)]


def max_error(ours: list[np.ndarray], theirs: list[np.ndarray]) -> float:
    """max |ours - theirs| over all outputs, over the largest |value| of onnxruntime's outputs."""
    if len(ours) != len(theirs):
        raise ValueError(f"irtool gave {len(ours)} outputs, onnxruntime {len(theirs)}")
    diff = max(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))
               for a, b in zip(ours, theirs))
    scale = max(float(np.max(np.abs(b.astype(np.float64)), initial=0.0)) for b in theirs)
    return diff / scale if scale else diff


def stage_error(stage: str, exc: BaseException) -> str:
    """A failed stage's message; anything but irtool's diagnostic (or torch's export failure, or
    the quantizer's) is a crash, a bug to report."""
    from irtool.core.diagnostics import DiagnosticError
    clean = isinstance(exc, DiagnosticError) or (stage == "export" and isinstance(exc, RuntimeError)) \
        or stage == "quantize"
    return f"{stage}: {exc if clean else f'crash: {type(exc).__name__}: {exc}'}"


def bench(arch: Architecture, exporter: str, cache: Path, refresh: bool, repeat: int, warmup: int,
          int8: str | None = None, threads: int = 1) -> dict[str, Any]:
    """One row: the exported model, or with `int8` its quantized form (one of INT8_FORMS), on
    `threads` threads for both runtimes."""
    import onnx

    import irtool
    from irtool.frontend.onnx import import_model
    from irtool.frontend.onnx_zoo import onnxruntime_session
    name = arch.name if int8 is None else f"{arch.name}-int8-{int8}"
    row: dict[str, Any] = {c: None for c in COLUMNS} | {"model": name, "exporter": exporter, "threads": threads}
    stage = "export"
    try:
        path = export(arch, exporter, cache, refresh)
        if int8 is not None:
            stage = "quantize"
            path = quantized(arch, path, int8, refresh)
        model = onnx.load(str(path))
        row["opset"] = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        stage = "import"
        started = time.perf_counter()
        imported = import_model(model, embed_params=True, source=path.name)
        row.update({"import": "ok", "import_s": round(time.perf_counter() - started, 2)})
        stage = "compile"
        started = time.perf_counter()
        built = irtool.build(imported.module, threads=threads)
        row.update(compile="ok", compile_s=round(time.perf_counter() - started, 2))
        stage = "run"
        x = example_input(arch)
        session = onnxruntime_session(model, threads=threads)
        feed = {session.get_inputs()[0].name: x}
        theirs = [np.asarray(a) for a in session.run(None, feed)]
        ours = _flat(built(x))
        error = max_error(ours, theirs)
        row["max_error"] = float(f"{error:.2e}")
        row["reference_max"] = float(f"{max(float(np.max(np.abs(a), initial=0.0)) for a in theirs):.3g}")
        within = error <= TOLERANCE
        if int8 is not None:
            row.update(int8_agreement(ours, theirs, model, feed))
            within = within or (row["steps"] is not None and row["top1"]
                                and row["steps"] <= max(1.0, row["ort_steps"] or 0.0))
        if row["reference_max"] == 0:
            row["error"] = "check: onnxruntime's output is all zeros, so the comparison says nothing"
        elif not within:
            row["error"] = (f"mismatch: max error {error:.2e} > {TOLERANCE:g} of the output's max |value|"
                            + (f", {row['steps']} output steps (onnxruntime against itself: {row['ort_steps']}), "
                               f"top-1 {'agrees' if row['top1'] else 'differs'}" if row["steps"] is not None else ""))
        times = alternate({"irtool": lambda: built(x), "onnxruntime": lambda: session.run(None, feed)},
                          repeat, warmup=warmup, lead_in=1 if threads > 1 else 0,
                          lead_in_ms=LEAD_IN_MS if threads > 1 else 0.0)
        result = versus(times["irtool"], times["onnxruntime"])
        row.update(irtool_ms=round(result.ms, 3), onnxruntime_ms=round(result.baseline_ms, 3),
                   ratio=round(result.ratio, 3), ratio_min=round(result.ratio_min, 3))
    except Exception as exc:  # noqa: BLE001 -- a failing stage is the row's result
        if stage == "import":
            row["import"] = "failed"
        elif stage == "compile":
            row["compile"] = "failed"
        row["error"] = stage_error(stage, exc)
    return row


def format_table(rows: list[dict[str, Any]], host_line: str) -> str:
    lines = [host_line, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join("" if row[c] is None else cell(str(row[c])) for c in COLUMNS) + " |")
    def kind(row: dict[str, Any]) -> tuple[str, int, str]:
        return row["exporter"], row["threads"], row["model"].partition("-int8-")[2]
    for exporter, threads, form in dict.fromkeys(kind(row) for row in rows):
        timed = [row for row in rows if kind(row) == (exporter, threads, form) and row["ratio"] is not None]
        if timed:
            cells = {"model": f"**geomean** ({len(timed)} timed{', int8 ' + form if form else ''})",
                     "exporter": exporter, "threads": str(threads),
                     "ratio": f"**{geomean(r['ratio'] for r in timed):.3f}**",
                     "ratio_min": f"{geomean(r['ratio_min'] for r in timed):.3f}"}
            lines.append("| " + " | ".join(cells.get(c, "") for c in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(ARCHITECTURES),
                    help=f"comma-separated, from {', '.join(ARCHITECTURES)} (default: all)")
    ap.add_argument("--exporters", default=",".join(EXPORTERS),
                    help="comma-separated: dynamo (torch's default exporter), torchscript (legacy, opset 17)")
    ap.add_argument("--int8", default="", help="comma-separated int8 rows for the image models: qdq, qop "
                    "(onnxruntime's quantize_static in the QDQ / QOperator format; default: none)")
    ap.add_argument("--threads", type=thread_counts, default=[1],
                    help="comma-separated thread counts, each for both runtimes (default: 1)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "irtool-bench" / "torch-models",
                    help="where the exported files are kept (default: ~/.cache/irtool-bench/torch-models)")
    ap.add_argument("--refresh", action="store_true", help="export again even when the cache has the file")
    ap.add_argument("--repeat", type=int, default=15, help="timed A/B rounds (default: 15)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default: 2)")
    ap.add_argument("--json", metavar="OUT", help="also write the host and the rows (full messages) as JSON")
    args = ap.parse_args(argv)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    exporters = [e.strip() for e in args.exporters.split(",") if e.strip()]
    if unknown := [m for m in names if m not in ARCHITECTURES]:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(ARCHITECTURES)}")
    if unknown := [e for e in exporters if e not in EXPORTERS]:
        ap.error(f"unknown exporter(s) {', '.join(unknown)}; choose from {', '.join(EXPORTERS)}")
    forms = [f.strip() for f in args.int8.split(",") if f.strip()]
    if unknown := [f for f in forms if f not in INT8_FORMS]:
        ap.error(f"unknown int8 form(s) {', '.join(unknown)}; choose from {', '.join(INT8_FORMS)}")
    if args.repeat < 1 or args.warmup < 0:
        ap.error("--repeat must be at least 1 and --warmup at least 0")
    if missing := missing_extras():
        verb = "is" if len(missing) == 1 else "are"
        print(f"torch_models.py: error: this benchmark needs {', '.join(missing)}, which {verb} not installed: "
              "pip install 'irtool[bench]'", file=sys.stderr)
        return 1
    host = describe_host()
    print(host.line(), file=sys.stderr, flush=True)
    rows = []
    for name in names:
        for exporter in exporters:
            arch = ARCHITECTURES[name]
            for form in [None, *(forms if arch.vocab is None else [])]:
                for threads in args.threads:
                    rows.append(bench(arch, exporter, args.cache.expanduser(), args.refresh, args.repeat,
                                      args.warmup, form, threads))
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    load_end = load_average()
    print(format_table(rows, host.line(load_end)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"host": host.as_json() | {"load_average_end": load_end}, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
