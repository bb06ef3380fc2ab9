"""Import an ONNX model as a Relay module.

The graph is walked once in its (topological) node order. Every ONNX tensor becomes a `Value`:
its Relay expression, its static type, and — for tensors whose contents are known at import
time (shape computations, `Constant` nodes, integer initializers) — the numpy value, so that
`Reshape`'s shape input, `Slice`'s starts or `Shape → Gather → Concat` chains resolve to static
attributes. Operator conversion lives in `onnx_ops/` (one converter per ONNX op type, by family).

Float initializers are the model's weights: by default they become parameters of `main` after
the real inputs (their values returned in `ImportResult.params`, written to an `.npz` by
`irtool-import`); with `embed_params` they become `meta[relay.Constant]` constants. They are
never folded into other constants at import time (that is `fold-constant`'s job).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from irtool.analysis.typecheck import infer_types
from irtool.eval.interpreter import evaluate
from irtool.ir.expr import Constant, Expr, Function, Tuple, Var
from irtool.ir.module import IRModule
from irtool.ir.types import Any, TensorType
from irtool.ir.visitor import free_vars
from irtool.core.diagnostics import DiagnosticError
from irtool.frontend.onnx_checks import (check_dims, check_node, input_dims, non_text_field,
                                         shape_inference_complaint, tensor_array)
from irtool.frontend.onnx_dtypes import dtype_of, onnx_type_name
from irtool.frontend import onnx_sizes
from irtool.frontend.onnx_ops import CONVERTERS
from irtool.frontend.onnx_support import (grouped, model_opset, model_opsets, node_location,
                                          operator_problem)
from irtool.frontend.onnx_values import (Builder, ConstantNeeded, DynamicShape, Node, Unsupported, Value,
                                         relay_dtype)

if TYPE_CHECKING:
    import onnx

# Integer and bool computations on import-time constants (shape arithmetic) are folded when the
# result is at most this big; float results (e.g. ConstantOfShape weights) stay expressions.
FOLD_LIMIT = 4096

_NON_IDENT = re.compile(r"[^A-Za-z0-9_/]")


def sanitize(name: str) -> str:
    """An ONNX tensor name as a Relay identifier (`[A-Za-z_/][A-Za-z0-9_/]*`)."""
    text = _NON_IDENT.sub("_", name)
    if not text or text[0].isdigit():
        text = "v" + text
    return text


class ImportFailure(DiagnosticError):
    """The importer's report of everything it refused. `constant_inputs` names the graph inputs
    whose contents were needed at import time when nothing else was wrong (a caller who knows
    their values, such as the ONNX backend at run time, can make them initializers and retry)."""

    def __init__(self, message: str, constant_inputs: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.constant_inputs = list(constant_inputs)


@dataclass
class ImportResult:
    """The imported module and the weights `main` takes as parameters (empty when embedded)."""

    module: IRModule
    params: dict[str, np.ndarray]
    # Names (sanitised) of the graph's real inputs, in `main`'s parameter order.
    inputs: list[str]
    timings: dict[str, float] = field(default_factory=dict)


def load_onnx(path: str) -> onnx.ModelProto:
    """Read a model file; a missing `onnx` package or a broken file is a diagnostic."""
    try:
        import onnx
    except ImportError:
        raise DiagnosticError("importing ONNX needs the `onnx` package: pip install 'irtool[onnx]'") from None
    try:
        return onnx.load(path)
    except OSError as exc:
        raise DiagnosticError(f"cannot read '{path}': {exc.strerror or exc}") from None
    except Exception as exc:  # noqa: BLE001 -- protobuf's DecodeError and friends
        raise DiagnosticError(f"{path}: not a valid ONNX model: {exc}") from None


def _short_float(value: float) -> float:
    """A float32 attribute as its shortest decimal (`epsilon=1e-05`, not 9.999999747378752e-06);
    it rounds back to the same float32."""
    return float(str(np.float32(value)))


def _attributes(node: onnx.NodeProto) -> dict[str, object]:
    import onnx
    from onnx import helper
    out: dict[str, object] = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if a.type == onnx.AttributeProto.FLOAT:
            value = _short_float(value)  # type: ignore[arg-type]
        elif a.type == onnx.AttributeProto.FLOATS:
            value = [_short_float(v) for v in value]  # type: ignore[union-attr]
        elif isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        elif a.type == onnx.AttributeProto.TENSOR:
            value = tensor_array(a.t, f"attribute '{a.name}'")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", errors="replace") for v in value]
        out[a.name] = value
    return out


def _input_type(info: onnx.ValueInfoProto, overrides: Mapping[str, Sequence[int]]) -> TensorType:
    """The input's type: `--input-shape`'s sizes if given, else the model's (symbolic axes `?`)."""
    t = info.type
    if t.WhichOneof("value") != "tensor_type":
        raise Unsupported(f"graph input '{info.name}' is not a tensor")
    dtype = dtype_of(t.tensor_type.elem_type)
    if dtype is None:
        raise Unsupported(f"graph input '{info.name}' has the unsupported element type "
                          f"{onnx_type_name(t.tensor_type.elem_type)}")
    model_dims = input_dims(info)
    for key in (info.name, sanitize(info.name)):  # the ONNX name or its Relay spelling
        if key in overrides:
            given = [int(d) for d in overrides[key]]
            check_dims(given, f"--input-shape {key}")
            _check_override(info, model_dims, given, key)
            return TensorType(tuple(given), dtype)
    if not t.tensor_type.HasField("shape"):
        raise Unsupported(f"graph input '{info.name}' has no shape (not even a rank); give it with "
                          f"--input-shape {sanitize(info.name)}=D0,D1,...")
    return TensorType(tuple(Any() if d is None else d for d in model_dims), dtype)


def _check_override(info: onnx.ValueInfoProto, model_dims: list[int | None], given: list[int], key: str) -> None:
    """`--input-shape` sizes the model's symbolic axes; it cannot change the rank or a fixed size
    (the model's nodes were written for them, and onnxruntime refuses such an input at run)."""
    if not info.type.tensor_type.HasField("shape"):
        return   # no rank in the model: the override gives it
    if len(given) != len(model_dims):
        raise Unsupported(f"--input-shape {key} gives {len(given)} dimension{'' if len(given) == 1 else 's'}, but graph input '{info.name}' "
                          f"has rank {len(model_dims)}")
    for axis, (fixed, size) in enumerate(zip(model_dims, given)):
        if fixed is not None and fixed != size:
            raise Unsupported(f"--input-shape {key} gives axis {axis} the size {size}, but graph input "
                              f"'{info.name}' fixes it at {fixed}")


def _symbolic_axes(info: onnx.ValueInfoProto, ty: TensorType) -> str | None:
    """`graph input 'x' has symbolic axis 0 'batch' (give its size with --input-shape
    x=1,3,224,224)` for an input whose type kept unknown sizes; None when every size is known."""
    unknown = [axis for axis, d in enumerate(ty.shape) if not isinstance(d, int)]
    if not unknown:
        return None
    dims = info.type.tensor_type.shape.dim
    names = ", ".join(f"{axis} '{dims[axis].dim_param or '?'}'" for axis in unknown)
    example = ",".join(str(d) if isinstance(d, int) else "1" for d in ty.shape)
    return (f"graph input '{info.name}' has symbolic {'axes' if len(unknown) > 1 else 'axis'} {names} "
            f"(give {'their sizes' if len(unknown) > 1 else 'its size'} with --input-shape "
            f"{sanitize(info.name)}={example})")


class _Unique:
    """Relay parameter names: sanitised ONNX names, made distinct where sanitising collides."""

    def __init__(self) -> None:
        self.taken: set[str] = set()

    def __call__(self, name: str) -> str:
        base = text = sanitize(name)
        n = 0
        while text in self.taken:
            n += 1
            text = f"{base}_{n}"
        self.taken.add(text)
        return text


def import_model(model: onnx.ModelProto, *, embed_params: bool = False, source: str = "model.onnx",
                 input_shapes: Mapping[str, Sequence[int]] | None = None, static_shapes: bool = False,
                 progress: Callable[[str, float], None] | None = None) -> ImportResult:
    """Convert a model to a module whose `main` takes the graph inputs (then the weights).

    Every unsupported operator or attribute of the whole graph is reported in one
    `DiagnosticError` naming the nodes. Symbolic input axes stay `?` unless `input_shapes` sizes
    them; `static_shapes` (what native code needs) makes one left unsized an error.
    `progress(stage, seconds)` is told each stage's time.
    """

    timings: dict[str, float] = {}
    started = time.perf_counter()
    broken = non_text_field(model)
    if broken is not None:
        raise DiagnosticError(f"{source}: not a valid ONNX model: {broken}")
    opset = model_opset(model, source)
    opsets = model_opsets(model)
    if model.functions:  # model-local functions (as exporters write them) are expanded in place
        from onnx.inliner import inline_local_functions
        model = inline_local_functions(model)
    graph = model.graph
    builder = Builder(opset)
    unique = _Unique()
    values: dict[str, Value] = {}
    problems: list[str] = []
    poisoned: set[str] = set()  # tensors whose producer (or graph input) was refused
    constant_inputs: dict[str, int] = {}  # graph inputs needed as constants -> their problems

    initializers = {t.name: t for t in graph.initializer}
    weight_vars: list[tuple[int, str, Var]] = []
    params: dict[str, np.ndarray] = {}
    order = {name: i for i, name in enumerate(initializers)}
    input_vars: list[Var] = []
    symbolic: list[str] = []
    for info in graph.input:
        if info.name in initializers:
            continue  # IR version 3 lists initializers among the inputs too; later ones give defaults
        try:
            ty = _input_type(info, input_shapes or {})
        except Unsupported as exc:
            problems.append(str(exc))
            poisoned.add(info.name)
            continue
        unsized = _symbolic_axes(info, ty)
        if unsized is not None:
            symbolic.append(unsized)
            if static_shapes:
                problems.append(f"{unsized}: native code needs the size of every axis")
        var = Var(unique(info.name), ty)
        input_vars.append(var)
        values[info.name] = Value(var, ty, graph_input=info.name)
        builder.graph_inputs[id(var)] = info.name
    known = {i.name for i in graph.input} | {sanitize(i.name) for i in graph.input}
    unknown_overrides = sorted(set(input_shapes or {}) - known)
    if unknown_overrides:
        problems.append(f"--input-shape names no graph input: {', '.join(unknown_overrides)}")

    def initializer_value(name: str) -> Value:
        array = tensor_array(initializers[name], f"initializer '{name}'")  # through the element-type gate
        if array.dtype.kind != "f":
            return builder.const(array)  # integer tensors are shapes and indices: keep them static
        ty = TensorType(array.shape, relay_dtype(array.dtype))
        if embed_params:
            v = builder.const(array)
            v.from_param = True
            return v
        var = Var(unique(name), ty)
        weight_vars.append((order[name], var.name_hint, var))
        params[var.name_hint] = array
        return Value(var, ty, array, True)

    uses = _use_counts(graph)

    def outer(name: str) -> Value | None:
        if name not in values and name in initializers and name not in poisoned:
            values[name] = initializer_value(name)
        return values.get(name)
    builder.subgraph = _SubgraphConverter(builder, opsets, outer)
    unknown: dict[str, list[str]] = {}
    defined = {i.name for i in graph.input} | set(initializers)  # each tensor has one definition (SSA)
    for index, proto in enumerate(graph.node):
        where = node_location(index, proto.name)
        problem = operator_problem(proto.domain, proto.op_type, opsets, CONVERTERS)
        if problem is not None:
            unknown.setdefault(problem, []).append(where)
            poisoned.update(proto.output)
            continue
        if any(name in poisoned for name in _reads([proto]) if name):
            poisoned.update(proto.output)
            continue
        missing = [name for name in proto.input if name and name not in values and name not in initializers]
        if missing:
            problems.append(f"node {where} ({proto.op_type}) reads '{missing[0]}', which nothing defines")
            poisoned.update(proto.output)
            continue
        again = [name for name in proto.output if name and name in defined]
        defined.update(proto.output)
        if again:
            problems.append(f"node {where} ({proto.op_type}) writes '{again[0]}', which is already defined")
            poisoned.update(proto.output)
            continue
        head = f"unsupported: {proto.op_type} (opset {opset})"
        try:
            check_node(proto, opset)
            inputs: list[Value | None] = []
            for name in proto.input:
                if name and name not in values:
                    values[name] = initializer_value(name)
                inputs.append(values[name] if name else None)
            outs = _convert(builder, proto, proto.name or f"#{index}", inputs, uses)
        except Unsupported as exc:
            what = f"unsupported: {exc.subject} (opset {opset})" if exc.subject else f"{head}: {exc}"
            if isinstance(exc, DynamicShape) and symbolic:
                what += "; " + "; ".join(symbolic)
            if isinstance(exc, ConstantNeeded):
                constant_inputs[exc.graph_input] = constant_inputs.get(exc.graph_input, 0) + 1
            problems.append(f"node {where}: {what}")
            poisoned.update(proto.output)
            continue
        except Exception:
            # A converter assumes what the specification guarantees: if the model breaks it,
            # ONNX's own inference says how; if not, this is an irtool bug and stays an error.
            complaint = shape_inference_complaint(model, proto)
            if complaint is None:
                raise
            problems.append(f"node {where}: {head}: {complaint}")
            poisoned.update(proto.output)
            continue
        for k, (name, out) in enumerate(zip(proto.output, outs)):
            if not name:
                continue
            if out is None:
                if uses.get(name):
                    problems.append(f"node {where}: {head}: its output {k} ('{name}')")
                    poisoned.add(name)
                continue
            values[name] = out
    for info in graph.output:
        if info.name not in values and info.name in initializers:  # an output that is a weight
            try:
                values[info.name] = initializer_value(info.name)
            except Unsupported as exc:
                problems.append(f"graph output '{info.name}': unsupported: {exc}")
        if info.name in values and values[info.name].sizes is not None:
            problems.append(f"graph output '{info.name}': unsupported: it is a shape read from a tensor with "
                            "symbolic axes (irtool computes such shapes only at import time, for a Reshape); "
                            + "; ".join(symbolic))
    problems[:0] = [grouped(problem, nodes) for problem, nodes in sorted(unknown.items())]
    if problems:
        only_constants = len(problems) == sum(constant_inputs.values())
        raise ImportFailure(f"{source}: cannot import the model:\n  " + "\n  ".join(problems),
                            sorted(constant_inputs) if only_constants else ())
    timings["convert"] = time.perf_counter() - started
    if progress:
        progress("convert", timings["convert"])

    outputs = []
    for info in graph.output:
        if info.name not in values:
            raise DiagnosticError(f"{source}: graph output '{info.name}' is never computed")
        outputs.append(values[info.name].expr)
    body: Expr = outputs[0] if len(outputs) == 1 else Tuple(outputs)
    # Weights read only as static values (a Clip bound, a Reshape shape) are not parameters.
    referenced = set(free_vars(body))
    weight_vars = sorted((w for w in weight_vars if w[2] in referenced), key=lambda item: item[0])
    func = Function(input_vars + [v for _, _, v in weight_vars], body)
    mod = IRModule()
    mod.add_function("main", func)
    started = time.perf_counter()
    infer_types(mod)
    timings["type-check"] = time.perf_counter() - started
    if progress:
        progress("type-check", timings["type-check"])
    ordered = {name: params[name] for _, name, _ in weight_vars}
    return ImportResult(mod, ordered, [v.name_hint for v in input_vars], timings)


def import_file(path: str, **options: object) -> ImportResult:
    """Load and import a `.onnx` file (the tools' entry point); options as for `import_model`."""
    progress = options.get("progress")
    started = time.perf_counter()
    model = load_onnx(path)
    load_seconds = time.perf_counter() - started
    if callable(progress):
        progress("load", load_seconds)
    result = import_model(model, source=path, **options)  # type: ignore[arg-type]
    result.timings = {"load": load_seconds, **result.timings}
    return result


def _use_counts(graph: onnx.GraphProto) -> dict[str, int]:
    """How often each tensor is read, by nodes (their subgraphs included) or as a graph output."""
    return Counter([info.name for info in graph.output] + list(_reads(graph.node)))


def _reads(nodes: Iterable[onnx.NodeProto]) -> Iterator[str]:
    """The names `nodes` read: their inputs, and the inputs and outputs of the nodes of their
    subgraphs at any depth (a body reads its enclosing graphs' tensors by name)."""
    pending = list(nodes)
    while pending:
        node = pending.pop()
        yield from node.input
        for a in node.attribute:
            for body in [a.g] if a.HasField("g") else list(a.graphs):
                pending.extend(body.node)
                yield from (info.name for info in body.output)


def _convert(builder: Builder, proto: onnx.NodeProto, label: str, inputs: list[Value | None],
             uses: Mapping[str, int]) -> list[Value | None]:
    """One node through its converter; a small integer result computed only from constants is
    folded to a constant (shape arithmetic). A control-flow node's bodies read other tensors
    than its inputs: what they compute from constants is folded inside them."""
    node = Node(proto.op_type, label, inputs, _attributes(proto), len(proto.output),
                [bool(uses.get(o)) for o in proto.output])
    convert = onnx_sizes.convert if onnx_sizes.reads_sizes(proto.op_type, inputs) else CONVERTERS[proto.op_type]
    outs = convert(builder, node)
    foldable = (all(v is None or (v.const is not None and not v.from_param) for v in inputs)
                and not any(a.HasField("g") or a.graphs for a in proto.attribute))
    return [_fold(out) if foldable and out is not None and out.const is None else out for out in outs]


class _SubgraphConverter:
    """Converts the body graphs of If, Loop and Scan (`Builder.subgraph`). A body reads its own
    inputs (bound by the converter), its initializers, and by name any tensor of the graphs
    around it: those go through the converter's `capture`, which binds them in front of the loop
    or `if` (and through the captures of every body in between). The first node it cannot
    convert is the error of the control-flow node."""

    def __init__(self, builder: Builder, opsets: dict[str, int], outer: Callable[[str], Value | None]) -> None:
        self.builder = builder
        self.opsets = opsets
        self.scopes = [outer]   # the name lookup of each enclosing graph, innermost last

    def __call__(self, graph: onnx.GraphProto, bound: Mapping[str, Value],
                 capture: Callable[[Value], Value]) -> list[Value]:
        values: dict[str, Value] = dict(bound)
        enclosing = self.scopes[-1]
        for t in graph.initializer:
            values[t.name] = self.builder.const(tensor_array(t, f"initializer '{t.name}'"))

        def find(name: str) -> Value | None:
            if name not in values:
                found = enclosing(name)
                if found is None:
                    return None
                values[name] = capture(found)
            return values[name]

        uses = _use_counts(graph)
        self.scopes.append(find)
        try:
            for index, proto in enumerate(graph.node):
                where = node_location(index, proto.name)
                problem = operator_problem(proto.domain, proto.op_type, self.opsets, CONVERTERS)
                try:
                    if problem is not None:
                        raise Unsupported(problem.removeprefix("unsupported: "))
                    check_node(proto, self.builder.opset)
                    inputs = [self._read(find, name) if name else None for name in proto.input]
                    outs = _convert(self.builder, proto, proto.name or f"#{index}", inputs, uses)
                except Unsupported as exc:
                    raise Unsupported(f"its {graph.name or 'body'} node {where} ({proto.op_type}): {exc}") from None
                values.update((name, out) for name, out in zip(proto.output, outs) if name and out is not None)
            outputs = [self._read(find, info.name) for info in graph.output]
            if any(out.sizes is not None for out in outputs):
                raise DynamicShape(f"its {graph.name or 'body'} returns a shape read from a tensor with symbolic axes "
                                   "(irtool computes such shapes only at import time, for a Reshape)")
            return outputs
        finally:
            self.scopes.pop()

    @staticmethod
    def _read(find: Callable[[str], Value | None], name: str) -> Value:
        found = find(name)
        if found is None:
            raise Unsupported(f"it reads '{name}', which nothing defines")
        return found


def _fold(value: Value) -> Value:
    """Evaluate a small integer computation on constants now (shape arithmetic becomes static)."""
    ty = value.type
    if not isinstance(ty, TensorType) or not ty.is_static or ty.dtype.startswith(("float", "bfloat")):
        return value
    size = int(np.prod([int(d) for d in ty.shape], dtype=np.int64))  # type: ignore[arg-type]
    if size > FOLD_LIMIT:
        return value
    result = evaluate(value.expr)
    assert isinstance(result, np.ndarray)
    array = result if result.flags.c_contiguous else result.copy(order="C")
    return Value(Constant(array), ty, array)
