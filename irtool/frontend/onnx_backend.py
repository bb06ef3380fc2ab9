"""irtool as an ONNX backend in the ecosystem's sense (`onnx.backend.base.Backend`), so ONNX's
own test runner and tools that take a backend class can drive it.

`InterpreterBackend` runs the imported module with the reference interpreter; `NativeBackend`
compiles it (`irtool.build`) once in `prepare` and runs native code. `prepare` refuses a model it
cannot run with a `DiagnosticError` before anything runs; `supports_model` answers from the
operator table alone (no conversion). A graph input whose contents a converter needs at import
time (a Reshape's shape, a reduction's axes) is bound at `run` from the values given: the model
is imported (and compiled) for those values, once per distinct set of them.

    from irtool.frontend.onnx_backend import NativeBackend
    rep = NativeBackend.prepare(onnx.load("model.onnx"))
    (y,) = rep.run([x])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from irtool.core.diagnostics import DiagnosticError
from irtool.eval.interpreter import run_function
from irtool.frontend.onnx import ImportFailure, ImportResult, import_model, sanitize
from irtool.frontend.onnx_dtypes import dtype_of
from irtool.frontend.onnx_ops import CONVERTERS
from irtool.frontend.onnx_support import model_opset, model_opsets, newest_opset, node_location, operator_problem


def model_problems(model: onnx.ModelProto) -> list[str]:
    """What keeps `model` from importing that shows without converting it: the opset, operators
    without a converter at their version or out of scope, graph inputs irtool cannot take."""
    try:
        model_opset(model, "model")
    except DiagnosticError as exc:
        return [str(exc)]
    if model.functions:
        from onnx.inliner import inline_local_functions
        model = inline_local_functions(model)
    opsets = model_opsets(model)
    problems = []
    for i, top in enumerate(model.graph.node):   # a node, then the nodes of its subgraphs at any depth
        pending = [top]
        while pending:
            n = pending.pop()
            problem = operator_problem(n.domain, n.op_type, opsets, CONVERTERS)
            if problem is not None:
                inside = "" if n is top else f" (in a body graph: {n.op_type})"
                problems.append(f"node {node_location(i, top.name)}{inside}: {problem}")
            pending.extend(m for a in n.attribute for g in ([a.g] if a.HasField("g") else a.graphs) for m in g.node)
    weights = {t.name for t in model.graph.initializer}
    for info in model.graph.input:
        if info.name in weights:
            continue
        if info.type.WhichOneof("value") != "tensor_type" or dtype_of(info.type.tensor_type.elem_type) is None:
            problems.append(f"graph input '{info.name}' is not a tensor of a supported element type")
    return problems


Executor = Callable[[dict[str, np.ndarray]], Any]


class IrtoolRep(BackendRep):
    """A prepared model: `run` takes the graph inputs (a sequence in graph order, a mapping by ONNX
    name, or one array) and returns the outputs as a tuple that is also indexable by name."""

    def __init__(self, backend: type[IrtoolBackend], model: onnx.ModelProto, options: Mapping[str, Any],
                 constant_inputs: Sequence[str] = ()) -> None:
        self.backend = backend
        self.model = model
        self.options = dict(options)
        initializers = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in initializers]
        self.output_names = [o.name for o in model.graph.output]
        # Graph inputs bound as constants at run time, and the import for each set of their values.
        self.constant_inputs = list(constant_inputs)
        self._prepared: dict[bytes, tuple[ImportResult, Executor]] = {}
        if not self.constant_inputs:
            self._prepared[b""] = self._prepare({})

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        feed = self._feed(inputs)
        while True:  # binding some inputs may show that a node needs further ones as constants
            key = b"".join(repr((n, feed[n].dtype.str, feed[n].shape)).encode() + feed[n].tobytes()
                           for n in self.constant_inputs)
            if key in self._prepared:
                break
            try:
                self._prepared[key] = self._prepare({n: feed[n] for n in self.constant_inputs})
            except ImportFailure as exc:
                more = [n for n in exc.constant_inputs if n not in self.constant_inputs]
                if not more:
                    raise
                self.constant_inputs += more
        result, execute = self._prepared[key]
        free = [n for n in self.input_names if n not in self.constant_inputs]
        outputs = execute({param: feed[name] for name, param in zip(free, result.inputs)})
        flat = outputs if isinstance(outputs, tuple) else (outputs,)
        return namedtupledict("Outputs", self.output_names)(*flat)

    def _prepare(self, constants: Mapping[str, np.ndarray]) -> tuple[ImportResult, Executor]:
        """The model imported (and compiled) with `constants` as initializers."""
        model = self.model
        if constants:
            model = onnx.ModelProto()
            model.CopyFrom(self.model)
            kept = [i for i in model.graph.input if i.name not in constants]
            del model.graph.input[:]
            model.graph.input.extend(kept)
            model.graph.initializer.extend(numpy_helper.from_array(v, n) for n, v in constants.items())
        native = self.backend.native
        result = import_model(model, embed_params=native, source=str(self.options.get("source", "model.onnx")),
                              static_shapes=native, input_shapes=self.options.get("input_shapes"))
        return result, self.backend._executor(result, self.options)

    def _feed(self, inputs: Any) -> dict[str, np.ndarray]:
        """The inputs by ONNX name, as arrays."""
        if isinstance(inputs, (np.ndarray, onnx.TensorProto)):
            inputs = [inputs]
        if isinstance(inputs, Mapping):
            spelled = {sanitize(n): n for n in self.input_names}
            pairs = [(k if k in self.input_names else spelled.get(k, k), v) for k, v in inputs.items()]
            unknown = sorted(k for k, _ in pairs if k not in self.input_names)
            missing = sorted(set(self.input_names) - {k for k, _ in pairs})
            if unknown or missing:
                raise DiagnosticError(f"the model's inputs are {', '.join(self.input_names)}; "
                                      + (f"{', '.join(unknown)} is not one" if unknown else
                                         f"{', '.join(missing)} is missing"))
        else:
            values = list(inputs)
            if len(values) != len(self.input_names):
                raise DiagnosticError(f"the model takes {len(self.input_names)} input(s) "
                                      f"({', '.join(self.input_names)}), {len(values)} given")
            pairs = list(zip(self.input_names, values))
        return {k: numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v) for k, v in pairs}


class IrtoolBackend(Backend):
    """The shared ONNX-backend behaviour; subclasses choose how the imported module runs."""

    native: ClassVar[bool] = False

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            return Device(device).type == DeviceType.CPU
        except (AttributeError, ValueError):
            return False

    @classmethod
    def supports_model(cls, model: onnx.ModelProto) -> bool:
        """True when every operator has a converter at the model's opset (attributes are checked
        when `prepare` converts the model)."""
        return not model_problems(model)

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device) and cls.supports_model(model)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> IrtoolRep:
        """Import (and for native code, compile) once. Options: `input_shapes` (sizes of symbolic
        axes, as `--input-shape`), `source` (the name errors give), and for native code
        `threads` and `opt_level`; others (the ONNX runner's rtol, atol) are ignored."""
        if not cls.supports_device(device):
            raise DiagnosticError(f"irtool runs on the CPU, not on {device}")
        # No onnx.checker pass: the importer validates what it reads, and the checker also refuses
        # graphs whose outputs carry no type, which onnxruntime and irtool run.
        try:
            return IrtoolRep(cls, model, kwargs)
        except ImportFailure as exc:
            if not exc.constant_inputs:
                raise
            return IrtoolRep(cls, model, kwargs, exc.constant_inputs)

    @classmethod
    def _executor(cls, result: ImportResult, options: Mapping[str, Any]) -> Executor:
        raise NotImplementedError

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        """One node on `inputs` (arrays in the node's input order): a one-node model run once."""
        arrays = [numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v) for v in inputs]
        names = [n for n in node.input if n]
        if len(names) != len(arrays):
            raise DiagnosticError(f"node '{node.name or node.op_type}' reads {len(names)} input(s), {len(arrays)} given")
        graph = helper.make_graph(
            [node], "run_node",
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in zip(names, arrays)],
            [helper.make_empty_tensor_value_info(o) for o in node.output if o])
        opset = int(kwargs.pop("opset_version", newest_opset()))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(node.domain, opset)])
        return cls.run_model(model, arrays, device, **kwargs)


class InterpreterBackend(IrtoolBackend):
    """Runs models with irtool's reference interpreter."""

    @classmethod
    def _executor(cls, result: ImportResult, options: Mapping[str, Any]) -> Executor:
        return lambda feed: run_function(result.module, {**feed, **result.params})


class NativeBackend(IrtoolBackend):
    """Compiles models to native code in `prepare` (weights become constants of the object)."""

    native = True

    @classmethod
    def _executor(cls, result: ImportResult, options: Mapping[str, Any]) -> Executor:
        from irtool.driver import build
        compiled = build(result.module, opt_level=int(options.get("opt_level", 3)),
                         threads=int(options.get("threads", 1)))
        return lambda feed: compiled(**feed)
