"""The TIR interpreter: runs a PrimFunc on numpy buffers, as the oracle for lowering, TIR passes
and codegen (small shapes; it is not a runtime).

It translates the function once into straight Python source (one Python `for` per TIR loop, one
temporary per operator, explicit bounds checks) and runs that, so a loop iteration costs no
tree walk and no Python recursion. Semantics, which docs/tir.md restates:
- every value is a numpy scalar or a 1-d numpy array (a vector of lanes) of the exact dtype, so
  float32 arithmetic rounds to float32 after every operation, and integers wrap;
- `/` on integers truncates toward zero (TVM's `Div`); `floordiv` / `floormod` round toward
  negative infinity; an integer division by zero is an error; float division follows IEEE;
- `select` evaluates both sides, `if_then_else` only the chosen one; loops of every kind run serially in order;
- an out-of-bounds index is an error (located at the load or store), never a wrap-around;
- `allocate`d float buffers start as NaN and integer ones as 0, so reads of unwritten scratch
  memory show up in results;
- `round` rounds half to even (LLVM's `nearbyint`), `fma` rounds once (computed in float64);
  `erf` uses `math.erf` lane by lane.
Buffer strides and alignment describe memory layout for codegen; the interpreter indexes the
numpy arrays logically and ignores them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from irtool.analysis.tir_verify import verify_primfunc
from irtool.core.span import Span
from irtool.ir.tir import (Allocate, AssertStmt, BinaryOp, Broadcast, Buffer, BufferLoad, BufferStore, Call,
                           Cast, Evaluate, FloatImm, For, IfExpr, IfThenElse, IntImm, LetStmt, Not, PrimExpr, PrimFunc,
                           Ramp, Select, SeqStmt, Stmt, Var, children, element_of, is_float, is_int, lanes_of)
from irtool.core.diagnostics import DiagnosticError

# CPython refuses more statically nested loops than this in one function.
MAX_LOOP_DEPTH = 20

_INFIX = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_FUNCS = {"min": "np.minimum", "max": "np.maximum", "and": "np.logical_and", "or": "np.logical_or",
          "floordiv": "_floordiv", "floormod": "_floormod", "bitwise_and": "np.bitwise_and",
          "bitwise_or": "np.bitwise_or", "bitwise_xor": "np.bitwise_xor", "shift_left": "np.left_shift",
          "shift_right": "np.right_shift"}


def _erf(x: np.generic | np.ndarray) -> np.generic | np.ndarray:
    out = np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)
    return out if out.ndim else out[()]


def _sigmoid(x: np.generic | np.ndarray) -> np.generic | np.ndarray:
    one = x.dtype.type(1)
    return one / (one + np.exp(-x))


def _fma(a: np.generic | np.ndarray, b: np.generic | np.ndarray,
         c: np.generic | np.ndarray) -> np.generic | np.ndarray:
    if a.dtype == np.float64:
        return a * b + c
    wide = np.float64
    return (np.asarray(a, wide) * np.asarray(b, wide) + np.asarray(c, wide)).astype(a.dtype)[()]


def _dot_u8s8(acc: np.generic | np.ndarray, a: np.generic | np.ndarray,
              b: np.generic | np.ndarray) -> np.generic | np.ndarray:
    """acc + the four unsigned-by-signed byte products of each int32 lane (little-endian bytes)."""
    lanes = np.shape(acc)
    ua = np.ascontiguousarray(a, np.int32).view(np.uint8).reshape(*lanes, 4).astype(np.int64)
    sb = np.ascontiguousarray(b, np.int32).view(np.int8).reshape(*lanes, 4).astype(np.int64)
    total = np.asarray(acc, np.int64) + (ua * sb).sum(axis=-1)
    return total.astype(np.int32)[()]   # int64 → int32 wraps, as the instruction does


def _rsqrt(x: np.generic | np.ndarray) -> np.generic | np.ndarray:
    return x.dtype.type(1) / np.sqrt(x)


# Numpy implementations of the math intrinsics (the same names as `tir.INTRINSICS`).
INTRINSIC_IMPLS: dict[str, Callable[..., object]] = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt,
    "rsqrt": _rsqrt, "tanh": np.tanh, "sigmoid": _sigmoid, "erf": _erf, "fabs": np.abs, "floor": np.floor,
    "ceil": np.ceil, "round": np.rint, "trunc": np.trunc, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "pow": np.power, "fmod": np.fmod, "fma": _fma,
}
INTEGER_INTRINSIC_IMPLS: dict[str, Callable[..., object]] = {"dot_u8s8": _dot_u8s8}   # tir.INTEGER_INTRINSICS


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of one lane of a TIR dtype.

    bfloat16 is refused even when a plugin (ml_dtypes, which onnx installs) teaches numpy the
    name, so the interpreter behaves the same whatever else is imported.
    """
    element = element_of(dtype)
    try:
        if element.startswith("bfloat"):
            raise TypeError(element)
        return np.dtype(element)
    except TypeError:
        raise ValueError(f"the TIR interpreter has no numpy type for {dtype}") from None


def array_shape(buf: Buffer) -> tuple[int, ...]:
    """The numpy shape holding `buf`: a vector dtype adds a trailing axis of its lanes."""
    lanes = lanes_of(buf.dtype)
    return buf.shape + ((lanes,) if lanes > 1 else ())


class CompiledPrimFunc:
    """A PrimFunc translated to Python; call it with one numpy array per parameter."""

    def __init__(self, func: PrimFunc, name: str = "") -> None:
        verify_primfunc(func, name)
        self.func = func
        try:
            self.arg_dtypes = [numpy_dtype(p.dtype) for p in func.params]
            self.source, namespace = _Translator(func).translate()
        except ValueError as exc:   # a dtype numpy lacks (bfloat16)
            raise DiagnosticError(str(exc), func.span) from None
        try:
            code = compile(self.source, f"<primfn @{name}>", "exec")
        except (SyntaxError, RecursionError, MemoryError):
            raise DiagnosticError(f"the TIR interpreter cannot run this function (more than {MAX_LOOP_DEPTH} nested "
                                  "loops, or too deep)", func.span) from None
        exec(code, namespace)
        self.kernel: Callable[..., None] = namespace["_kernel"]

    def __call__(self, buffers: Sequence[np.ndarray]) -> None:
        params = self.func.params
        if len(buffers) != len(params):
            raise DiagnosticError(f"the function takes {len(params)} buffer(s), {len(buffers)} given", self.func.span)
        for buf, want, arr in zip(params, self.arg_dtypes, buffers):
            if not isinstance(arr, np.ndarray) or arr.dtype != want or arr.shape != array_shape(buf):
                got = f"{arr.dtype} array of shape {arr.shape}" if isinstance(arr, np.ndarray) else type(arr).__name__
                raise DiagnosticError(f"buffer `%{buf.name}` needs a {want} array of shape {array_shape(buf)}, "
                                      f"got a {got}", buf.span or self.func.span)
            if not arr.flags.writeable:
                raise DiagnosticError(f"buffer `%{buf.name}` was given a read-only array", buf.span or self.func.span)
        with np.errstate(all="ignore"):
            self.kernel(*buffers)


def compile_primfunc(func: PrimFunc, name: str = "") -> CompiledPrimFunc:
    """Verifies and translates once, for running the same function many times."""
    return CompiledPrimFunc(func, name)


def run_primfunc(func: PrimFunc, buffers: Sequence[np.ndarray], name: str = "") -> None:
    """Runs `func`, reading and writing `buffers` (one per parameter) in place."""
    CompiledPrimFunc(func, name)(buffers)


class _Translator:
    """PrimFunc → the source of `def _kernel(b0, b1, ...)` plus the namespace it runs in."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.names: dict[int, str] = {}
        self.spans: list[tuple[Span | None, str]] = []
        self.lines: list[str] = []
        self.temps = 0
        # Loop variables with literal bounds: id -> (begin, end), to skip provably redundant checks.
        self.loop_ranges: dict[int, tuple[int, int]] = {}
        self.where: Span | None = func.span   # the span of the statement being translated
        self.namespace: dict[str, object] = {
            "np": np, "_fail": self.fail, "_floordiv": _floordiv, "_floormod": _floormod, "_truncdiv": _truncdiv,
            "_oob": self.out_of_bounds, "_vcheck": _vector_check,
        }
        for name, impl in (INTRINSIC_IMPLS | INTEGER_INTRINSIC_IMPLS).items():
            self.namespace[f"_i_{name}"] = impl

    # -- runtime helpers (bound into the namespace); `k` indexes `self.spans`
    def fail(self, k: int, message: str | None = None) -> DiagnosticError:
        span, text = self.spans[k]
        return DiagnosticError(message or text, span)

    def out_of_bounds(self, k: int, index: object) -> DiagnosticError:
        span, text = self.spans[k]
        return DiagnosticError(f"index {index} is out of bounds for {text}", span)

    def site(self, span: Span | None, text: str) -> int:
        """Registers an error site; a node built without a span reports its statement's."""
        self.spans.append((span or self.where, text))
        return len(self.spans) - 1

    def name(self, obj: Var | Buffer, prefix: str) -> str:
        text = self.names.get(id(obj))
        if text is None:
            text = self.names[id(obj)] = f"{prefix}{len(self.names)}"
        return text

    def const(self, value: object) -> str:
        name = f"c{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def translate(self) -> tuple[str, dict[str, object]]:
        params = [self.name(p, "b") for p in self.func.params]
        self.lines.append(f"def _kernel({', '.join(params)}):")
        self.lines.append("    pass")
        self.stmts(self.func.body)
        return "\n".join(self.lines) + "\n", self.namespace

    # -- statements (explicit stack: `let` chains can be long)
    def stmts(self, root: Stmt) -> None:
        stack: list[tuple[Stmt | str, int]] = [(root, 1)]
        while stack:
            stmt, depth = stack.pop()
            pad = "    " * depth
            if isinstance(stmt, str):
                self.lines.append(pad + stmt)
                continue
            self.where = stmt.span or self.where
            if isinstance(stmt, SeqStmt):
                stack.extend((s, depth) for s in reversed(stmt.stmts))
            elif isinstance(stmt, For):
                begin = self.expr(stmt.begin, pad)
                end = self.expr(stmt.end, pad)
                dtype = self.const(numpy_dtype(stmt.var.dtype))
                var = self.name(stmt.var, "v")
                if type(stmt.begin) is IntImm and type(stmt.end) is IntImm:
                    self.loop_ranges[id(stmt.var)] = (stmt.begin.value, stmt.end.value)
                self.lines += [f"{pad}for {var} in np.arange({begin}, {end}, dtype={dtype}):", f"{pad}    pass"]
                stack.append((stmt.body, depth + 1))
            elif isinstance(stmt, LetStmt):
                value = self.expr(stmt.value, pad)
                self.lines.append(f"{pad}{self.name(stmt.var, 'v')} = {value}")
                stack.append((stmt.body, depth))
            elif isinstance(stmt, Allocate):
                buf = stmt.buffer
                fill = "np.nan" if is_float(buf.dtype) else "0"
                dtype = self.const(numpy_dtype(buf.dtype))
                self.lines.append(f"{pad}{self.name(buf, 'b')} = np.full({array_shape(buf)}, {fill}, dtype={dtype})")
                stack.append((stmt.body, depth))
            elif isinstance(stmt, BufferStore):
                index = self.index(stmt.buffer, stmt.indices, stmt.span, pad)
                value = self.expr(stmt.value, pad)
                self.lines.append(f"{pad}{self.name(stmt.buffer, 'b')}[{index}] = {value}")
            elif isinstance(stmt, IfThenElse):
                cond = self.expr(stmt.cond, pad)
                self.lines += [f"{pad}if {cond}:", f"{pad}    pass"]
                if stmt.else_body is not None:
                    stack += [(stmt.else_body, depth + 1), ("pass", depth + 1), ("else:", depth)]
                stack.append((stmt.then_body, depth + 1))
            elif isinstance(stmt, Evaluate):
                self.expr(stmt.value, pad)
            elif isinstance(stmt, AssertStmt):
                cond = self.expr(stmt.cond, pad)
                k = self.site(stmt.span, stmt.message)
                self.lines.append(f"{pad}if not {cond}: raise _fail({k})")
            else:
                raise TypeError(f"not a TIR statement: {stmt!r}")

    def index(self, buf: Buffer, indices: tuple[PrimExpr, ...], span: Span | None, pad: str) -> str:
        """Bounds-checked index text for `buf[...]` (the checks are emitted before it)."""
        names = []
        for dim, (index, extent) in enumerate(zip(indices, buf.shape)):
            value = self.expr(index, pad)
            names.append(value)
            known = self.known_range(index)
            if known is not None and 0 <= known[0] and known[1] <= extent:
                continue   # a loop variable or literal that is in bounds on every iteration
            k = self.site(span, f"dimension {dim} of `%{buf.name}` (extent {extent})")
            if lanes_of(index.dtype) == 1:
                self.lines.append(f"{pad}if not 0 <= {value} < {extent}: raise _oob({k}, {value})")
            else:
                self.lines.append(f"{pad}_vcheck({value}, {extent}, _oob, {k})")
        return ", ".join(names) if names else "()"

    def known_range(self, index: PrimExpr) -> tuple[int, int] | None:
        """[low, high) that a scalar index surely lies in, when that is evident."""
        if type(index) is IntImm:
            return index.value, index.value + 1
        return self.loop_ranges.get(id(index))

    # -- expressions: post-order, one temporary per operator
    def expr(self, root: PrimExpr, pad: str) -> str:
        results: list[str] = []
        todo: list[tuple[PrimExpr, bool]] = [(root, False)]
        while todo:
            node, ready = todo.pop()
            kids = children(node)
            if not ready and kids and not isinstance(node, (BufferLoad, IfExpr)):
                todo.append((node, True))
                todo.extend((kid, False) for kid in reversed(kids))
                continue
            if isinstance(node, BufferLoad):
                results.append(self.load(node, pad))
                continue
            if isinstance(node, IfExpr):
                results.append(self.lazy_select(node, pad))
                continue
            args = results[len(results) - len(kids):] if kids else []
            if kids:
                del results[-len(kids):]
            text = self.operation(node, args)
            if kids:
                temp = f"t{self.temps}"
                self.temps += 1
                self.lines.append(f"{pad}{temp} = {text}")
                text = temp
            results.append(text)
        return results[0]

    def lazy_select(self, node: IfExpr, pad: str) -> str:
        """`if_then_else`: each side's operations are emitted inside its own branch."""
        cond = self.expr(node.cond, pad)
        temp = f"t{self.temps}"
        self.temps += 1
        self.lines.append(f"{pad}if {cond}:")
        value = self.expr(node.true_value, pad + "    ")
        self.lines += [f"{pad}    {temp} = {value}", f"{pad}else:"]
        value = self.expr(node.false_value, pad + "    ")
        self.lines.append(f"{pad}    {temp} = {value}")
        return temp

    def load(self, node: BufferLoad, pad: str) -> str:
        index = self.index(node.buffer, node.indices, node.span, pad)
        temp = f"t{self.temps}"
        self.temps += 1
        copy = ".copy()" if lanes_of(node.buffer.dtype) > 1 else ""
        self.lines.append(f"{pad}{temp} = {self.name(node.buffer, 'b')}[{index}]{copy}")
        return temp

    def operation(self, node: PrimExpr, args: list[str]) -> str:
        if isinstance(node, Var):
            return self.name(node, "v")
        if isinstance(node, IntImm):
            return self.const(numpy_dtype(node.dtype).type(node.value))
        if isinstance(node, FloatImm):
            return self.const(numpy_dtype(node.dtype).type(node.value))
        if isinstance(node, BinaryOp):
            op = node.op
            if op == "div":
                if is_int(node.dtype):
                    return f"_truncdiv({args[0]}, {args[1]}, _fail, {self.site(node.span, 'integer division by zero')})"
                return f"{args[0]} / {args[1]}"
            if op in _INFIX:
                return f"{args[0]} {_INFIX[op]} {args[1]}"
            if op in ("floordiv", "floormod"):
                return f"{_FUNCS[op]}({args[0]}, {args[1]}, _fail, {self.site(node.span, 'integer division by zero')})"
            return f"{_FUNCS[op]}({args[0]}, {args[1]})"
        if isinstance(node, Not):
            return f"np.logical_not({args[0]})"
        if isinstance(node, Select):
            if lanes_of(node.dtype) == 1:
                return f"({args[1]} if {args[0]} else {args[2]})"
            return f"np.where({args[0]}, {args[1]}, {args[2]})"
        if isinstance(node, Cast):
            return f"{args[0]}.astype({self.const(numpy_dtype(node.dtype))})"
        if isinstance(node, Ramp):
            lanes = node.lanes
            return f"{args[0]} + {args[1]} * np.arange({lanes}, dtype={self.const(numpy_dtype(node.dtype))})"
        if isinstance(node, Broadcast):
            return f"np.full({node.lanes}, {args[0]})"
        if isinstance(node, Call):
            return f"_i_{node.name}({', '.join(args)})"
        raise TypeError(f"not a TIR expression: {node!r}")


def _vector_check(index: np.ndarray, extent: int, oob: Callable[[int, object], DiagnosticError], k: int) -> None:
    bad = (index < 0) | (index >= extent)
    if bad.any():
        raise oob(k, index[bad][0])


def _zero_check(b: np.generic | np.ndarray, fail: Callable[[int], DiagnosticError], k: int) -> None:
    if np.any(b == 0):
        raise fail(k)


def _floordiv(a: np.generic | np.ndarray, b: np.generic | np.ndarray, fail: Callable[[int], DiagnosticError],
              k: int) -> np.generic | np.ndarray:
    _zero_check(b, fail, k)
    return a // b


def _floormod(a: np.generic | np.ndarray, b: np.generic | np.ndarray, fail: Callable[[int], DiagnosticError],
              k: int) -> np.generic | np.ndarray:
    _zero_check(b, fail, k)
    return a % b


def _truncdiv(a: np.generic | np.ndarray, b: np.generic | np.ndarray, fail: Callable[[int], DiagnosticError],
              k: int) -> np.generic | np.ndarray:
    _zero_check(b, fail, k)
    # Floor division corrected toward zero (np.abs would wrap on INT_MIN).
    q = a // b
    out = np.where(((a % b) != 0) & ((a < 0) != (b < 0)), q + 1, q).astype(q.dtype)
    return out if out.ndim else out[()]
