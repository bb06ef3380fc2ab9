"""Small ONNX graphs run natively (`irtool.build`) against onnxruntime, for the converter tests
whose operators have their own kernels (one build per graph: put several nodes in one graph)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


def native_matches_onnxruntime(model: object, inputs: Mapping[str, np.ndarray], rtol: float = 1e-5,
                               atol: float = 1e-5) -> None:
    """Import `model` with its weights embedded, compile `main`, and compare every output with
    onnxruntime's on `inputs` (graph inputs by name): same shape, dtype and values."""
    import irtool
    from irtool.frontend.onnx import import_model
    from irtool.frontend.onnx_zoo import onnxruntime_session
    expected = onnxruntime_session(model).run(None, dict(inputs))
    result = import_model(model, embed_params=True)  # type: ignore[arg-type]
    got = irtool.build(result.module)(**{name: inputs[name] for name in result.inputs})
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
