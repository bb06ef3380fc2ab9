"""The inline pass and its call-graph helpers, beyond the lit tests: binders stay unique, chains
of any length collapse without recursion, and the call-graph orderings are right."""

from __future__ import annotations

import numpy as np
import pytest

from irtool.analysis.wellformed import check_well_formed
from irtool.eval.interpreter import run_function
from irtool.ir import Call, Function, GlobalVar, IRModule, Let, post_order
from irtool.passes import run
from irtool.passes.call_graph import callees_first, cyclic_globals, referenced_globals
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse


def module(text: str) -> IRModule:
    mod = parse('#[version = "0.0.5"]\n' + text, "inline_test.relay")
    assert isinstance(mod, IRModule)
    return mod


def test_callees_come_first() -> None:
    calls = {"main": {"a", "b"}, "a": {"c"}, "b": {"c"}, "c": set()}
    order = callees_first(calls)
    assert sorted(order) == sorted(calls)
    for caller, callees in calls.items():
        assert all(order.index(c) < order.index(caller) for c in callees)


def test_cycles_are_found() -> None:
    calls = {"main": {"f", "solo"}, "f": {"g"}, "g": {"f", "h"}, "h": set(), "self": {"self"}, "solo": set()}
    assert cyclic_globals(calls) == {"f", "g", "self"}


def test_long_call_chains_need_no_recursion() -> None:
    n = 5000
    calls = {f"f{i}": {f"f{i + 1}"} for i in range(n)}
    calls[f"f{n}"] = set()
    order = callees_first(calls)
    assert order[0] == f"f{n}" and order[-1] == "f0"
    assert cyclic_globals(calls) == set()
    ring = {f"r{i}": {f"r{(i + 1) % n}"} for i in range(n)}
    assert cyclic_globals(ring) == set(ring)


def test_referenced_globals_counts_bare_references() -> None:
    mod = module("def @f() -> int32 { 1 }\ndef @main() { (@f, @f()) }")
    assert referenced_globals(mod.functions["main"]) == {"f"}


def test_body_inlined_twice_gets_fresh_binders() -> None:
    mod = module("""
def @g(%x: float32, Inline=1) -> float32 { let %t = negative(%x); multiply(%t, %t) }
def @main(%a: float32, %b: float32) -> (float32, float32) { (@g(%a), @g(%b)) }
""")
    out = run(mod, "inline")
    assert set(out.functions) == {"main"}
    lets = [n for n in post_order(out.functions["main"]) if isinstance(n, Let)]
    assert len(lets) == 2 and lets[0].var is not lets[1].var
    check_well_formed(out)
    result = run_function(out, [np.float32(2), np.float32(3)])
    assert [float(v) for v in result] == [4.0, 9.0]


def test_thousand_level_chain_collapses_into_main() -> None:
    n = 1000
    lines = ["def @f0(%x: float32, Inline=1) -> float32 { negative(%x) }"]
    lines += [f"def @f{i}(%x: float32, Inline=1) -> float32 {{ add(@f{i - 1}(%x), 1f) }}" for i in range(1, n)]
    lines.append(f"def @main(%x: float32) -> float32 {{ @f{n - 1}(%x) }}")
    out = run(module("\n".join(lines)), "inline")
    assert set(out.functions) == {"main"}
    assert not any(isinstance(node, GlobalVar) for node in post_order(out.functions["main"]))
    assert float(run_function(out, [np.float32(5)])) == -5.0 + (n - 1)


def test_all_keeps_recursive_cycles_and_their_calls() -> None:
    mod = module("""
def @even(%n: int32) -> bool { if (equal(%n, 0)) { True } else { @odd(subtract(%n, 1)) } }
def @odd(%n: int32) -> bool { if (equal(%n, 0)) { False } else { @even(subtract(%n, 1)) } }
def @wrap(%n: int32) -> bool { @even(%n) }
def @main(%n: int32) -> bool { @wrap(%n) }
""")
    out = run(mod, "inline{all=true}")
    assert set(out.functions) == {"main", "even", "odd"}
    body = out.functions["main"].body
    assert isinstance(body, Call) and body.op == GlobalVar("even")
    assert bool(run_function(out, [np.int32(7)])) is False


def test_compiler_attribute_keeps_a_closure_call() -> None:
    mod = module("""
def @ext(%x: float32, Inline=1, Compiler="ccompiler") -> float32 { exp(%x) }
def @main(%x: float32) -> float32 { @ext(%x) }
""")
    body = run(mod, "inline").functions["main"].body
    assert isinstance(body, Call) and isinstance(body.op, Function)
    assert body.op.attrs["Compiler"] == "ccompiler"
    # The literal has its own parameters, not @ext's.
    assert body.op.params[0] is not mod.functions["ext"].params[0]


def test_marked_but_blocked_is_a_located_error() -> None:
    mod = module("""
def @h(%x: float32) -> float32 { %x }
def @w(%x: float32, Inline=1) -> float32 { @h(%x) }
def @main(%x: float32) -> float32 { @w(%x) }
""")
    with pytest.raises(DiagnosticError) as info:
        run(mod, "inline")
    assert info.value.diagnostics[0].message == "@w is marked Inline but cannot be inlined: it calls @h"
    assert info.value.span is not None and info.value.span.line == 4  # header, blank line, @h, @w


def test_beta_reduce_keeps_a_let_used_other_than_as_callee() -> None:
    mod = module("""
def @main(%x: float32) -> (float32, fn (float32) -> float32) {
  let %f = fn (%y: float32) -> float32 { negative(%y) };
  (%f(%x), %f)
}
""")
    out = run(mod, "inline{beta-reduce=true}")
    body = out.functions["main"].body
    assert isinstance(body, Let) and isinstance(body.value, Function)
    call, ref = body.body.fields  # type: ignore[attr-defined]
    assert isinstance(call, Call) and call.op is body.var and ref is body.var


def test_inline_of_deep_let_chain_body() -> None:
    """A 20,000-deep let chain inside an inlined global: substitution is iterative."""
    n = 20000
    body = "\n".join(f"  let %v{i} = add(%v{i - 1}, 1f);" for i in range(1, n))
    mod = module(f"""
def @g(%x: float32, Inline=1) -> float32 {{
  let %v0 = %x;
{body}
  %v{n - 1}
}}
def @main(%x: float32) -> float32 {{ @g(%x) }}
""")
    out = run(mod, "inline", verify_each=False)
    assert set(out.functions) == {"main"}
    assert isinstance(out.functions["main"].body, Let)
    assert float(run_function(out, [np.float32(0)])) == float(n - 1)
