"""`bind-params`: turn named parameters of an entry function into constants from an `.npz` file.

This is TVM's `bind_params_by_name`: once the weights are constants, everything computed only
from them (ConstantOfShape fills, batch-norm folding, weight re-layouts that alter-layout adds)
is known at compile time, so codegen evaluates it once instead of on every run.
`irtool-import` writes exactly such a file (`--params model.npz`).
"""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

import numpy as np

from irtool.ir.expr import Constant, Expr, Function, Var
from irtool.ir.module import IRModule
from irtool.ir.types import TensorType, type_to_text
from irtool.passes.base import ModulePass
from irtool.passes.substitution import substitute
from irtool.core.diagnostics import DiagnosticError, suggest


def read_params(path: str) -> dict[str, np.ndarray]:
    """The arrays of an `.npz` archive by name; a located-by-file error when it cannot be read."""
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DiagnosticError(f"bind-params: cannot read {path}: {e}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise DiagnosticError(f"bind-params: {path} holds a single array, not an .npz archive of named parameters")
    with data:
        try:
            return {name: np.asarray(data[name]) for name in data.files}
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            raise DiagnosticError(f"bind-params: cannot read {path}: {e}") from None


def _checked(param: Var, value: np.ndarray) -> Constant:
    """`value` as a constant of `param`'s annotated type (the dtype must match exactly: a silent
    float64 -> float32 narrowing would change results)."""
    ann = param.type_annotation
    if not isinstance(ann, TensorType):
        raise DiagnosticError(f"bind-params: %{param.name_hint} is not a tensor parameter "
                              f"({type_to_text(ann) if ann is not None else 'no type annotation'})", param.span)
    shape = tuple(value.shape)
    if len(ann.shape) != len(shape) or any(isinstance(d, int) and d != s for d, s in zip(ann.shape, shape)) \
            or str(value.dtype) != ann.dtype:
        got = type_to_text(TensorType(shape, str(value.dtype)))
        raise DiagnosticError(f"bind-params: %{param.name_hint} is {type_to_text(ann)} but the file gives {got}",
                              param.span)
    return Constant(np.require(value, requirements='C'), param.span)  # 0-d stays 0-d (ascontiguousarray adds a dim)


def bind_params(func: Function, params: dict[str, np.ndarray], allow_unknown: bool = False) -> Function:
    """`func` with every parameter named in `params` replaced by its constant and removed."""
    names = {p.name_hint for p in func.params}
    unknown = sorted(set(params) - names)
    if unknown and not allow_unknown:
        hint = suggest(unknown[0], names)
        raise DiagnosticError(f"bind-params: the entry has no parameter(s) named {', '.join(unknown)}"
                              + (f" (did you mean {hint}?)" if hint else "") + "; set allow-unknown=true to "
                              "ignore them", func.span)
    mapping: dict[int, Expr] = {id(p): _checked(p, params[p.name_hint]) for p in func.params
                                if p.name_hint in params}
    if not mapping:
        return func
    body = substitute(func.body, mapping)
    kept = [p for p in func.params if id(p) not in mapping]
    return Function(kept, body, func.ret_type, func.type_params, func.attrs, func.span)


@dataclasses.dataclass
class BindParamsPass(ModulePass):
    """Parameters of `entry` named in `file` become constants; the others stay parameters."""

    name = "bind-params"
    description = "bind parameters of the entry function to constants from an .npz file (TVM bind_params_by_name)"

    file: str = ""
    entry: str = "main"
    allow_unknown: bool = False

    def apply(self, mod: IRModule) -> IRModule:
        if not self.file:
            raise DiagnosticError("bind-params needs file=<weights.npz>")
        func = mod.functions.get(self.entry)
        if not isinstance(func, Function):
            hint = suggest(self.entry, set(mod.functions))
            raise DiagnosticError(f"bind-params: no Relay function @{self.entry}"
                                  + (f"; did you mean @{hint}?" if hint else ""))
        params = read_params(str(Path(self.file)))
        out = mod.copy()
        out.functions[self.entry] = bind_params(func, params, self.allow_unknown)
        return out
