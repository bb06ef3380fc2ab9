"""irtool.frontend.onnx_checks: the field checks against what `onnx.helper` itself writes, and
the element types they let through (the one table, irtool/frontend/onnx_dtypes.py)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from irtool.frontend.onnx_checks import check_tensor, tensor_array  # noqa: E402
from irtool.frontend.onnx_dtypes import dtype_of, onnx_type_name  # noqa: E402
from irtool.frontend.onnx_values import Unsupported  # noqa: E402

# What docs/onnx.md says irtool imports, spelled out here independently of the table.
IMPORTED = {TensorProto.BOOL: "bool", TensorProto.INT8: "int8", TensorProto.INT16: "int16",
            TensorProto.INT32: "int32", TensorProto.INT64: "int64", TensorProto.UINT8: "uint8",
            TensorProto.UINT16: "uint16", TensorProto.UINT32: "uint32", TensorProto.UINT64: "uint64",
            TensorProto.FLOAT16: "float16", TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64"}


def test_the_element_type_table_imports_exactly_the_documented_types() -> None:
    """Every element type onnx defines: the twelve above map to their dtype, every other one
    (bfloat16, the 8-, 4- and 2-bit types, strings, complex, undefined) to None, so refused."""
    for elem_type in TensorProto.DataType.values():
        assert dtype_of(elem_type) == IMPORTED.get(elem_type), onnx_type_name(elem_type)
    assert dtype_of(TensorProto.BFLOAT16) is None


def test_a_tensor_of_a_refused_element_type_is_named() -> None:
    for elem_type in (TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN, TensorProto.UNDEFINED):
        name = onnx_type_name(elem_type)
        with pytest.raises(Unsupported, match=rf"^initializer 't' of element type {name}$"):
            check_tensor(TensorProto(name="t", data_type=elem_type, dims=[2], raw_data=bytes(2)), "initializer 't'")


@pytest.mark.parametrize("elem_type", sorted(IMPORTED), ids=onnx_type_name)
def test_every_imported_element_type_is_read_from_raw_and_typed_fields(elem_type: int) -> None:
    """`helper.make_tensor` stores values where the specification puts them; the check must find
    exactly the shape's count there, and one value less or more is an error."""
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    values = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
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
    with pytest.raises(Unsupported, match="holds 0 values in int64_data, but its shape \\(\\) of int64 needs 1"):
        check_tensor(TensorProto(name="s", data_type=TensorProto.INT64), "initializer 's'")


def test_external_data_that_was_not_loaded_is_named() -> None:
    tensor = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    tensor.data_location = TensorProto.EXTERNAL
    with pytest.raises(Unsupported, match="initializer 'w' keeps its data in an external file"):
        check_tensor(tensor, "initializer 'w'")
