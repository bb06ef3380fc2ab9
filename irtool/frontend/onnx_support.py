"""Which ONNX models and operators the importer takes, decided from the model alone (nothing is
converted or run): the opset range, each operator's schema at the model's opset, the converter
table, and the operator families left out on purpose, each with its reason. The importer reports
with these checks, and the ONNX backend's `supports_model` answers with them."""

from __future__ import annotations

from collections.abc import Container, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from irtool.core.diagnostics import DiagnosticError

if TYPE_CHECKING:
    import onnx

MIN_OPSET = 1
DEFAULT_DOMAINS = ("", "ai.onnx")

# The families irtool leaves out, and the reason an error gives for each of their operators.
_OUT_OF_SCOPE_FAMILIES: dict[str, tuple[str, ...]] = {
    "string tensors are out of scope": ("StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch",
                                        "TfIdfVectorizer"),
    "sequences are out of scope": ("SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
                                   "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence",
                                   "ConcatFromSequence"),
    "optional values are out of scope": ("Optional", "OptionalGetElement", "OptionalHasElement"),
    "training operators are out of scope": ("Gradient", "Momentum", "Adagrad", "Adam"),
    "random number generators are out of scope": ("RandomNormal", "RandomNormalLike", "RandomUniform",
                                                  "RandomUniformLike", "Multinomial", "Bernoulli"),
    "spectral transforms are out of scope": ("DFT", "STFT"),
}
OUT_OF_SCOPE: dict[str, str] = {op: why for why, ops in _OUT_OF_SCOPE_FAMILIES.items() for op in ops}
_DOMAIN_REASONS = {
    "ai.onnx.ml": "classical machine-learning operators (ai.onnx.ml) are out of scope",
    "ai.onnx.preview.training": "training operators are out of scope",
}


def newest_opset() -> int:
    """The newest ai.onnx opset the installed `onnx` package defines (the importer's upper bound)."""
    import onnx.defs
    return int(onnx.defs.onnx_opset_version())


def model_opsets(model: onnx.ModelProto) -> dict[str, int]:
    """The opset each domain of `model` imports, the ai.onnx domain under ""."""
    return {("" if o.domain in DEFAULT_DOMAINS else o.domain): int(o.version) for o in model.opset_import}


def model_opset(model: onnx.ModelProto, source: str) -> int:
    """The model's ai.onnx opset; one outside 1 to `newest_opset()` is a diagnostic naming it."""
    opset = model_opsets(model).get("", MIN_OPSET)
    newest = newest_opset()
    if opset > newest:
        raise DiagnosticError(f"{source}: opset {opset} is newer than the installed onnx package knows "
                              f"(it defines opsets {MIN_OPSET} to {newest}; upgrade onnx)")
    if opset < MIN_OPSET:
        raise DiagnosticError(f"{source}: opset {opset} is not an ONNX opset (they start at {MIN_OPSET})")
    return opset


@lru_cache(maxsize=None)
def _schema_versions(op_type: str) -> tuple[tuple[int, bool], ...]:
    """(since_version, deprecated) of every ai.onnx version of `op_type`, oldest first."""
    import onnx.defs
    versions: list[tuple[int, bool]] = []
    limit = newest_opset()
    while limit >= MIN_OPSET:
        try:
            schema = onnx.defs.get_schema(op_type, limit, "")
        except onnx.defs.SchemaError:
            break
        versions.append((int(schema.since_version), bool(schema.deprecated)))
        limit = schema.since_version - 1
    return tuple(reversed(versions))


def operator_problem(domain: str, op_type: str, opsets: dict[str, int], converters: Container[str]) -> str | None:
    """Why no node of this operator can be imported (`unsupported: Op (opset N)[: reason]`), or
    None when its converter takes it (a node's attributes may still be refused at conversion)."""
    if domain not in DEFAULT_DOMAINS:
        version = opsets.get(domain)
        at = f"{domain} opset {version}" if version is not None else f"domain {domain} is not imported"
        reason = _DOMAIN_REASONS.get(domain, f"operators of domain {domain} are out of scope")
        return f"unsupported: {domain}.{op_type} ({at}): {reason}"
    opset = opsets.get("", MIN_OPSET)
    head = f"unsupported: {op_type} (opset {opset})"
    versions = _schema_versions(op_type)
    if not versions:
        return f"{head}: not an ONNX operator"
    applicable = [(since, deprecated) for since, deprecated in versions if since <= opset]
    if not applicable:
        return f"{head}: {op_type} is defined from opset {versions[0][0]} on"
    since, deprecated = applicable[-1]
    if op_type in converters:
        # Deprecated versions (Upsample-10, Scatter-11, GroupNormalization-18) still run where a
        # converter knows their semantics, as in onnxruntime.
        return None
    if deprecated:
        return f"{head}: {op_type} is deprecated from opset {since} on"
    reason = OUT_OF_SCOPE.get(op_type)
    return f"{head}: {reason}" if reason else head


def node_location(index: int, name: str) -> str:
    """`#3 'conv1'`: a node by its index in the graph and, when it has one, its name."""
    return f"#{index} '{name}'" if name else f"#{index}"


def grouped(problem: str, locations: Sequence[str], limit: int = 6) -> str:
    """One report line for the nodes sharing a problem: `node(s) #1 'a', #2 'b': problem`."""
    shown = ", ".join(locations[:limit])
    more = f" and {len(locations) - limit} more" if len(locations) > limit else ""
    return f"node{'s' if len(locations) > 1 else ''} {shown}{more}: {problem}"
