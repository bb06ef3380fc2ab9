"""The package layering of docs/architecture.md, checked over the source: every import of every
module of `irtool/`, `passes/` (installed as `irtool.passes`) and `grammar/` (`irtool.grammar`)
points to a lower layer, function-level (lazy) imports included; imports under
`if TYPE_CHECKING:` are annotations only and do not count. Parsing and printing must not load
lowering, code generation, the driver or LLVM (checked in a fresh interpreter).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Source folder -> the package it installs as.
ROOTS = {"irtool": "irtool", "passes": "irtool.passes", "grammar": "irtool.grammar"}

# Bottom to top. A package may import the packages of the layers below its own, nothing else
# (not even one beside it). `irtool` is the top-level `irtool/__init__.py` (the lazy `build`).
LAYERS: list[tuple[str, ...]] = [
    ("core",),
    ("target",),
    ("grammar", "ir"),
    ("ops",),
    ("syntax",),
    ("analysis",),
    ("eval",),
    ("tir_transform",),
    ("lower",),
    ("passes",),
    ("codegen",),
    ("runtime",),
    ("driver",),
    ("frontend",),
    ("editor",),
    ("tools",),
    ("irtool",),
]
ALLOWED: dict[str, frozenset[str]] = {
    pkg: frozenset(p for lower in LAYERS[:rank] for p in lower) for rank, layer in enumerate(LAYERS) for pkg in layer
}
# LLVM is loaded by code generation and the runtime; `irtool.target` asks it about the host CPU
# only inside functions (lowering reads the target without loading LLVM).
LLVMLITE = {"codegen": "module", "runtime": "module", "target": "function"}


def module_files() -> Iterator[tuple[str, Path]]:
    for folder, package in ROOTS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join([package, *parts]), path


def package_of(module: str) -> str:
    """`irtool.lower.rules.nn` -> `lower`; `irtool.target` -> `target`; `irtool` -> `irtool`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of the import statements inside `if TYPE_CHECKING:` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imports(module: str, path: Path) -> Iterator[tuple[int, str, bool, tuple[str, ...]]]:
    """(line, imported module, at function level, imported names) of every executed import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_nodes(tree)
    is_package = path.name == "__init__.py"
    nested: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested.update(id(n) for n in ast.walk(node) if n is not node)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        lazy = id(node) in nested
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, lazy, ()
        elif isinstance(node, ast.ImportFrom):
            names = tuple(a.name for a in node.names)
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target, lazy, names


def _violations() -> list[str]:
    found = []
    for module, path in module_files():
        pkg = package_of(module)
        for line, target, lazy, names in imports(module, path):
            where = f"{path.relative_to(REPO)}:{line}: {module} imports {target}"
            if target.split(".")[0] == "llvmlite":
                allowed = LLVMLITE.get(pkg)
                if allowed is None or (allowed == "function" and not lazy):
                    found.append(f"{where}: `{pkg}` may not import llvmlite" + (" at module level" if allowed else ""))
                continue
            if target != "irtool" and not target.startswith("irtool."):
                continue
            if target == "irtool" and names == ("__version__",):
                continue   # the version string of the package every module lives in
            other = package_of(target)
            if other != pkg and other not in ALLOWED[pkg]:
                found.append(f"{where}: `{pkg}` may not import `{other}`")
    return found


def test_every_package_has_a_layer() -> None:
    packages = {package_of(module) for module, _ in module_files()}
    assert packages == set(ALLOWED), f"packages and layers differ: {sorted(packages ^ set(ALLOWED))}"


def test_imports_only_point_down() -> None:
    problems = _violations()
    assert not problems, "imports against docs/architecture.md's layers:\n" + "\n".join(problems)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """A lazy import of lowering from the registry (what the registry once did) is reported."""
    path = tmp_path / "registry.py"
    path.write_text("def _load_all() -> None:\n    import irtool.lower.rules\n")
    [(line, target, lazy, _)] = list(imports("irtool.ops.registry", path))
    assert (line, target, lazy) == (2, "irtool.lower.rules", True)
    assert package_of(target) not in ALLOWED["ops"]


def package_graph() -> dict[str, set[str]]:
    """package -> the packages its modules import (the version string aside)."""
    graph: dict[str, set[str]] = {pkg: set() for pkg in ALLOWED}
    for module, path in module_files():
        for _, target, _, names in imports(module, path):
            if (target == "irtool" and names == ("__version__",)) or not target.startswith("irtool"):
                continue
            if package_of(target) != package_of(module):
                graph[package_of(module)].add(package_of(target))
    return graph


def _reachable(graph: dict[str, set[str]], start: str, without: tuple[str, str]) -> set[str]:
    seen: set[str] = set()
    todo = [b for b in graph[start] if (start, b) != without]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph[node])
    return seen


def drawn_edges(text: str) -> set[tuple[str, str]]:
    """The arrows of the mermaid drawing in docs/architecture.md (`a --> b & c` is two)."""
    body = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    edges = set()
    for line in body.splitlines()[1:]:
        left, right = line.split("-->")
        edges |= {(a.strip(), b.strip()) for a in left.split("&") for b in right.split("&")}
    return edges


def test_the_drawing_is_the_reduced_import_graph() -> None:
    """docs/architecture.md draws every package edge that no path of other arrows implies, and no other."""
    graph = package_graph()
    reduced = {(a, b) for a in graph for b in graph[a] if b not in _reachable(graph, a, (a, b))}
    drawn = drawn_edges((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert reduced - drawn == set(), f"imports the drawing lacks: {sorted(reduced - drawn)}"
    assert drawn - reduced == set(), f"arrows no import needs (or implied by others): {sorted(drawn - reduced)}"


def test_no_import_cycle_between_packages() -> None:
    graph = package_graph()
    state: dict[str, int] = {}   # 1 on the path, 2 done
    for start in graph:
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = state.get(start, 0) or 1
        if state[start] == 2:
            continue
        while stack:
            node, kids = stack[-1]
            nxt = next(kids, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(nxt) == 1:
                pytest.fail("package cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)


PROBE = """
import sys
from irtool.syntax.parser import parse
from irtool.syntax.printer import print_program
text = print_program(parse('def @main(%x: float32) { add(%x, %x) }', source_name="probe.relay"))
assert "add(%x, %x)" in text, text
import irtool.passes
irtool.passes.parse_pipeline("inline,dead-code")
loaded = sorted(m for m in sys.modules
                if m.split(".")[0] == "llvmlite" or m.startswith(("irtool.lower", "irtool.codegen", "irtool.driver")))
print(",".join(loaded))
"""


def test_parsing_and_printing_load_no_lowering_codegen_or_llvm(tmp_path: Path) -> None:
    # Started outside the checkout: its `irtool/` has no `grammar` (installed as irtool.grammar).
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"loaded by parsing and printing: {done.stdout.strip()}"
