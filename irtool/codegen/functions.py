"""The functions path of code generation (docs/native-relay.md): a lowered module whose `main` is not
pure dataflow becomes one LLVM function per reachable Relay function instance.

`ProgramBuilder` starts at `main` and generates every instance it reaches (a polymorphic function
once per instantiation, found from the types at each call; a function literal once per enclosing
instance) with `irtool.codegen.instance`, then the objects' drop functions, the kernels, and the
C entry points `<prefix>_init`/`<prefix>_run` with the AOT path's ABI.
"""

from __future__ import annotations

import numpy as np

from irtool.analysis.typecheck import infer_types
from irtool.codegen.boxes import (BOX_RUNTIME_TEXT, boxed_body, data_fields, free_function, is_box,
                                  rows_wrapper)
from irtool.codegen.entry import (ABI, GeneratedModule, RUN_KERNEL, TensorSpec, _attribute_groups, _with_attributes,
                                  constant_global, misaligned, output_specs, sanitize, tensor_specs)
from irtool.codegen.instance import VIEW_OPS, FunctionBuilder, Instance, Subst, has_type_vars, match_type
from irtool.codegen.objects import (BIG_STACK_DECLARATIONS, BIG_STACK_TEXT, CALLER_STACK_BUDGET, ON_BIG_STACK,
                                    RUNTIME_DECLARATIONS, RUNTIME_TEXT, STATUS_STACK_OVERFLOW, Leaf, Obj,
                                    drop_function, leaves_of)
from irtool.codegen.tir_to_llvm import STATUS_MISALIGNED, STATUS_OK, ModuleContext, primfunc_to_llvm
from irtool.core.diagnostics import DiagnosticError
from irtool.core.span import Span
from irtool.ir.expr import Call, Constant, Function, GlobalVar, Let, Op, Tuple, TupleGetItem, Var
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.ir.types import FuncType, TupleType, Type, type_to_text
from irtool.ir.visitor import free_vars, post_order
from irtool.target import TargetOptions

# Kernels whose buffers are all this small may be inlined into their callers (scalar arithmetic).
_INLINE_KERNEL_ELEMENTS = 64

def is_dataflow_main(mod: IRModule) -> bool:
    """Whether `main` is what the AOT path compiles: variables, constants, tuples, projections,
    `let`, and calls of kernels (`call_lowered` of a primfn), views and device copies, over
    tensors only."""
    main = mod.functions.get("main")
    if not isinstance(main, Function):
        return True
    if any(isinstance(leaf, Obj) for p in main.params for leaf in _param_leaves(p)):
        return False   # objects, and tensors of dynamic shape (boxes)
    kernels: set[int] = set()
    nodes = post_order(main.body)
    for node in nodes:
        if isinstance(node, Call):
            if not isinstance(node.op, Op):
                return False
            if node.op.name == "call_lowered":
                target = node.args[0] if node.args else None
                if not (isinstance(target, GlobalVar) and isinstance(mod.functions.get(target.name_hint), PrimFunc)):
                    return False
                kernels.add(id(target))
            elif node.op.name not in VIEW_OPS:
                return False
        elif not isinstance(node, (Var, Constant, Tuple, TupleGetItem, Let, Op, GlobalVar)):
            return False
    return all(id(n) in kernels for n in nodes if isinstance(n, GlobalVar))


def main_result(main: Function) -> Type | None:
    """`main`'s declared result type (its body's may be more precise: a static shape for a `?`)."""
    t = main.checked_type
    return t.ret_type if isinstance(t, FuncType) else main.body.checked_type


def _param_leaves(p: Var) -> tuple[Leaf, ...]:
    t = p.checked_type or p.type_annotation
    try:
        return leaves_of(t, p.span)
    except DiagnosticError:
        return ()


def _subst_key(subst: Subst) -> tuple[tuple[str, Type], ...]:
    return tuple(sorted(subst.items(), key=lambda kv: kv[0]))


class ProgramBuilder:
    """Every instance reachable from `main`, and what they share (kernels, constants, drops)."""

    def __init__(self, mod: IRModule, prefix: str, ctx: ModuleContext,
                 external_constants: dict[str, np.ndarray] | None) -> None:
        self.mod = mod
        self.prefix = prefix
        self.ctx = ctx
        self.external_constants = external_constants
        self.instances: dict[tuple, Instance] = {}
        self.queue: list[Instance] = []
        self.defines: list[str] = []
        self.globals: list[str] = []
        self.constants: dict[int, str] = {}
        self.drops: dict[tuple, str] = {}
        self.kernel_align: dict[str, list[int]] = {}
        self.names: set[str] = set()
        # The call graph, for deciding whether deep recursion is possible: direct calls, and
        # calls of closures (which may reach any function used as a value).
        self.calls: dict[str, set[str]] = {}
        self.calls_closures: set[str] = set()
        self.function_values: set[str] = set()
        # Batch-1 kernels run per row (irtool/codegen/boxes.py): wrapper symbol -> its text.
        self.row_wrappers: dict[str, str] = {}
        # Routines of the operators with data-dependent extents (irtool/codegen/data_dependent.py).
        self.routines: dict[str, str] = {}
        self.boxes = False

    def fresh_symbol(self, stem: str) -> str:
        base = f"{self.prefix}_{sanitize(stem)}"
        name, k = base, 0
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    # -- instances
    def global_instance(self, name: str, subst: Subst, at: Span | None) -> Instance:
        func = self.mod.functions.get(name)
        if not isinstance(func, Function):
            raise DiagnosticError(f"native code: @{name} is not a Relay function", at)
        if func.is_primitive:
            raise DiagnosticError(f"native code: the primitive function @{name} is not lowered (run `lower`: its "
                                  "calls become kernels)", at)
        key = ("global", name, _subst_key(subst))
        inst = self.instances.get(key)
        if inst is None:
            inst = Instance(self.fresh_symbol(f"fn_{name}"), func, dict(subst))
            self.instances[key] = inst
            self.queue.append(inst)
        return inst

    def lambda_instance(self, func: Function, subst: Subst, self_var: Var | None, borrows: bool) -> Instance:
        key = ("lambda", id(func), _subst_key(subst))
        inst = self.instances.get(key)
        if inst is None:
            captures = [v for v in free_vars(func) if v is not self_var]
            inst = Instance(self.fresh_symbol("lambda"), func, dict(subst), captures, self_var, borrows)
            self.instances[key] = inst
            self.queue.append(inst)
        return inst

    def instantiate(self, func: Function, arg_types: list[Type], ret: Type | None, at: Span | None,
                    what: str) -> Subst:
        """The type arguments of a polymorphic function at a call with these concrete types."""
        fn_t = func.checked_type
        if not isinstance(fn_t, FuncType) or not fn_t.type_params:
            return {}
        params = {p.name for p in fn_t.type_params}
        out: Subst = {}
        pattern = TupleType((*fn_t.arg_types, fn_t.ret_type))
        concrete = TupleType((*arg_types, ret if ret is not None else fn_t.ret_type))
        if not match_type(pattern, concrete, params, out) or set(out) != params \
                or any(has_type_vars(t) for t in out.values()):
            raise DiagnosticError(f"native code: cannot instantiate the polymorphic {what} at this call "
                                  f"(its type {type_to_text(fn_t)}, the arguments' types "
                                  f"{', '.join(type_to_text(t) for t in arg_types)})", at)
        return out

    # -- shared definitions
    def constant(self, node: Constant) -> str:
        symbol = self.constants.get(id(node))
        if symbol is None:
            stem = f"{self.prefix}_k{len(self.constants)}"
            symbol, text = constant_global(stem, node.data, self.external_constants)
            self.globals.append(text)
            self.constants[id(node)] = symbol
        return symbol

    def drop(self, key: tuple, leaves: tuple[Leaf, ...], offsets: list[int]) -> str:
        symbol = self.drops.get(key)
        if symbol is None:
            symbol = self.fresh_symbol(f"drop{len(self.drops)}")
            self.drops[key] = symbol
            self.defines.append(drop_function(symbol, leaves, offsets))
        return symbol

    def kernel(self, name: str, aligns: list[int]) -> PrimFunc:
        func = self.mod.functions[name]
        assert isinstance(func, PrimFunc)
        old = self.kernel_align.get(name)
        self.kernel_align[name] = aligns if old is None else [min(a, b) for a, b in zip(old, aligns)]
        return func

    def kernel_symbol(self, name: str) -> str:
        return f"{self.prefix}_{sanitize(name)}"

    def rows_symbol(self, name: str, flags: tuple[int, ...], rows: list[int], tile: tuple[str, int] | None) -> str:
        """The wrapper running the batch-1 kernel `name` (after its `tile` kernel) over the rows of
        a run-time batch."""
        symbol = f"{self.kernel_symbol(name)}.rows"
        if symbol not in self.row_wrappers:
            self.row_wrappers[symbol] = rows_wrapper(symbol, self.kernel_symbol(name), flags, rows, tile)
        return symbol

    def box_drop(self) -> str:
        """The drop function of a box (no object fields: it frees the box)."""
        self.boxes = True
        return self.drop(("box",), (), [])

    # -- the whole program
    def build(self, main: Function) -> tuple[list[TensorSpec], list[TensorSpec], bool]:
        infer_types(self.mod)
        for p in main.params:
            for leaf in leaves_of(p.checked_type or p.type_annotation, p.span):
                if isinstance(leaf, Obj) and not is_box(leaf):
                    raise DiagnosticError(f"native code: main's parameter %{p.name_hint} has type "
                                          f"{type_to_text(p.checked_type or p.type_annotation)}; the C ABI takes "
                                          "tensors and tuples of tensors", p.span)
        result = main_result(main)
        for leaf in leaves_of(result, main.span):
            if isinstance(leaf, Obj) and not is_box(leaf):
                raise DiagnosticError(f"native code: main returns {type_to_text(result)}; the C ABI "
                                      "returns tensors and tuples of tensors", main.span)
        entry = self.global_instance("main", {}, main.span)
        while self.queue:
            inst = self.queue.pop(0)
            self.defines.append(FunctionBuilder(self, inst).build())
        inputs = tensor_specs(list(main.params), [[leaf.rtype if isinstance(leaf, Obj) else leaf  # a box's type
                                                   for leaf in leaves_of(p.checked_type, p.span)]
                                                  for p in main.params])  # type: ignore[misc]
        outputs = output_specs(result, main.span)
        deep = self.may_recurse(entry.symbol)
        self.defines.append(self.entry_points(entry, inputs, outputs, deep))
        return inputs, outputs, deep

    def may_recurse(self, root: str) -> bool:
        """Whether the call graph from `root` has a cycle (self tail calls are loops, not edges)."""
        edges = {k: set(v) for k, v in self.calls.items()}
        for caller in self.calls_closures:
            edges.setdefault(caller, set()).update(self.function_values)
        state: dict[str, int] = {}   # 1 on the path, 2 finished
        stack: list[tuple[str, list[str]]] = [(root, sorted(edges.get(root, ())))]
        state[root] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                state[node] = 2
                stack.pop()
                continue
            nxt = todo.pop()
            if state.get(nxt) == 1:
                return True
            if nxt not in state:
                state[nxt] = 1
                stack.append((nxt, sorted(edges.get(nxt, ()))))
        return False

    def entry_points(self, entry: Instance, inputs: list[TensorSpec], outputs: list[TensorSpec], deep: bool) -> str:
        """`<prefix>_body(ctx, in, out)` calling main's instance, `<prefix>_run` (the AOT ABI: checks
        alignment, then runs the body here or on a thread with a large stack), `<prefix>_init`."""
        p = self.prefix
        lines: list[str] = []
        temps = [0]

        def emit(text: str) -> str:
            temps[0] += 1
            lines.append(f"  %e{temps[0]} = {text}")
            return f"%e{temps[0]}"

        def pointers(array: str, n: int) -> list[str]:
            return [emit(f"load ptr, ptr {emit(f'getelementptr inbounds ptr, ptr {array}, i64 {k}')}, align 8")
                    for k in range(n)]

        lines.append("entry:")
        if any(spec.dynamic for spec in inputs + outputs):
            self.ctx.declare("llvm.memcpy.p0.p0.i64", "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")
            boxed_body(entry.symbol, inputs, outputs, emit, lines, self.box_drop())
        else:
            args = [f"ptr {x}" for x in pointers("%in", len(inputs)) + pointers("%out", len(outputs))]
            status = emit(f"call i32 @{entry.symbol}(ptr %ctx, ptr null{''.join(', ' + a for a in args)})")
            lines.append(f"  ret i32 {status}")
        body = "\n".join([f"define internal i32 @{p}_body(ptr %ctx, ptr %in, ptr %out) #0 {{", *lines, "}", ""])
        lines.clear()
        lines.append("entry:")
        checked = inputs + [spec for spec in outputs if not spec.dynamic]   # dynamic outputs are the callee's
        fields = [("%in", k) for k in data_fields(inputs)] + [("%out", k) for k, spec in
                                                              zip(data_fields(outputs), outputs) if not spec.dynamic]
        data = [emit(f"load ptr, ptr {emit(f'getelementptr inbounds ptr, ptr {array}, i64 {k}')}, align 8")
                for array, k in fields]
        bad = misaligned(emit, data, checked)
        if bad != "false":
            lines += [f"  br i1 {bad}, label %misaligned, label %body", "misaligned:",
                      f"  ret i32 {STATUS_MISALIGNED}", "body:"]
        ctx = emit("alloca i64, align 8")
        if deep:
            # First on the caller's stack, within a budget; a deeper recursion runs again on a
            # thread with a large stack (a failed run has released everything it held).
            limit = emit(f"sub i64 {emit(f'ptrtoint ptr {ctx} to i64')}, {CALLER_STACK_BUDGET}")
            lines.append(f"  store i64 {limit}, ptr {ctx}, align 8")
            first = emit(f"call i32 @{p}_body(ptr {ctx}, ptr %in, ptr %out)")
            lines += [f"  br i1 {emit(f'icmp eq i32 {first}, {STATUS_STACK_OVERFLOW}')}, label %deep, label %done",
                      "deep:"]
            self.ctx.functions.append(BIG_STACK_TEXT)
            for name, text in BIG_STACK_DECLARATIONS.items():
                self.ctx.declare(name, text)
            again = emit(f"call i32 @{ON_BIG_STACK}(ptr @{p}_body, ptr %in, ptr %out)")
            lines += ["  br label %done", "done:"]
            status = emit(f"phi i32 [ {first}, %{'body' if bad != 'false' else 'entry'} ], [ {again}, %deep ]")
        else:
            lines.append(f"  store i64 0, ptr {ctx}, align 8")
            status = emit(f"call i32 @{p}_body(ptr {ctx}, ptr %in, ptr %out)")
        lines.append(f"  ret i32 {status}")
        written = " readonly" if not any(spec.dynamic for spec in outputs) else ""   # dynamic outputs' pointers
        run = "\n".join([f"define i32 @{p}_run(ptr noalias nocapture readonly %in, "
                         f"ptr noalias nocapture{written} %out, ptr %ws) #0 {{", *lines, "}", ""])
        init = "\n".join([f"define i32 @{p}_init() #0 {{", "entry:", f"  ret i32 {STATUS_OK}", "}", ""])
        self.globals.append(f"@{p}_workspace_size = constant i64 0, align 8")
        return "\n".join([body, init, run])


def generate_functions_module(mod: IRModule, prefix: str, options: TargetOptions, ctx: ModuleContext,
                              embed_constants: bool, export_kernels: bool) -> GeneratedModule:
    """The LLVM module of the functions path (the caller, `entry.generate_module`, has checked
    that `mod` is lowered and has a `main` that is not pure dataflow)."""
    main = mod.functions["main"]
    assert isinstance(main, Function)
    external: dict[str, np.ndarray] = {}
    prog = ProgramBuilder(mod, prefix, ctx, None if embed_constants else external)
    inputs, outputs, _ = prog.build(main)
    for name, text in RUNTIME_DECLARATIONS.items():
        ctx.declare(name, text)
    linkage = "" if export_kernels else "internal"
    kernels = []
    for name in sorted(prog.kernel_align):
        func = mod.functions[name]
        assert isinstance(func, PrimFunc)
        define = primfunc_to_llvm(ctx, func, prog.kernel_symbol(name), prog.kernel_align[name], True, linkage)
        small = all(int(np.prod(b.shape, dtype=np.int64)) <= _INLINE_KERNEL_ELEMENTS for b in func.params)
        kernels.append(define if small else _with_attributes(define, RUN_KERNEL))
    kernels += [*prog.row_wrappers.values(), *prog.routines.values()]
    if prog.boxes:
        kernels.append(BOX_RUNTIME_TEXT)
    if any(spec.dynamic for spec in outputs):
        kernels.append(free_function(prefix))
    abi = ABI(prefix, inputs, outputs, 0, main_result(main), list(ctx.assert_messages))
    header = f"; irtool-llc module `{prefix}` (functions)"
    tail = [*sorted(ctx.declarations.values()), "", *_attribute_groups(options.function_attributes()), "",
            *ctx.metadata, ""]
    ir = "\n".join([header, "", *prog.globals, "", *kernels, RUNTIME_TEXT, *prog.defines, *ctx.added_functions(),
                    *tail])
    return GeneratedModule(ir, prefix, abi, sorted(prog.kernel_align), external, None, None, [])
