"""Model importers: ONNX graphs to Relay modules (`irtool.frontend.onnx`)."""

from irtool.frontend.onnx import ImportResult, import_file, import_model, load_onnx

__all__ = ["ImportResult", "import_file", "import_model", "load_onnx"]
