"""Reading the `#[metadata]` section: one JSON object `{kind: [entries]}` (docs/architecture.md).

`relay.Constant` entries become numpy arrays (`data` as a flat row-major list, with "nan",
"inf", "-inf" strings for non-finite floats, or `base64` little-endian bytes); entries of other
kinds (`VirtualDevice`, ...) are kept as they are so the module can print them back.
"""

from __future__ import annotations

import base64
import binascii
import json

import numpy as np

from irtool.ir.types import parse_dtype

CONSTANT_KIND = "relay.Constant"
_NON_FINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


class MetadataError(ValueError):
    """The section is not valid; the parser locates the message at `#[metadata]`."""


def parse_metadata_json(text: str) -> dict[str, list[object]]:
    """The table in a `#[metadata]` section (the text after the marker)."""
    try:
        table = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MetadataError(f"the metadata section is not valid JSON: {exc}") from None
    if not isinstance(table, dict) or not all(isinstance(v, list) for v in table.values()):
        raise MetadataError("the metadata section must be a JSON object mapping kinds to lists of entries")
    return table


def constant_array(entry: object) -> np.ndarray:
    """The array a `relay.Constant` metadata entry describes (an ndarray entry is taken as is)."""
    if isinstance(entry, np.ndarray):
        return entry
    if not isinstance(entry, dict):
        raise MetadataError("a relay.Constant entry must be an object with dtype, shape and data")
    dtype_name = entry.get("dtype")
    shape = entry.get("shape")
    dtype = parse_dtype(dtype_name) if isinstance(dtype_name, str) else None
    if dtype is None or "x" in dtype or dtype.startswith("bfloat"):
        raise MetadataError(f"unsupported constant dtype {dtype_name!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise MetadataError("a constant's shape must be a list of non-negative integers")
    np_dtype = np.dtype("bool" if dtype == "bool" else dtype)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    try:
        if "base64" in entry:
            raw = base64.b64decode(entry["base64"], validate=True)
            flat = np.frombuffer(raw, dtype=np_dtype.newbyteorder("<")).astype(np_dtype)
        elif isinstance(entry.get("data"), list):
            values = [_NON_FINITE.get(v, v) if isinstance(v, str) else v for v in entry["data"]]
            flat = np.array(values, dtype=np_dtype)
        else:
            raise MetadataError("a relay.Constant entry needs `data` (a list) or `base64`")
    except (TypeError, ValueError, OverflowError, binascii.Error) as exc:
        if isinstance(exc, MetadataError):
            raise
        raise MetadataError(f"bad constant data: {exc}") from None
    if flat.ndim != 1 or flat.size != count:
        raise MetadataError(f"constant data has {flat.size} elements, shape {shape} needs {count}")
    return flat.reshape(shape)
