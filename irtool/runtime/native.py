"""Running compiled modules on numpy arrays, in process (MCJIT).

`NativeModule(mod)` generates and JIT-compiles the `main` of a prepared module (`irtool.build`,
in `irtool.driver`, prepares it); the result is cached by the hash of the generated LLVM IR and
the target options, so building the same module twice compiles once. Calls check every input's
name, shape, dtype and C-contiguity (a `DiagnosticError` that names the parameter), pass the
arrays as they are (the ABI asks only for element alignment, which numpy arrays have; a
misaligned view is copied), allocate the outputs 64-byte aligned, and reuse one workspace per
built module (so a built module is not re-entrant: one call at a time). The pool of hoisted
tensors that `_init` fills is numpy memory bound to the module's pool symbol, like the constants
(large numpy arrays get transparent huge pages, which weight-streaming kernels need); it lives as
long as the process. Engines live as long as the process too; at exit, before they are freed, each
runs its static destructors, which stop and join a threaded module's parked pool workers
(`irtool.codegen.thread_pool`).
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import functools
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from irtool.codegen.boxes import FREE_SUFFIX, data_fields
from irtool.codegen.compile import ChunkCompiler, compile_module, compile_threads
from irtool.codegen.entry import ABI, GeneratedModule, TensorSpec, generate_module, sanitize
from irtool.codegen.machine import parse_and_optimize, target_machine
from irtool.target import TargetOptions
from irtool.eval.tir_interp import array_shape, numpy_dtype
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.ir.types import TupleType, Type
from irtool.core.diagnostics import DiagnosticError
from irtool.core.progress import Progress
from irtool.runtime.buffers import aligned_empty, describe_status

_CACHE: dict[str, llvm.ExecutionEngine] = {}


@atexit.register
def _stop_thread_pools() -> None:
    """Joins the pool workers of threaded modules (their `llvm.global_dtors`) while their code
    is still mapped: a worker left parked would return into freed memory."""
    for engine in _CACHE.values():
        engine.run_static_destructors()


def _jit(ir: str, options: TargetOptions, make_engine: Callable[[], llvm.ExecutionEngine],
         symbol: str | None) -> tuple[llvm.ExecutionEngine, int]:
    """A finalized engine for `ir` (cached by its hash and the options) and `symbol`'s address."""
    key = hashlib.sha256(repr((ir, options)).encode()).hexdigest()
    engine = _CACHE.get(key)
    if engine is None:
        _bind_compiler_runtime()
        engine = make_engine()
        engine.finalize_object()
        _CACHE[key] = engine
    return engine, (engine.get_function_address(symbol) if symbol else 0)


# Helpers LLVM calls for conversions the target has no instruction for (double to half always,
# float/half without F16C): the JIT finds them only if they are bound, as the C linker does.
_COMPILER_RUNTIME = ("__truncdfhf2", "__truncsfhf2", "__extendhfsf2")


@functools.cache
def _bind_compiler_runtime() -> None:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("gcc_s") or "libgcc_s.so.1")
    except OSError:
        return
    for name in _COMPILER_RUNTIME:
        if hasattr(lib, name):
            llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)


def _engine(generated: GeneratedModule, prefix: str, options: TargetOptions,
            compiler: ChunkCompiler | None = None) -> llvm.ExecutionEngine:
    """MCJIT over the generated code: its kernel modules compiled by `compiler` (in parallel
    processes, or read from the object cache) and linked by the JIT to the entry module, or the
    one module. The entry module (small, optimised here while the workers finish) is a module of
    the engine, so that `run_static_destructors` runs the thread pool's shutdown it holds."""
    if generated.chunk_irs and compiler is not None:
        tm = target_machine(options, jit=True)
        engine = llvm.create_mcjit_compiler(parse_and_optimize(generated.chunk_irs[0], options, tm), tm)
        for obj in compiler.objects():
            engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        return engine
    art = compile_module(generated, prefix, options, jit=True)
    return llvm.create_mcjit_compiler(art.llvm_module, art.target)


_SYMBOLS: dict[str, np.ndarray] = {}


def _bind_symbol(name: str, data: np.ndarray) -> None:
    """Makes `name` resolve to an aligned copy of `data` in JIT-compiled code. Names carry a
    hash of the data, so one name always means the same bytes; the first copy stays bound."""
    held = _SYMBOLS.get(name)
    if held is None:
        held = aligned_empty(data.shape, data.dtype)
        held[...] = data
        _SYMBOLS[name] = held
        llvm.add_symbol(name, held.ctypes.data)


class NativeModule:
    """`main` compiled to native code; call it like the interpreter's `run_function`."""

    def __init__(self, mod: IRModule, options: TargetOptions, prefix: str = "irtool",
                 export_kernels: bool = False, cache_dir: str | None = None,
                 progress: Progress | None = None) -> None:
        """`cache_dir`: the on-disk cache of compiled kernels (`irtool.codegen.object_cache`);
        the kernels are then compiled as separate modules even on one CPU, as the cache holds
        those. `progress` reports the stages on a terminal (`irtool.core.progress`)."""
        if progress is not None:
            progress.start("generating code")
        # The kernel modules compile in worker processes while the rest are generated.
        compiler = ChunkCompiler(options, cache_dir, progress) if compile_threads() > 1 or cache_dir is not None \
            else None
        try:
            generated = generate_module(mod, prefix, options, embed_constants=False, export_kernels=export_kernels,
                                        split=compiler is not None,
                                        sink=None if compiler is None else compiler.submit)
            if generated.abi is None:
                raise DiagnosticError("irtool.build: the module has no `main` function to run")
            self.abi: ABI = generated.abi
            self.ir = generated.ir
            self.mod, self.options, self.layout = mod, options, generated.layout
            self.exports_kernels = export_kernels
            self._profiled: NativeModule | None = None
            # Constants stay numpy arrays (kept for the process's lifetime) that the engine's symbols
            # point to. The engine must outlive every call through its function pointer: kept here.
            for name, data in generated.external_constants.items():
                _bind_symbol(name, data)
            if generated.pool_symbol is not None and generated.pool_symbol not in _SYMBOLS:
                pool = aligned_empty((self.abi.pool_bytes,), np.uint8, "the pool of hoisted tensors")
                _SYMBOLS[generated.pool_symbol] = pool
                llvm.add_symbol(generated.pool_symbol, pool.ctypes.data)
            self._engine, address = _jit(self.ir, options, lambda: _engine(generated, prefix, options, compiler),
                                         f"{self.abi.prefix}_run")
        finally:
            if compiler is not None:
                compiler.close()
        self._run = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(address)
        self._workspace = aligned_empty((max(self.abi.workspace_bytes, 1),), np.uint8, "the workspace of main")
        # One pointer per tensor, and a shape pointer after each dynamic one (docs/native-relay.md).
        self._in = (ctypes.c_void_p * max(sum(1 + s.dynamic for s in self.abi.inputs), 1))()
        self._out = (ctypes.c_void_p * max(sum(1 + s.dynamic for s in self.abi.outputs), 1))()
        self._free = None
        if any(spec.dynamic for spec in self.abi.outputs):
            self._free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
                self._engine.get_function_address(f"{self.abi.prefix}{FREE_SUFFIX}"))

    @property
    def input_names(self) -> list[str]:
        return [spec.name for spec in self.abi.inputs]

    def init(self) -> None:
        """Runs `<prefix>_init` (the hoisted steps) now rather than in the first call."""
        status = ctypes.CFUNCTYPE(ctypes.c_int32)(self._engine.get_function_address(f"{self.abi.prefix}_init"))()
        if status != 0:
            raise DiagnosticError(f"native `main` failed: {describe_status(status, self.abi)}")

    def kernel(self, name: str) -> Callable[..., int]:
        """The compiled primfn `name` as a C function of buffer addresses (the module must be
        built with `export_kernels=True`)."""
        if not self.exports_kernels:
            raise DiagnosticError("kernels of this module are internal: build it with export_kernels=True")
        func = self.mod.functions[name]
        assert isinstance(func, PrimFunc)
        address = self._engine.get_function_address(f"{self.abi.prefix}_{sanitize(name)}")
        return ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * len(func.params)))(address)

    def profile(self, *args: Any, repeat: int = 10, **kwargs: Any) -> Any:
        """Per-kernel times on these inputs (`irtool.runtime.profile.Profile`; its `table()` prints
        them). A module built without exported kernels compiles a twin that exports them, once."""
        from irtool.runtime.profile import profile_native
        if self.exports_kernels:
            target = self
        else:
            if self._profiled is None:
                self._profiled = NativeModule(self.mod, self.options, self.abi.prefix, export_kernels=True)
            target = self._profiled
        return profile_native(target, args, kwargs, repeat)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Outputs of `main` for inputs given in parameter order and/or by name (a tuple
        parameter `t` as a tuple, or as `t.0`, `t.1` ... via a mapping)."""
        if self._free is not None:
            return _structure(self.abi.result_type, iter(self._run_dynamic(self.bind_inputs(args, kwargs))))
        outs = [aligned_empty(spec.shape, spec.dtype, f"main's {spec.name}") for spec in self.abi.outputs]
        self.run_into(outs, *args, **kwargs)
        return _structure(self.abi.result_type, iter(outs))

    def _set_inputs(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """Fills the inputs struct; returns the shape arrays it points to (keep them alive)."""
        shapes = []
        for k, (spec, a) in zip(data_fields(self.abi.inputs), zip(self.abi.inputs, arrays)):
            self._in[k] = a.ctypes.data
            if spec.dynamic:
                shapes.append(np.array(a.shape, np.int64))
                self._in[k + 1] = shapes[-1].ctypes.data
        return shapes

    def _run_dynamic(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """A run with dynamic outputs: `_run` allocates them and fills their shape arrays; they
        are copied into numpy arrays and freed with `<prefix>_free`."""
        keep = self._set_inputs(arrays)
        outs: list[np.ndarray | None] = []
        shapes: list[np.ndarray] = []
        for k, spec in zip(data_fields(self.abi.outputs), self.abi.outputs):
            if spec.dynamic:
                shapes.append(np.zeros(len(spec.shape), np.int64))
                self._out[k], self._out[k + 1] = None, shapes[-1].ctypes.data
                outs.append(None)
            else:
                outs.append(aligned_empty(spec.shape, spec.dtype, f"main's {spec.name}"))
                self._out[k] = outs[-1].ctypes.data   # type: ignore[union-attr]
        status = self._run(ctypes.addressof(self._in), ctypes.addressof(self._out), self._workspace.ctypes.data)
        del keep
        if status != 0:
            raise DiagnosticError(f"native `main` failed: {describe_status(status, self.abi)}")
        result, dims = [], iter(shapes)
        for k, spec, out in zip(data_fields(self.abi.outputs), self.abi.outputs, outs):
            if out is not None:
                result.append(out)
                continue
            shape = tuple(int(d) for d in next(dims))
            dt = np.dtype(spec.dtype)
            nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            address = self._out[k]
            result.append(np.frombuffer(ctypes.string_at(address, nbytes), dt).reshape(shape).copy())
            assert self._free is not None
            self._free(address)
        return result

    def run_into(self, outputs: Any, *args: Any, **kwargs: Any) -> None:
        """Runs `main` writing its results into `outputs`, so repeated calls allocate nothing:
        writable C-contiguous arrays of the right shapes and dtypes, given as `run` returns them
        (an array for a tensor result, nested tuples for a tuple result) or flat (a sequence in
        depth-first order); a single output may be an array or a one-element tuple or list."""
        if self._free is not None:
            raise DiagnosticError("main returns tensors of dynamic shape, which _run allocates: use run()")
        arrays = self.bind_inputs(args, kwargs)
        outs = _flatten_outputs(outputs)
        if len(outs) != len(self.abi.outputs):
            raise DiagnosticError(f"main has {len(self.abi.outputs)} output(s), {len(outs)} arrays given")
        for spec, o in zip(self.abi.outputs, outs):
            if (not isinstance(o, np.ndarray) or o.shape != spec.shape or o.dtype != np.dtype(spec.dtype)
                    or not o.flags.c_contiguous or not o.flags.writeable or not o.flags.aligned):
                got = (f"{o.dtype} array of shape {o.shape}" if isinstance(o, np.ndarray)
                       else type(o).__name__)
                raise DiagnosticError(f"{spec.name} needs a writable, C-contiguous, element-aligned {spec.dtype} "
                                      f"array of shape {spec.shape}, got {got}")
        keep = self._set_inputs(arrays)
        for k, o in enumerate(outs):
            self._out[k] = o.ctypes.data
        status = self._run(ctypes.addressof(self._in), ctypes.addressof(self._out), self._workspace.ctypes.data)
        del keep
        if status != 0:
            raise DiagnosticError(f"native `main` failed: {describe_status(status, self.abi)}")

    def bind_inputs(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[np.ndarray]:
        """The input arrays in ABI order, checked (element-aligned copies of misaligned views)."""
        flat: dict[str, Any] = {}
        specs = self.abi.inputs
        params = _param_groups(specs)
        if len(args) > len(params):
            raise DiagnosticError(f"main takes {len(params)} parameter(s), {len(args)} given")
        for (pname, group), value in zip(params, args):
            _spread(pname, group, value, flat)
        for key, value in kwargs.items():
            key = key.lstrip("%")
            group = dict(params).get(key)
            if group is None and key not in {s.name for s in specs}:
                raise DiagnosticError(f"main has no parameter `{key}` (parameters: {', '.join(p for p, _ in params)})")
            if key in flat or (group is not None and any(s.name in flat for s in group)):
                raise DiagnosticError(f"parameter `{key}` is given twice")
            if group is not None:
                _spread(key, group, value, flat)
            else:
                flat[key] = value
        missing = [s.name for s in specs if s.name not in flat]
        if missing:
            raise DiagnosticError(f"missing input(s) {', '.join('`' + m + '`' for m in missing)}")
        return [_check(spec, flat[spec.name]) for spec in specs]


def _param_groups(specs: list[TensorSpec]) -> list[tuple[str, list[TensorSpec]]]:
    groups: dict[str, list[TensorSpec]] = {}
    for s in specs:
        groups.setdefault(s.name.split(".", 1)[0] if "." in s.name else s.name, []).append(s)
    return list(groups.items())


def _spread(name: str, group: list[TensorSpec], value: Any, flat: dict[str, Any]) -> None:
    if len(group) == 1 and group[0].name == name:
        flat[name] = value
        return
    if not isinstance(value, (tuple, list)) or len(value) != len(group):
        raise DiagnosticError(f"parameter `{name}` is a tuple of {len(group)} tensors; pass a tuple of arrays")
    for spec, v in zip(group, value):
        flat[spec.name] = v


def _check(spec: TensorSpec, value: Any) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        if isinstance(value, (int, float, bool, np.generic)) and spec.shape == ():
            value = np.asarray(value, dtype=spec.dtype)
        else:
            raise DiagnosticError(f"input `{spec.name}` must be a numpy array, got {type(value).__name__}")
    if len(value.shape) != len(spec.shape) or any(d >= 0 and d != v for d, v in zip(spec.shape, value.shape)):
        want = "(" + ", ".join("?" if d < 0 else str(d) for d in spec.shape) + ("," if len(spec.shape) == 1 else "") + ")"
        raise DiagnosticError(f"input `{spec.name}` must have shape {want}, got {value.shape}")
    if value.dtype != np.dtype(spec.dtype):
        raise DiagnosticError(f"input `{spec.name}` must have dtype {spec.dtype}, got {value.dtype} "
                              f"(convert with .astype('{spec.dtype}'))")
    if not value.flags.c_contiguous:
        raise DiagnosticError(f"input `{spec.name}` must be C-contiguous (use np.ascontiguousarray)")
    if not value.flags.aligned:   # a view at an odd byte offset: the ABI needs element alignment
        return value.copy()
    return value


def _flatten_outputs(outputs: Any) -> list[Any]:
    """Output arrays in depth-first order from an array or (nested) tuples and lists of them."""
    flat: list[Any] = []
    stack = [outputs]
    while stack:
        item = stack.pop()
        if isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
        else:
            flat.append(item)
    return flat


def _structure(t: Type | None, outs: Any) -> Any:
    """Flat outputs regrouped as `main`'s result type (tuples stay tuples)."""
    if isinstance(t, TupleType):
        return tuple(_structure(f, outs) for f in t.fields)
    return next(outs)


class KernelLibrary:
    """Every primfn of a module, JIT-compiled as exported functions: `lib["f"](*arrays)` runs
    `@f` on numpy arrays in place (one per buffer parameter), like `tir_interp.run_primfunc`."""

    def __init__(self, mod: IRModule, options: TargetOptions, prefix: str = "k") -> None:
        kernels_only = IRModule()
        for name, func in mod.functions.items():
            if isinstance(func, PrimFunc):
                kernels_only.functions[name] = func
        generated = generate_module(kernels_only, prefix, options)
        self.ir = generated.ir
        self._engine, _ = _jit(self.ir, options, lambda: _engine(generated, prefix, options), symbol=None)
        self._funcs = {name: kernels_only.functions[name] for name in generated.kernels}
        self._prefix = generated.prefix

    def __getitem__(self, name: str) -> Callable[..., None]:
        func = self._funcs.get(name)
        if func is None:
            raise KeyError(name)
        address = self._engine.get_function_address(f"{self._prefix}_{sanitize(name)}")
        cfunc = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * len(func.params)))(address)

        def call(*arrays: np.ndarray) -> int:
            if len(arrays) != len(func.params):
                raise DiagnosticError(f"@{name} takes {len(func.params)} buffers, {len(arrays)} given")
            for buf, arr in zip(func.params, arrays):
                want = array_shape(buf)
                if arr.shape != want or arr.dtype != numpy_dtype(buf.dtype) or not arr.flags.c_contiguous:
                    raise DiagnosticError(f"buffer `%{buf.name}` needs a C-contiguous {numpy_dtype(buf.dtype)} "
                                          f"array of shape {want}, got {arr.dtype} {arr.shape}")
                if buf.align and arr.ctypes.data % buf.align:
                    raise DiagnosticError(f"buffer `%{buf.name}` needs {buf.align}-byte alignment (aligned_empty)")
            return int(cfunc(*(a.ctypes.data for a in arrays)))
        return call
