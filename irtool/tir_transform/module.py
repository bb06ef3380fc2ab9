"""Applying a PrimFunc transformation across an IRModule (what every `tir-*` pass does)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from irtool.ir.expr import GlobalVar
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.ir.visitor import post_order
from irtool.core.diagnostics import DiagnosticError, suggest


def primfunc_names(mod: IRModule, function: str | None) -> list[str]:
    """The PrimFuncs a pass acts on: all of them, or the one named by its `function` option."""
    names = [name for name, f in mod.functions.items() if isinstance(f, PrimFunc)]
    if function is None:
        return names
    name = function.lstrip("@")
    if name not in names:
        hint = suggest(name, set(names))
        raise DiagnosticError(f"no primfn `@{name}` in the module" + (f"; did you mean `@{hint}`?" if hint else ""),
                              mod.def_spans.get(name))
    return [name]


def map_primfuncs(mod: IRModule, transform: Callable[[str, PrimFunc], PrimFunc],
                  function: str | None = None) -> IRModule:
    """A new module with `transform(name, func)` applied to the selected PrimFuncs."""
    out = mod.copy()
    for name in primfunc_names(mod, function):
        func = mod.functions[name]
        assert isinstance(func, PrimFunc)
        out.functions[name] = transform(name, func)
    return out


def called_from_relay(mod: IRModule) -> set[str]:
    """Names of the globals that some Relay function refers to (their signatures are fixed)."""
    names: set[str] = set()
    for func in mod.functions.values():
        if isinstance(func, PrimFunc):
            continue
        names.update(node.name_hint for node in post_order(func) if isinstance(node, GlobalVar))
    return names


@contextmanager
def located_as(pass_name: str) -> Iterator[None]:
    """Prefixes the message of a diagnostic raised inside with the pass's name (`tir-split: ...`),
    keeping its location, so that a pipeline's error says which pass refused."""
    try:
        yield
    except DiagnosticError as exc:
        first = exc.diagnostics[0]
        raise DiagnosticError(f"{pass_name}: {first.message}", first.span, notes=first.notes) from None
