"""Source locations survive passes: an error a pass raises after other passes rewrote the module
still points at the user's original line (issue 10)."""

from __future__ import annotations

import pytest

from irtool.passes.manager import parse_pipeline, run_pipeline
from irtool.core.diagnostics import DiagnosticError, render_error
from irtool.syntax.parser import parse_module

TEXT = """#[version = "0.0.5"]
def @scale(%x: Tensor[(2, 8), float32], Inline=1) -> Tensor[(2, 8), float32] {
  multiply(%x, 2f)
}

// Inlining and fusion rewrite everything around the `if` (memory planning cannot handle it) and
// the batch norm in it (lowering cannot: simplify-inference did not run).
def @main(%a: Tensor[(2, 8), float32], %c: bool, %g: Tensor[(8), float32]) -> Tensor[(2, 8), float32] {
  %0 = @scale(%a);
  %1 = nn.relu(%0);
  if (%c) {
    add(nn.batch_norm(%1, %g, %g, %g, %g).0, %a)
  } else {
    %1
  }
}
"""


@pytest.mark.parametrize(("pipeline", "line", "col", "caret"), [
    ("inline,fuse-ops,lower", 12, 9, "\n    add(nn.batch_norm(%1, %g, %g, %g, %g).0, %a)\n        ^"),
    ("inline,fuse-ops,plan-memory", 11, 3, "\n  if (%c) {\n  ^"),
])
def test_pass_error_points_at_the_original_line(pipeline: str, line: int, col: int, caret: str) -> None:
    mod = parse_module(TEXT, "locations.relay")
    with pytest.raises(DiagnosticError) as info:
        run_pipeline(mod, parse_pipeline(pipeline), verify_each=True)
    span = info.value.span
    assert span is not None
    assert (span.source, span.line, span.col) == ("locations.relay", line, col)
    rendered = render_error(info.value)
    assert rendered.startswith(f"locations.relay:{line}:{col}: error: ")
    assert caret in rendered
