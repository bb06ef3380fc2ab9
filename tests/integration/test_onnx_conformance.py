"""The ONNX conformance node cases (`onnx.backend.test.case.node`, every one the installed onnx
generates) through irtool's ONNX backend.

Each case either matches its expected outputs within the case's rtol/atol (as ONNX's own runner
compares: shape, dtype, then values), or is refused with the importer's clear error; any other
exception or a wrong answer fails. Which of the two is fixed by a rule, so a case that regresses
fails here: every case whose operators all have converters (`model_problems` finds nothing)
passes, except those in `REFUSED`, which must be refused; every other case must be refused.
Operators added later move their cases under the rule. A fixed sample also runs natively.
"""

from __future__ import annotations

import functools
import io
import re
import unittest
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

from irtool.core.diagnostics import DiagnosticError  # noqa: E402
from irtool.frontend.onnx_backend import InterpreterBackend, IrtoolBackend, NativeBackend, model_problems  # noqa: E402

_NARROW = ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")
# Cases irtool refuses although every operator in them has a converter, by reason.
REFUSED: dict[str, set[str]] = {
    "casts to element types irtool does not compute with (float8, float4, int4, int2, bfloat16)": {
        *(f"test_cast_{src}_to_{dst}" for src in ("FLOAT", "FLOAT16")
          for dst in (*_NARROW, "FLOAT4E2M1", "INT4", "UINT4", "INT2", "UINT2")),
        *(f"test_cast_no_saturate_{src}_to_{dst}" for src in ("FLOAT", "FLOAT16") for dst in _NARROW),
        "test_cast_FLOAT_to_BFLOAT16", "test_cast_e8m0_FLOAT_to_FLOAT8E8M0", "test_cast_e8m0_FLOAT16_to_FLOAT8E8M0"},
    "training-mode dropout with a non-zero ratio (random)": {
        f"test_training_dropout{s}" for s in ("", "_default", "_default_mask", "_mask")},
    "a Loop's trip count, or shapes inside If branches, computed from graph inputs at run time": {
        "test_affine_grid_2d_expanded", "test_affine_grid_2d_align_corners_expanded",
        "test_affine_grid_3d_align_corners_expanded",
        "test_range_float_type_positive_delta_expanded", "test_range_float16_type_positive_delta_expanded"},
}
REASON = {name: reason for reason, names in REFUSED.items() for name in names}

# Natively (each compiles in about 0.2 s): every converter family, the ceil-mode pooling and
# Round fixes, zero-element tensors, inputs bound as constants (also through computations on
# them), float16/float64 casts.
NATIVE_SAMPLE = (
    "test_basic_conv_with_padding", "test_conv_with_strides_and_asymmetric_padding", "test_conv_with_autopad_same",
    "test_convtranspose", "test_convtranspose_1d", "test_convtranspose_output_shape",
    "test_maxpool_2d_ceil_output_size_reduce_by_one", "test_averagepool_2d_ceil_last_window_starts_on_pad",
    "test_maxpool_2d_pads", "test_averagepool_2d_pads_count_include_pad", "test_maxpool_3d_default",
    "test_globalaveragepool", "test_gemm_all_attributes", "test_matmul_4d", "test_softmax_axis_1",
    "test_logsoftmax_large_number", "test_reduce_sum_keepdims_example", "test_reduce_sum_empty_set",
    "test_argmax_keepdims_example", "test_round", "test_pow_types_int32_float32", "test_clip",
    "test_where_example", "test_cast_DOUBLE_to_FLOAT16", "test_cast_FLOAT16_to_DOUBLE", "test_erf",
    "test_selu_default", "test_prelu_broadcast", "test_reshape_allowzero_reordered",
    "test_slice_start_out_of_bounds", "test_slice_neg_steps", "test_split_zero_size_splits_opset18",
    "test_split_1d_uneven_split_opset18", "test_tile", "test_reflect_pad", "test_gather_negative_indices",
    "test_unsqueeze_three_axes", "test_constantofshape_int_shape_zero", "test_dropout_default_mask",
    "test_batchnorm_epsilon", "test_instancenorm_example", "test_castlike_FLOAT_to_DOUBLE_expanded",
    "test_batchnorm_example_training_mode", "test_col2im_5d", "test_det_nd", "test_hannwindow_symmetric",
    "test_center_crop_pad_crop_axes_chw_expanded", "test_compress_negative_axis", "test_tensorscatter_circular",
    "test_maxpool_with_argmax_2d_precomputed_strides", "test_maxunpool_export_with_output_shape", "test_wrap_pad",
    "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True",
    "test_lstm_with_peepholes", "test_gru_bidirectional", "test_simple_rnn_batchwise", "test_scan9_multi_state",
    "test_if", "test_loop11",
    "test_attention_4d_causal_fp16",  # a float16 softmax rounds as the interpreter does
    # Data-dependent extents, counted at run time: the conditions are graph inputs.
    "test_nonzero_example", "test_unique_sorted_without_axis", "test_unique_not_sorted_without_axis",
    "test_unique_sorted_with_axis", "test_unique_sorted_with_axis_3d", "test_unique_sorted_with_negative_axis",
    "test_unique_length_1", "test_compress_0", "test_compress_1", "test_compress_default_axis",
)
_REFUSAL = re.compile(r"cannot import the model")


@functools.cache
def _cases() -> dict[str, object]:
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():  # generating the cast cases overflows on purpose
        warnings.simplefilter("ignore")
        return {case.name: case for case in collect_testcases(None)}


@pytest.fixture(scope="module")
def cases() -> dict[str, object]:
    return _cases()


def _array(value: object) -> np.ndarray:
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def outcome(backend: type[IrtoolBackend], case: object) -> str | None:
    """None when every data set matches; the refusal's message when irtool refuses the case.
    A wrong answer fails an assertion; any other exception propagates."""
    try:
        rep = backend.prepare(case.model)  # type: ignore[attr-defined]
        for inputs, expected in case.data_sets:  # type: ignore[attr-defined]
            got = rep.run([_array(v) for v in inputs])
            assert len(got) == len(expected)
            for k, (ours, want) in enumerate(zip(got, expected)):
                want = _array(want)
                assert ours.shape == want.shape, f"output {k}: shape {ours.shape}, expected {want.shape}"
                assert ours.dtype == want.dtype, f"output {k}: dtype {ours.dtype}, expected {want.dtype}"
                np.testing.assert_allclose(ours, want, rtol=case.rtol, atol=case.atol,  # type: ignore[attr-defined]
                                           err_msg=f"output {k}")
    except DiagnosticError as exc:
        assert _REFUSAL.search(str(exc)), f"not a refusal: {exc}"
        return str(exc)
    return None


@pytest.mark.parametrize("name", sorted(_cases()))
def test_interpreter_passes_or_refuses(name: str, cases: dict[str, object]) -> None:
    case = cases[name]
    refused = outcome(InterpreterBackend, case)
    covered = not model_problems(case.model)  # type: ignore[attr-defined]
    if covered and name not in REASON:
        assert refused is None, f"refused: {refused}"
    else:
        assert refused is not None, ("passes now: take it out of REFUSED" if covered else
                                     "irtool imports it although an operator has no converter")
        assert "unsupported" in refused or "graph input" in refused


def test_refusal_table_names_existing_covered_cases(cases: dict[str, object]) -> None:
    assert set(REASON) <= set(cases)
    assert not [n for n in REASON if model_problems(cases[n].model)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", NATIVE_SAMPLE)
def test_native_sample_passes(name: str, cases: dict[str, object]) -> None:
    assert outcome(NativeBackend, cases[name]) is None


def test_onnx_runner_drives_the_backend() -> None:
    """ONNX's own runner (`onnx.backend.test.BackendTest`) with its comparisons, on a few cases."""
    import onnx.backend.test
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = onnx.backend.test.BackendTest(InterpreterBackend, __name__)
        runner.include(r"^test_(relu|round|slice|maxpool_2d_ceil|reduce_sum_keepdims_example)_cpu$")
        suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(cls)
                                   for cls in runner.test_cases.values())
    result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)
    assert result.wasSuccessful(), result.failures + result.errors
    assert result.testsRun - len(result.skipped) == 5
