"""Graphviz DOT for a Relay function's dataflow graph (`irtool-viz`).

Nodes are parameters, constants and operator calls; edges carry the producer's inferred type
(the tensor shape). Every function literal is a `subgraph cluster_*`: a fused `Primitive=1`
function called in place is drawn as its operators inside the cluster, with its parameters
replaced by the caller's arguments, so the graph reads the same before and after fusion. Call
attributes naming storage (`storage_id`, `storage_offset`, as written by plan-memory or
lowering) are shown on the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from irtool.ir.adt import Constructor
from irtool.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Tuple, TupleGetItem, Var
from irtool.ir.types import TensorType, Type
from irtool.ir.visitor import post_order
from irtool.syntax.printer import print_type
from irtool.syntax.text_format import format_attr_value

__all__ = ["function_dot"]

_STORAGE_KEYS = ("storage_id", "storage_offset", "offset", "storage_size", "device_type", "virtual_device")
_CALLEES = (Op, GlobalVar, Constructor)


@dataclass
class _Cluster:
    func: Function
    label: str
    members: list[int] = field(default_factory=list)
    parent: int | None = None   # index of the enclosing cluster


def function_dot(func: Function, name: str = "main") -> str:
    """DOT text for `func` (types must already be inferred for shapes on the edges)."""
    order = post_order(func.body)
    rep: dict[int, Expr] = {}          # node id -> the node drawn for it
    clusters: list[_Cluster] = []
    cluster_of_func: dict[int, int] = {}
    fused_call_storage: dict[int, str] = {}

    def resolve(node: Expr) -> Expr:
        while id(node) in rep and rep[id(node)] is not node:
            node = rep[id(node)]
        return node

    for node in order:
        if isinstance(node, Function) and id(node) not in cluster_of_func:
            cluster_of_func[id(node)] = len(clusters)
            clusters.append(_Cluster(node, "fused (Primitive=1)" if _is_primitive(node) else "fn"))
        elif isinstance(node, Call) and _is_primitive(node.op):
            for param, arg in zip(node.op.params, node.args):
                rep[id(param)] = arg
            rep[id(node)] = node.op.body
            storage = _storage_text(node)
            if storage:
                fused_call_storage[id(node.op)] = storage
    # Cluster membership: the innermost function literal holding a node (inner ones come first).
    owner: dict[int, int] = {}
    for index, cluster in enumerate(clusters):
        if id(cluster.func) in fused_call_storage:
            cluster.label += "\n" + fused_call_storage[id(cluster.func)]
        for inner in post_order(cluster.func.body):
            if id(inner) not in owner and id(inner) != id(cluster.func):
                owner[id(inner)] = index
        for inner in cluster.func.params:
            owner.setdefault(id(inner), index)
    for index, cluster in enumerate(clusters):
        cluster.parent = owner.get(id(cluster.func))

    # `call_lowered(@f, (args...))`: the global and the argument pack are part of the call.
    packed = {id(arg) for node in order if _is_lowered_call(node) for arg in node.args[:2]}
    drawn = [node for node in order if _drawn(node) and resolve(node) is node and id(node) not in packed]
    ids = {id(node): f"n{i}" for i, node in enumerate(drawn)}
    lines: list[str] = []
    top: list[str] = []
    edges: list[str] = []
    for node in drawn:
        node_id = ids[id(node)]
        shape = "ellipse" if isinstance(node, Var) else "box"
        statement = f'{node_id} [label="{_escape(_label(node))}", shape={shape}];'
        if id(node) in owner:
            clusters[owner[id(node)]].members.append(len(lines))
        else:
            top.append(statement)
        lines.append(statement)
        for child in _inputs(node):
            source = resolve(child)
            if id(source) in ids:
                edges.append(f'{ids[id(source)]} -> {node_id} [label="{_escape(_type_label(source.checked_type))}"];')
    result = resolve(func.body)
    out = [f'digraph "{_escape(name)}" {{', "  rankdir=TB;", '  node [fontname="Helvetica"];',
           '  edge [fontname="Helvetica", fontsize=10];']
    out += ["  " + statement for statement in top]
    out += _cluster_blocks(clusters, lines)
    out.append('  output [label="output", shape=doublecircle];')
    if id(result) in ids:
        out.append(f'  {ids[id(result)]} -> output [label="{_escape(_type_label(result.checked_type))}"];')
    out += ["  " + edge for edge in edges]
    out.append("}")
    return "\n".join(out) + "\n"


def _cluster_blocks(clusters: list[_Cluster], lines: list[str]) -> list[str]:
    """Nested `subgraph cluster_N { ... }` blocks, written with an explicit stack."""
    children: dict[int | None, list[int]] = {}
    for index, cluster in enumerate(clusters):
        children.setdefault(cluster.parent, []).append(index)
    out: list[str] = []
    stack: list[tuple[int, int, bool]] = [(index, 1, False) for index in reversed(children.get(None, []))]
    while stack:
        index, depth, closing = stack.pop()
        pad = "  " * depth
        if closing:
            out.append(pad + "}")
            continue
        cluster = clusters[index]
        out.append(f"{pad}subgraph cluster_{index} {{")
        out.append(f'{pad}  label="{_escape(cluster.label)}"; style=rounded; color=gray40;')
        out += [pad + "  " + lines[member] for member in cluster.members]
        stack.append((index, depth, True))
        stack += [(child, depth + 1, False) for child in reversed(children.get(index, []))]
    return out


def _is_primitive(node: Expr) -> bool:
    return isinstance(node, Function) and bool(node.attrs and node.attrs.get("Primitive", 0))


def _drawn(node: Expr) -> bool:
    """Operators and function literals are not nodes; a call of a fused function is its cluster."""
    return not isinstance(node, (Op, Function, Constructor)) and not (isinstance(node, Call) and
                                                                     _is_primitive(node.op))


def _is_lowered_call(node: Expr) -> bool:
    return isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == "call_lowered" \
        and len(node.args) >= 1 and isinstance(node.args[0], GlobalVar)


def _inputs(node: Expr) -> tuple[Expr, ...]:
    if _is_lowered_call(node):
        assert isinstance(node, Call)
        pack = node.args[1] if len(node.args) > 1 else None
        return pack.fields if isinstance(pack, Tuple) else node.args[1:]
    if isinstance(node, Call):
        callee = () if isinstance(node.op, (*_CALLEES, Function)) else (node.op,)
        return (*callee, *node.args)
    return tuple(child for child in node.children() if not isinstance(child, (Op, Function)))


def _label(node: Expr) -> str:
    if isinstance(node, Var):
        return f"%{node.name_hint}"
    if isinstance(node, Constant):
        return "constant" if node.data.ndim else f"constant {node.data.item()!r}"
    if isinstance(node, TupleGetItem):
        return f".{node.index}"
    if isinstance(node, Tuple):
        return "tuple"
    if isinstance(node, GlobalVar):
        return f"@{node.name_hint}"
    if isinstance(node, Call):
        op = node.op
        text = op.name if isinstance(op, (Op, Constructor)) else f"@{op.name_hint}" if isinstance(op, GlobalVar) \
            else "call"
        if _is_lowered_call(node):
            text = f"call_lowered @{node.args[0].name_hint}"
        storage = _storage_text(node)
        return text + ("\n" + storage if storage else "")
    return type(node).__name__.lower()


def _storage_text(call: Call) -> str:
    found = [f"{key}={format_attr_value(call.attrs[key])}" for key in _STORAGE_KEYS if call.attrs and key in call.attrs]
    return ", ".join(found)


def _type_label(ty: Type | None) -> str:
    if ty is None:
        return ""
    if isinstance(ty, TensorType):
        return "(" + ", ".join(str(d) for d in ty.shape) + f") {ty.dtype}"
    return print_type(ty)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
