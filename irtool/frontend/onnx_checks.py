"""Checks of an ONNX protobuf's fields before anything is converted.

A protobuf holds whatever its writer put there: a negative dimension, 12 bytes of `raw_data` for
a 2x2 float tensor, `kernel_shape` as a string, a `Conv` without its weight, a string tensor.
The converters assume the fields mean what the ONNX specification says, so the importer checks
each one first against the specification (the operator schemas `onnx.defs` ships, per opset) and
refuses a model with a message naming the graph input, initializer or node: the ONNX checker's
rules, applied where the importer reads the field. Each check raises `Unsupported`; the importer
reports all of them together.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

import numpy as np

from irtool.frontend.onnx_dtypes import onnx_type_name, tensor_dtype
from irtool.frontend.onnx_values import Unsupported

if TYPE_CHECKING:
    import onnx

# The TensorProto field holding the values of each element type when there is no `raw_data`.
_VALUE_FIELD = {1: "float_data", 11: "double_data", 7: "int64_data", 12: "uint64_data", 13: "uint64_data"}


def non_text_field(model: onnx.ModelProto) -> str | None:
    """The first name the importer reads that is not text, described (protobuf hands a string
    field that is not valid UTF-8 over as bytes); None when all are. The nodes of model-local
    functions count: they are inlined into the graph."""
    g = model.graph
    fields: list[tuple[str, object]] = [("an opset domain", o.domain) for o in model.opset_import]
    fields += [("a graph input name", i.name) for i in g.input]
    fields += [("a graph output name", o.name) for o in g.output]
    fields += [("an initializer name", t.name) for t in g.initializer]
    for node in [*g.node, *(n for f in model.functions for n in f.node)]:
        fields += [("a node name", node.name), ("an op type", node.op_type), ("a node domain", node.domain)]
        fields += [("a node input name", name) for name in node.input]
        fields += [("a node output name", name) for name in node.output]
        fields += [("an attribute name", a.name) for a in node.attribute]
    for what, value in fields:
        if not isinstance(value, str):
            return f"{what} is not UTF-8 text ({value!r})"
    return None


def check_dims(dims: list[int], what: str) -> None:
    negative = [d for d in dims if d < 0]
    if negative:
        raise Unsupported(f"{what} has a negative dimension {negative[0]} (shape {tuple(dims)})")


def check_tensor(tensor: onnx.TensorProto, what: str) -> None:
    """A tensor's element type, dimensions and data agree: exactly as many values (or bytes)
    as its shape needs, stored where its element type keeps them."""
    from onnx import TensorProto
    dtype = tensor_dtype(tensor.data_type, what)
    dims = list(tensor.dims)
    check_dims(dims, what)
    if tensor.data_location == TensorProto.EXTERNAL:
        raise Unsupported(f"{what} keeps its data in an external file that was not loaded")
    count = int(np.prod(dims, dtype=object)) if dims else 1
    shape = f"shape {tuple(dims)} of {onnx_type_name(tensor.data_type)}"
    if tensor.HasField("raw_data"):
        need = count * np.dtype(dtype).itemsize
        if len(tensor.raw_data) != need:
            raise Unsupported(f"{what} has {len(tensor.raw_data)} bytes of raw_data, but its {shape} needs {need}")
        return
    field = _VALUE_FIELD.get(tensor.data_type, "int32_data")
    held = len(getattr(tensor, field))
    if held != count:
        raise Unsupported(f"{what} holds {held} values in {field}, but its {shape} needs {count}")


def tensor_array(tensor: onnx.TensorProto, what: str) -> np.ndarray:
    """A checked tensor's contents as a numpy array."""
    from onnx import numpy_helper
    check_tensor(tensor, what)
    return np.asarray(numpy_helper.to_array(tensor))


def input_dims(info: onnx.ValueInfoProto) -> list[int | None]:
    """A graph input's dimensions (None for a symbolic one), the static ones checked."""
    dims = [int(d.dim_value) if d.WhichOneof("value") == "dim_value" else None
            for d in info.type.tensor_type.shape.dim]
    check_dims([d for d in dims if d is not None], f"graph input '{info.name}'")
    return dims


@functools.lru_cache(maxsize=None)
def _schema(op_type: str, opset: int) -> onnx.defs.OpSchema | None:
    from onnx import defs
    try:
        return defs.get_schema(op_type, opset, "")
    except defs.SchemaError:
        return None


def check_node(node: onnx.NodeProto, opset: int) -> None:
    """A node's inputs and attributes against its operator's schema at `opset` (when onnx knows
    one): input counts, required inputs present, attribute names and types, required attributes,
    and the tensors inside attributes."""
    import onnx
    schema = _schema(node.op_type, opset)
    for a in node.attribute:
        kind = onnx.AttributeProto.AttributeType
        if a.type not in kind.values():
            raise Unsupported(f"attribute '{a.name}' has no valid type")
        if schema is not None:
            spec = schema.attributes.get(a.name)
            if spec is None:
                raise Unsupported(f"'{a.name}' is not an attribute of {node.op_type}")  # at the opset the message names
            if a.type != spec.type.value:
                raise Unsupported(f"attribute '{a.name}' must be {kind.Name(spec.type.value)}, "
                                  f"not {kind.Name(a.type)}")
        if a.type == onnx.AttributeProto.TENSOR:
            check_tensor(a.t, f"attribute '{a.name}'")
        elif a.type == onnx.AttributeProto.TENSORS:
            for t in a.tensors:
                check_tensor(t, f"attribute '{a.name}'")
        elif a.type in (onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.SPARSE_TENSORS):
            raise Unsupported(f"attribute '{a.name}' is a sparse tensor, which irtool does not import")
    if schema is None:
        return
    given = {a.name for a in node.attribute}
    missing = [name for name, spec in schema.attributes.items() if spec.required and name not in given]
    if missing:
        raise Unsupported(f"the required attribute '{missing[0]}' is missing")
    if not schema.min_input <= len(node.input) <= schema.max_input:
        raise Unsupported(f"{len(node.input)} inputs given, but {node.op_type} takes "
                          f"{_count(schema.min_input, schema.max_input)}")
    if not schema.min_output <= len(node.output) <= schema.max_output:
        raise Unsupported(f"{len(node.output)} outputs given, but {node.op_type} has "
                          f"{_count(schema.min_output, schema.max_output)}")
    single = onnx.defs.OpSchema.FormalParameterOption.Single
    for i, (name, formal) in enumerate(zip(node.input, schema.inputs)):
        if not name and formal.option == single:
            raise Unsupported(f"input {i} ({formal.name}) is required, but its name is empty")


def _count(low: int, high: int) -> str:
    if low == high:
        return str(low)
    return f"at least {low}" if high >= 2 ** 31 - 1 else f"{low} to {high}"


# One complaint of ONNX's shape inference: `(op_type:Conv, node name: conv): [ShapeInferenceError] ...`.
_COMPLAINT = re.compile(r"\(op_type:([^,]*), node name: ([^)]*)\): \[(\w+)\] (.*?)(?=\n\(op_type:|\Z)", re.S)


def shape_inference_complaint(model: onnx.ModelProto, node: onnx.NodeProto) -> str | None:
    """Why ONNX's strict type and shape inference finds the model invalid, when it does: its
    complaint about `node` if it has one, else its first. None for a model it accepts.

    Asked only once a converter has failed on a node in an unexpected way: a model the
    specification rejects is refused with the reason; for one it accepts, the failure is a bug.
    """
    from onnx import shape_inference
    try:
        shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except shape_inference.InferenceError as exc:
        found = [(op, name, text.strip()) for op, name, _, text in _COMPLAINT.findall(str(exc))]
        if not found:
            return f"ONNX shape inference rejects the model: {str(exc).strip()}"
        mine = [f for f in found if f[0] == node.op_type and f[1] == node.name]
        op, name, text = (mine or found)[0]
        where = "" if mine else f" (at node '{name}' ({op}))"
        return f"ONNX shape inference rejects the model{where}: {text}"
    return None
