"""The int8 byte dot products (irtool/lower/schedules/int8.py, `dot_u8s8` in TIR and codegen):
exact int32 results against numpy, the instruction per target *feature* read from the
assembly of pinned CPUs (VNNI `vpdpbusd` where the CPU has it, `pmaddwd` where it does not),
and the QDQ/QOperator convolutions that reach them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import irtool
from irtool.core.diagnostics import DiagnosticError
from irtool.eval.tir_interp import run_primfunc
from irtool.ir.tir import Buffer, BufferLoad, BufferStore, Call, IntImm, PrimFunc, Ramp
from irtool.syntax.parser import parse_module
from irtool.target import TargetOptions
from irtool.tools.llc import main as llc

RNG = np.random.default_rng(5)
TRIPLE = "--mtriple=x86_64-unknown-linux-gnu"


def _codes(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _conv_reference(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Direct NCHW convolution in int64 over zero padding."""
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, _, kh, kw = w.shape
    oh, ow = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], o, oh, ow), np.int64)
    for ry in range(kh):
        for rx in range(kw):
            patch = xp[:, :, ry:ry + stride * (oh - 1) + 1:stride, rx:rx + stride * (ow - 1) + 1:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, ry, rx].astype(np.int64))
    return out


def _conv_text(c: int, h: int, o: int, k: int, stride: int, pad: int) -> str:
    return (f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(1, {c}, {h}, {h}), uint8], '
            f'%w: Tensor[({o}, {c}, {k}, {k}), int8]) {{\n'
            f'  nn.conv2d(%x, %w, strides=[{stride}, {stride}], padding=[{pad}, {pad}, {pad}, {pad}], '
            f'channels={o}, kernel_size=[{k}, {k}], out_dtype="int32")\n}}\n')


def test_dot_u8s8_in_the_interpreter_is_the_byte_dot_product() -> None:
    """Lane j: acc + Σ unsigned byte i of a × signed byte i of b (little-endian), wrapping."""
    acc, a, b = (RNG.integers(-2**31, 2**31, 8).astype(np.int32) for _ in range(3))
    acc[0] = 2**31 - 1                       # wraps past the top
    a[1], b[1] = -1, 0x7F7F7F7F              # 255 · 127 four times
    bufs = [Buffer(n, (8,), "int32") for n in ("acc", "a", "b", "out")]
    lanes = Ramp(IntImm(0, "int32"), IntImm(1, "int32"), 8)
    body = BufferStore(bufs[3], (lanes,), Call("dot_u8s8", [BufferLoad(buf, (lanes,)) for buf in bufs[:3]]))
    out = np.zeros(8, np.int32)
    run_primfunc(PrimFunc(bufs, body), [acc, a, b, out])
    want = []
    for j in range(8):
        ua = int(a[j]).to_bytes(4, "little", signed=True)
        sb = int(b[j]).to_bytes(4, "little", signed=True)
        total = int(acc[j]) + sum(ua[i] * int.from_bytes(sb[i:i + 1], "little", signed=True) for i in range(4))
        want.append((total + 2**31) % 2**32 - 2**31)
    assert out.tolist() == want


def test_the_verifier_wants_int32_lanes_for_dot_u8s8() -> None:
    from irtool.analysis.tir_verify import verify_primfunc
    bufs = [Buffer(n, (4,), "float32") for n in ("a", "out")]
    zero = IntImm(0, "int32")
    body = BufferStore(bufs[1], (zero,), Call("dot_u8s8", [BufferLoad(bufs[0], (zero,))] * 3))
    with pytest.raises(DiagnosticError, match="`dot_u8s8` needs int32 arguments"):
        verify_primfunc(PrimFunc(bufs, body))


@pytest.mark.parametrize("cpu", ["native", "x86-64"])
@pytest.mark.parametrize("c,h,o,k,stride,pad", [
    (64, 10, 64, 3, 1, 1),     # full tiles and words
    (3, 11, 16, 3, 2, 1),      # RGB: one word with a zero byte; strided
    (13, 6, 37, 3, 1, 0),      # channels not a multiple of 4, outputs not of the vector
    (8, 7, 40, 1, 1, 0),       # 1x1
])
def test_uint8_int8_conv_is_exact(cpu: str, c: int, h: int, o: int, k: int, stride: int, pad: int) -> None:
    """Natively (`x86-64`: SSE2's 4-lane `pmaddwd` fallback on any x86 host), against int64 numpy."""
    x, w = _codes((1, c, h, h), "uint8"), _codes((o, c, k, k), "int8")
    x[0, 0, 0, :3] = 255
    w[0, 0, 0, 0] = -128
    module = irtool.build(parse_module(_conv_text(c, h, o, k, stride, pad)), cpu=cpu)
    assert np.array_equal(module(x, w), _conv_reference(x, w, stride, pad).astype(np.int32))


@pytest.mark.parametrize("cpu", ["native", "x86-64"])
@pytest.mark.parametrize("m,k,n", [(1, 64, 48), (20, 33, 50), (64, 128, 96)])
def test_uint8_int8_dense_is_exact(cpu: str, m: int, k: int, n: int) -> None:
    a, w = _codes((m, k), "uint8"), _codes((n, k), "int8")
    text = (f'#[version = "0.0.5"]\ndef @main(%a: Tensor[({m}, {k}), uint8], %w: Tensor[({n}, {k}), int8]) '
            '{ nn.dense(%a, %w, out_dtype="int32") }\n')
    module = irtool.build(parse_module(text), cpu=cpu)
    assert np.array_equal(module(a, w), (a.astype(np.int64) @ w.astype(np.int64).T).astype(np.int32))


def _assembly(tmp_path: Path, text: str, *flags: str) -> str:
    source, out = tmp_path / "q.relay", tmp_path / "q.s"
    source.write_text(text)
    assert llc([str(source), "--emit=asm", TRIPLE, *flags, "-o", str(out)]) == 0
    return out.read_text()


@pytest.mark.parametrize("flags,instruction,register", [
    (("--mcpu=icelake-server",), "vpdpbusd", "zmm"),             # AVX-512 VNNI
    (("--mcpu=znver4",), "vpdpbusd", "zmm"),
    (("--mcpu=alderlake",), "vpdpbusd", "ymm"),                  # AVX-VNNI, 256-bit vectors
    (("--mcpu=znver3",), "vpmaddwd", "ymm"),                     # AVX2, no VNNI
    (("--mcpu=skylake-avx512",), "vpmaddwd", "zmm"),             # AVX-512 without VNNI
    (("--mcpu=znver4", "--mattr=-avx512vnni"), "vpmaddwd", "zmm"),  # the feature, not the CPU's name
])
def test_the_int8_conv_uses_the_targets_dot_product(tmp_path: Path, flags: tuple[str, ...], instruction: str,
                                                     register: str) -> None:
    asm = _assembly(tmp_path, _conv_text(64, 10, 64, 3, 1, 1), *flags)
    used = set(re.findall(rf"^\s+(?:\{{vex\}}\s+)?{instruction}\s+[^\n]*%({register})\d+\s*$", asm, re.M))
    assert used == {register}
    assert ("vpdpbusd" in asm) == (instruction == "vpdpbusd")


@pytest.mark.parametrize("cpu,bits", [("znver3", 0), ("icelake-server", 512), ("alderlake", 256),
                                      ("skylake-avx512", 0), ("x86-64", 0)])
def test_vnni_width_comes_from_the_targets_features(cpu: str, bits: int) -> None:
    assert TargetOptions(cpu=cpu).vnni_bits() == bits


def test_int8_conv_weights_get_the_word_layout_and_keep_their_meaning() -> None:
    """alter-layout gives an int8 conv's weight the layout its word stage reads in order (four
    input channels adjacent), and the Relay interpreter's results do not change."""
    from irtool.eval.interpreter import flatten_value, run_function
    from irtool.passes import run
    from irtool.syntax.printer import print_program
    mod = parse_module(_conv_text(8, 6, 32, 3, 1, 1))
    x, w = _codes((1, 8, 6, 6), "uint8"), _codes((32, 8, 3, 3), "int8")
    altered = run(mod, "alter-layout{lanes=16}")
    assert 'kernel_layout="OIHW16o4i"' in print_program(altered)
    after = flatten_value(run_function(altered, {"x": x, "w": w}))[0]
    assert np.array_equal(after, _conv_reference(x, w, 1, 1).astype(np.int32))


def test_a_qdq_conv_runs_on_the_codes_like_the_onnx_reference() -> None:
    """DequantizeLinear(uint8) and DequantizeLinear(int8, per channel) into a Conv, then
    QuantizeLinear: the conv is an int32 conv of the codes (no float conv left), and the codes
    after it agree with the ONNX reference's to one step (onnxruntime, which fuses the same nodes
    into QLinearConv, saturates its u8s8 sums on hosts without VNNI: `reference_outputs`)."""
    import onnx
    from onnx import helper, numpy_helper

    from irtool.frontend.onnx import import_model
    from irtool.ir.expr import Call as RelayCall
    from support.onnx_cases import reference_outputs
    from irtool.ir.visitor import post_order
    x = _codes((1, 8, 9, 9), "uint8")
    inits = {"xs": np.float32(0.02), "xz": np.uint8(117), "w": _codes((16, 8, 3, 3), "int8"),
             "ws": (RNG.random(16) * 0.01 + 0.001).astype(np.float32), "wz": np.zeros(16, np.int8),
             "b": RNG.integers(-300, 300, 16).astype(np.int32), "ys": np.float32(0.3), "yz": np.uint8(128)}
    inits["bs"] = (inits["xs"] * inits["ws"]).astype(np.float32)
    inits["bz"] = np.zeros(16, np.int32)
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, x.shape)],
                              [helper.make_empty_tensor_value_info("y")],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    module = import_model(model, embed_params=True).module
    convs = [n for n in post_order(module["main"]) if isinstance(n, RelayCall) and getattr(n.op, "name", "") == "nn.conv2d"]
    assert [(c.args[0].checked_type.dtype, c.checked_type.dtype) for c in convs] == [("uint8", "int32")]
    want = reference_outputs(model, {"x": x})[0]
    got = irtool.build(module)(x)
    assert got.dtype == want.dtype == np.uint8
    assert np.max(np.abs(got.astype(np.int16) - want.astype(np.int16))) <= 1
