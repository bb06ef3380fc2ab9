"""`irtool-run`: run a Relay program on numpy inputs with the reference interpreter.

    irtool-run FILE|- [--entry main] [--input NAME=file.npy]... [--inputs inputs.npz] [--seed N] [-o outputs.npz]
               [--backend interp|native] [--profile [--repeat N]]

Scripts rely on this interface (option names, the `outputN` keys of the output file, the summary
line format), so keep it stable. Inputs are either all given (`.npz` keys and `--input` names are
parameter names without `%`; a tuple parameter `%t` is given as `t.0`, `t.1`, ...) or all drawn
at random: each tensor from its own generator seeded by `--seed` and its name (`x`, `t.0`), so
the draw depends on the entry's signature only, never on its body (a pass leaves the inputs as
they were). Floats are uniform in [-1, 1) — in [0, 1) when the name's last word is `var` or
`variance` (a batch norm's variance: a negative one makes everything NaN) — integers in [0, 8),
booleans fair coins.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import re
import sys
import zipfile
import zlib
from collections.abc import Sequence

import numpy as np

from irtool.analysis.typecheck import infer_types
from irtool.analysis.wellformed import check_well_formed
from irtool.eval.interpreter import entry_function, name_list, param_type, run_function, signature
from irtool.eval.values import Value, flatten_value, numpy_dtype
from irtool.ir.expr import Expr, Function
from irtool.ir.module import IRModule
from irtool.ir.types import TensorType, TupleType, Type, type_to_text
from irtool.ir.visitor import free_vars
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse
from irtool.tools import argtypes
from irtool.tools.common import add_input_shape_option, parse_args, parse_shapes, read_source, run_tool, usage_error
from irtool.tools.output import STDOUT, check_output, write_npz

PROG = "irtool-run"
_SHOWN_VALUES = 6


def build_arg_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG, description="Run a Relay program with the reference interpreter.")
    ap.add_argument("file", help="the .relay (or .onnx) file to run, or - for standard input")
    ap.add_argument("--entry", default="main", type=argtypes.non_empty,
                    help="the global function to call (default: main)")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                    help="one input from a .npy file (repeatable)")
    ap.add_argument("--inputs", metavar="FILE.npz", help="inputs from an .npz file keyed by parameter name")
    ap.add_argument("--seed", type=argtypes.seed, default=0,
                    help="seed of the random inputs used when none are given (an integer >= 0, default: 0)")
    ap.add_argument("-o", "--output", metavar="FILE.npz", help="write the outputs as output0, output1, ...")
    ap.add_argument("--backend", choices=("interp", "native"), default="interp",
                    help="interp: the reference interpreter (default); native: compile main with irtool.build")
    ap.add_argument("--profile", action="store_true",
                    help="with --backend=native: time every kernel of main and print a table (slowest first)")
    ap.add_argument("--repeat", type=argtypes.repeat, default=10, metavar="N",
                    help="--profile: timed runs per kernel, the median is shown (default: 10)")
    ap.add_argument("--threads", type=argtypes.threads, default=1, metavar="N",
                    help="with --backend=native: run parallel loops on N threads (default: 1)")
    ap.add_argument("--cache-dir", metavar="DIR",
                    help="with --backend=native: keep compiled kernels in DIR and reuse them (docs/codegen.md)")
    add_input_shape_option(ap)
    return ap


def load_module(name: str, text: str, entry: str) -> IRModule:
    """Parse and verify; a lone expression becomes `@entry` with its free variables as parameters."""
    program = parse(text, name)
    check_well_formed(program)
    infer_types(program)
    if isinstance(program, Expr):
        mod = IRModule()
        mod.add_function(entry, Function(free_vars(program), program, span=program.span))
        return mod
    return program


# The first bytes of the two file formats numpy writes (an empty zip starts with its directory's end).
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
# What numpy and zipfile raise on a truncated or corrupt file.
_BAD_FILE = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, KeyError)


def read_npz(option: str, path: str) -> dict[str, np.ndarray]:
    """The arrays of an `.npz` file named by `option`."""
    _check_numpy_file(option, path, "npz")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except _BAD_FILE as exc:
        raise _unreadable(option, path, _numpy_reason(exc)) from None


def read_npy(option: str, path: str) -> np.ndarray:
    """The array of an `.npy` file named by `option`."""
    _check_numpy_file(option, path, "npy")
    try:
        return np.load(path, allow_pickle=False)
    except _BAD_FILE as exc:
        raise _unreadable(option, path, _numpy_reason(exc)) from None


def _check_numpy_file(option: str, path: str, want: str) -> None:
    """Refuses anything but the format wanted (a pickle, text, a directory) by its first bytes,
    with a message that names the option and the file."""
    try:
        with open(path, "rb") as f:
            magic = f.read(len(_NPY_MAGIC))
    except OSError as exc:
        raise _unreadable(option, path, exc.strerror or str(exc)) from None
    kind = "npy" if magic.startswith(_NPY_MAGIC) else "npz" if magic.startswith(_ZIP_MAGICS) else None
    if kind is None:
        raise _unreadable(option, path, "not a NumPy .npy or .npz file")
    if kind != want:
        raise _unreadable(option, path, "an .npy file holds one array; name the inputs with an .npz file "
                          "(numpy.savez)" if want == "npz" else "an .npz archive, not one array in an .npy file")


def _unreadable(option: str, path: str, why: str) -> DiagnosticError:
    return DiagnosticError(f"{option}: cannot read '{path}': {why}")


def _numpy_reason(exc: BaseException) -> str:
    if "allow_pickle" in str(exc):
        return "it holds Python objects (pickled data); irtool reads numeric arrays only"
    return f"truncated or corrupt ({exc})"


def given_inputs(inputs_npz: str | None, singles: Sequence[str]) -> dict[str, np.ndarray]:
    """Arrays from `--inputs` and `--input NAME=FILE` (the latter win), keyed by name without `%`."""
    arrays: dict[str, np.ndarray] = {}
    if inputs_npz is not None:
        arrays.update((key.lstrip("%"), value) for key, value in read_npz("--inputs", inputs_npz).items())
    for item in singles:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise DiagnosticError(f"--input expects NAME=FILE.npy, got `{item}`")
        arrays[name.lstrip("%")] = read_npy(f"--input {name}", path)
    return arrays


def assemble_inputs(entry: str, func: Function, arrays: dict[str, np.ndarray]) -> dict[str, Value]:
    """Parameter values from named arrays; a tuple parameter `%t` takes `t.0`, `t.1`, ..."""
    out: dict[str, Value] = {}
    used: set[str] = set()
    for p in func.params:
        name = p.name_hint
        t = param_type(p)
        if isinstance(t, TupleType) and name not in arrays:
            out[name] = _assemble(t, name, arrays, used, entry, func)
        elif name in arrays:
            out[name] = arrays[name]
            used.add(name)
    extra = sorted(set(arrays) - used)
    if extra:
        raise DiagnosticError(f"{signature(entry, func)}; {name_list('unexpected input', extra)}")
    return out


def _assemble(t: Type, name: str, arrays: dict[str, np.ndarray], used: set[str],
              entry: str, func: Function) -> Value:
    if isinstance(t, TupleType):
        return tuple(_assemble(f, f"{name}.{i}", arrays, used, entry, func) for i, f in enumerate(t.fields))
    if name not in arrays:
        raise DiagnosticError(f"{signature(entry, func)}; missing input `{name}`")
    used.add(name)
    return arrays[name]


def random_inputs(entry: str, func: Function, seed: int) -> dict[str, Value]:
    """Deterministic inputs drawn from the parameter types and names alone (module docstring),
    refused before anything is allocated when they would not fit in the machine's memory."""
    leaves = [leaf for p in func.params for leaf in _leaves(param_type(p), p.name_hint, entry, func)]
    total = sum(_nbytes(t) for _, t in leaves)
    limit = _physical_memory()
    if limit is not None and total > limit:
        name, t = max(leaves, key=lambda leaf: _nbytes(leaf[1]))
        size = f"%{name}: {type_to_text(t)} takes {_nbytes(t)} bytes"
        raise DiagnosticError(f"cannot make a random input: {size}" + (f" ({total} bytes for all inputs)"
                              if total > _nbytes(t) else "") + f", more than the {limit} bytes of memory here")
    drawn = {name: _random_tensor(t, _generator(seed, name), _is_variance(name)) for name, t in leaves}
    return {p.name_hint: _gather(param_type(p), p.name_hint, drawn) for p in func.params}


def _leaves(t: Type | None, name: str, entry: str, func: Function) -> list[tuple[str, TensorType]]:
    """The tensors of a parameter with their names (`t.0`, `t.1.0`, ... inside tuples), depth first."""
    if isinstance(t, TupleType):
        return [leaf for i, f in enumerate(t.fields) for leaf in _leaves(f, f"{name}.{i}", entry, func)]
    if not isinstance(t, TensorType) or not t.is_static:
        what = "its type is unknown" if t is None else f"it has type {type_to_text(t)}"
        raise DiagnosticError(f"cannot make a random input for %{name}: {what}; "
                              f"pass the inputs with --input/--inputs ({signature(entry, func)})")
    numpy_dtype(t.dtype)  # a dtype numpy lacks is refused here, before any drawing
    return [(name, t)]


def _gather(t: Type | None, name: str, drawn: dict[str, np.ndarray]) -> Value:
    if isinstance(t, TupleType):
        return tuple(_gather(f, f"{name}.{i}", drawn) for i, f in enumerate(t.fields))
    return drawn[name]


def _nbytes(t: TensorType) -> int:
    return math.prod(int(d) for d in t.shape) * numpy_dtype(t.dtype).itemsize  # type: ignore[arg-type]


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _generator(seed: int, name: str) -> np.random.Generator:
    """A generator of its own per (seed, tensor name): stable across runs, machines and bodies."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:16], "little")])


_VARIANCE_WORDS = {"var", "variance"}


def _is_variance(name: str) -> bool:
    """`bn1_var`, `running_var`, `bn.moving_variance`: names whose last word says variance."""
    words = re.findall(r"[a-z]+", name.lower())
    return bool(words) and words[-1] in _VARIANCE_WORDS


def _random_tensor(t: TensorType, rng: np.random.Generator, non_negative: bool) -> np.ndarray:
    shape = tuple(int(d) for d in t.shape)  # type: ignore[arg-type]
    dtype = numpy_dtype(t.dtype)
    if dtype == np.bool_:
        return rng.random(shape, dtype=np.float32) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 8, size=shape, dtype=dtype)
    # float32 draws for every float type but float64: no float64 temporary twice the input's size
    draw = rng.random(shape, dtype=np.float64 if dtype == np.float64 else np.float32)
    if not non_negative:
        draw *= 2
        draw -= 1
    return draw.astype(dtype, copy=False)


def summarize(index: int, array: np.ndarray) -> str:
    """`output0: Tensor[(1, 10), float32] min=... max=... mean=... sha256=...` and the first values."""
    kind = type_to_text(TensorType(tuple(array.shape), str(array.dtype)))
    digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:12]
    line = f"output{index}: {kind}"
    if array.size:
        line += (f" min={_number(array.min())} max={_number(array.max())} "
                 f"mean={_number(array.mean(dtype=np.float64))}")
    line += f" sha256={digest}"
    flat = array.reshape(-1)[:_SHOWN_VALUES]
    shown = ", ".join(_number(v) for v in flat)
    more = ", ..." if array.size > _SHOWN_VALUES else ""
    return f"{line}\n  values: [{shown}{more}]"


def _number(v: object) -> str:
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (np.integer, int)):
        return str(int(v))
    return f"{float(v):.6g}"  # type: ignore[arg-type]


def write_outputs(path: str, arrays: list[np.ndarray]) -> None:
    """Write `output0`, `output1`, ... (atomically, as every output)."""
    write_npz(path, {f"output{i}": a for i, a in enumerate(arrays)})


def run(args: argparse.Namespace) -> int:
    check_output(args.output, binary=True)
    if args.file.endswith(".onnx"):
        # ONNX imports on the fly, weights embedded: the inputs are the graph's own.
        from irtool.frontend.onnx import import_file
        mod = import_file(args.file, embed_params=True, input_shapes=parse_shapes(args.input_shape),
                          static_shapes=args.backend == "native").module
    else:
        if args.input_shape:
            raise DiagnosticError("--input-shape applies to .onnx models")
        name, text = read_source(args.file)
        mod = load_module(name, text, args.entry)
    func = entry_function(mod, args.entry)
    arrays = given_inputs(args.inputs, args.input)
    if arrays or (args.inputs is not None):
        inputs = assemble_inputs(args.entry, func, arrays)
    else:
        inputs = random_inputs(args.entry, func, args.seed)
    if args.profile and args.backend != "native":
        raise DiagnosticError("--profile times compiled kernels: add --backend=native")
    if args.threads != 1 and args.backend != "native":
        raise DiagnosticError("--threads applies to compiled code: add --backend=native")
    if args.cache_dir is not None and (args.backend != "native" or args.profile):
        raise DiagnosticError("--cache-dir keeps compiled kernels of a native build: add --backend=native "
                              "(without --profile)")
    if args.backend == "native":
        if args.entry != "main":
            raise DiagnosticError("--backend=native runs `main` only")
        if args.profile:
            from irtool.driver import profile
            result = profile(mod, repeat=args.repeat, threads=args.threads, **inputs)
            print(result.table())
            outputs = result.outputs
        else:
            from irtool.driver import build
            outputs = flatten_value(build(mod, threads=args.threads, cache_dir=args.cache_dir)(**inputs))
    else:
        outputs = flatten_value(run_function(mod, inputs, args.entry))
    for i, array in enumerate(outputs):
        print(summarize(i, array))
    if args.output is not None:
        write_outputs(args.output, outputs)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_arg_parser()
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    if args.output == STDOUT:
        return usage_error(parser, "argument -o/--output: the summaries go to standard output; name a file")
    return run_tool(PROG, lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
