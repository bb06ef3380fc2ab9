"""Operators with data-dependent extents in native code (docs/native-relay.md, "Data-dependent
extents"): `argwhere`, `nonzero`, `unique`, `compress` (irtool/ops/definitions/data_dependent.py).

No fused kernel can compute them, since a kernel's shapes are static. Each call is instead a
count pass (an LLVM routine returning the extent), the result boxes allocated with it through the
activation (`FunctionBuilder.new_box`, so they are held and released like every box), and a fill
pass writing them. The routines are generated as LLVM IR into the same object, one per operator
and element type, and take every extent as a run-time argument, so a box operand works like a
static one. `unique` merge-sorts the slice indices by their slices (stable, so each run of equal
slices starts with its first occurrence): O(n log n) slice comparisons.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from irtool.codegen.boxes import STATUS_SHAPE_MISMATCH
from irtool.codegen.objects import Obj
from irtool.codegen.routine import MEMCPY, Routine
from irtool.codegen.types import element_bytes, is_unsigned, memory_type
from irtool.ir.expr import Call
from irtool.ir.tir import is_float
from irtool.ir.types import Any, TensorType
from irtool.ops.definitions.data_dependent import INDEX_DTYPE

if TYPE_CHECKING:
    from irtool.codegen.instance import LV, FunctionBuilder, Value


def _suffix(dtype: str) -> str:
    return dtype.replace(".", "_")


def _nonzero_test(r: Routine, value: str, dtype: str) -> str:
    """Whether an element counts as true (NaN does, as in numpy)."""
    if is_float(dtype):
        return r.v(f"fcmp une {memory_type(dtype)} {value}, 0.0")
    return r.v(f"icmp ne {memory_type(dtype)} {value}, 0")


# -- the routines (each returns its symbol; its text goes into the program once)

def _count(routines: dict[str, str], dtype: str) -> str:
    """`i64 count(ptr x, i64 n)`: how many of the `n` elements are non-zero."""
    symbol = f"irtool_rt_count_{_suffix(dtype)}"
    if symbol not in routines:
        r = Routine(symbol, "i64", ["ptr %x", "i64 %n"])
        count = r.var("0")
        with r.loop("%n") as i:
            with r.when(_nonzero_test(r, r.load("%x", i, dtype), dtype)):
                r.bump(count)
        r.do(f"ret i64 {r.get(count)}")
        routines[symbol] = r.text()
    return symbol


def _coordinates(routines: dict[str, str], dtype: str, out_dtype: str, by_axis: bool) -> str:
    """`void where(ptr x, i64 n, ptr dims, i64 rank, i64 m, ptr out)`: the coordinates of the
    `m` non-zero elements, one row each (`argwhere`) or one row per axis (`by_axis`: `nonzero`)."""
    symbol = f"irtool_rt_{'nonzero' if by_axis else 'argwhere'}_{_suffix(dtype)}"
    if symbol not in routines:
        r = Routine(symbol, "void", ["ptr %x", "i64 %n", "ptr %dims", "i64 %rank", "i64 %m", "ptr %out"])
        k = r.var("0")
        with r.loop("%n") as i:
            with r.when(_nonzero_test(r, r.load("%x", i, dtype), dtype)):
                rest = r.var(i)
                row = r.get(k)
                with r.loop("%rank") as t:
                    axis = r.v(f"sub nsw i64 {r.v('sub nsw i64 %rank, 1')}, {t}")   # innermost first
                    d, left = r.load("%dims", axis, "int64"), r.get(rest)
                    coord = r.v(f"urem i64 {left}, {d}")
                    r.set(rest, r.v(f"udiv i64 {left}, {d}"))
                    at = r.madd(axis, "%m", row) if by_axis else r.madd(row, "%rank", axis)
                    value = coord if out_dtype == "int64" else r.v(f"trunc i64 {coord} to {memory_type(out_dtype)}")
                    r.store("%out", at, out_dtype, value)
                r.bump(k)
        r.do("ret void")
        routines[symbol] = r.text()
    return symbol


def _compress(routines: dict[str, str], cond_dtype: str) -> str:
    """`void compress(ptr x, ptr cond, i64 len, i64 outer, i64 n, i64 slice_bytes, i64 m, ptr out)`:
    the slices of x viewed as (outer, n, slice) whose condition is non-zero."""
    symbol = f"irtool_rt_compress_{_suffix(cond_dtype)}"
    if symbol not in routines:
        r = Routine(symbol, "void", ["ptr %x", "ptr %cond", "i64 %len", "i64 %outer", "i64 %n", "i64 %bytes",
                                     "i64 %m", "ptr %out"])
        with r.loop("%outer") as o:
            k = r.var("0")
            with r.loop("%len") as j:
                with r.when(_nonzero_test(r, r.load("%cond", j, cond_dtype), cond_dtype)):
                    dst = r.v(f"mul nsw i64 {r.madd(o, '%m', r.get(k))}, %bytes")
                    src = r.v(f"mul nsw i64 {r.madd(o, '%n', j)}, %bytes")
                    r.copy("%out", dst, "%x", src, "%bytes")
                    r.bump(k)
        r.do("ret void")
        routines[symbol] = r.text()
    return symbol


_SLICE_PARAMS = ["ptr %x", "i64 %outer", "i64 %n", "i64 %inner"]


def _slice_less(routines: dict[str, str], dtype: str) -> str:
    """`i1 less(ptr x, i64 outer, i64 n, i64 inner, i64 a, i64 b)`: whether slice a comes before
    slice b lexicographically (their elements in row-major order; unsigned types and bool as
    unsigned, floats by value with NaN last)."""
    symbol = f"irtool_rt_slice_less_{_suffix(dtype)}"
    if symbol not in routines:
        r = Routine(symbol, "i1", [*_SLICE_PARAMS, "i64 %a", "i64 %b"])
        t = memory_type(dtype)
        float_ = is_float(dtype)
        with r.loop("%outer") as o:
            row = r.v(f"mul nsw i64 {o}, %n")
            with r.loop("%inner") as i:
                x, y = (r.load("%x", r.madd(r.v(f"add nsw i64 {row}, {s}"), "%inner", i), dtype) for s in ("%a", "%b"))
                if float_:   # NaN after every number and equal to NaN (numpy's order)
                    x_nan, y_nan = r.v(f"fcmp uno {t} {x}, 0.0"), r.v(f"fcmp uno {t} {y}, 0.0")
                    same = r.v(f"or i1 {r.v(f'fcmp oeq {t} {x}, {y}')}, {r.v(f'and i1 {x_nan}, {y_nan}')}")
                    differ = r.v(f"xor i1 {same}, true")
                    below = r.v(f"or i1 {y_nan}, {r.v(f'fcmp olt {t} {x}, {y}')}")
                    less = r.v(f"and i1 {r.v(f'xor i1 {x_nan}, true')}, {below}")
                else:
                    differ = r.v(f"icmp ne {t} {x}, {y}")
                    pred = "icmp ult" if is_unsigned(dtype) or dtype == "bool" else "icmp slt"
                    less = r.v(f"{pred} {t} {x}, {y}")
                with r.when(differ):
                    r.do(f"ret i1 {less}")
                    r.start(r.label("dead"))
        r.do("ret i1 false")
        routines[symbol] = r.text()
    return symbol


def _unique_sort(routines: dict[str, str], dtype: str) -> str:
    """`i64 sort(ptr x, i64 outer, i64 n, i64 inner, ptr perm, ptr tmp)`: the slice indices in
    `perm`, stably merge-sorted by their slices (bottom-up, through `tmp`), so each run of equal
    slices starts with its first occurrence; returns the number of runs."""
    symbol = f"irtool_rt_unique_sort_{_suffix(dtype)}"
    if symbol not in routines:
        less = _slice_less(routines, dtype)
        r = Routine(symbol, "i64", [*_SLICE_PARAMS, "ptr %perm", "ptr %tmp"])

        def before(a: str, b: str) -> str:
            return r.v(f"call i1 @{less}(ptr %x, i64 %outer, i64 %n, i64 %inner, i64 {a}, i64 {b})")

        def smaller(a: str, b: str) -> str:
            return r.v(f"select i1 {r.v(f'icmp slt i64 {a}, {b}')}, i64 {a}, i64 {b}")

        with r.loop("%n") as k:
            r.store("%perm", k, "int64", k)
        width, flip = r.var("1"), r.var("0")
        with r.whilst(lambda: r.v(f"icmp slt i64 {r.get(width)}, %n")):
            w, flipped = r.get(width), r.v(f"icmp ne i64 {r.get(flip)}, 0")
            src = r.v(f"select i1 {flipped}, ptr %tmp, ptr %perm")
            dst = r.v(f"select i1 {flipped}, ptr %perm, ptr %tmp")
            lo = r.var("0")
            with r.whilst(lambda: r.v(f"icmp slt i64 {r.get(lo)}, %n")):
                low = r.get(lo)
                mid = smaller(r.v(f"add nsw i64 {low}, {w}"), "%n")
                high = smaller(r.v(f"add nsw i64 {mid}, {w}"), "%n")
                i, j = r.var(low), r.var(mid)
                with r.loop(r.v(f"sub nsw i64 {high}, {low}")) as step:
                    at_i, at_j = r.get(i), r.get(j)
                    left = r.v(f"icmp slt i64 {at_i}, {mid}")
                    right = r.v(f"icmp slt i64 {at_j}, {high}")
                    a = r.load(src, r.v(f"select i1 {left}, i64 {at_i}, i64 {low}"), "int64")
                    b = r.load(src, r.v(f"select i1 {right}, i64 {at_j}, i64 {low}"), "int64")
                    # The right one only when it is strictly before the left one (stable).
                    exhausted = r.v(f"xor i1 {left}, true")
                    take_right = r.v(f"and i1 {right}, {r.v(f'or i1 {exhausted}, {before(b, a)}')}")
                    r.store(dst, r.v(f"add nsw i64 {low}, {step}"), "int64", r.v(f"select i1 {take_right}, i64 {b}, i64 {a}"))
                    r.set(i, r.v(f"select i1 {take_right}, i64 {at_i}, i64 {r.v(f'add nsw i64 {at_i}, 1')}"))
                    r.set(j, r.v(f"select i1 {take_right}, i64 {r.v(f'add nsw i64 {at_j}, 1')}, i64 {at_j}"))
                r.set(lo, high)
            r.set(width, r.v(f"shl i64 {w}, 1"))
            r.set(flip, r.v(f"xor i64 {r.get(flip)}, 1"))
        with r.when(r.v(f"icmp ne i64 {r.get(flip)}, 0")):
            r.copy("%perm", "0", "%tmp", "0", r.v("mul nsw i64 %n, 8"))
        runs = r.var(r.v("select i1 " + r.v("icmp sgt i64 %n, 0") + ", i64 1, i64 0"))
        with r.loop(r.v("sub nsw i64 %n, 1")) as k:
            after = r.v(f"add nsw i64 {k}, 1")
            with r.when(before(r.load("%perm", k, "int64"), r.load("%perm", after, "int64"))):
                r.bump(runs)
        r.do(f"ret i64 {r.get(runs)}")
        routines[symbol] = r.text()
    return symbol


def _unique_fill(routines: dict[str, str], dtype: str, sort: bool) -> str:
    """`void fill(ptr x, i64 outer, i64 n, i64 inner, ptr perm, ptr tmp, i64 m, ptr y, ptr idx,
    ptr inverse, ptr counts)`: from the sorted `perm`, the `m` runs' first indices, each slice's
    run and the runs' sizes; unless `sort`, the runs are then renumbered in order of first
    occurrence (marks in `tmp`, new numbers in `perm`); last the distinct slices are copied."""
    symbol = f"irtool_rt_unique_{'sorted' if sort else 'unsorted'}_{_suffix(dtype)}"
    if symbol not in routines:
        less = _slice_less(routines, dtype)
        r = Routine(symbol, "void", [*_SLICE_PARAMS, "ptr %perm", "ptr %tmp", "i64 %m", "ptr %y", "ptr %idx",
                                     "ptr %inverse", "ptr %counts"])
        run = r.var("-1")
        with r.loop("%n") as k:
            here = r.load("%perm", k, "int64")
            first = r.v(f"icmp eq i64 {k}, 0")
            earlier = r.load("%perm", r.v(f"select i1 {first}, i64 0, i64 {r.v(f'sub nsw i64 {k}, 1')}"), "int64")
            differs = r.v(f"call i1 @{less}(ptr %x, i64 %outer, i64 %n, i64 %inner, i64 {earlier}, i64 {here})")
            new_run = r.v(f"or i1 {first}, {differs}")
            with r.when(new_run):
                r.bump(run)
                at = r.get(run)
                r.store("%idx", at, "int64", here)
                r.store("%counts", at, "int64", "0")
            at = r.get(run)
            r.store("%inverse", here, "int64", at)
            r.store("%counts", at, "int64", r.v(f"add nsw i64 {r.load('%counts', at, 'int64')}, 1"))
        if not sort:
            with r.loop("%n") as k:
                r.store("%tmp", k, "int64", "-1")
            with r.loop("%m") as q:
                r.store("%tmp", r.load("%idx", q, "int64"), "int64", q)
            order = r.var("0")
            with r.loop("%n") as k:
                q = r.load("%tmp", k, "int64")
                with r.when(r.v(f"icmp sge i64 {q}, 0")):
                    r.store("%perm", q, "int64", r.get(order))
                    r.bump(order)
            for array in ("%idx", "%counts"):   # array[perm[q]] = old array[q], through tmp
                r.copy("%tmp", "0", array, "0", r.v("mul nsw i64 %m, 8"))
                with r.loop("%m") as q:
                    r.store(array, r.load("%perm", q, "int64"), "int64", r.load("%tmp", q, "int64"))
            with r.loop("%n") as k:
                r.store("%inverse", k, "int64", r.load("%perm", r.load("%inverse", k, "int64"), "int64"))
        size = element_bytes(dtype)
        with r.loop("%outer") as o:
            with r.loop("%m") as q:
                src_row = r.madd(o, "%n", r.load("%idx", q, "int64"))
                dst_row = r.madd(o, "%m", q)
                bytes_ = r.v(f"mul nsw i64 %inner, {size}")
                r.copy("%y", r.v(f"mul nsw i64 {dst_row}, {bytes_}"), "%x", r.v(f"mul nsw i64 {src_row}, {bytes_}"),
                       bytes_)
        r.do("ret void")
        routines[symbol] = r.text()
    return symbol


# -- the call site

def _operand(fb: FunctionBuilder, lv: LV) -> tuple[str, list[str], TensorType]:
    """A tensor operand's data pointer, its dims (i64 values) and its type."""
    if isinstance(lv.leaf, Obj):
        t = lv.leaf.rtype
        assert isinstance(t, TensorType)
        return fb.box_data(lv), [fb.box_dim(lv, axis) for axis in range(len(t.shape))], t
    assert isinstance(lv.leaf, TensorType)
    return lv.value, [str(d) for d in lv.leaf.shape], lv.leaf


def _slices(fb: FunctionBuilder, dims: list[str], axis: int | None) -> tuple[str, str, str]:
    """(outer, n, inner) of a tensor around `axis` (`slices_view` at run time)."""
    if axis is None:
        return "1", fb.product(dims), "1"
    return fb.product(dims[:axis]), dims[axis], fb.product(dims[axis + 1:])


def _result(fb: FunctionBuilder, leaf: object, dims: list[str], dest: LV | None) -> tuple[LV, str]:
    """A result and its data pointer: a new box of `dims`, or for a static type (`unique`'s
    inverse indices) its destination or a temporary."""
    if isinstance(leaf, Obj):
        box = fb.new_box(leaf, dims)
        return box, fb.box_data(box)
    assert isinstance(leaf, TensorType)
    lv = dest if dest is not None else fb.temp(leaf)
    return lv, lv.value


def _axis_attr(node: Call, ndim: int) -> int | None:
    axis = node.attrs.get("axis")
    return None if axis is None else int(axis) % ndim  # type: ignore[call-overload]


def _where(fb: FunctionBuilder, node: Call, args: list[Value], places: tuple[LV | None, ...]) -> Value:
    """`argwhere` (rows of coordinates, int32) or `nonzero` (one row per axis, int64)."""
    routines = fb.prog.routines
    data, dims, t = _operand(fb, args[0][0])
    total = fb.product(dims)
    m = fb.emit(f"call i64 @{_count(routines, t.dtype)}(ptr {data}, i64 {total})")
    rank = str(len(dims))
    shape = fb.temp(TensorType((max(1, len(dims)),), INDEX_DTYPE))
    for axis, d in enumerate(dims):
        fb.do(f"store i64 {d}, ptr {fb.emit(f'getelementptr inbounds i64, ptr {shape.value}, i64 {axis}')}, align 8")
    by_axis = node.op.name == "nonzero"  # type: ignore[union-attr]
    out, pointer = _result(fb, fb.leaves(node)[0], [rank, m] if by_axis else [m, rank], places[0])
    out_dtype = INDEX_DTYPE if by_axis else "int32"
    fb.do(f"call void @{_coordinates(routines, t.dtype, out_dtype, by_axis)}(ptr {data}, i64 {total}, "
          f"ptr {shape.value}, i64 {rank}, i64 {m}, ptr {pointer})")
    return (out,)


def _shaped(dims: list[str], axis: int | None, extent: str) -> list[str]:
    """The dims of a selection of `extent` slices along `axis` (1-d without one)."""
    return [extent] if axis is None else [*dims[:axis], extent, *dims[axis + 1:]]


def _compress_call(fb: FunctionBuilder, node: Call, args: list[Value], places: tuple[LV | None, ...]) -> Value:
    """`compress`: a condition longer than its axis is status 5."""
    routines = fb.prog.routines
    data, dims, t = _operand(fb, args[0][0])
    axis = _axis_attr(node, len(dims))
    outer, n, inner = _slices(fb, dims, axis)
    cond, cond_dims, cond_t = _operand(fb, args[1][0])
    fb.fail_if(fb.emit(f"icmp sgt i64 {cond_dims[0]}, {n}"), STATUS_SHAPE_MISMATCH)
    m = fb.emit(f"call i64 @{_count(routines, cond_t.dtype)}(ptr {cond}, i64 {cond_dims[0]})")
    out, pointer = _result(fb, fb.leaves(node)[0], _shaped(dims, axis, m), places[0])
    size = fb.emit(f"mul nsw i64 {inner}, {element_bytes(t.dtype)}")
    fb.do(f"call void @{_compress(routines, cond_t.dtype)}(ptr {data}, ptr {cond}, i64 {cond_dims[0]}, "
          f"i64 {outer}, i64 {n}, i64 {size}, i64 {m}, ptr {pointer})")
    return (out,)


def _unique_call(fb: FunctionBuilder, node: Call, args: list[Value], places: tuple[LV | None, ...]) -> Value:
    """`unique`: its scratch (the permutation and the merge buffer) is a box the activation holds."""
    routines = fb.prog.routines
    data, dims, t = _operand(fb, args[0][0])
    axis = _axis_attr(node, len(dims))
    outer, n, inner = _slices(fb, dims, axis)
    scratch = fb.new_box(Obj(TensorType((Any(),), INDEX_DTYPE)), [fb.emit(f"mul nsw i64 {n}, 2")])
    perm = fb.box_data(scratch)
    tmp = fb.emit(f"getelementptr inbounds i64, ptr {perm}, i64 {n}")
    view = f"ptr {data}, i64 {outer}, i64 {n}, i64 {inner}"
    m = fb.emit(f"call i64 @{_unique_sort(routines, t.dtype)}({view}, ptr {perm}, ptr {tmp})")
    results = [_result(fb, leaf, extents, place)
               for leaf, extents, place in zip(fb.leaves(node), [_shaped(dims, axis, m), [m], [n], [m]], places)]
    outs, pointers = [lv for lv, _ in results], [p for _, p in results]
    fill = _unique_fill(routines, t.dtype, bool(node.attrs.get("sorted", True)))
    fb.do(f"call void @{fill}({view}, ptr {perm}, ptr {tmp}, i64 {m}, {', '.join('ptr ' + p for p in pointers)})")
    return tuple(outs)


_CALLS: dict[str, Callable[[FunctionBuilder, Call, list[Value], tuple[LV | None, ...]], Value]] = {
    "argwhere": _where, "nonzero": _where, "compress": _compress_call, "unique": _unique_call}


def emit_call(fb: FunctionBuilder, node: Call, args: list[Value], dests: tuple[LV | None, ...] | None) -> Value:
    """Code for one call of a data-dependent operator (`args`: its operands' values): count,
    allocate, fill. Results of static type go to `dests` where given."""
    name = node.op.name  # type: ignore[union-attr]
    call = _CALLS.get(name)
    if call is None:
        raise fb.error(f"the operator `{name}` has a data-dependent extent but no native routine", node)
    fb.prog.ctx.declare(MEMCPY, f"declare void @{MEMCPY}(ptr, ptr, i64, i1)")
    return call(fb, node, args, dests if dests is not None else (None,) * len(fb.leaves(node)))
