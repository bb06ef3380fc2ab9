"""Fuzzing the ONNX importer: mutated protobufs give a module that verifies, or a DiagnosticError.

Small valid models built with `onnx.helper` (conv + relu, gemm, a reshape chain, a concatenation,
pooling) have their fields mutated — dimensions, dtypes, attribute types and values, input and
output names, dropped inputs, initializer bytes, opset versions, op types, whole nodes — with
hypothesis choosing what and how. Each mutant is serialised to a file and imported in-process by
`import_file`, the function `irtool-import` and `irtool-run model.onnx` call. The contract: either
a module that verifies and prints to text its own parser reads back (and the interpreter runs it
without crashing), or a `DiagnosticError` with a message; never another exception, and in
bounded time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.eval.interpreter import run_function  # noqa: E402
from irtool.frontend.onnx import import_file  # noqa: E402
from irtool.passes import verify  # noqa: E402
from irtool.syntax.parser import parse  # noqa: E402
from irtool.syntax.printer import print_program  # noqa: E402
from irtool.tools.run import random_inputs  # noqa: E402

N = helper.make_node
F = TensorProto.FLOAT
# A generous bound on one import of these tiny models (an exponential blow-up, not speed).
BOUND_SECONDS = 10.0
# Accepted mutants with more input elements than this are not run (a 2^31 dimension is valid).
RUN_LIMIT = 1 << 16


def _weights(name: str, shape: tuple[int, ...], seed: int = 0) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: list[onnx.TensorProto], opset: int = 13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def conv_relu() -> onnx.ModelProto:
    return _model([N("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                     strides=[1, 1], dilations=[1, 1], group=1),
                   N("Relu", ["c"], ["y"], name="relu")],
                  [helper.make_tensor_value_info("x", F, [1, 3, 6, 6])],
                  [helper.make_tensor_value_info("y", F, [1, 4, 6, 6])],
                  [_weights("w", (4, 3, 3, 3)), _weights("b", (4,), 1)])


def gemm() -> onnx.ModelProto:
    return _model([N("Gemm", ["a", "bw", "cb"], ["y"], name="fc", alpha=0.5, beta=2.0, transB=1)],
                  [helper.make_tensor_value_info("a", F, [2, 4])],
                  [helper.make_tensor_value_info("y", F, [2, 3])],
                  [_weights("bw", (3, 4)), _weights("cb", (3,), 1)], opset=11)


def reshape_chain() -> onnx.ModelProto:
    shape = numpy_helper.from_array(np.array([6, 4], np.int64), "shape")
    return _model([N("Reshape", ["x", "shape"], ["r"], name="flat"),
                   N("Constant", [], ["minus1"], name="k", value=numpy_helper.from_array(np.array([-1], np.int64))),
                   N("Reshape", ["r", "minus1"], ["s"], name="line"),
                   N("Transpose", ["x"], ["t"], name="swap", perm=[2, 0, 1]),
                   N("Flatten", ["t"], ["y2"], name="flatten", axis=1)],
                  [helper.make_tensor_value_info("x", F, [2, 3, 4])],
                  [helper.make_tensor_value_info("s", F, [24]), helper.make_tensor_value_info("y2", F, [4, 6])],
                  [shape])


def concat() -> onnx.ModelProto:
    return _model([N("Concat", ["p", "q", "k"], ["y"], name="cat", axis=1)],
                  [helper.make_tensor_value_info("p", F, [1, 2, 3]), helper.make_tensor_value_info("q", F, [1, 4, 3])],
                  [helper.make_tensor_value_info("y", F, [1, 7, 3])],
                  [_weights("k", (1, 1, 3))])


def pool() -> onnx.ModelProto:
    return _model([N("MaxPool", ["x"], ["m"], name="max", kernel_shape=[2, 2], strides=[2, 2]),
                   N("AveragePool", ["m"], ["a"], name="avg", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                     count_include_pad=0),
                   N("GlobalAveragePool", ["a"], ["y"], name="gap")],
                  [helper.make_tensor_value_info("x", F, [1, 2, 6, 6])],
                  [helper.make_tensor_value_info("y", F, [1, 2, 1, 1])], [], opset=10)


SEEDS: list[Callable[[], onnx.ModelProto]] = [conv_relu, gemm, reshape_chain, concat, pool]
SEED_MODELS = [seed() for seed in SEEDS]

# Values worth writing into fields: signs, zero, one, the int32 edge, huge.
SIZES = [0, 1, 2, 3, 7, 2 ** 31 - 1, 2 ** 31, 2 ** 40]
INTS = st.sampled_from([-(2 ** 40), -(2 ** 31), -3, -1, *SIZES])
FLOATS = st.sampled_from([0.0, -1.0, 0.5, 1e30, float("inf"), float("nan")])
STRINGS = st.sampled_from(["", "NOTSET", "SAME_UPPER", "VALID", "bogus", "é"])
ELEM_TYPES = st.integers(0, 26)
ATTRIBUTE_VALUES = st.one_of(
    INTS, FLOATS, STRINGS, st.lists(INTS, max_size=5), st.lists(FLOATS, min_size=1, max_size=3),
    st.lists(STRINGS, min_size=1, max_size=2),
    st.just(numpy_helper.from_array(np.array([1.5, 2.5], np.float32))))
OP_TYPES = st.sampled_from(["Relu", "Conv", "Gemm", "Reshape", "Concat", "MaxPool", "AveragePool", "Flatten",
                            "Transpose", "Add", "MatMul", "Softmax", "BatchNormalization", "Constant", "Identity",
                            "Squeeze", "Unsqueeze", "Slice", "Gather", "NoSuchOp"])
KINDS = ["dim", "drop-dim", "add-dim", "dim-param", "elem-type", "init-dtype", "init-dims", "raw-bytes",
         "typed-data", "attr-type", "attr-value", "attr-drop", "attr-add", "input-rename", "input-drop",
         "input-add", "output-rename", "opset", "op-type", "node-drop", "node-dup", "domain", "byte-flip"]


def _attribute(name: str, value: object) -> onnx.AttributeProto:
    """`make_attribute`, which cannot infer the type of an empty list (ints, then)."""
    kind = onnx.AttributeProto.INTS if value == [] else None
    return helper.make_attribute(name, value, attr_type=kind)


def _value_infos(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    return [*model.graph.input, *model.graph.output]


def _names(model: onnx.ModelProto) -> list[str]:
    g = model.graph
    return sorted({*(i.name for i in g.input), *(t.name for t in g.initializer),
                   *(o for n in g.node for o in n.output)}) + ["", "nowhere"]


def _mutate(draw: st.DrawFn, model: onnx.ModelProto, kind: str) -> None:
    """Apply one mutation of `kind` in place (a no-op when the model has nothing of that kind)."""
    g = model.graph
    infos, inits, nodes = _value_infos(model), list(g.initializer), list(g.node)
    pick = lambda seq: seq[draw(st.integers(0, len(seq) - 1))]  # noqa: E731
    if kind in ("dim", "drop-dim", "add-dim", "dim-param", "elem-type") and infos:
        tensor = pick(infos).type.tensor_type
        dims = tensor.shape.dim
        if kind == "elem-type":
            tensor.elem_type = draw(ELEM_TYPES)
        elif kind == "add-dim":
            dims.add().dim_value = draw(st.sampled_from(SIZES))
        elif dims and kind == "drop-dim":
            del dims[draw(st.integers(0, len(dims) - 1))]
        elif dims and kind == "dim-param":
            pick(dims).dim_param = "N"
        elif dims:
            pick(dims).dim_value = draw(INTS)   # the protobuf field takes a negative one too
    elif kind in ("init-dtype", "init-dims", "raw-bytes", "typed-data") and inits:
        t = pick(inits)
        if kind == "init-dtype":
            t.data_type = draw(ELEM_TYPES)
        elif kind == "init-dims":
            if t.dims and draw(st.booleans()):
                t.dims[draw(st.integers(0, len(t.dims) - 1))] = draw(INTS)
            else:
                t.dims.append(draw(st.integers(0, 3)))
        elif kind == "raw-bytes":
            raw = t.raw_data or bytes(4 * len(t.float_data) + 8 * len(t.int64_data))
            t.ClearField("float_data")
            t.ClearField("int64_data")
            cut = draw(st.integers(-8, 8))
            t.raw_data = raw[:cut] if cut < 0 else raw + bytes(cut)
        else:   # the values in the typed field instead of raw_data, with a wrong count
            count = min(int(np.prod(t.dims, dtype=object)) if t.dims else 1, 1 << 12)   # dims may be huge
            t.ClearField("raw_data")
            field = {TensorProto.INT64: t.int64_data, TensorProto.DOUBLE: t.double_data}.get(t.data_type, t.float_data)
            field.extend([1] * max(count + draw(st.sampled_from([-2, -1, 1, 3])), 0))
    elif kind.startswith("attr") and nodes:
        node = pick(nodes)
        attrs = node.attribute
        if kind == "attr-add" or not attrs:
            name = draw(st.sampled_from(["kernel_shape", "pads", "axis", "perm", "group", "auto_pad", "bogus"]))
            attrs.append(_attribute(name, draw(ATTRIBUTE_VALUES)))
        elif kind == "attr-drop":
            del attrs[draw(st.integers(0, len(attrs) - 1))]
        else:   # replace by a value of any type ("attr-type") or of the same kind ("attr-value")
            i = draw(st.integers(0, len(attrs) - 1))
            old = attrs[i]
            if kind == "attr-type":
                value = draw(ATTRIBUTE_VALUES)
            elif old.type == onnx.AttributeProto.INTS:
                value = draw(st.lists(INTS, max_size=6))
            elif old.type == onnx.AttributeProto.INT:
                value = draw(INTS)
            elif old.type == onnx.AttributeProto.FLOAT:
                value = draw(FLOATS)
            elif old.type == onnx.AttributeProto.STRING:
                value = draw(STRINGS)
            else:
                value = draw(ATTRIBUTE_VALUES)
            new = _attribute(old.name, value)
            attrs.remove(old)
            attrs.insert(i, new)
    elif kind.startswith("input") and nodes:
        node = pick(nodes)
        if kind == "input-add" or not node.input:
            node.input.append(draw(st.sampled_from(_names(model))))
        elif kind == "input-drop":
            del node.input[draw(st.integers(0, len(node.input) - 1))]
        else:
            node.input[draw(st.integers(0, len(node.input) - 1))] = draw(st.sampled_from(_names(model)))
    elif kind == "output-rename" and nodes:
        node = pick(nodes)
        if node.output:
            node.output[draw(st.integers(0, len(node.output) - 1))] = draw(st.sampled_from(_names(model)))
    elif kind == "opset":
        model.opset_import[0].version = draw(st.integers(0, 30))
    elif kind == "op-type" and nodes:
        pick(nodes).op_type = draw(OP_TYPES)
    elif kind == "node-drop" and nodes:
        del g.node[draw(st.integers(0, len(nodes) - 1))]
    elif kind == "node-dup" and nodes:
        g.node.append(pick(nodes))
    elif kind == "domain" and nodes:
        pick(nodes).domain = draw(st.sampled_from(["ai.onnx", "com.microsoft", "ai.onnx.ml"]))


@st.composite
def mutated_models(draw: st.DrawFn) -> bytes:
    """A seed model with one to three mutations, serialised (a byte flip acts on the bytes)."""
    model = onnx.ModelProto()
    model.CopyFrom(draw(st.sampled_from(SEED_MODELS)))
    flips: list[int] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(KINDS))
        if kind == "byte-flip":
            flips.append(draw(st.integers(0, 10 ** 6)))
        else:
            _mutate(draw, model, kind)
        event(f"mutation: {kind}")
    data = bytearray(model.SerializeToString())
    for at in flips:
        data[at % len(data)] ^= 0xFF
    return bytes(data)


def check_import(path: Path) -> None:
    """The importer's contract on one file (see the module docstring)."""
    started = time.perf_counter()
    try:
        result = import_file(str(path), embed_params=True)
    except DiagnosticError as exc:
        assert str(exc).strip(), "a diagnostic without a message"
        event("refused")
        return
    finally:
        assert time.perf_counter() - started < BOUND_SECONDS, "the import took too long"
    event("imported")
    mod = result.module
    verify(mod)
    text = print_program(mod)
    again = parse(text, "imported.relay")
    verify(again)
    assert print_program(again) == text
    main = mod.functions["main"]
    shapes = [p.checked_type.shape for p in main.params]  # type: ignore[union-attr]
    if not all(isinstance(d, int) for shape in shapes for d in shape):
        event("imported with a symbolic dimension: not run")   # running needs every size
        return
    sizes = [math.prod(shape) for shape in shapes]
    if sum(sizes) > RUN_LIMIT:
        return   # a huge (accepted) dimension: too big to run here
    try:
        run_function(mod, random_inputs("main", main, 0))  # type: ignore[arg-type]
    except DiagnosticError:
        event("refused at run time")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx_fuzz") / "mutant.onnx"


def test_seed_models_import_and_verify(model_file: Path) -> None:
    for model in SEED_MODELS:
        onnx.checker.check_model(model)
        model_file.write_bytes(model.SerializeToString())
        result = import_file(str(model_file), embed_params=True)
        verify(result.module)


@settings(max_examples=2000)
@given(data=mutated_models())
def test_mutated_models_import_or_are_refused(model_file: Path, data: bytes) -> None:
    model_file.write_bytes(data)
    check_import(model_file)
