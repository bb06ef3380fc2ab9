"""`irtool-run`: run a Relay program on numpy inputs with the reference interpreter.

    irtool-run FILE|- [--entry main] [--input NAME=file.npy]... [--inputs inputs.npz] [--seed N] [-o outputs.npz]
               [--backend interp|native] [--profile [--repeat N]]

Scripts rely on this interface (option names, the `outputN` keys of the output file, the summary
line format), so keep it stable. Inputs are either all given (`.npz` keys and `--input` names are
parameter names without `%`; a tuple parameter `%t` is given as `t.0`, `t.1`, ...) or all drawn
from a seeded generator: floats uniform in [-1, 1) (a batch norm's variance in [0, 1)), integers in
[0, 8), booleans fair coins.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.lib.npyio import NpzFile

from irtool.analysis.typecheck import infer_types
from irtool.analysis.wellformed import check_well_formed
from irtool.eval.interpreter import entry_function, name_list, param_type, run_function, signature
from irtool.eval.values import Value, flatten_value, numpy_dtype
from irtool.ir.expr import Call, Expr, Function, Op
from irtool.ir.module import IRModule
from irtool.ir.types import TensorType, TupleType, Type, type_to_text
from irtool.ir.visitor import free_vars, post_order
from irtool.core.diagnostics import DiagnosticError
from irtool.syntax.parser import parse
from irtool.tools.common import add_input_shape_option, cli_main, parse_shapes, read_source

PROG = "irtool-run"
_SHOWN_VALUES = 6


def build_arg_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG, description="Run a Relay program with the reference interpreter.")
    ap.add_argument("file", help="the .relay (or .onnx) file to run, or - for standard input")
    ap.add_argument("--entry", default="main", help="the global function to call (default: main)")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                    help="one input from a .npy file (repeatable)")
    ap.add_argument("--inputs", metavar="FILE.npz", help="inputs from an .npz file keyed by parameter name")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the random inputs used when none are given (default: 0)")
    ap.add_argument("-o", "--output", metavar="FILE.npz", help="write the outputs as output0, output1, ...")
    ap.add_argument("--backend", choices=("interp", "native"), default="interp",
                    help="interp: the reference interpreter (default); native: compile main with irtool.build")
    ap.add_argument("--profile", action="store_true",
                    help="with --backend=native: time every kernel of main and print a table (slowest first)")
    ap.add_argument("--repeat", type=int, default=10, metavar="N",
                    help="--profile: timed runs per kernel, the median is shown (default: 10)")
    ap.add_argument("--threads", type=int, default=1, metavar="N",
                    help="with --backend=native: run parallel loops on N threads (default: 1)")
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


def _load_array(path: str) -> np.ndarray | NpzFile:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DiagnosticError(f"cannot read input file {path}: {e}") from None


def given_inputs(inputs_npz: str | None, singles: Sequence[str]) -> dict[str, np.ndarray]:
    """Arrays from `--inputs` and `--input NAME=FILE` (the latter win), keyed by name without `%`."""
    arrays: dict[str, np.ndarray] = {}
    if inputs_npz is not None:
        data = _load_array(inputs_npz)
        if not isinstance(data, NpzFile):
            raise DiagnosticError(f"{inputs_npz} holds a single array, not an .npz archive of named inputs")
        with data:
            try:
                arrays.update((key.lstrip("%"), data[key]) for key in data.files)
            except (OSError, ValueError) as e:
                raise DiagnosticError(f"cannot read input file {inputs_npz}: {e}") from None
    for item in singles:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise DiagnosticError(f"--input expects NAME=FILE.npy, got `{item}`")
        arrays[name.lstrip("%")] = _load_array(path)
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
    """Deterministic inputs drawn from the parameter types, in parameter order from one generator.
    A parameter that is a batch norm's variance is drawn from [0, 1) instead: a negative variance
    makes the whole result NaN, which says nothing about the program."""
    rng = np.random.default_rng(seed)
    variances = _variance_params(func)
    return {p.name_hint: _random_value(param_type(p), p.name_hint, rng, entry, func, id(p) in variances)
            for p in func.params}


def _variance_params(func: Function) -> set[int]:
    """ids of the parameters passed as `nn.batch_norm`'s moving variance (its fifth argument)."""
    params = {id(p) for p in func.params}
    return {id(n.args[4]) for n in post_order(func.body)
            if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == "nn.batch_norm" and len(n.args) == 5
            and id(n.args[4]) in params}


def _random_value(t: Type | None, name: str, rng: np.random.Generator, entry: str, func: Function,
                  non_negative: bool = False) -> Value:
    if isinstance(t, TupleType):
        return tuple(_random_value(f, f"{name}.{i}", rng, entry, func) for i, f in enumerate(t.fields))
    if not isinstance(t, TensorType) or not t.is_static:
        what = "its type is unknown" if t is None else f"it has type {type_to_text(t)}"
        raise DiagnosticError(f"cannot make a random input for %{name}: {what}; "
                              f"pass the inputs with --input/--inputs ({signature(entry, func)})")
    shape = tuple(int(d) for d in t.shape)  # type: ignore[arg-type]
    dtype = numpy_dtype(t.dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 8, size=shape).astype(dtype)
    return rng.uniform(0.0 if non_negative else -1.0, 1.0, size=shape).astype(dtype)


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
    """Write `output0`, `output1`, ... atomically."""
    write_npz(path, {f"output{i}": a for i, a in enumerate(arrays)})


def write_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Write named arrays atomically: a temporary file beside `path`, then a rename."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".irtool-", suffix=".npz", dir=directory)
    except OSError as e:
        raise DiagnosticError(f"cannot write {path}: {e}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise DiagnosticError(f"cannot write {path}: {e}") from None
    except BaseException:
        os.unlink(tmp)
        raise


def run(args: argparse.Namespace) -> int:
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
            outputs = flatten_value(build(mod, threads=args.threads)(**inputs))
    else:
        outputs = flatten_value(run_function(mod, inputs, args.entry))
    for i, array in enumerate(outputs):
        print(summarize(i, array))
    if args.output is not None:
        write_outputs(args.output, outputs)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli_main(PROG, build_arg_parser(), argv, run)


if __name__ == "__main__":
    sys.exit(main())
