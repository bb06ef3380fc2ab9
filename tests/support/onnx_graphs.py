"""Small ONNX graphs built with `onnx.helper`, and the check every converter test makes: irtool's
import and run against onnxruntime on the same inputs (needs `onnx` and `onnxruntime`)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from irtool.eval.interpreter import run_function
from irtool.frontend.onnx import import_model
from irtool.frontend.onnx_zoo import onnxruntime_session


def build(nodes: list, inputs: dict[str, np.ndarray], inits: dict[str, np.ndarray] | None = None,
          outputs: tuple[str, ...] = ("y",), opset: int = 13) -> onnx.ModelProto:
    """A model of `nodes` whose graph inputs have the arrays' types and shapes."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def check(nodes: list, inputs: dict[str, np.ndarray], inits: dict[str, np.ndarray] | None = None,
          outputs: tuple[str, ...] = ("y",), opset: int = 13, rtol: float = 1e-5, native: bool = False,
          atol: float = 1e-5) -> None:
    """irtool's import + interpreter against onnxruntime, with the weights as parameters and
    embedded; with `native`, also compiled (`irtool.build`)."""
    model = build(nodes, inputs, inits, outputs, opset)
    expected = onnxruntime_session(model).run(None, inputs)
    runs = []
    for embed in (False, True):
        result = import_model(model, embed_params=embed)
        runs.append(run_function(result.module, {**inputs, **result.params}))
    if native:
        import irtool
        runs.append(irtool.build(import_model(model, embed_params=True).module)(**inputs))
    for got in runs:
        got = got if isinstance(got, tuple) else (got,)
        for g, e in zip(got, expected, strict=True):
            assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
