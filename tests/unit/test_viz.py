"""irtool-viz: the DOT it writes, read back with a small DOT parser and checked structurally."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from irtool.editor.viz import function_dot
from irtool.ir.expr import Attrs, Call, Function, GlobalVar, Op, Tuple, Var
from irtool.ir.types import TensorType
from irtool.tools import viz
from irtool.tools.viz import graph_of, main

ROOT = Path(__file__).resolve().parents[2]
RESNET = ROOT / "samples/resnet_block.relay"
MLP = ROOT / "samples/mlp.relay"

_TOKEN = re.compile(r'\s+|//[^\n]*|"(?:[^"\\]|\\.)*"|->|[{}\[\];,=]|[A-Za-z0-9_.]+')


@dataclass
class Graph:
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    edges: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    clusters: dict[str, set[str]] = field(default_factory=dict)   # cluster name -> node ids (transitively)
    cluster_labels: dict[str, str] = field(default_factory=dict)

    def label(self, node: str) -> str:
        return self.nodes[node].get("label", node)


def parse_dot(text: str) -> Graph:
    """Enough of the DOT language for what irtool-viz writes: a digraph of node and edge
    statements with attribute lists, graph attributes, and nested subgraphs."""
    tokens = [t for t in _TOKEN.findall(text) if t.strip() and not t.startswith("//")]
    assert "".join(_TOKEN.sub("", text).split()) == "", "unexpected characters in DOT"
    value = lambda t: t[1:-1].replace('\\"', '"').replace("\\n", "\n") if t.startswith('"') else t  # noqa: E731
    graph = Graph()
    assert tokens[0] == "digraph" and tokens[2] == "{"
    i = 3
    open_clusters: list[str] = []
    while i < len(tokens):
        tok = tokens[i]
        if tok == "}":
            if open_clusters:
                open_clusters.pop()
            i += 1
            continue
        if tok == "subgraph":
            open_clusters.append(tokens[i + 1])
            graph.clusters.setdefault(tokens[i + 1], set())
            assert tokens[i + 2] == "{"
            i += 3
            continue
        if tok == ";":
            i += 1
            continue
        # a statement: ID [= ID] | ID [attrs] | ID -> ID [attrs]
        if tokens[i + 1] == "=":
            if open_clusters and tok == "label":
                graph.cluster_labels[open_clusters[-1]] = value(tokens[i + 2])
            i += 3
            continue
        ids = [value(tok)]
        i += 1
        while tokens[i] == "->":
            ids.append(value(tokens[i + 1]))
            i += 2
        attrs: dict[str, str] = {}
        if tokens[i] == "[":
            i += 1
            while tokens[i] != "]":
                attrs[tokens[i]] = value(tokens[i + 2])
                i += 3
                if tokens[i] == ",":
                    i += 1
            i += 1
        if len(ids) == 1:
            if ids[0] in ("node", "edge", "graph"):
                continue
            graph.nodes[ids[0]] = attrs
            for cluster in open_clusters:
                graph.clusters[cluster].add(ids[0])
        else:
            graph.edges.append((ids[0], ids[1], attrs))
    return graph


def test_resnet_block_graph() -> None:
    g = parse_dot(graph_of(RESNET.read_text(), str(RESNET)))
    labels = Counter(g.label(n) for n in g.nodes)
    # From the source: 11 parameters, 7 operator calls, 2 projections `.0`, and the output.
    assert sum(1 for n in g.nodes if g.label(n).startswith("%")) == 11
    assert labels["nn.conv2d"] == 2 and labels["nn.batch_norm"] == 2 and labels["nn.relu"] == 2
    assert labels["add"] == 1 and labels[".0"] == 2 and labels["output"] == 1
    assert len(g.nodes) == 21
    # Edges: conv 2 + bn 5 + .0 1 + relu 1 + conv 2 + bn 5 + .0 1 + add 2 + relu 1 + output 1.
    assert len(g.edges) == 21
    assert g.clusters == {}
    by_label = {g.label(n): n for n in g.nodes}
    data = by_label["%data"]
    into_add = {g.label(src): attrs["label"] for src, dst, attrs in g.edges if g.label(dst) == "add"}
    assert into_add == {".0": "(1, 64, 56, 56) float32", "%data": "(1, 64, 56, 56) float32"}   # the residual
    weight_edges = [attrs["label"] for src, _, attrs in g.edges if g.label(src) == "%conv1_weight"]
    assert weight_edges == ["(64, 64, 3, 3) float32"]
    assert [g.label(dst) for src, dst, _ in g.edges if src == data].count("nn.conv2d") == 1
    assert any(dst == "output" and g.label(src) == "nn.relu" for src, dst, _ in g.edges)


def test_resnet_block_after_fusion_has_a_cluster_per_group() -> None:
    g = parse_dot(graph_of(RESNET.read_text(), str(RESNET), "fuse-ops"))
    # fuse-ops' groups for this block (conv2d and batch_norm are not fused with each other;
    # the projection, the residual add and relu join the last group).
    groups = sorted(sorted(g.label(n) for n in members) for members in g.clusters.values())
    assert groups == sorted([["nn.conv2d"], ["nn.batch_norm"], [".0", "nn.relu"], ["nn.conv2d"], ["nn.batch_norm"],
                             [".0", "add", "nn.relu"]])
    assert all(label.startswith("fused (Primitive=1)") for label in g.cluster_labels.values())
    # The same dataflow as before fusion: parameters connect straight to the operators inside.
    assert len(g.nodes) == 21 and len(g.edges) == 21
    in_clusters = set().union(*g.clusters.values())
    assert all(g.label(n).startswith("%") or n == "output" for n in set(g.nodes) - in_clusters)


def test_memory_plan_offsets_are_shown() -> None:
    g = parse_dot(graph_of(MLP.read_text(), str(MLP), "fuse-ops,plan-memory"))
    assert len(g.clusters) == 3
    offsets = sorted(re.search(r"storage_offset=(\d+)", label).group(1) for label in g.cluster_labels.values())
    # (1, 128) float32 = 512 bytes: the second group cannot overlap the first's live output.
    assert offsets == ["0", "0", "512"]


def test_cli_writes_dot_and_reports_missing_graphviz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g.dot"
    assert main([str(RESNET), "-p", "fuse-ops", "-o", str(out)]) == 0
    assert len(parse_dot(out.read_text()).clusters) == 6
    monkeypatch.setattr(viz.shutil, "which", lambda name: None)
    assert main([str(RESNET), "-o", str(tmp_path / "g.svg")]) == 1
    assert "apt-get install graphviz" in capsys.readouterr().err
    assert not (tmp_path / "g.svg").exists()


def test_cli_errors_are_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(RESNET), "--function", "mian"]) == 1
    assert "did you mean `@main`?" in capsys.readouterr().err
    assert main([str(RESNET), "-o", str(tmp_path / "g.jpg2")]) == 1
    assert "unknown output format" in capsys.readouterr().err
    assert main([str(RESNET), "-p", "fuse-opps"]) == 1
    assert "fuse-ops" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed (apt-get install graphviz)")
def test_cli_renders_svg_with_graphviz(tmp_path: Path) -> None:
    out = tmp_path / "g.svg"
    assert main([str(RESNET), "-p", "fuse-ops", "-o", str(out)]) == 0
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert svg.count('class="cluster"') == 6


def test_lowered_calls_show_their_kernel_and_storage() -> None:
    # A lowered main as docs/lowering.md describes it (built directly: it needs `primfn`s to parse):
    #   %0 = call_lowered(@fused_dense, (%x, %w)); call_lowered(@fused_softmax, (%0,))
    x = Var("x", TensorType((1, 8), "float32"))
    w = Var("w", TensorType((4, 8), "float32"))
    dense = Call(Op("call_lowered"), (GlobalVar("fused_dense"), Tuple((x, w))),
                 Attrs({"storage_id": 0, "storage_offset": 0}))
    softmax = Call(Op("call_lowered"), (GlobalVar("fused_softmax"), Tuple((dense,))),
                   Attrs({"storage_id": 1, "storage_offset": 64}))
    g = parse_dot(function_dot(Function((x, w), softmax), "main"))
    labels = sorted(g.label(n) for n in g.nodes)
    assert labels == ["%w", "%x", "call_lowered @fused_dense\nstorage_id=0, storage_offset=0",
                      "call_lowered @fused_softmax\nstorage_id=1, storage_offset=64", "output"]
    named = {g.label(n).split("\n")[0]: n for n in g.nodes}
    pairs = sorted((g.label(a).split("\n")[0], g.label(b).split("\n")[0]) for a, b, _ in g.edges)
    assert pairs == [("%w", "call_lowered @fused_dense"), ("%x", "call_lowered @fused_dense"),
                     ("call_lowered @fused_dense", "call_lowered @fused_softmax"),
                     ("call_lowered @fused_softmax", "output")]
    assert named["output"] == "output"
