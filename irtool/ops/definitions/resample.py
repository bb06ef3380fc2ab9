"""Resampling: `image.resize1d/2d/3d` (nearest, linear, cubic; ONNX's coordinate transformations,
rounding methods, antialiasing) and `image.grid_sample`, with TVM's names and attributes.

Resizing is separable: each spatial axis maps an output position to a source coordinate and a
few weighted taps of input positions (`axis_taps`), and the result is the weighted sum over the
taps of every axis. The reference computes coordinates and weights in float64, as ONNX's
reference does; the two attributes TVM lacks are `scales` (ONNX's scale factors, which set the
coordinate mapping when `size` is their rounded-down result) and `antialias`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from irtool.ir.expr import AttrValue
from irtool.ir.types import TensorType, Type
from irtool.ops.attrs import lengths, one_of
from irtool.ops.definitions._common import as_array, check_domain, is_known, tensor_arg
from irtool.ops.registry import AttrField, OpDef, OpPattern, TypeRelError, Value, register

Attrs = Mapping[str, AttrValue]

METHODS = ("nearest_neighbor", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn",
                    "tf_crop_and_resize", "half_pixel_symmetric")
ROUNDING_METHODS = ("", "round", "floor", "ceil", "round_prefer_floor", "round_prefer_ceil")
# The spatial axes of each resize, in the order `size`, `scales` and `roi` list them.
RESIZE_AXES = {"image.resize1d": "W", "image.resize2d": "HW", "image.resize3d": "DHW"}


@dataclass(frozen=True)
class AxisResize:
    """How one spatial axis is resampled: `n_in` positions to `n_out`, `scale` = ONNX's factor
    (n_out / n_in unless given), `roi` the normalised crop window of tf_crop_and_resize."""

    n_in: int
    n_out: int
    scale: float
    roi: tuple[float, float]


@dataclass(frozen=True)
class ResizeMethod:
    """The per-call choices that every axis shares."""

    method: str
    coordinates: str
    rounding: str
    cubic_alpha: float
    exclude_outside: bool
    antialias: bool


def resize_method(attrs: Attrs) -> ResizeMethod:
    rounding = str(attrs["rounding_method"])
    coordinates = str(attrs["coordinate_transformation_mode"])
    if not rounding:  # TVM's default for nearest_neighbor
        rounding = "round" if coordinates == "align_corners" else "floor"
    return ResizeMethod(str(attrs["method"]), coordinates, rounding, float(attrs["cubic_alpha"]),  # type: ignore[arg-type]
                        bool(attrs["cubic_exclude"]), bool(attrs["antialias"]))


def resize_axes(op: str, x: TensorType, attrs: Attrs) -> list[tuple[int, AxisResize]]:
    """(tensor axis, how it is resampled) for each spatial axis of a resize call."""
    layout = str(attrs["layout"])
    letters = RESIZE_AXES[op]
    if sorted(layout) != sorted("NC" + letters):
        raise TypeRelError(f"{op}: layout {layout!r} must be a permutation of {'NC' + letters}")
    if x.ndim != len(layout):
        raise TypeRelError(f"{op}: data {x} does not have the rank of layout {layout}")
    size, scales, roi = attrs["size"], attrs["scales"], attrs["roi"]
    count = len(letters)
    if len(size) != count or (scales is not None and len(scales) != count) or (  # type: ignore[arg-type]
            roi is not None and len(roi) != 2 * count):  # type: ignore[arg-type]
        raise TypeRelError(f"{op}: size, scales and roi must give {count} values (roi: {2 * count})")
    out: list[tuple[int, AxisResize]] = []
    for k, letter in enumerate(letters):
        axis = layout.index(letter)
        n_in, n_out = x.shape[axis], int(size[k])  # type: ignore[index]
        if not is_known(n_in):
            raise TypeRelError(f"{op}: the spatial extent of {x} on axis {axis} must be static")
        if n_in == 0 or n_out <= 0:
            raise TypeRelError(f"{op}: cannot resize {n_in} positions on axis {axis} to {n_out}")
        scale = float(scales[k]) if scales is not None else n_out / n_in  # type: ignore[index]
        if not (scale > 0 and math.isfinite(scale)):
            raise TypeRelError(f"{op}: scale {scale} of axis {axis} must be positive")
        window = (float(roi[k]), float(roi[count + k])) if roi is not None else (0.0, 1.0)  # type: ignore[index]
        out.append((axis, AxisResize(int(n_in), n_out, scale, window)))  # type: ignore[arg-type]
    return out


def source_coordinate(how: ResizeMethod, ax: AxisResize, o: np.ndarray) -> np.ndarray:
    """The input coordinate (float64) that output positions `o` map to."""
    resized = ax.scale * ax.n_in  # ONNX's length_resized: fractional when it comes from a scale
    mode = how.coordinates
    if mode == "half_pixel":
        return (o + 0.5) / ax.scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = ax.n_in / 2 * (1 - ax.n_out / resized)
        return offset + (o + 0.5) / ax.scale - 0.5
    if mode == "pytorch_half_pixel":
        return (o + 0.5) / ax.scale - 0.5 if ax.n_out > 1 else np.zeros_like(o)
    if mode == "align_corners":
        return o * (ax.n_in - 1) / (resized - 1) if resized != 1 else np.zeros_like(o)
    if mode == "asymmetric":
        return o / ax.scale
    if mode == "tf_half_pixel_for_nn":
        return (o + 0.5) / ax.scale
    start, end = ax.roi  # tf_crop_and_resize
    if resized == 1:
        return np.full_like(o, (end - start) * (ax.n_in - 1) / 2) + start * (ax.n_in - 1)
    return o * (end - start) * (ax.n_in - 1) / (resized - 1) + start * (ax.n_in - 1)


def cubic_weight(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distances `d` (|d| < 2; zero beyond)."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def antialias_start(how: ResizeMethod, scale: float) -> int:
    """The first tap's offset from floor(x) when the kernel is stretched by 1 / scale (< 1)."""
    support = 2.0 if how.method == "cubic" else 1.0
    return int(math.floor(-support / scale)) + 1


def uses_antialias(how: ResizeMethod, ax: AxisResize) -> bool:
    return how.antialias and how.method != "nearest_neighbor" and ax.scale < 1


def tap_count(how: ResizeMethod, ax: AxisResize) -> int:
    if uses_antialias(how, ax):
        return 2 - 2 * antialias_start(how, ax.scale)
    return {"nearest_neighbor": 1, "linear": 2, "cubic": 4}[how.method]


def round_coordinate(x: np.ndarray, rounding: str) -> np.ndarray:
    if rounding == "round":  # half away from zero
        return np.sign(x) * np.floor(np.abs(x) + 0.5)
    if rounding == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if rounding == "round_prefer_ceil":
        return np.floor(x + 0.5)
    return np.floor(x) if rounding == "floor" else np.ceil(x)


def axis_taps(how: ResizeMethod, ax: AxisResize) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(input positions (n_out, K), their weights (n_out, K), the positions that take
    extrapolation_value or None) of one axis; positions are clamped to the axis (edge padding)."""
    x = source_coordinate(how, ax, np.arange(ax.n_out, dtype=np.float64))
    outside = ((x < 0) | (x > ax.n_in - 1)) if how.coordinates == "tf_crop_and_resize" else None
    if how.method == "nearest_neighbor":
        pos = round_coordinate(x, how.rounding)[:, None]
        weights = np.ones_like(pos)
    else:
        base = np.floor(x)
        t = (x - base)[:, None]
        k = np.arange(tap_count(how, ax), dtype=np.float64)[None, :]
        if uses_antialias(how, ax):
            offset = antialias_start(how, ax.scale) + k
            d = (offset - t) * ax.scale
            weights = cubic_weight(d, how.cubic_alpha) if how.method == "cubic" else np.clip(1 - np.abs(d), 0, 1)
        elif how.method == "linear":
            offset = k
            weights = np.concatenate([1 - t, t], axis=1)
        else:
            offset = k - 1
            weights = cubic_weight(offset - t, how.cubic_alpha)
        pos = base[:, None] + offset
        if how.exclude_outside:
            weights = np.where((pos < 0) | (pos > ax.n_in - 1), 0.0, weights)
        if how.exclude_outside or uses_antialias(how, ax):
            weights = weights / weights.sum(axis=1, keepdims=True)
    return np.clip(pos, 0, ax.n_in - 1).astype(np.int64), weights, outside


def _resize_rel(op: str) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        x = check_domain(op, tensor_arg(op, types, 0, "data"), "float")
        shape = list(x.shape)
        for axis, ax in resize_axes(op, x, attrs):
            shape[axis] = ax.n_out
        return TensorType(tuple(shape), str(attrs["out_dtype"]) or x.dtype)
    return rel


def _resize(op: str) -> Callable[[list[Value], Attrs], Value]:
    def compute(args: list[Value], attrs: Attrs) -> Value:
        x = args[0]
        how = resize_method(attrs)
        out = x.astype(np.float64)
        for axis, ax in resize_axes(op, TensorType(x.shape, str(x.dtype)), attrs):
            pos, weights, outside = axis_taps(how, ax)
            gathered = np.take(out, pos, axis=axis)  # the taps as a new axis after `axis`
            shape = [1] * gathered.ndim
            shape[axis], shape[axis + 1] = weights.shape
            out = np.sum(gathered * weights.reshape(shape), axis=axis + 1)
            if outside is not None:
                mask = outside.reshape([-1 if a == axis else 1 for a in range(out.ndim)])
                out = np.where(mask, float(attrs["extrapolation_value"]), out)  # type: ignore[arg-type]
        return as_array(out, str(attrs["out_dtype"]) or str(x.dtype))
    return compute


def _resize_attrs(layout: str, count: int) -> tuple[AttrField, ...]:
    return (
        AttrField("size", "int_list", required=True, check=lengths(count, positive_entries=True)),
        AttrField("roi", "float_list", None, optional=True, check=lengths(2 * count),
                  doc="starts then ends of the crop window (normalised), for tf_crop_and_resize"),
        AttrField("layout", "str", layout),
        AttrField("method", "str", "linear", check=one_of(*METHODS)),
        AttrField("coordinate_transformation_mode", "str", "half_pixel", check=one_of(*COORDINATE_MODES)),
        AttrField("rounding_method", "str", "", check=one_of(*ROUNDING_METHODS)),
        AttrField("cubic_alpha", "float", -0.5),
        AttrField("cubic_exclude", "bool", False),
        AttrField("extrapolation_value", "float", 0.0),
        AttrField("out_dtype", "dtype", ""),
        AttrField("scales", "float_list", None, optional=True, check=lengths(count),
                  doc="ONNX's scale factors; None: size / input extent"),
        AttrField("antialias", "bool", False, doc="stretch linear/cubic kernels by 1 / scale when downsampling"),
    )


for _name, _layout in (("image.resize1d", "NCW"), ("image.resize2d", "NCHW"), ("image.resize3d", "NCDHW")):
    register(OpDef(_name, 1, _resize_attrs(_layout, len(RESIZE_AXES[_name])), OpPattern.INJECTIVE,
                   _resize_rel(_name), _resize(_name),
                   description="resamples the spatial axes to `size` (nearest, linear or cubic)"))


# -------------------------------------------------------------------------------- grid_sample

GRID_LAYOUTS = {"NCHW": 2, "NCDHW": 3}


def _grid_sample_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "image.grid_sample"
    x = check_domain(op, tensor_arg(op, types, 0, "data"), "float")
    grid = tensor_arg(op, types, 1, "grid")
    dims = GRID_LAYOUTS[str(attrs["layout"])]
    if x.ndim != dims + 2 or grid.ndim != dims + 2 or grid.shape[1] != dims or grid.dtype != x.dtype:
        raise TypeRelError(f"{op}: data {x} and grid {grid} must be {attrs['layout']} and (N, {dims}, ...) "
                           "of one dtype")
    if attrs["method"] == "bicubic" and dims == 3:
        raise TypeRelError(f"{op}: bicubic sampling is 2-d only")
    if is_known(x.shape[0]) and is_known(grid.shape[0]) and x.shape[0] != grid.shape[0]:
        raise TypeRelError(f"{op}: data {x} and grid {grid} have different batch sizes")
    return TensorType(x.shape[:2] + grid.shape[2:], x.dtype)


def grid_coordinate(g: np.ndarray, n: int, align_corners: bool) -> np.ndarray:
    """A normalised grid coordinate in [-1, 1] as an input position (in g's dtype)."""
    one, two = g.dtype.type(1), g.dtype.type(2)
    if align_corners:
        return (g + one) / two * g.dtype.type(n - 1)
    return ((g + one) * g.dtype.type(n) - one) / two


def reflect(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """Mirrors coordinates into [low, high] about its ends, as often as needed."""
    dt = x.dtype.type
    span = dt(high - low)
    below = x < low
    d = np.where(below, dt(low) - x, x - dt(high))
    flips = np.floor(d / span)
    r = d - flips * span
    even = np.fmod(flips, 2) == 0
    inside_low, inside_high = dt(low) + r, dt(high) - r
    mirrored = np.where(below, np.where(even, inside_low, inside_high), np.where(even, inside_high, inside_low))
    return np.where((x < low) | (x > high), mirrored, x)


def grid_bounds(n: int, align_corners: bool) -> tuple[float, float]:
    return (0.0, n - 1.0) if align_corners else (-0.5, n - 0.5)


def _grid_sample(args: list[Value], attrs: Attrs) -> Value:
    x, grid = args
    dims = GRID_LAYOUTS[str(attrs["layout"])]
    align = bool(attrs["align_corners"])
    padding = str(attrs["padding_mode"])
    method = str(attrs["method"])
    dt = x.dtype.type
    sizes = x.shape[2:]
    # Grid channel k is the coordinate of spatial axis dims - 1 - k (x is the width).
    coords = []
    for axis in range(dims):
        n = sizes[axis]
        c = grid_coordinate(grid[:, dims - 1 - axis], n, align)
        if method == "nearest":
            c = np.rint(c)
        low, high = grid_bounds(n, align)
        if padding == "border":  # only coordinates beyond the bounds move (the taps clamp anyway)
            c = np.where((c < low) | (c > high), np.clip(c, dt(0), dt(n - 1)), c)
        elif padding == "reflection":
            c = reflect(c, low, high)
        coords.append(c)
    # Per axis: taps (positions, weights), each (N, out...).
    taps_per_axis = []
    for axis, c in enumerate(coords):
        n = sizes[axis]
        if method == "nearest":
            taps = [(c, np.ones_like(c))]
        else:
            base = np.floor(c)
            t = c - base
            if method == "bilinear":
                taps = [(base, dt(1) - t), (base + dt(1), t)]
            else:
                w = cubic_weight(np.stack([t + 1, t, 1 - t, 2 - t]), -0.75).astype(x.dtype)
                taps = [(base + dt(k - 1), w[k]) for k in range(4)]
        taps_per_axis.append([(_grid_tap(p, n, align, padding), w) for p, w in taps])
    out = np.zeros(x.shape[:2] + grid.shape[2:], x.dtype)
    batch = np.arange(x.shape[0]).reshape((-1, 1) + (1,) * (grid.ndim - 2))
    channel = np.arange(x.shape[1]).reshape((1, -1) + (1,) * (grid.ndim - 2))
    for combo in np.ndindex(*[len(t) for t in taps_per_axis]):
        weight = np.ones(grid.shape[:1] + grid.shape[2:], x.dtype)
        index: list[np.ndarray] = []
        valid = np.ones(weight.shape, bool)
        for axis, k in enumerate(combo):
            (pos, ok), w = taps_per_axis[axis][k]
            weight = weight * w
            index.append(pos)
            valid &= ok
        values = x[(batch, channel) + tuple(i[:, None] for i in index)]
        out = out + np.where(valid[:, None], values, dt(0)) * weight[:, None]
    return as_array(out, str(x.dtype))


def _grid_tap(pos: np.ndarray, n: int, align: bool, padding: str) -> tuple[np.ndarray, np.ndarray]:
    """An integer tap position as (an index inside the axis, whether it reads data): zeros
    padding reads nothing outside, border clamps, reflection mirrors the position."""
    if padding == "reflection":
        pos = reflect(pos, *grid_bounds(n, align))
    inside = (pos >= 0) & (pos <= n - 1)
    index = np.clip(pos, 0, n - 1).astype(np.int64)
    return index, inside if padding == "zeros" else np.ones_like(inside)


register(OpDef("image.grid_sample", 2,
               (AttrField("method", "str", "bilinear", check=one_of("nearest", "bilinear", "bicubic")),
                AttrField("layout", "str", "NCHW", check=one_of(*GRID_LAYOUTS)),
                AttrField("padding_mode", "str", "zeros", check=one_of("zeros", "border", "reflection")),
                AttrField("align_corners", "bool", True)),
               OpPattern.INJECTIVE, _grid_sample_rel, _grid_sample,
               description="samples data at the normalised coordinates of grid (N, 2, H, W): x then y"))
