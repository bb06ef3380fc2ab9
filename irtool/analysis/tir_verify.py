"""The TIR verifier: what every PrimFunc must satisfy before a pass, the interpreter or codegen
may rely on it. Errors are `DiagnosticError`s at the offending node (or, for nodes a pass built
without a span, at the nearest enclosing node that has one).

Rules: variables and buffers are used only inside their scope; every variable and every
allocated buffer is bound once in the function (so loop variables are never rebound, and
stores only ever target buffers); loads and stores index every dimension with integers; the
operands of an operator have the same dtype; lanes agree (a vector index gives a vector of that
many lanes; scalars mix with vectors only through `broadcast`); conditions are bool.
"""

from __future__ import annotations

from irtool.core.span import Span
from irtool.ir.tir import (ALL_INTRINSICS, ARITH_OPS, BIT_OPS, COMPARE_OPS, INFIX_SYMBOLS, INTEGER_INTRINSICS,
                           LOGIC_OPS, LOOP_KINDS, SCOPES, Allocate, AssertStmt, BinaryOp, Broadcast, Buffer, BufferLoad,
                           BufferStore, Call, Cast, Evaluate, FloatImm, For, IfExpr, IfThenElse, IntImm, LetStmt, Not,
                           PrimExpr, PrimFunc, Ramp, Select, SeqStmt, Stmt, Var, children, element_of, int_range, is_bool,
                           is_float, is_int, lanes_of, with_lanes)
from irtool.core.diagnostics import DiagnosticError
from irtool.ir.types import parse_dtype


def verify_primfunc(func: PrimFunc, name: str = "") -> None:
    """Raises `DiagnosticError` at the first violation found (in text order)."""
    _Verifier(func, name).run()


def _op_text(op: str) -> str:
    return f"`{INFIX_SYMBOLS[op]}`" if op in INFIX_SYMBOLS else f"`{op}`"


class _Verifier:
    def __init__(self, func: PrimFunc, name: str) -> None:
        self.func = func
        self.label = f"@{name}" if name else "the function"
        self.in_scope: set[int] = set()    # ids of the variables and buffers visible here
        self.bound: set[int] = set()       # ids of everything bound so far in the function
        self.where: Span | None = func.span

    def fail(self, message: str, span: Span | None = None) -> DiagnosticError:
        return DiagnosticError(message, span or self.where)

    def bind(self, obj: Var | Buffer, span: Span | None) -> None:
        if id(obj) in self.bound:
            kind = "buffer" if type(obj) is Buffer else "variable"
            raise self.fail(f"{kind} `%{obj.name}` is bound more than once in {self.label}", span)
        self.bound.add(id(obj))
        self.in_scope.add(id(obj))

    def check_dtype(self, dtype: str, span: Span | None) -> None:
        if parse_dtype(dtype) != dtype:
            raise self.fail(f"invalid dtype `{dtype}`", span)

    def check_buffer(self, buf: Buffer, span: Span | None) -> None:
        self.check_dtype(buf.dtype, span)
        if not all(type(d) is int and d >= 0 for d in buf.shape):
            raise self.fail(f"buffer `%{buf.name}` has an invalid shape {buf.shape}", span)
        if buf.strides is not None and len(buf.strides) != len(buf.shape):
            raise self.fail(f"buffer `%{buf.name}` has {len(buf.strides)} strides for {len(buf.shape)} dimensions",
                            span)
        if buf.scope not in SCOPES:
            raise self.fail(f"buffer `%{buf.name}` has unknown scope `{buf.scope}`", span)
        if buf.align < 0:
            raise self.fail(f"buffer `%{buf.name}` has a negative alignment", span)

    def run(self) -> None:
        for param in self.func.params:
            self.check_buffer(param, param.span)
            if param.scope != "global":
                raise self.fail(f"parameter `%{param.name}` must be in global scope", param.span)
            self.bind(param, param.span)
        # Tasks: a statement to check, or an object leaving scope.
        stack: list[Stmt | tuple[Var | Buffer]] = [self.func.body]
        while stack:
            task = stack.pop()
            if type(task) is tuple:
                self.in_scope.discard(id(task[0]))
                continue
            stmt: Stmt = task
            self.where = stmt.span or self.where
            span = stmt.span
            if isinstance(stmt, SeqStmt):
                stack.extend(reversed(stmt.stmts))
            elif isinstance(stmt, For):
                self.check_for(stmt)
                stack.extend([(stmt.var,), stmt.body])
            elif isinstance(stmt, LetStmt):
                value = self.expr(stmt.value)
                var = stmt.var
                self.check_dtype(var.dtype, var.span or span)
                if var.dtype != value:
                    raise self.fail(f"`let %{var.name}: {var.dtype}` is given a {value} value", span)
                self.bind(var, var.span or span)
                stack.extend([(var,), stmt.body])
            elif isinstance(stmt, Allocate):
                buf = stmt.buffer
                self.check_buffer(buf, buf.span or span)
                self.bind(buf, buf.span or span)
                stack.extend([(buf,), stmt.body])
            elif isinstance(stmt, BufferStore):
                target = self.access(stmt.buffer, stmt.indices, span)
                value = self.expr(stmt.value)
                if value != target:
                    raise self.fail(f"storing a {value} value into `%{stmt.buffer.name}`, "
                                    f"whose elements here are {target}", span)
            elif isinstance(stmt, IfThenElse):
                self.condition(stmt.cond, "an `if` condition")
                if stmt.else_body is not None:
                    stack.append(stmt.else_body)
                stack.append(stmt.then_body)
            elif isinstance(stmt, Evaluate):
                self.expr(stmt.value)
            elif isinstance(stmt, AssertStmt):
                self.condition(stmt.cond, "an assert condition")
            else:
                raise self.fail(f"not a TIR statement: {type(stmt).__name__}", span)

    def check_for(self, loop: For) -> None:
        if loop.kind not in LOOP_KINDS:
            raise self.fail(f"unknown loop kind `{loop.kind}`", loop.span)
        var = loop.var
        self.check_dtype(var.dtype, var.span or loop.span)
        if not is_int(var.dtype) or lanes_of(var.dtype) != 1:
            raise self.fail(f"loop variable `%{var.name}` must be a scalar integer, not {var.dtype}", var.span)
        for bound in (loop.begin, loop.end):
            dtype = self.expr(bound)
            if dtype != var.dtype:
                raise self.fail(f"loop bounds of `%{var.name}` must be {var.dtype}, found {dtype}",
                                bound.span or loop.span)
        self.bind(var, var.span or loop.span)

    def condition(self, cond: PrimExpr, what: str) -> None:
        dtype = self.expr(cond)
        if dtype != "bool":
            raise self.fail(f"{what} must be a scalar bool, found {dtype}", cond.span)

    def access(self, buf: Buffer, indices: tuple[PrimExpr, ...], span: Span | None) -> str:
        """The dtype a load/store of `buf` at `indices` has (checking the indices)."""
        if id(buf) not in self.in_scope:
            raise self.fail(f"buffer `%{buf.name}` is used outside its scope", span)
        if len(indices) != len(buf.shape):
            raise self.fail(f"buffer `%{buf.name}` has {len(buf.shape)} dimension(s), indexed with {len(indices)}",
                            span)
        lanes = 1
        for index in indices:
            dtype = self.expr(index)
            if not is_int(dtype):
                raise self.fail(f"index of `%{buf.name}` must be an integer, found {dtype}", index.span or span)
            n = lanes_of(dtype)
            if n > 1:
                if lanes > 1 and n != lanes:
                    raise self.fail(f"vector indices of `%{buf.name}` have different lanes ({lanes} and {n})",
                                    index.span or span)
                lanes = n
        if lanes > 1 and lanes_of(buf.dtype) > 1:
            raise self.fail(f"buffer `%{buf.name}` of vector dtype {buf.dtype} takes scalar indices only", span)
        return buf.dtype if lanes == 1 else with_lanes(buf.dtype, lanes)

    def expr(self, root: PrimExpr) -> str:
        """Checks an expression tree (iteratively) and returns its dtype."""
        stack = [root]
        while stack:
            node = stack.pop()
            self.check_node(node)
            stack.extend(children(node))
        return root.dtype

    def check_node(self, node: PrimExpr) -> None:
        span = node.span
        if isinstance(node, Var):
            if id(node) not in self.in_scope:
                raise self.fail(f"variable `%{node.name}` is used outside its scope", span)
        elif isinstance(node, IntImm):
            self.check_dtype(node.dtype, span)
            if not is_int(node.dtype) and not is_bool(node.dtype) or lanes_of(node.dtype) != 1:
                raise self.fail(f"an integer literal cannot have dtype {node.dtype}", span)
            low, high = int_range(node.dtype)
            if not low <= node.value <= high:
                raise self.fail(f"literal {node.value} is out of range for {node.dtype}", span)
        elif isinstance(node, FloatImm):
            if not is_float(node.dtype) or lanes_of(node.dtype) != 1:
                raise self.fail(f"a float literal cannot have dtype {node.dtype}", span)
        elif isinstance(node, BinaryOp):
            self.check_binary(node)
        elif isinstance(node, Not):
            if not is_bool(node.a.dtype):
                raise self.fail(f"`not` needs a bool operand, found {node.a.dtype}", span)
        elif isinstance(node, Select):
            self.check_select(node)
        elif isinstance(node, IfExpr):
            if node.cond.dtype != "bool":
                raise self.fail(f"if_then_else condition must be a scalar bool, found {node.cond.dtype}", span)
            if node.true_value.dtype != node.false_value.dtype:
                raise self.fail(f"if_then_else branches have different dtypes: {node.true_value.dtype} and "
                                f"{node.false_value.dtype}", span)
        elif isinstance(node, Cast):
            self.check_dtype(node.dtype, span)
            if lanes_of(node.dtype) != lanes_of(node.value.dtype):
                raise self.fail(f"cast from {node.value.dtype} to {node.dtype} changes the number of lanes; "
                                "use broadcast", span)
        elif isinstance(node, BufferLoad):
            self.access(node.buffer, node.indices, span)
        elif isinstance(node, Ramp):
            base, stride = node.base, node.stride
            if not is_int(base.dtype) or lanes_of(base.dtype) != 1 or stride.dtype != base.dtype:
                raise self.fail(f"ramp needs scalar integer base and stride of one dtype, found {base.dtype} and "
                                f"{stride.dtype}", span)
            if node.lanes < 1:
                raise self.fail("ramp lanes must be positive", span)
        elif isinstance(node, Broadcast):
            if lanes_of(node.value.dtype) != 1 or node.lanes < 1:
                raise self.fail(f"broadcast needs a scalar and positive lanes, found {node.value.dtype}", span)
        elif isinstance(node, Call):
            self.check_call(node)
        else:
            raise self.fail(f"not a TIR expression: {type(node).__name__}", span)

    def check_binary(self, node: BinaryOp) -> None:
        a, b, op = node.a.dtype, node.b.dtype, node.op
        if a != b:
            raise self.fail(f"operands of {_op_text(op)} have different dtypes: {a} and {b}", node.span)
        if op in LOGIC_OPS:
            if not is_bool(a):
                raise self.fail(f"{_op_text(op)} needs bool operands, found {a}", node.span)
        elif op in ("floordiv", "floormod") or op in BIT_OPS:
            if not is_int(a):
                raise self.fail(f"{_op_text(op)} needs integer operands, found {a}", node.span)
        elif op in ARITH_OPS and is_bool(a):
            raise self.fail(f"{_op_text(op)} does not apply to {a}", node.span)
        elif op not in ARITH_OPS and op not in COMPARE_OPS:
            raise self.fail(f"unknown operator `{op}`", node.span)

    def check_select(self, node: Select) -> None:
        cond, t, f = node.cond.dtype, node.true_value.dtype, node.false_value.dtype
        if t != f:
            raise self.fail(f"select branches have different dtypes: {t} and {f}", node.span)
        if not is_bool(cond) or lanes_of(cond) not in (1, lanes_of(t)):
            raise self.fail(f"select condition must be bool with 1 or {lanes_of(t)} lanes, found {cond}", node.span)

    def check_call(self, node: Call) -> None:
        arity = ALL_INTRINSICS.get(node.name)
        if arity is None:
            raise self.fail(f"unknown intrinsic `{node.name}`", node.span)
        if len(node.args) != arity:
            raise self.fail(f"`{node.name}` takes {arity} argument(s), {len(node.args)} given", node.span)
        integer = node.name in INTEGER_INTRINSICS
        for arg in node.args:
            if arg.dtype != node.dtype or (element_of(arg.dtype) != "int32" if integer else not is_float(arg.dtype)):
                raise self.fail(f"`{node.name}` needs {'int32' if integer else 'float'} arguments of one dtype, found "
                                f"{', '.join(a.dtype for a in node.args)}", node.span)
