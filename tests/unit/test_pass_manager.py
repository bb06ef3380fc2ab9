"""The pass manager: pipeline strings, typed options, verification between passes, instrumentation."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from irtool.ir import Call, Function, IRModule, Op, Var
from irtool.ir.types import TensorType
from irtool.passes import PASS_REGISTRY, list_passes, parse_pipeline, run, run_pipeline
from irtool.passes.base import ModulePass
from irtool.passes.manager import convert_option, pipeline_text
from irtool.core.diagnostics import DiagnosticError, render_error
from irtool.syntax.parser import parse
from irtool.syntax.printer import print_program

SOURCE = """#[version = "0.0.5"]
def @g(%x: Tensor[(2), float32], Inline=1) -> Tensor[(2), float32] { negative(%x) }
def @unused(%x: Tensor[(2), float32]) -> Tensor[(2), float32] { %x }
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] { @g(%x) }
"""


def module() -> IRModule:
    mod = parse(SOURCE, "manager.relay")
    assert isinstance(mod, IRModule)
    return mod


@dataclasses.dataclass
class _Typed(ModulePass):
    """A pass with one option of every supported type (registered only for these tests)."""

    name = "test-typed-options"
    description = "test"
    count: int = 1
    ratio: float = 0.5
    flag: bool = False
    label: str = "x"
    names: tuple[str, ...] = ()
    sizes: list[int] = dataclasses.field(default_factory=list)
    limit: int | None = None

    def apply(self, mod: IRModule) -> IRModule:
        return mod


@dataclasses.dataclass
class _Breaks(ModulePass):
    """Replaces @main's body with an ill-typed call, to see verify-each blame the pass."""

    name = "test-breaks-module"
    description = "test"

    def apply(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        main = out.functions["main"]
        bad = Call(Op("add"), [main.params[0], Var("y", TensorType((3,), "float32"))])
        out.functions["main"] = Function(main.params, bad, main.ret_type)
        return out



@pytest.fixture()
def test_passes():
    PASS_REGISTRY[_Typed.name] = _Typed
    PASS_REGISTRY[_Breaks.name] = _Breaks
    yield
    del PASS_REGISTRY[_Typed.name]
    del PASS_REGISTRY[_Breaks.name]


def test_pipeline_with_options_builds_configured_passes() -> None:
    passes = parse_pipeline("inline,fuse-ops{max-depth=64,opt-level=2},dead-code")
    assert [p.name for p in passes] == ["inline", "fuse-ops", "dead-code"]
    assert (passes[1].max_depth, passes[1].opt_level) == (64, 2)  # type: ignore[attr-defined]


def test_empty_pipeline_is_no_passes() -> None:
    assert parse_pipeline("") == []
    assert parse_pipeline("   ") == []


def test_option_values_follow_field_types(test_passes: None) -> None:
    (p,) = parse_pipeline("test-typed-options{count=0x10 ratio=2.5e-1 flag=true label=\"a b\" "
                          "names=main,other sizes=[1, 2, 3] limit=7}")
    assert p == _Typed(count=16, ratio=0.25, flag=True, label="a b", names=("main", "other"),
                       sizes=[1, 2, 3], limit=7)
    (q,) = parse_pipeline("test-typed-options{limit=none,flag=False}")
    assert q.limit is None and q.flag is False  # type: ignore[attr-defined]


@pytest.mark.parametrize("text, message, col", [
    ("inline,dead-cod", "unknown pass `dead-cod`; did you mean `dead-code`?", 8),
    ("fuse-ops{max-dept=3}", "pass `fuse-ops` has no option `max-dept`; did you mean `max-depth`?", 10),
    ("fuse-ops{max-depth=many}", "bad value for option `max-depth` of `fuse-ops`: expected an integer", 10),
    ("inline{all=maybe}", "bad value for option `all` of `inline`: expected true or false", 8),
    ("inline{all=true", "missing `}` after the options of `inline`", 16),
    ("inline{all=true all=false}", "option `all` given twice", 17),
    ("inline dead-code", "expected `,` between passes", 8),
    ("inline,,dead-code", "expected a pass name", 8),
    ("inline{all=true,false}", "expected `option=value` in the options of `inline`", 17),
    ("to-a-normal-form{x=1}", "pass `to-a-normal-form` has no option `x` (options: none)", 18),
])
def test_pipeline_errors_are_located_in_the_pipeline(text: str, message: str, col: int) -> None:
    with pytest.raises(DiagnosticError) as info:
        parse_pipeline(text)
    assert info.value.diagnostics[0].message == message
    span = info.value.span
    assert span is not None and (span.source, span.line, span.col) == ("<pipeline>", 1, col)
    rendered = render_error(info.value)
    assert rendered.splitlines()[1] == text and rendered.splitlines()[2].index("^") == col - 1


def test_convert_option_rejects_lists_for_scalars() -> None:
    with pytest.raises(ValueError):
        convert_option(["1", "2"], int)


def test_pipeline_text_round_trips(test_passes: None) -> None:
    text = "inline{all=true},test-typed-options{count=3 names=[a,b] limit=4},dead-code"
    passes = parse_pipeline(text)
    assert pipeline_text(passes) == text
    assert parse_pipeline(pipeline_text(passes)) == passes


def test_list_passes_describes_every_registered_pass() -> None:
    listed = {name: (desc, opts) for name, desc, opts in list_passes()}
    for name in ("inline", "dead-code", "fold-constant", "simplify-inference", "eliminate-common-subexpr",
                 "to-a-normal-form", "to-graph-normal-form", "infer-type", "fuse-ops"):
        assert name in listed and listed[name][0]
    inline_opts = {o.name: (o.type, o.default) for o in listed["inline"][1]}
    assert inline_opts == {"all": ("bool", False), "beta-reduce": ("bool", False)}
    dead = {o.name: o.type for o in listed["dead-code"][1]}
    assert dead["entries"] == "list of str"


def test_run_applies_passes_in_order_and_leaves_input_alone() -> None:
    mod = module()
    before = print_program(mod)
    out = run(mod, "inline,dead-code")
    assert set(out.functions) == {"main"}
    assert print_program(mod) == before
    # Order matters: dead-code first keeps @g (still called), then inline removes it.
    assert set(run(mod, "dead-code").functions) == {"main", "g"}


def test_verify_each_names_the_pass_that_broke_the_module(test_passes: None) -> None:
    with pytest.raises(DiagnosticError) as info:
        run(module(), "inline,test-breaks-module,dead-code")
    assert info.value.diagnostics[0].message.startswith("module is invalid after pass `test-breaks-module`: ")
    # Without verification the broken module comes back as is.
    out = run(module(), "test-breaks-module", verify_each=False)
    assert isinstance(out.functions["main"].body, Call)


def test_invalid_input_is_reported_as_the_inputs_fault() -> None:
    mod = module()
    main = mod.functions["main"]
    mod.functions["main"] = Function(main.params, Call(Op("add"), [main.params[0], Var("free")]), main.ret_type)
    with pytest.raises(DiagnosticError) as info:
        run(mod, "dead-code")
    assert "after pass" not in info.value.diagnostics[0].message


def test_ir_dumps_go_to_err_with_mlir_headers() -> None:
    err = io.StringIO()
    run(module(), "inline,dead-code", print_ir_before=["inline"], print_ir_after=["dead-code"], err=err)
    text = err.getvalue()
    headers = [line for line in text.splitlines() if line.startswith("// -----// IR Dump")]
    assert headers == ["// -----// IR Dump Before inline //----- //", "// -----// IR Dump After dead-code //----- //"]
    before, after = text.split("// -----// IR Dump After dead-code //----- //")
    assert "def @unused" in before and "def @g" in before
    assert "def @unused" not in after and "negative(%x)" in after

    err = io.StringIO()
    run(module(), "inline,dead-code", print_ir_after_all=True, err=err)
    assert err.getvalue().count("// -----// IR Dump After") == 2


def test_dump_of_unknown_pass_is_an_error() -> None:
    with pytest.raises(DiagnosticError, match="did you mean `inline`"):
        run_pipeline(module(), parse_pipeline("inline"), print_ir_after=["inlin"])


def test_timing_table_lists_each_pass() -> None:
    err = io.StringIO()
    run(module(), "inline,dead-code", timing=True, verify_each=False, err=err)
    rows = err.getvalue().splitlines()
    names = [r.split(")  ", 1)[1] for r in rows if "%)  " in r]
    assert names == ["inline", "dead-code", "Total"]
    seconds = [float(r.split()[0]) for r in rows if "%)  " in r]
    assert abs(sum(seconds[:-1]) - seconds[-1]) < 1e-3


def test_the_catalog_names_every_pass_class_once() -> None:
    """Every `ModulePass` defined in `passes/` is in `catalog.BUILTIN` under its own `name`, and
    listing the passes loads them from the table (no module registers itself on import)."""
    import importlib
    import inspect
    import pkgutil

    import irtool.passes
    from irtool.passes.base import ModulePass
    from irtool.passes.catalog import BUILTIN, get_pass

    defined = {}
    for info in pkgutil.iter_modules(irtool.passes.__path__):
        module = importlib.import_module(f"irtool.passes.{info.name}")
        for attr, cls in vars(module).items():
            if (inspect.isclass(cls) and issubclass(cls, ModulePass) and cls.__module__ == module.__name__
                    and not attr.startswith("_") and hasattr(cls, "name")):
                defined[cls.name] = (info.name, attr)
    assert defined == BUILTIN
    assert all(name.endswith("Pass") for _, name in BUILTIN.values())
    assert all(get_pass(name).name == name for name in BUILTIN)  # type: ignore[union-attr]


def test_a_pipeline_imports_only_the_passes_it_names(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys
    probe = ("import json, sys, irtool.passes as p; p.parse_pipeline('inline'); "
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('irtool.passes.'))))")
    # Started outside the checkout, so the installed package (with irtool.passes) is imported.
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True,
                          cwd=tmp_path)
    loaded = json.loads(done.stdout)
    assert "irtool.passes.inline" in loaded
    assert not {"irtool.passes.fuse_ops", "irtool.passes.lower", "irtool.passes.tir_loops"} & set(loaded)
