"""The model-zoo graphs the `onnx` package ships, and the inputs its test runner feeds them.

Shared by the integration tests and `benchmarks/models.py`. The light models' weights are all
equal (ConstantOfShape), so every softmax output is uniform and says little; their pre-softmax
logits (exposed as an extra graph output by `with_logits_output`) are the stronger check.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

LIGHT_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                "shufflenet", "squeezenet", "vgg19", "zfnet512")
# rtol of the ONNX test runner (data/real/test_<m>/data.json).
RUNNER_RTOL = {"densenet121": 2e-3}
RUNNER_ATOL = 1e-7


def onnx_data_dir() -> Path:
    import onnx
    return Path(onnx.__file__).parent / "backend" / "test" / "data"


def light_model_path(name: str) -> Path:
    return onnx_data_dir() / "light" / f"light_{name}.onnx"


def light_reference_output(name: str) -> np.ndarray:
    return read_tensor(onnx_data_dir() / "light" / f"light_{name}_output_0.pb")


def read_tensor(path: Path) -> np.ndarray:
    import onnx
    from onnx import numpy_helper
    return np.asarray(numpy_helper.to_array(onnx.load_tensor(str(path))))


def runner_input(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    """What `onnx.backend.test.runner` feeds a light model: the ramp `arange(n)/n` in its shape."""
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(dtype)


def with_logits_output(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str | None]:
    """A copy of `model` that also outputs the input of its final Softmax (None if it has none)."""
    import onnx
    from onnx import helper
    out = onnx.ModelProto()
    out.CopyFrom(model)
    final = {o.name for o in out.graph.output}
    for node in out.graph.node:
        if node.op_type == "Softmax" and node.output[0] in final:
            logits = node.input[0]
            out.graph.output.append(helper.make_empty_tensor_value_info(logits))
            return out, logits
    return out, None


def onnxruntime_session(model: onnx.ModelProto, threads: int = 1) -> object:
    """A one-thread CPU onnxruntime session (the benchmark's and the tests' second reference)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |a − e| / max |e|: the measure for logits of magnitude 1e9 and more."""
    scale = float(np.max(np.abs(expected.astype(np.float64))))
    diff = float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))
    return diff / scale if scale else diff
