"""Resize, Upsample and GridSample.

The resized axes become the spatial axes of `image.resize1d/2d/3d`: directly when they are the
trailing axes of an (N, C, ...) tensor, otherwise the other axes are moved to the front and
merged into one batch axis (a channel axis of 1 added), so any one to three axes resize.
ONNX's `scales` stay the coordinate mapping's factors even where the rounded-down output size
differs from input × scale.
"""

from __future__ import annotations

import math

import numpy as np

from irtool.frontend.onnx_ops.common import converter, int_list, norm_axis, required, reshaped, transposed
from irtool.frontend.onnx_values import Builder, Node, Unsupported, Value

_OPS = {1: ("image.resize1d", "NCW"), 2: ("image.resize2d", "NCHW"), 3: ("image.resize3d", "NCDHW")}
_NEAREST = {"round_prefer_floor": "round_prefer_floor", "round_prefer_ceil": "round_prefer_ceil",
            "floor": "floor", "ceil": "ceil"}


def _floats(b: Builder, v: Value | None, what: str) -> list[float] | None:
    """An optional float input; a missing or empty tensor is None."""
    if v is None or (v.const is None and math.prod(v.shape) == 0):
        return None
    return [float(f) for f in np.asarray(b.static(v, what)).reshape(-1)] or None


def resize(b: Builder, x: Value, sizes: list[int], scales: list[float], roi: list[float] | None,
           **attrs: object) -> Value:
    """x resampled to `sizes` (one entry per axis of x) with per-axis `scales`."""
    resized = [a for a in range(x.ndim) if sizes[a] != x.shape[a] or scales[a] != 1.0 or (
        roi is not None and (roi[a], roi[x.ndim + a]) != (0.0, 1.0))]
    if not resized:
        return x
    if len(resized) > 3:
        raise Unsupported(f"resizing {len(resized)} axes (irtool resizes 1 to 3)")
    if not all(x.shape[a] > 0 for a in resized):
        raise Unsupported(f"resizing an empty axis of {x.shape}")
    kept = [a for a in range(x.ndim) if a not in resized]
    op, layout = _OPS[len(resized)]
    direct = x.ndim == len(resized) + 2 and kept == [0, 1]
    src = x if direct else reshaped(b, transposed(b, x, kept + resized),
                                    (math.prod(x.shape[a] for a in kept), 1) + tuple(x.shape[a] for a in resized))
    out_sizes = tuple(sizes[a] for a in resized)
    given = tuple(scales[a] for a in resized)
    extra: dict[str, object] = {}
    if any(s != n / x.shape[a] for s, n, a in zip(given, out_sizes, resized)):
        extra["scales"] = given
    if roi is not None:
        extra["roi"] = tuple(roi[a] for a in resized) + tuple(roi[x.ndim + a] for a in resized)
    out = b.call(op, [src], size=out_sizes, layout=layout, **attrs, **extra)
    if direct:
        return out
    out = reshaped(b, out, tuple(x.shape[a] for a in kept) + out_sizes)
    order = kept + resized
    return transposed(b, out, [order.index(a) for a in range(x.ndim)])


def _output_sizes(node: Node, x: Value, axes: list[int], sizes: list[int] | None,
                  scales: list[float] | None) -> tuple[list[int], list[float]]:
    """Per axis of x: output size and scale factor (sizes win; keep_aspect_ratio_policy applies)."""
    out, factors = list(x.shape), [1.0] * x.ndim
    if sizes is not None:
        if len(sizes) != len(axes):
            raise Unsupported(f"sizes {sizes} for axes {axes}")
        policy = str(node.attr("keep_aspect_ratio_policy", "stretch"))
        ratios = [n / x.shape[a] for n, a in zip(sizes, axes)]
        if policy in ("not_larger", "not_smaller"):
            common = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                out[a], factors[a] = int(common * x.shape[a] + 0.5), common
        elif policy == "stretch":
            for a, n, r in zip(axes, sizes, ratios):
                out[a], factors[a] = n, r
        else:
            raise Unsupported(f"keep_aspect_ratio_policy {policy!r}")
    elif scales is not None:
        if len(scales) != len(axes) or any(s <= 0 for s in scales):
            raise Unsupported(f"scales {scales} for axes {axes}")
        for a, s in zip(axes, scales):
            out[a], factors[a] = int(math.floor(x.shape[a] * s)), s
    else:
        raise Unsupported("neither scales nor sizes is given")
    if any(n <= 0 for n in out):
        raise Unsupported(f"an empty output of shape {tuple(out)}")
    return out, factors


def _legacy_nearest(factors: list[float]) -> str:
    """Before opset 11 nearest truncates when upsampling and rounds up when downsampling."""
    kinds = {"floor" if f >= 1 else "ceil" for f in factors if f != 1.0}
    if len(kinds) > 1:
        raise Unsupported("nearest resizing that upsamples some axes and downsamples others (opset < 11)")
    return kinds.pop() if kinds else "floor"


@converter("Resize")
def _resize(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "X")
    if not x.dtype.startswith("float"):
        raise Unsupported(f"resizing a {x.dtype} tensor (irtool resizes floating-point data)")
    mode = str(node.attr("mode", "nearest"))
    if mode not in ("nearest", "linear", "cubic"):
        raise Unsupported(f"mode {mode!r}")
    axes = [norm_axis(a, x.ndim) for a in int_list(node.attr("axes"))] or list(range(x.ndim))
    if b.opset < 11:
        sizes, scales, roi = None, _floats(b, node.input(1), "scales"), None
        coordinates = "asymmetric"
    else:
        roi = _floats(b, node.input(1), "roi")
        scales = _floats(b, node.input(2), "scales")
        sizes_in = node.input(3)
        sizes = int_list(b.static(sizes_in, "sizes")) if sizes_in is not None else None
        coordinates = str(node.attr("coordinate_transformation_mode", "half_pixel"))
    out, factors = _output_sizes(node, x, axes, sizes, scales)
    full_roi = None
    if coordinates == "tf_crop_and_resize":
        if roi is None or len(roi) != 2 * len(axes):
            raise Unsupported(f"tf_crop_and_resize needs an roi of {2 * len(axes)} values, got {roi}")
        full_roi = [0.0] * x.ndim + [1.0] * x.ndim
        for i, a in enumerate(axes):
            full_roi[a], full_roi[x.ndim + a] = roi[i], roi[len(axes) + i]
    attrs: dict[str, object] = dict(method="nearest_neighbor" if mode == "nearest" else mode,
                                    coordinate_transformation_mode=coordinates)
    if mode == "nearest":
        nearest = str(node.attr("nearest_mode", "round_prefer_floor")) if b.opset >= 11 else None
        if nearest is not None and nearest not in _NEAREST:
            raise Unsupported(f"nearest_mode {nearest!r}")
        attrs["rounding_method"] = _NEAREST[nearest] if nearest is not None else _legacy_nearest(factors)
    if mode == "cubic":
        attrs["cubic_alpha"] = float(node.attr("cubic_coeff_a", -0.75))  # type: ignore[arg-type]
        attrs["cubic_exclude"] = bool(node.attr("exclude_outside", 0))
    if coordinates == "tf_crop_and_resize":
        attrs["extrapolation_value"] = float(node.attr("extrapolation_value", 0.0))  # type: ignore[arg-type]
    if int(node.attr("antialias", 0)) and mode != "nearest":
        attrs["antialias"] = True
    return [resize(b, x, out, factors, full_roi, **attrs)]


@converter("Upsample")
def _upsample(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "X")
    if not x.dtype.startswith("float"):
        raise Unsupported(f"resizing a {x.dtype} tensor (irtool resizes floating-point data)")
    scales = _floats(b, node.input(1), "scales") if b.opset >= 9 else [float(s) for s in node.attr("scales", [])]  # type: ignore[union-attr]
    mode = str(node.attr("mode", "nearest"))
    if mode not in ("nearest", "linear", "bilinear"):
        raise Unsupported(f"mode {mode!r}")
    out, factors = _output_sizes(node, x, list(range(x.ndim)), None, scales)
    attrs: dict[str, object] = dict(coordinate_transformation_mode="asymmetric",
                                    method="nearest_neighbor" if mode == "nearest" else "linear")
    if mode == "nearest":
        attrs["rounding_method"] = _legacy_nearest(factors)
    return [resize(b, x, out, factors, None, **attrs)]


@converter("GridSample")
def _grid_sample(b: Builder, node: Node) -> list[Value | None]:
    x, grid = required(node, 0, "X"), required(node, 1, "grid")
    dims = x.ndim - 2
    if dims not in (2, 3) or grid.ndim != x.ndim or grid.shape[-1] != dims:
        raise Unsupported(f"sampling a rank-{x.ndim} input with a grid of shape {grid.shape} (irtool: 2-d, 3-d)")
    mode = str(node.attr("mode", "linear" if b.opset >= 20 else "bilinear"))
    method = {"linear": "bilinear", "bilinear": "bilinear", "cubic": "bicubic", "bicubic": "bicubic",
              "nearest": "nearest"}.get(mode)
    if method is None or (method == "bicubic" and dims == 3):
        raise Unsupported(f"mode {mode!r} for {dims}-d sampling")
    channels_first = transposed(b, grid, [0, grid.ndim - 1] + list(range(1, grid.ndim - 1)))
    return [b.call("image.grid_sample", [x, channels_first], method=method, layout="NCHW" if dims == 2 else "NCDHW",
                   padding_mode=str(node.attr("padding_mode", "zeros")),
                   align_corners=bool(node.attr("align_corners", 0)))]
