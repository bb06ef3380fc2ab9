"""Hypothesis strategies for Relay programs, shared by every property test.

Import as `from support.strategies import modules, expressions, dataflow_programs` (pytest puts
`tests/` on `sys.path`; the project's pytest `pythonpath = ["tests"]` makes that explicit).

- `modules()`: random well-formed modules covering the whole text format: type definitions with
  constructors (and extern types), definitions with type parameters, annotated parameters with
  binder attributes, function attributes of every value kind, `let` (recursive too) and
  sequencing, graph sharing (the same object used several times, also across scopes), `if`,
  tuples and projections, `match`/`match?` with nested patterns, references, function literals,
  calls of registered operators with canonical attributes, globals and constructors, scalar and
  tensor constants of many dtypes including NaN/±inf, and annotations of every type kind that
  the text can write. They are *not* type-correct: they are for syntax round trips and fuzzing.
- `expressions()`: the same without the module around it (a lone expression; its free
  variables print as `free_var`).
- `dataflow_programs()`: random *well-typed* pure dataflow `main` functions (static shapes,
  float32 mostly) for semantic properties: elementwise unary ops, same-shape and broadcasting
  binary ops, tuples and projections, let-bound and shared nodes, tensor and scalar constants.
  Built from the small op table `DATAFLOW_UNARY` / `DATAFLOW_BINARY` below, so it does not
  depend on type inference.

Generation recurses on a small depth budget (the *generator*, not the code under test); the
programs themselves stay small so that many examples run quickly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from irtool.ir import (Attrs, Call, Clause, Constant, Constructor, Expr, FuncType, Function, GlobalVar, If,
                       IncompleteType, IRModule, Let, Match, MetaRef, Op, Pattern, PatternConstructor,
                       PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead, RefWrite, TensorType, Tuple,
                       TupleGetItem, TupleType, Type, TypeCall, TypeData, TypeVar, Var)
from irtool.ir.types import Any
from irtool.ops import get_op, op_names
from irtool.core.diagnostics import DiagnosticError

# --- building blocks -----------------------------------------------------------------------------

DTYPES = ("float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
          "uint64", "bool")
# Names that exercise the printer's uniquifying: duplicates, `x` vs `x1`, digits first (`%v1`),
# the empty name, a `/` (an identifier character) and characters that are not.
VAR_NAMES = ("x", "x", "x1", "y", "p0", "p0", "data", "_t", "a/b", "1", "", "w.0", "v1", "conv1_weight")
TYPE_VAR_NAMES = ("A", "B", "T")
ADT_SHAPES = (  # name, type-parameter count, constructors (field types written with "A"/"B"/"self")
    ("List", 1, (("Cons", ("A", "self")), ("Nil", ()))),
    ("Option", 1, (("Some", ("A",)), ("Nothing", ()))),
    ("Tree", 2, (("Leaf", ("A",)), ("Node", ("self", "B", "self")))),
    ("Unit", 0, (("MkUnit", ()),)),
    ("Pair", 2, (("MkPair", ("A", "B")),)),
)
FN_ATTR_KEYS = ("Primitive", "Inline", "Compiler", "global_symbol", "relay.reshape_only", "Composite",
                "TestAttribute")
STRING_VALUES = ("NCHW", "NHWC", "OIHW", "HWIO", "NCHW16c", "float32", "int64", "", "constant", "edge",
                 "reflect", "end", "size", "clip", "wrap", "fast", "cublas", "relu", "a b/c.d")
MAX_DEPTH = 4


def dtypes() -> st.SearchStrategy[str]:
    return st.sampled_from(DTYPES)


def _finite_attr_floats() -> st.SearchStrategy[float]:
    # Float attributes are written `<repr>f`, and a float32 literal must be within float32's range.
    limit = float(np.finfo(np.float32).max)
    return st.floats(min_value=-limit, max_value=limit, allow_nan=False)


def attr_floats() -> st.SearchStrategy[float]:
    return _finite_attr_floats() | st.sampled_from([math.inf, -math.inf, 1e-05, 0.5, -0.0])


def scalar_values(dtype: str) -> st.SearchStrategy[np.ndarray]:
    """0-d arrays of `dtype`, with the edge values (extremes, -0.0, NaN, ±inf for floats)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        values: st.SearchStrategy = st.booleans()
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        values = st.integers(int(info.min), int(info.max)) | st.sampled_from([int(info.min), int(info.max), 0])
    else:
        values = st.floats(width=8 * dt.itemsize if dt.itemsize <= 8 else 64) | st.sampled_from(
            [math.nan, math.inf, -math.inf, -0.0, float(np.finfo(dt).max), float(np.finfo(dt).tiny)])
    return values.map(lambda v: np.array(v, dtype=dt))


@st.composite
def tensor_values(draw: st.DrawFn, max_elements: int = 8) -> np.ndarray:
    """Small arrays of any dtype (with NaN/±inf among floats); sometimes more than the 64 elements
    the printer lists in its metadata JSON, to cover the base64 form too."""
    dtype = np.dtype(draw(dtypes()))
    big = draw(st.booleans().map(lambda b: b and max_elements > 8))
    shape = (draw(st.integers(65, 100)),) if big else tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    size = int(np.prod(shape))
    elems = draw(st.lists(scalar_values(dtype.name), min_size=size, max_size=size))
    return np.array([e[()] for e in elems], dtype=dtype).reshape(shape)


# --- modules and expressions ---------------------------------------------------------------------

@dataclass
class _Frame:
    """A lexical scope of the program being generated: its variables, and the expressions built in
    it (they may be shared while the frame is open: any variable they use is still in scope)."""

    vars: list[Var] = field(default_factory=list)
    pool: list[Expr] = field(default_factory=list)


@dataclass
class _Env:
    adts: list[TypeData] = field(default_factory=list)
    globals: list[str] = field(default_factory=list)
    type_vars: list[TypeVar] = field(default_factory=list)
    frames: list[_Frame] = field(default_factory=lambda: [_Frame()])
    virtual_devices: int = 0  # entries of `meta[VirtualDevice]` available
    free: list[Var] = field(default_factory=list)  # free variables (lone expressions only)

    def in_scope(self) -> list[Var]:
        return [v for f in self.frames for v in f.vars] + self.free

    def shared(self) -> list[Expr]:
        return [e for f in self.frames for e in f.pool]


def _name(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(VAR_NAMES))


def _type(draw: st.DrawFn, env: _Env, depth: int = 2) -> Type:
    kinds = ["tensor", "scalar", "incomplete"]
    if depth > 0:
        kinds += ["tuple", "func"]
    if env.type_vars:
        kinds.append("var")
    if env.adts:
        kinds.append("adt")
    kind = draw(st.sampled_from(kinds))
    if kind == "tensor":
        dims = draw(st.lists(st.integers(0, 300) | st.just(Any()), min_size=1, max_size=4))
        return TensorType(tuple(dims), draw(dtypes()))
    if kind == "scalar":
        return TensorType((), draw(dtypes()))
    if kind == "incomplete":
        return IncompleteType()
    if kind == "tuple":
        return TupleType(tuple(_type(draw, env, depth - 1) for _ in range(draw(st.integers(0, 3)))))
    if kind == "func":
        own = [TypeVar(n) for n in draw(st.lists(st.sampled_from(TYPE_VAR_NAMES), max_size=2, unique=True))]
        inner = _Env(env.adts, env.globals, env.type_vars + own)
        args = tuple(_type(draw, inner, depth - 1) for _ in range(draw(st.integers(0, 2))))
        return FuncType(args, _type(draw, inner, depth - 1), tuple(own))
    if kind == "var":
        return draw(st.sampled_from(env.type_vars))
    data = draw(st.sampled_from(env.adts))
    return TypeCall(data.name, tuple(_type(draw, env, depth - 1) for _ in data.type_params))


def _maybe_type(draw: st.DrawFn, env: _Env) -> Type | None:
    return _type(draw, env) if draw(st.booleans()) else None


def _attr_value(draw: st.DrawFn, env: _Env, depth: int = 2) -> object:
    """Any value a function attribute can hold: int, float, bool, str, None, list, meta reference."""
    kinds = ["int", "float", "bool", "str", "none"] + (["list"] if depth > 0 else [])
    if env.virtual_devices:
        kinds.append("meta")
    kind = draw(st.sampled_from(kinds))
    if kind == "int":
        return draw(st.integers(-2**63, 2**63 - 1) | st.integers(-3, 3))
    if kind == "float":
        return draw(attr_floats())
    if kind == "bool":
        return draw(st.booleans())
    if kind == "str":
        return draw(st.sampled_from(STRING_VALUES))
    if kind == "none":
        return None
    if kind == "meta":
        return MetaRef("VirtualDevice", draw(st.integers(0, env.virtual_devices - 1)))
    return tuple(_attr_value(draw, env, depth - 1) for _ in range(draw(st.integers(0, 3))))


def _op_attr_value(draw: st.DrawFn, env: _Env, kind: str) -> object:
    small = st.integers(-1, 6)
    if kind == "int":
        return draw(small)
    if kind == "float":
        return draw(attr_floats())
    if kind == "bool":
        return draw(st.booleans())
    if kind in ("str", "dtype"):
        return draw(st.sampled_from(STRING_VALUES + DTYPES))
    if kind == "int_list":
        return tuple(draw(st.lists(small, max_size=4)))
    if kind == "float_list":
        return tuple(draw(st.lists(attr_floats(), max_size=3)))
    if kind == "int_or_list":
        return draw(small | st.lists(small, max_size=4).map(tuple))
    if kind == "int_list_list":
        return tuple(tuple(p) for p in draw(st.lists(st.lists(st.integers(0, 3), min_size=2, max_size=2),
                                                     max_size=4)))
    if kind == "device":
        options = [st.integers(0, 3), st.sampled_from(("cpu", "cuda"))]
        if env.virtual_devices:
            options.append(st.integers(0, env.virtual_devices - 1).map(lambda i: MetaRef("VirtualDevice", i)))
        return draw(st.one_of(options))
    return None


def _normalized(opdef: object, given: dict) -> Attrs | None:
    try:
        return opdef.normalize_attrs(given)  # type: ignore[attr-defined]
    except DiagnosticError:
        return None


def _op_call(draw: st.DrawFn, env: _Env, depth: int) -> Expr:
    """A registered operator called with its arity and valid, canonical (normalised) attributes."""
    name = draw(st.sampled_from(OP_NAMES))
    opdef = get_op(name)
    assert opdef is not None
    given: dict = {}
    for f in opdef.attrs or ():
        if f.kind in ("meta", "any"):
            continue  # values that name metadata entries of other kinds, or opaque objects
        if not f.required and not draw(st.booleans()):
            continue
        for _ in range(4):
            value = _op_attr_value(draw, env, f.kind)
            if _normalized(opdef, {**given, f.name: value}) is not None or not f.required:
                break
        if _normalized(opdef, {**given, f.name: value}) is not None:
            given[f.name] = value
    attrs = _normalized(opdef, given)
    if attrs is None:  # a required attribute found no valid value: call a plain operator instead
        return Call(Op("add"), [_expr(draw, env, depth - 1), _expr(draw, env, depth - 1)])
    arity = opdef.num_inputs if opdef.num_inputs is not None else draw(st.integers(0, 3))
    return Call(Op(name), [_expr(draw, env, depth - 1) for _ in range(arity)], attrs)


def _constant(draw: st.DrawFn) -> Constant:
    if draw(st.booleans()):
        return Constant(draw(st.sampled_from(DTYPES).flatmap(scalar_values)))
    return Constant(draw(tensor_values(max_elements=100)))


def _atom(draw: st.DrawFn, env: _Env) -> Expr:
    options = ["const"]
    scope = env.in_scope()
    if scope:
        options += ["var", "var", "var"]
    if env.globals:
        options.append("global")
    if env.adts:
        options.append("ctor")
    options.append("op")
    kind = draw(st.sampled_from(options))
    if kind == "var":
        return draw(st.sampled_from(scope))
    if kind == "global":
        return GlobalVar(draw(st.sampled_from(env.globals)))
    if kind == "op":
        return Op(draw(st.sampled_from(OP_NAMES)))
    if kind == "ctor":
        ctor = draw(st.sampled_from([c for d in env.adts for c in d.constructors]))
        # A nullary constructor is always applied (the parser makes `Nil` the call `Nil()`).
        return Call(ctor, []) if not ctor.inputs else ctor
    return _constant(draw)


def _with_frame(env: _Env, bound: list[Var]) -> _Frame:
    frame = _Frame(list(bound))
    env.frames.append(frame)
    return frame


def _function(draw: st.DrawFn, env: _Env, depth: int) -> Function:
    own = [TypeVar(n) for n in draw(st.lists(st.sampled_from(TYPE_VAR_NAMES), max_size=2, unique=True))]
    outer_tvars = env.type_vars
    env.type_vars = outer_tvars + [tv for tv in own if tv not in outer_tvars]
    params = []
    for _ in range(draw(st.integers(0, 3))):
        attrs = Attrs()
        if env.virtual_devices and draw(st.integers(0, 4)) == 0:
            attrs = Attrs({"virtual_device": MetaRef("VirtualDevice", draw(st.integers(0, env.virtual_devices - 1)))})
        params.append(Var(_name(draw), _maybe_type(draw, env), attrs=attrs))
    fn_attrs = {k: _attr_value(draw, env) for k in draw(st.lists(st.sampled_from(FN_ATTR_KEYS), max_size=3,
                                                                 unique=True))}
    ret = _maybe_type(draw, env)
    _with_frame(env, params)
    body = _expr(draw, env, depth - 1)
    env.frames.pop()
    env.type_vars = outer_tvars
    return Function(params, body, ret, tuple(tv for tv in own if tv not in outer_tvars), Attrs(fn_attrs))


def _pattern(draw: st.DrawFn, env: _Env, bound: list[Var], depth: int) -> Pattern:
    kinds = ["wild", "var"] + (["ctor", "tuple"] if depth > 0 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "wild" or (kind == "ctor" and not env.adts):
        return PatternWildcard()
    if kind == "var":
        var = Var(_name(draw), _maybe_type(draw, env))
        bound.append(var)
        return PatternVar(var)
    if kind == "ctor":
        ctor = draw(st.sampled_from([c for d in env.adts for c in d.constructors]))
        return PatternConstructor(ctor, tuple(_pattern(draw, env, bound, depth - 1) for _ in ctor.inputs))
    return PatternTuple(tuple(_pattern(draw, env, bound, depth - 1) for _ in range(draw(st.integers(0, 3)))))


def _expr(draw: st.DrawFn, env: _Env, depth: int) -> Expr:
    shared = env.shared()
    if depth <= 0:
        return draw(st.sampled_from(shared)) if shared and draw(st.booleans()) else _atom(draw, env)
    kinds = ["atom", "atom", "op", "op", "tuple", "proj", "let", "seq", "if", "fn", "call", "ref", "match"]
    if shared:
        kinds += ["share", "share", "share"]
    if env.adts:
        kinds.append("ctor_app")
    kind = draw(st.sampled_from(kinds))
    node: Expr
    if kind == "atom":
        return _atom(draw, env)
    if kind == "share":
        return draw(st.sampled_from(shared))
    if kind == "op":
        node = _op_call(draw, env, depth)
    elif kind == "tuple":
        node = Tuple([_expr(draw, env, depth - 1) for _ in range(draw(st.integers(0, 3)))])
    elif kind == "proj":
        node = TupleGetItem(_expr(draw, env, depth - 1), draw(st.integers(0, 2)))
    elif kind == "let":
        var = Var(_name(draw), _maybe_type(draw, env))
        if draw(st.integers(0, 3)) == 0:  # a recursive function: its own name is in scope in its value
            _with_frame(env, [var])
            value: Expr = _function(draw, env, depth)
            env.frames.pop()
        else:
            value = _expr(draw, env, depth - 1)
        _with_frame(env, [var])
        node = Let(var, value, _expr(draw, env, depth - 1))
        env.frames.pop()
    elif kind == "seq":
        node = Let(Var("", IncompleteType()), _expr(draw, env, depth - 1), _expr(draw, env, depth - 1))
    elif kind == "if":
        cond = _expr(draw, env, depth - 1)
        node = If(cond, _expr(draw, env, depth - 1), _expr(draw, env, depth - 1))
    elif kind == "fn":
        node = _function(draw, env, depth)
    elif kind == "call":
        callee = draw(st.sampled_from(["fn", "expr"]))
        target = _function(draw, env, depth) if callee == "fn" else _expr(draw, env, depth - 1)
        # `Nil()` reads as `Nil` (TVM): calling an applied nullary constructor needs arguments.
        nullary = type(target) is Call and type(target.op) is Constructor and not target.args
        node = Call(target, [_expr(draw, env, depth - 1) for _ in range(draw(st.integers(int(nullary), 2)))])
    elif kind == "ref":
        which = draw(st.sampled_from(["create", "read", "write"]))
        if which == "create":
            node = RefCreate(_expr(draw, env, depth - 1))
        elif which == "read":
            node = RefRead(_expr(draw, env, depth - 1))
        else:
            node = RefWrite(_expr(draw, env, depth - 1), _expr(draw, env, depth - 1))
    elif kind == "ctor_app":
        ctor = draw(st.sampled_from([c for d in env.adts for c in d.constructors]))
        node = Call(ctor, [_expr(draw, env, depth - 1) for _ in ctor.inputs])
    else:  # match
        data = _expr(draw, env, depth - 1)
        clauses = []
        for _ in range(draw(st.integers(0, 3))):
            bound: list[Var] = []
            lhs = _pattern(draw, env, bound, 2)
            _with_frame(env, bound)
            clauses.append(Clause(lhs, _expr(draw, env, depth - 1)))
            env.frames.pop()
        node = Match(data, clauses, draw(st.booleans()))
    if draw(st.booleans()):
        env.frames[-1].pool.append(node)
    return node


def _type_defs(draw: st.DrawFn) -> list[TypeData]:
    chosen = draw(st.lists(st.sampled_from(ADT_SHAPES), max_size=3, unique_by=lambda s: s[0]))
    out: list[TypeData] = []
    for tag_base, (name, arity, ctors) in enumerate(chosen):
        tvars = tuple(TypeVar(n) for n in TYPE_VAR_NAMES[:arity])
        self_type = TypeCall(name, tvars)
        by_name = {"A": tvars[0] if arity > 0 else None, "B": tvars[1] if arity > 1 else None, "self": self_type}
        constructors = [Constructor(c, tuple(by_name[f] for f in fields), name, tag)  # type: ignore[misc]
                        for tag, (c, fields) in enumerate(ctors)]
        out.append(TypeData(name, tvars, constructors))
    if draw(st.booleans()):
        out.append(TypeData("Handle", tuple(TypeVar(n) for n in TYPE_VAR_NAMES[:draw(st.integers(0, 2))]), [],
                            extern=True))
    return out


@st.composite
def modules(draw: st.DrawFn, max_depth: int = MAX_DEPTH) -> IRModule:
    """A random well-formed (not necessarily well-typed) module; see the module docstring."""
    mod = IRModule()
    env = _Env()
    for data in _type_defs(draw):
        mod.add_type(data)
        if not data.extern:
            env.adts.append(data)
    if draw(st.booleans()):
        env.virtual_devices = draw(st.integers(1, 3))
        mod.metadata["VirtualDevice"] = [{"device_type": i + 1, "virtual_device_id": 0, "target": None}
                                         for i in range(env.virtual_devices)]
    names = draw(st.lists(st.sampled_from(["main", "f", "g", "helper", "f1", "_aux"]), min_size=1, max_size=3,
                          unique=True))
    env.globals = names
    for name in names:
        env.frames = [_Frame()]
        mod.add_function(name, _function(draw, env, max_depth))
    return mod


@st.composite
def expressions(draw: st.DrawFn, max_depth: int = MAX_DEPTH) -> Expr:
    """A random lone expression; its free variables are typed (`free_var %x: T;` needs a type to
    read back as the same annotation)."""
    env = _Env()
    env.free = [Var(_name(draw), _type(draw, env)) for _ in range(draw(st.integers(0, 2)))]
    return _expr(draw, env, max_depth)


# --- well-typed dataflow programs ----------------------------------------------------------------

# Elementwise unary operators: result type = argument type. Total on finite inputs except that
# exp may overflow to inf (compare with NaN/inf-aware tolerances).
DATAFLOW_UNARY = ("negative", "abs", "exp", "tanh", "sigmoid", "nn.relu", "floor", "ceil", "round")
# Broadcasting binary operators: result shape = numpy broadcast of the two shapes, same dtype.
DATAFLOW_BINARY = ("add", "subtract", "multiply", "maximum", "minimum")
DATAFLOW_DTYPES = ("float32", "float32", "float32", "float64")


def _registered(names: tuple[str, ...]) -> tuple[str, ...]:
    known = tuple(n for n in names if get_op(n) is not None)
    assert known, f"none of {names} is a registered operator"
    return known


OP_NAMES = tuple(op_names())
_UNARY = _registered(DATAFLOW_UNARY)
_BINARY = _registered(DATAFLOW_BINARY)


def _broadcast_partner(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with `shape` to exactly `shape`: a suffix with some dims set to 1."""
    suffix = shape[draw(st.integers(0, len(shape))):]
    return tuple(1 if draw(st.integers(0, 2)) == 0 else d for d in suffix)


@st.composite
def dataflow_programs(draw: st.DrawFn, max_ops: int = 12) -> IRModule:
    """A module whose `main` is a well-typed pure dataflow function over static tensors.

    Every parameter, `let` variable and `main` itself carry their exact types. Values are
    tensors of one dtype (float32 mostly); results are one tensor or a tuple of them.
    """
    dtype = draw(st.sampled_from(DATAFLOW_DTYPES))
    base = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    params: list[Var] = []
    values: list[tuple[Expr, tuple[int, ...]]] = []  # available tensors and their shapes
    lets: list[tuple[Var, Expr]] = []
    # Tuples built so far, with their fields' shapes, for projections.
    tuples: list[tuple[Expr, tuple[tuple[int, ...], ...]]] = []

    def new_param(shape: tuple[int, ...]) -> Var:
        var = Var(f"p{len(params)}", TensorType(shape, dtype))
        params.append(var)
        return var

    def operand(shape: tuple[int, ...]) -> Expr:
        """A tensor of exactly `shape`: an existing value, a new parameter or a constant."""
        same = [e for e, s in values if s == shape]
        choice = draw(st.integers(0, 4))
        if same and choice <= 2:
            return draw(st.sampled_from(same))
        if choice == 3:
            data = draw(st.lists(st.floats(-4, 4, width=32), min_size=int(np.prod(shape)),
                                 max_size=int(np.prod(shape))))
            return Constant(np.array(data, dtype=dtype).reshape(shape))
        return new_param(shape)

    values.append((new_param(base), base))
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "tuple", "proj", "let"]))
        if kind == "proj" and not tuples:
            kind = "unary"
        if kind == "unary":
            arg, shape = draw(st.sampled_from(values))
            values.append((Call(Op(draw(st.sampled_from(_UNARY))), [arg]), shape))
        elif kind == "binary":
            lhs, shape = draw(st.sampled_from(values))
            rhs_shape = _broadcast_partner(draw, shape)
            if rhs_shape == () and draw(st.booleans()):
                rhs: Expr = Constant(np.array(draw(st.floats(-4, 4, width=32)), dtype=dtype))
            else:
                rhs = operand(rhs_shape)
            args = [lhs, rhs] if draw(st.booleans()) else [rhs, lhs]
            values.append((Call(Op(draw(st.sampled_from(_BINARY))), args), shape))
        elif kind == "tuple":
            fields = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
            tuples.append((Tuple([e for e, _ in fields]), tuple(s for _, s in fields)))
        elif kind == "proj":
            tup, shapes = draw(st.sampled_from(tuples))
            index = draw(st.integers(0, len(shapes) - 1))
            values.append((TupleGetItem(tup, index), shapes[index]))
        else:  # let-bind a value; later uses go through the variable
            i = draw(st.integers(0, len(values) - 1))
            value, shape = values[i]
            if isinstance(value, Var):
                continue
            var = Var(f"v{len(lets)}", TensorType(shape, dtype))
            lets.append((var, value))
            values[i] = (var, shape)
    outputs = draw(st.lists(st.sampled_from(values[1:] or values), min_size=1, max_size=3))
    if len(outputs) == 1:
        body: Expr = outputs[0][0]
        ret: Type = TensorType(outputs[0][1], dtype)
    else:
        body = Tuple([e for e, _ in outputs])
        ret = TupleType(tuple(TensorType(s, dtype) for _, s in outputs))
    for var, value in reversed(lets):
        body = Let(var, value, body)
    mod = IRModule()
    mod.add_function("main", Function(params, body, ret))
    return mod


# --- programs with control flow, well-typed -------------------------------------------------------

_CF_UNARY = ("tanh", "sigmoid", "negative", "abs", "nn.relu")
_CF_BINARY = ("add", "subtract", "multiply", "maximum", "minimum")


class _ControlFlowWriter:
    """Writes a well-typed module over float32 tensors of one shape `T` with control flow:
    nested `if`s, `let`s, tuples and projections, closures over tensors (called in place and
    passed to a higher-order global), lists of tensors folded by a closure, and global
    functions recursing at most `%n` (an input between 0 and 4) times, tail or not."""

    def __init__(self, draw: st.DrawFn, shape: tuple[int, ...]) -> None:
        self.draw = draw
        self.t = f"Tensor[({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), float32]" if shape \
            else "float32"
        self.names = 0
        self.globals: list[str] = []     # recursive helpers: @recK(%k: int32, %v: T) -> T
        # The recursion count and the flag in scope: main's parameters, or a helper's %k.
        self.counter, self.flag = "%n", "%c"

    def fresh(self, stem: str) -> str:
        self.names += 1
        return f"%{stem}{self.names}"

    def cond(self, env: list[str], depth: int) -> str:
        kind = self.draw(st.integers(0 if self.flag else 1, 2))
        if kind == 0:
            return self.flag
        if kind == 1:
            return f"{self.counter} > {self.draw(st.integers(0, 3))}"
        return f"sum({self.expr(env, depth - 1)}) > 0f"

    def expr(self, env: list[str], depth: int) -> str:
        d = self.draw
        kinds = ["var", "unary", "binary"] + (["if", "let", "tuple", "closure", "rec", "apply", "list"]
                                             if depth > 0 else [])
        kind = d(st.sampled_from(kinds))
        if kind == "var":
            return d(st.sampled_from(env))
        if kind == "unary":
            return f"{d(st.sampled_from(_CF_UNARY))}({self.expr(env, depth - 1)})"
        if kind == "binary":
            rhs = self.expr(env, depth - 1) if d(st.booleans()) else f"{d(st.sampled_from([0.5, -1.25, 2.0]))}f"
            return f"{d(st.sampled_from(_CF_BINARY))}({self.expr(env, depth - 1)}, {rhs})"
        if kind == "if":
            return (f"if ({self.cond(env, depth)}) {{ {self.expr(env, depth - 1)} }} "
                    f"else {{ {self.expr(env, depth - 1)} }}")
        if kind == "let":
            v = self.fresh("v")
            return f"(let {v}: {self.t} = {self.expr(env, depth - 1)}; {self.expr([*env, v], depth - 1)})"
        if kind == "tuple":
            v = self.fresh("t")
            return (f"(let {v} = ({self.expr(env, depth - 1)}, {self.expr(env, depth - 1)}); "
                    f"{d(st.sampled_from(_CF_BINARY))}({v}.{d(st.integers(0, 1))}, {v}.{d(st.integers(0, 1))}))")
        if kind == "closure":
            f, a = self.fresh("f"), self.fresh("a")
            body = self.expr([*env, a], depth - 1)   # captures what `env` holds
            return f"(let {f} = fn ({a}: {self.t}) -> {self.t} {{ {body} }}; {f}({self.expr(env, depth - 1)}))"
        if kind == "apply":   # a closure passed to a higher-order global, applied %n times
            a = self.fresh("a")
            return (f"@apply_n({self.counter}, fn ({a}: {self.t}) -> {self.t} {{ {self.expr([*env, a], depth - 1)} }}, "
                    f"{self.expr(env, depth - 1)})")
        if kind == "list":
            a, b = self.fresh("a"), self.fresh("b")
            count = d(st.integers(0, 3))
            items = ", ".join(f"Cons({self.expr(env, depth - 1)}" for _ in range(count))
            closing = ")" * count
            fold = f"fn ({a}: {self.t}, {b}: {self.t}) -> {self.t} {{ {d(st.sampled_from(_CF_BINARY))}({a}, {b}) }}"
            return f"@fold({fold}, {items}{', ' if items else ''}Nil{closing}, {self.expr(env, depth - 1)})"
        # kind == "rec": a new recursive global, or one made before
        if self.globals and d(st.booleans()):
            name = d(st.sampled_from(self.globals))
        else:
            name = f"@rec{len(self.globals)}{self.fresh('_')[1:]}"
            outer = self.counter, self.flag
            self.counter, self.flag = "%k", ""
            base = self.expr(["%v"], depth - 1)
            step = self.expr(["%v"], depth - 1)
            if d(st.booleans()):   # a tail call: a loop
                rest = f"{name}(%k - 1, {step})"
            else:
                rest = f"{d(st.sampled_from(_CF_BINARY))}({name}(%k - 1, {step}), {self.expr(['%v'], depth - 1)})"
            self.counter, self.flag = outer
            self.globals.append(name)   # only now: a helper calls itself only as `%k - 1`
            self.definitions.append(f"def {name}(%k: int32, %v: {self.t}) -> {self.t} {{\n"
                                    f"  if (%k <= 0) {{ {base} }} else {{ {rest} }}\n}}")
        return f"{name}({self.counter}, {self.expr(env, depth - 1)})"

    def module(self, depth: int) -> str:
        self.definitions: list[str] = []
        body = self.expr(["%x", "%y"], depth)
        second = self.expr(["%x", "%y"], 1) if self.draw(st.booleans()) else None
        result = f"({body}, {second})" if second is not None else body
        ret = f"({self.t}, {self.t})" if second is not None else self.t
        t = self.t
        return "\n".join([
            '#[version = "0.0.5"]',
            "type List[A] { Cons(A, List[A]), Nil }",
            f"def @apply_n(%k: int32, %f: fn ({t}) -> {t}, %v: {t}) -> {t} {{",
            "  if (%k <= 0) { %v } else { @apply_n(%k - 1, %f, %f(%v)) }",
            "}",
            f"def @fold(%f: fn ({t}, {t}) -> {t}, %l: List[{t}], %acc: {t}) -> {t} {{",
            "  match (%l) { Cons(%h, %rest) => @fold(%f, %rest, %f(%acc, %h)), Nil => %acc }",
            "}",
            *self.definitions,
            f"def @main(%x: {t}, %y: {t}, %n: int32, %c: bool) -> {ret} {{",
            f"  {result}",
            "}",
        ])


@st.composite
def control_flow_programs(draw: st.DrawFn, max_depth: int = 3) -> IRModule:
    """A well-typed module whose `main(%x, %y: T, %n: int32, %c: bool)` has random control flow
    (see `_ControlFlowWriter`); `%n` between 0 and 4 bounds every recursion."""
    from irtool.syntax.parser import parse
    shape = draw(st.sampled_from([(), (3,), (2, 3)]))
    text = _ControlFlowWriter(draw, shape).module(draw(st.integers(1, max_depth)))
    program = parse(text, "control_flow.relay")
    assert isinstance(program, IRModule)
    return program
