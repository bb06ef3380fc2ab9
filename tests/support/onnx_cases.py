"""ONNX models as oracles: the conformance node cases (`onnx.backend.test.case.node`, with the
outputs the ONNX reference computed), onnxruntime on small `onnx.helper` graphs, and running
either through irtool's interpreter or native code."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np


def node_cases(*modules: str) -> dict[str, Any]:
    """The node cases by name that the named generator modules of `onnx.backend.test.case.node`
    make (`attention`, `quantizelinear`, ...; a module makes its cases when first imported), or
    every case when none is named (about 5 s)."""
    import onnx.backend.test.case.node as generators
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the generators cast out-of-range values on purpose
        if not modules:
            return {c.name: c for c in generators.collect_testcases(None)}
        for module in modules:
            importlib.import_module(f"{generators.__name__}.{module}")
    return {c.name: c for c in generators._NodeTestCases}  # what the imported generators made


def run_irtool(model: Any, inputs: Sequence[np.ndarray], native: bool = False) -> list[np.ndarray]:
    """The model's outputs from irtool's interpreter or native code (weights embedded)."""
    import irtool
    from irtool.eval.interpreter import run_function
    from irtool.frontend.onnx import import_model
    module = import_model(model, embed_params=True).module
    got = irtool.build(module)(*inputs) if native else run_function(module, list(inputs))
    return list(got) if isinstance(got, tuple) else [got]


def assert_outputs(got: Sequence[np.ndarray], want: Sequence[np.ndarray], rtol: float, atol: float) -> None:
    """Equal shapes and dtypes; floats within the tolerances (NaN where NaN), others exactly."""
    from onnx import numpy_helper
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        w = numpy_helper.to_array(w) if hasattr(w, "data_type") else np.asarray(w)   # a TensorProto
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind == "f" or w.dtype.name == "bfloat16":
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)


def check_node_case(case: Any, native: bool = False) -> None:
    """irtool reproduces the node case's expected outputs, within its tolerances."""
    for inputs, outputs in case.data_sets:
        assert_outputs(run_irtool(case.model, inputs, native), outputs, case.rtol, case.atol)


def node_case_failures(cases: dict[str, Any], names: Sequence[str]) -> list[str]:
    """One line per named case the interpreter does not reproduce; every case runs, so one
    failure does not hide the others."""
    failures = []
    for name in names:
        try:
            check_node_case(cases[name])
        except AssertionError as exc:
            failures.append(f"{name}: {str(exc)[:200]}")
    return failures


def onnxruntime_outputs(model: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    from irtool.frontend.onnx_zoo import onnxruntime_session
    session = onnxruntime_session(model)
    return session.run(None, {i.name: x for i, x in zip(session.get_inputs(), inputs)})


def reference_outputs(model: Any, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The ONNX reference evaluator's outputs: the oracle for uint8 x int8 products. onnxruntime
    is not one on hosts without VNNI: its AVX2 u8s8 kernels add byte products pairwise in
    saturating 16 bits (`pmaddubsw`), so a QLinearMatMul there can be 20+ steps off the exact
    result (seen on a Zen 3 host), while VNNI hosts agree with the reference."""
    from onnx.reference import ReferenceEvaluator
    from onnx.version_converter import convert_version
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    # The evaluator implements DequantizeLinear from opset 19 on; the later versions only add types.
    return ReferenceEvaluator(convert_version(model, 21) if opset < 19 else model).run(None, inputs)
