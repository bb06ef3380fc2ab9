"""irtool.frontend.onnx_checks: the field checks against what `onnx.helper` itself writes."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from irtool.frontend.onnx_checks import ELEM_DTYPES, check_tensor, elem_type_name, tensor_array  # noqa: E402
from irtool.frontend.onnx_values import Unsupported  # noqa: E402


@pytest.mark.parametrize("elem_type", sorted(ELEM_DTYPES), ids=elem_type_name)
def test_every_imported_element_type_is_read_from_raw_and_typed_fields(elem_type: int) -> None:
    """`helper.make_tensor` stores values where the specification puts them; the check must find
    exactly the shape's count there, and one value less or more is an error."""
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    values = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    assert ELEM_DTYPES[elem_type] == ("bool" if dtype == np.bool_ else str(dtype))
    for tensor in (numpy_helper.from_array(values, "t"), helper.make_tensor("t", elem_type, [2, 3], values.ravel())):
        np.testing.assert_array_equal(tensor_array(tensor, "initializer 't'"), values)
    typed = helper.make_tensor("t", elem_type, [2, 3], values.ravel())
    typed.dims[1] = 4   # now 8 values are needed, 6 are held
    with pytest.raises(Unsupported, match=r"initializer 't' holds 6 values in \w+_data, but its shape \(2, 4\)"):
        check_tensor(typed, "initializer 't'")
    raw = numpy_helper.from_array(values, "t")
    raw.raw_data = raw.raw_data + b"\x00"
    with pytest.raises(Unsupported, match=rf"has {6 * dtype.itemsize + 1} bytes of raw_data, but .* needs "
                                          rf"{6 * dtype.itemsize}"):
        check_tensor(raw, "initializer 't'")


def test_empty_and_scalar_tensors_are_consistent() -> None:
    assert tensor_array(numpy_helper.from_array(np.zeros((0, 3), np.float32), "e"), "e").shape == (0, 3)
    assert tensor_array(helper.make_tensor("s", TensorProto.INT64, [], [7]), "s") == 7
    with pytest.raises(Unsupported, match="holds 0 values in int64_data, but its shape \\(\\) of INT64 needs 1"):
        check_tensor(TensorProto(name="s", data_type=TensorProto.INT64), "initializer 's'")


def test_external_data_that_was_not_loaded_is_named() -> None:
    tensor = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    tensor.data_location = TensorProto.EXTERNAL
    with pytest.raises(Unsupported, match="initializer 'w' keeps its data in an external file"):
        check_tensor(tensor, "initializer 'w'")
