"""Compute rules of resizing and grid sampling (definitions/resample.py).

A resized element is the weighted sum of the input at the taps of each spatial axis; a tap's
position and weight are arithmetic on the output position, written in float64 with the same
operations, in the same order, as the reference, so nearest picks the same pixels. Up to 64 tap
combinations (nearest 1, bilinear 4, bicubic 16, trilinear 8) are one inlined expression; more
(antialiased downsampling) is a reduction over the tap loops. Grid sampling reads its coordinates
from the grid, in the data's float type, as the reference.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from irtool.ir.tir import BinaryOp, Call, PrimExpr
from irtool.ir.types import TensorType, Type
from irtool.lower.rules._rule import Attrs, out_tensor_type, rule, shape_of
from irtool.lower.te import Compute, Element, Idx, Reduce, Tensor, acc_load, acc_store, cast, cmp, imm, select
from irtool.ops.definitions.resample import (GRID_LAYOUTS, RESIZE_AXES, AxisResize, ResizeMethod, antialias_start,
                                             grid_bounds, resize_axes, resize_method, tap_count, uses_antialias)

F64 = "float64"
Taps = Callable[[PrimExpr | int], tuple[PrimExpr, PrimExpr]]   # tap number -> (index, weight)
MAX_INLINE_TAPS = 64


def _f(value: float, dtype: str = F64) -> PrimExpr:
    return imm(value, dtype)


def _op(name: str, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return BinaryOp(name, a, b)


def _floor(x: PrimExpr) -> PrimExpr:
    return Call("floor", (x,))


def _coordinate(how: ResizeMethod, ax: AxisResize, o: PrimExpr) -> PrimExpr:
    """`source_coordinate` of definitions/resample.py, operation for operation."""
    of = cast(F64, o)
    resized = ax.scale * ax.n_in
    mode = how.coordinates

    def half_pixel() -> PrimExpr:
        return _op("div", _op("add", of, _f(0.5)), _f(ax.scale))
    if mode in ("half_pixel", "pytorch_half_pixel"):
        if mode == "pytorch_half_pixel" and ax.n_out <= 1:
            return _f(0.0)
        return _op("sub", half_pixel(), _f(0.5))
    if mode == "half_pixel_symmetric":
        offset = ax.n_in / 2 * (1 - ax.n_out / resized)
        return _op("sub", _op("add", _f(offset), half_pixel()), _f(0.5))
    if mode == "align_corners":
        return _op("div", _op("mul", of, _f(ax.n_in - 1)), _f(resized - 1)) if resized != 1 else _f(0.0)
    if mode == "asymmetric":
        return _op("div", of, _f(ax.scale))
    if mode == "tf_half_pixel_for_nn":
        return half_pixel()
    start, end = ax.roi
    if resized == 1:
        return _f((end - start) * (ax.n_in - 1) / 2 + start * (ax.n_in - 1))
    scaled = _op("div", _op("mul", _op("mul", of, _f(end - start)), _f(ax.n_in - 1)), _f(resized - 1))
    return _op("add", scaled, _f(start * (ax.n_in - 1)))


def _rounded(x: PrimExpr, rounding: str) -> PrimExpr:
    if rounding == "round":  # half away from zero
        up = _floor(_op("add", Call("fabs", (x,)), _f(0.5)))
        return select(cmp("lt", x, _f(0.0)), _op("mul", up, _f(-1.0)), up)
    if rounding == "round_prefer_floor":
        return Call("ceil", (_op("sub", x, _f(0.5)),))
    if rounding == "round_prefer_ceil":
        return _floor(_op("add", x, _f(0.5)))
    return _floor(x) if rounding == "floor" else Call("ceil", (x,))


def cubic_weight(d: PrimExpr, a: float) -> PrimExpr:
    """Keys' kernel at distance d, as `cubic_weight` of the reference (zero from |d| = 2 on)."""
    d = Call("fabs", (d,))
    dt = d.dtype
    near = _op("add", _op("mul", _op("mul", _op("sub", _op("mul", _f(a + 2, dt), d), _f(a + 3, dt)), d), d), _f(1, dt))
    far = _op("sub", _op("mul", _op("add", _op("mul", _op("sub", _op("mul", _f(a, dt), d), _f(5 * a, dt)), d),
                                    _f(8 * a, dt)), d), _f(4 * a, dt))
    return select(cmp("le", d, _f(1, dt)), near, select(cmp("lt", d, _f(2, dt)), far, _f(0, dt)))


def _index(pos: PrimExpr, n: int) -> PrimExpr:
    """A float position as an int32 index clamped into [0, n) (edge padding)."""
    return cast("int32", _op("min", _op("max", pos, _f(0.0, pos.dtype)), _f(n - 1, pos.dtype)))


def _axis_taps(how: ResizeMethod, ax: AxisResize, o: PrimExpr) -> tuple[Taps, PrimExpr | None]:
    """The taps of output position `o` on one axis, and the condition for extrapolation."""
    x = _coordinate(how, ax, o)
    outside = None
    if how.coordinates == "tf_crop_and_resize":
        outside = _op("or", cmp("lt", x, _f(0.0)), cmp("gt", x, _f(ax.n_in - 1)))
    if how.method == "nearest_neighbor":
        pos = _index(_rounded(x, how.rounding), ax.n_in)
        return (lambda k: (pos, _f(1.0))), outside
    base = _floor(x)
    t = _op("sub", x, base)
    antialias = uses_antialias(how, ax)
    first = antialias_start(how, ax.scale) if antialias else (0 if how.method == "linear" else -1)

    def raw(k: PrimExpr | int) -> tuple[PrimExpr, PrimExpr]:
        offset = _op("add", _f(first), cast(F64, k)) if isinstance(k, PrimExpr) else _f(first + k)
        pos = _op("add", base, offset)
        if antialias:
            d = _op("mul", _op("sub", offset, t), _f(ax.scale))
            if how.method == "cubic":
                w = cubic_weight(d, how.cubic_alpha)
            else:
                w = _op("min", _op("max", _op("sub", _f(1.0), Call("fabs", (d,))), _f(0.0)), _f(1.0))
        elif how.method == "linear":
            first_tap = cmp("eq", k, 0) if isinstance(k, PrimExpr) else k == 0
            w = (select(first_tap, _op("sub", _f(1.0), t), t) if isinstance(first_tap, PrimExpr)
                 else _op("sub", _f(1.0), t) if first_tap else t)
        else:
            w = cubic_weight(_op("sub", offset, t), how.cubic_alpha)
        if how.exclude_outside:
            w = select(_op("or", cmp("lt", pos, _f(0.0)), cmp("gt", pos, _f(ax.n_in - 1))), _f(0.0), w)
        return _index(pos, ax.n_in), w
    return raw, outside


def _tables(how: ResizeMethod, ax: AxisResize, ct: str, count: int, label: str) -> tuple[Compute, Compute | None]:
    """The input index and the weight of tap k at output position o, as (n_out, K) stages the
    kernel computes once (weights divided by their sum where the reference normalises); None
    for nearest's weights, all 1."""
    def position(ctx: Element, idx: Idx) -> PrimExpr:
        taps, _ = _axis_taps(how, ax, idx[0])
        return taps(idx[1])[0]
    positions = Compute((ax.n_out, count), "int32", position, f"{label}_index", stage=True)
    if how.method == "nearest_neighbor":
        return positions, None
    normalized = how.exclude_outside or uses_antialias(how, ax)

    def weight(ctx: Element, idx: Idx) -> PrimExpr:
        taps, _ = _axis_taps(how, ax, idx[0])
        w = taps(idx[1])[1]
        if normalized:
            total = taps(0)[1]
            for k in range(1, count):
                total = _op("add", total, taps(k)[1])
            w = _op("div", w, total)
        return cast(ct, w)
    return positions, Compute((ax.n_out, count), ct, weight, f"{label}_weight", stage=True)


def _resize_rule(name: str) -> None:
    @rule(name)
    def lower(args: list, attrs: Attrs, out: Type) -> Tensor:
        x = args[0]
        how = resize_method(attrs)
        axes = resize_axes(name, TensorType(x.shape, x.dtype), attrs)
        dtype = out_tensor_type(out).dtype
        ct = "float32" if x.dtype in ("float16", "bfloat16") else x.dtype   # the arithmetic's type
        counts = [tap_count(how, ax) for _, ax in axes]
        tables = [_tables(how, ax, ct, c, f"{name[6:]}_{axis}") for (axis, ax), c in zip(axes, counts)]
        extrapolation = imm(float(attrs["extrapolation_value"]), dtype)  # type: ignore[arg-type]

        def term(ctx: Element, idx: Idx, taps: Idx) -> PrimExpr:
            """weight · x at one tap per axis (tap numbers `taps`)."""
            where = list(idx)
            weight: PrimExpr | None = None
            for (axis, _), (positions, weights), k in zip(axes, tables, taps):
                where[axis] = ctx.load(positions, (idx[axis], k))
                if weights is not None:
                    w = ctx.load(weights, (idx[axis], k))
                    weight = w if weight is None else _op("mul", weight, w)
            value = cast(ct, ctx.load(x, tuple(where)))
            return value if weight is None else _op("mul", weight, value)

        def finish(idx: Idx, value: PrimExpr) -> PrimExpr:
            value = cast(dtype, value)
            if how.coordinates != "tf_crop_and_resize":
                return value
            outside: PrimExpr | None = None
            for axis, ax in axes:
                o = _axis_taps(how, ax, idx[axis])[1]
                assert o is not None
                outside = o if outside is None else _op("or", outside, o)
            assert outside is not None
            return select(outside, extrapolation, value)

        if _product(counts) <= MAX_INLINE_TAPS:
            def f(ctx: Element, idx: Idx) -> PrimExpr:
                total: PrimExpr | None = None
                for taps in itertools.product(*[range(c) for c in counts]):
                    t = term(ctx, idx, tuple(imm(k, "int32") for k in taps))
                    total = t if total is None else _op("add", total, t)
                assert total is not None
                return finish(idx, total)
            return Compute(shape_of(out), dtype, f, name.replace("image.", ""))

        def fbody(ctx: Element, idx: Idx) -> PrimExpr:
            acc = ctx.accumulator(ct, imm(0, ct), "resize_acc")
            ctx.loop(counts, [f"tap{k}" for k in range(len(counts))],
                     lambda r: acc_store(acc, _op("add", acc_load(acc), term(ctx, idx, r))))
            return finish(idx, acc_load(acc))
        return Reduce(shape_of(out), dtype, fbody, name.replace("image.", ""))


def _product(values: list[int]) -> int:
    total = 1
    for v in values:
        total *= v
    return total


for _name in RESIZE_AXES:
    _resize_rule(_name)


# -------------------------------------------------------------------------------- grid_sample

def _reflect(x: PrimExpr, low: float, high: float) -> PrimExpr:
    """`reflect` of the reference: mirrored about the ends of [low, high] as often as needed."""
    dt = x.dtype
    below = cmp("lt", x, _f(low, dt))
    d = select(below, _op("sub", _f(low, dt), x), _op("sub", x, _f(high, dt)))
    flips = _floor(_op("div", d, _f(high - low, dt)))
    r = _op("sub", d, _op("mul", flips, _f(high - low, dt)))
    even = cmp("eq", _op("sub", flips, _op("mul", _floor(_op("div", flips, _f(2, dt))), _f(2, dt))), _f(0, dt))
    near_low, near_high = _op("add", _f(low, dt), r), _op("sub", _f(high, dt), r)
    mirrored = select(below, select(even, near_low, near_high), select(even, near_high, near_low))
    return select(_op("or", below, cmp("gt", x, _f(high, dt))), mirrored, x)


@rule("image.grid_sample")
def _grid_sample(args: list, attrs: Attrs, out: Type) -> Tensor:
    x, grid = args
    dims = GRID_LAYOUTS[str(attrs["layout"])]
    align = bool(attrs["align_corners"])
    padding, method = str(attrs["padding_mode"]), str(attrs["method"])
    dt = x.dtype
    sizes = x.shape[2:]

    def tap(pos: PrimExpr, n: int) -> tuple[PrimExpr, PrimExpr | None]:
        """(an index inside the axis, the condition for reading data; None: always)."""
        if padding == "reflection":
            pos = _reflect(pos, *grid_bounds(n, align))
        safe = select(cmp("ne", pos, pos), _f(0, dt), pos)   # a NaN coordinate never indexes memory
        inside = _op("and", cmp("ge", safe, _f(0, dt)), cmp("le", safe, _f(n - 1, dt)))
        return _index(safe, n), (inside if padding == "zeros" else None)

    def f(ctx: Element, idx: Idx) -> PrimExpr:
        batch, channel, spatial = idx[0], idx[1], idx[2:]
        per_axis = []
        for axis in range(dims):
            n = sizes[axis]
            g = ctx.load(grid, (batch, imm(dims - 1 - axis, "int32")) + spatial)
            one, two = _f(1, dt), _f(2, dt)
            c = (_op("mul", _op("div", _op("add", g, one), two), _f(n - 1, dt)) if align
                 else _op("div", _op("sub", _op("mul", _op("add", g, one), _f(n, dt)), one), two))
            if method == "nearest":
                c = Call("round", (c,))  # half to even, as the reference's rint
            low, high = grid_bounds(n, align)
            if padding == "border":
                clamped = _op("min", _op("max", c, _f(0, dt)), _f(n - 1, dt))
                c = select(_op("or", cmp("lt", c, _f(low, dt)), cmp("gt", c, _f(high, dt))), clamped, c)
            elif padding == "reflection":
                c = _reflect(c, low, high)
            if method == "nearest":
                taps = [(c, _f(1, dt))]
            else:
                base = _floor(c)
                t = _op("sub", c, base)
                if method == "bilinear":
                    taps = [(base, _op("sub", one, t)), (_op("add", base, one), t)]
                else:
                    taps = [(_op("add", base, _f(k - 1, dt)), cubic_weight(d, -0.75))
                            for k, d in enumerate((_op("add", t, one), t, _op("sub", one, t), _op("sub", two, t)))]
            per_axis.append([(tap(p, n), w) for p, w in taps])
        total: PrimExpr | None = None
        for combo in itertools.product(*per_axis):
            weight: PrimExpr = _f(1, dt)
            where: list[PrimExpr] = [batch, channel]
            valid: PrimExpr | None = None
            for (i, ok), w in combo:
                weight = _op("mul", weight, w)
                where.append(i)
                if ok is not None:
                    valid = ok if valid is None else _op("and", valid, ok)
            value = ctx.load(x, tuple(where))
            if valid is not None:
                value = select(valid, value, _f(0, dt))
            term = _op("mul", value, weight)
            total = term if total is None else _op("add", total, term)
        assert total is not None
        return total
    return Compute(shape_of(out), dt, f, "grid_sample")
