"""Kernel speed of irtool's native code against numpy (and onnxruntime when installed), one thread.

    python benchmarks/kernels.py [--only elementwise,dense,conv2d] [--repeat N] [--json OUT]

- elementwise: relu(a*b+c) on 16M float32, one fused kernel, against numpy's temporaries
  (`np.maximum(a*b+c, 0)`) — the issue's target is ≥ 3x numpy (reference: 3.0-4.2x measured).
- dense: 512x512 · 512x512ᵀ (`nn.dense`), against numpy.matmul (OpenBLAS, 1 thread), with W an
  input and W a constant (packed into panels at compile time); and a batch-1 FC layer
  (1x9216 · 4096x9216, memory bound: GB/s of weight) against numpy's GEMV.
- conv2d: 1x64x56x56, 64 filters 3x3, pad 1 (231 MFLOP), against numpy im2col + matmul, and
  onnxruntime (ORT_ENABLE_ALL, 1 thread) if installed.
dense and NCHW conv2d (unit column stride) lower to register-tiled kernels sized for the host's
vector registers (irtool/lower/schedules/); the rest of the lowered code is one loop nest per
output. The rows of one comparison are timed alternately (`harness.alternate`: one call of each per
round, so load from other processes on a shared machine hits them alike); each figure is the
median of `--repeat` rounds after a warm-up, compile time excluded and reported separately. The
table's first line names the host (CPU, LLVM's CPU name and ISA, load average).
"""

from __future__ import annotations

import os

# One BLAS thread, and let OpenBLAS detect the CPU (a forced Haswell core type halves matmul).
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ.pop("OPENBLAS_CORETYPE", None)

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import irtool  # noqa: E402
from harness import alternate, describe_host, medians  # noqa: E402
from irtool.runtime import aligned_empty  # noqa: E402
from irtool.syntax.parser import parse  # noqa: E402


def _aligned(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def _compile(src: str, **opts: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    native = irtool.build(parse(src, "bench.relay"), **opts)
    return native, time.perf_counter() - t0


def bench_elementwise(repeat: int) -> list[dict[str, Any]]:
    n = 16 * 1024 * 1024
    src = f"""#[version = "0.0.5"]
def @main(%a: Tensor[({n}), float32], %b: Tensor[({n}), float32], %c: Tensor[({n}), float32]) {{
  nn.relu(add(multiply(%a, %b), %c))
}}"""
    rng = np.random.default_rng(0)
    a, b, c = (_aligned(rng.standard_normal(n).astype(np.float32)) for _ in range(3))
    native, compile_s = _compile(src)
    out = aligned_empty((n,), np.float32)
    got = native(a=a, b=b, c=c)
    np.testing.assert_array_equal(got, np.maximum(a * b + c, 0))
    ms = medians(alternate({"numpy": lambda: np.maximum(a * b + c, 0), "native": lambda: native(a=a, b=b, c=c),
                            "into": lambda: native.run_into((out,), a=a, b=b, c=c)}, repeat))
    t_numpy, t_native, t_into = ms["numpy"], ms["native"], ms["into"]
    gbs = 4 * n * 4 / 1e9
    return [
        {"kernel": "relu(a*b+c) 16M", "impl": "numpy (temporaries)", "ms": t_numpy, "GB/s": gbs / t_numpy * 1e3,
         "ratio_vs_numpy": 1.0},
        {"kernel": "relu(a*b+c) 16M", "impl": "irtool -O3 (new output array)", "ms": t_native,
         "GB/s": gbs / t_native * 1e3, "ratio_vs_numpy": t_numpy / t_native, "compile_s": compile_s},
        {"kernel": "relu(a*b+c) 16M", "impl": "irtool -O3 (preallocated output)", "ms": t_into,
         "GB/s": gbs / t_into * 1e3, "ratio_vs_numpy": t_numpy / t_into},
    ]


def _dense_module(m: int, k: int, n: int, weight: np.ndarray | None = None) -> Any:
    """`nn.dense(%x, W)`: W the parameter %w, or the constant `weight` (packed at compile time
    by alter-layout, as onnxruntime and the models' FC layers have it)."""
    from irtool.ir.expr import Call, Constant, Function, Op, Var
    from irtool.ir.module import IRModule
    from irtool.ir.types import TensorType
    x = Var("x", TensorType((m, k), "float32"))
    params = [x]
    if weight is None:
        params.append(Var("w", TensorType((n, k), "float32")))
    mod = IRModule()
    mod.functions["main"] = Function(params, Call(Op("nn.dense"), [x, params[1] if weight is None
                                                                   else Constant(weight)]))
    return mod


def bench_dense(repeat: int) -> list[dict[str, Any]]:
    """512^3 against OpenBLAS (W a run-time input, or a constant), and a batch-1 FC layer (AlexNet's
    1 x 9216 . 4096 x 9216: memory bound, so GB/s of weight read) against numpy's GEMV."""
    rng = np.random.default_rng(1)
    rows: list[dict[str, Any]] = []
    m = k = n = 512
    x = _aligned(rng.standard_normal((m, k)).astype(np.float32))
    w = _aligned(rng.standard_normal((n, k)).astype(np.float32))
    flop = 2 * m * n * k
    fns: dict[str, Callable[[], Any]] = {"numpy.matmul (OpenBLAS, 1 thread)": lambda: x @ w.T}
    compile_s: dict[str, float] = {}
    out = aligned_empty((m, n), np.float32)
    for label, opts, const_w in (("irtool -O3", {}, False), ("irtool -O3 --fast-math", {"fast_math": True}, False),
                                 ("irtool -O3, constant W (pre-packed)", {}, True)):
        t0 = time.perf_counter()
        native = irtool.build(_dense_module(m, k, n, w if const_w else None), **opts)
        compile_s[label] = time.perf_counter() - t0
        args = {"x": x} if const_w else {"x": x, "w": w}
        np.testing.assert_allclose(native(**args), x @ w.T, rtol=1e-3, atol=1e-3)
        fns[label] = lambda native=native, args=args: native.run_into((out,), **args)
    ms = medians(alternate(fns, repeat * 2))
    base = ms["numpy.matmul (OpenBLAS, 1 thread)"]
    rows += [{"kernel": "dense 512^3", "impl": label, "ms": t, "GFLOP/s": flop / t / 1e6, "ratio_vs_numpy": base / t,
              **({"compile_s": compile_s[label]} if label in compile_s else {})} for label, t in ms.items()]

    m, k, n = 1, 9216, 4096
    x = _aligned(rng.standard_normal((m, k)).astype(np.float32))
    w = _aligned(rng.standard_normal((n, k)).astype(np.float32))
    out = aligned_empty((m, n), np.float32)
    t0 = time.perf_counter()
    native = irtool.build(_dense_module(m, k, n))
    gemv_compile = time.perf_counter() - t0
    np.testing.assert_allclose(native(x=x, w=w), x @ w.T, rtol=1e-3, atol=1e-3)
    ms = medians(alternate({"numpy (OpenBLAS GEMV)": lambda: x @ w.T,
                            "irtool -O3": lambda: native.run_into((out,), x=x, w=w)}, repeat * 2))
    gb = n * k * 4 / 1e9
    base = ms["numpy (OpenBLAS GEMV)"]
    rows += [{"kernel": "dense 1x9216.4096x9216", "impl": label, "ms": t, "GB/s": gb / t * 1e3,
              "ratio_vs_numpy": base / t, **({"compile_s": gemv_compile} if label.startswith("irtool") else {})}
             for label, t in ms.items()]
    return rows


def _im2col_conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))  # n c h w kh kw
    cols = cols.transpose(0, 1, 4, 5, 2, 3).reshape(c * kh * kw, h * wd)
    return (w.reshape(oc, -1) @ cols).reshape(1, oc, h, wd)


def _onnxruntime_conv(x: np.ndarray, w: np.ndarray, stride: int = 1, pad: int = 1,
                      groups: int = 1) -> Callable[[], Any] | None:
    try:
        import onnx  # noqa: F401 -- the helpers below live in it
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[pad] * 4, kernel_shape=list(w.shape[2:]),
                            strides=[stride, stride], group=groups)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"x": x})


def bench_conv2d(repeat: int) -> list[dict[str, Any]]:
    src = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 64, 56, 56), float32], %w: Tensor[(64, 64, 3, 3), float32]) {
  nn.conv2d(%x, %w, padding=[1, 1, 1, 1])
}"""
    rng = np.random.default_rng(2)
    x = _aligned(rng.standard_normal((1, 64, 56, 56)).astype(np.float32))
    w = _aligned((rng.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float32))
    flop = 2 * 64 * 56 * 56 * 64 * 9
    want = _im2col_conv(x, w)
    fns: dict[str, Callable[[], Any]] = {"numpy im2col + matmul": lambda: _im2col_conv(x, w)}
    ort = _onnxruntime_conv(x, w)
    if ort is not None:
        fns["onnxruntime (1 thread)"] = ort
    compile_s: dict[str, float] = {}
    for label, opts in (("irtool -O3", {}), ("irtool -O3 --fast-math", {"fast_math": True}),
                        ("irtool -O3, 2 threads", {"threads": 2})):
        native, compile_s[label] = _compile(src, **opts)
        np.testing.assert_allclose(native(x=x, w=w), want, rtol=1e-3, atol=1e-3)
        fns[label] = lambda native=native: native(x=x, w=w)
    ms = medians(alternate(fns, repeat))
    t_numpy = ms["numpy im2col + matmul"]
    return [{"kernel": "conv2d 1x64x56x56 3x3", "impl": label, "ms": t, "GFLOP/s": flop / t / 1e6,
             "ratio_vs_numpy": t_numpy / t, **({"compile_s": compile_s[label]} if label in compile_s else {})}
            for label, t in ms.items()]


# (label, data shape, weight shape, stride, padding, groups): the other conv kinds of the model zoo
# and of the PyTorch mobile CNNs.
CONV_VARIANTS = [
    ("depthwise 1x136x28x28 3x3", (1, 136, 28, 28), (136, 1, 3, 3), 1, 1, 136),
    ("1x1 1x64x56x56 ->256", (1, 64, 56, 56), (256, 64, 1, 1), 1, 0, 1),
    ("1x1 1x1024x14x14 ->256", (1, 1024, 14, 14), (256, 1024, 1, 1), 1, 0, 1),
    ("3x3/2 1x128x56x56", (1, 128, 56, 56), (128, 128, 3, 3), 2, 1, 1),
    ("7x7/2 stem 1x3x224x224", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1),
    ("3x3 1x512x7x7", (1, 512, 7, 7), (512, 512, 3, 3), 1, 1, 1),
    # EfficientNet-B0's (PyTorch) expansion and depthwise shapes.
    ("1x1 1x16x112x112 ->96", (1, 16, 112, 112), (96, 16, 1, 1), 1, 0, 1),
    ("depthwise 1x96x112x112 3x3/2", (1, 96, 112, 112), (96, 1, 3, 3), 2, 1, 96),
    ("depthwise 1x144x56x56 5x5/2", (1, 144, 56, 56), (144, 1, 5, 5), 2, 2, 144),
    ("depthwise 1x672x14x14 5x5", (1, 672, 14, 14), (672, 1, 5, 5), 1, 2, 672),
    ("depthwise 1x1152x7x7 5x5", (1, 1152, 7, 7), (1152, 1, 5, 5), 1, 2, 1152),
]
PACKING = "simplify-inference,alter-layout,fuse-ops,lower"


def bench_conv_variants(repeat: int) -> list[dict[str, Any]]:
    """Each conv of CONV_VARIANTS with a constant weight (packed at compile time by alter-layout, as
    onnxruntime packs at session creation), against onnxruntime and the Relay interpreter's numpy
    (im2col + matmul); `ratio_vs_onnxruntime` > 1 means irtool is faster."""
    from irtool.eval.interpreter import run_function
    from irtool.ir.expr import Call, Constant, Function, Op, Var
    from irtool.ir.module import IRModule
    from irtool.ir.types import TensorType
    from irtool.ops.registry import get_op
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(3)
    for label, xs, ws, stride, pad, groups in CONV_VARIANTS:
        x = _aligned(rng.standard_normal(xs).astype(np.float32))
        w = (rng.standard_normal(ws) * 0.1).astype(np.float32)
        xv = Var("x", TensorType(xs, "float32"))
        opdef = get_op("nn.conv2d")
        assert opdef is not None
        attrs = opdef.normalize_attrs({"strides": [stride, stride], "padding": [pad] * 4, "groups": groups})
        mod = IRModule()
        mod.functions["main"] = Function([xv], Call(Op("nn.conv2d"), [xv, Constant(w)], attrs))
        want = run_function(mod, {"x": x})
        flop = 2 * int(np.prod(want.shape)) * ws[1] * ws[2] * ws[3]
        started = time.perf_counter()
        native = irtool.build(mod, pipeline=PACKING)
        compile_s = time.perf_counter() - started
        np.testing.assert_allclose(native(x=x), want, rtol=1e-3, atol=1e-3)
        fns: dict[str, Callable[[], Any]] = {"numpy": lambda: run_function(mod, {"x": x}),
                                             "irtool": lambda: native(x=x)}
        ort = _onnxruntime_conv(x, w, stride, pad, groups)
        if ort is not None:
            fns["onnxruntime"] = ort
        ms = medians(alternate(fns, repeat))
        t_numpy, t, t_ort = ms["numpy"], ms["irtool"], ms.get("onnxruntime")
        if t_ort is not None:
            rows.append({"kernel": label, "impl": "onnxruntime (1 thread)", "ms": t_ort, "GFLOP/s": flop / t_ort / 1e6,
                         "ratio_vs_numpy": t_numpy / t_ort})
        rows.append({"kernel": label, "impl": "irtool -O3 (alter-layout)", "ms": t, "GFLOP/s": flop / t / 1e6,
                     "ratio_vs_numpy": t_numpy / t, "compile_s": compile_s,
                     **({"ratio_vs_onnxruntime": t_ort / t} if t_ort is not None else {})})
    return rows


BENCHES = {"elementwise": bench_elementwise, "dense": bench_dense, "conv2d": bench_conv2d,
           "conv-variants": bench_conv_variants}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(BENCHES), help="comma-separated subset of " + ", ".join(BENCHES))
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for name in args.only.split(","):
        rows += BENCHES[name.strip()](args.repeat)
    print(describe_host().line())
    print(f"{'kernel':<24} {'implementation':<36} {'ms':>9} {'GB/s|GFLOP/s':>13} {'vs numpy':>9} {'compile s':>10}")
    for r in rows:
        rate = r.get("GB/s", r.get("GFLOP/s"))
        comp = f"{r['compile_s']:.2f}" if "compile_s" in r else ""
        print(f"{r['kernel']:<24} {r['impl']:<36} {r['ms']:>9.2f} {rate:>13.2f} "
              f"{r['ratio_vs_numpy']:>8.2f}x {comp:>10}"
              + (f"  {r['ratio_vs_onnxruntime']:.2f}x onnxruntime" if "ratio_vs_onnxruntime" in r else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
