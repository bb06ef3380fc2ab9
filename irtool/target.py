"""The machine code is generated for: triple, CPU, features, optimisation level, threads.

Lowering reads it (the target's vector width picks register tiles and weight layouts) and
codegen emits for it, so it sits below both. By default the host: its CPU name and features go
both on the target machine and on every function (`"target-cpu"`/`"target-features"`), because
with neither LLVM falls back to SSE2. On a CPU with AVX-512, `"prefer-vector-width"="512"` keeps
LLVM from stopping at 256-bit vectors. llvmlite is imported inside the functions that ask LLVM
about the target, so importing this module (and lowering) does not load LLVM.

The width is LLVM's answer, not a feature-string match: `--mcpu=skylake-avx512` implies AVX-512F
without listing it, and `-avx512f` takes it away. Lowering runs inside `compiling_for(options)`
(as TVM's `with target:`), so a cross-compiling `irtool-llc --mcpu=...` tiles for that CPU, not
for the machine it runs on; outside one, the target is the host.

Options other than the host's are checked when `TargetOptions` is made (`check_target`): LLVM
only warns about an unknown CPU or feature, rejects a malformed feature list late, and aborts the
process for a CPU that cannot run the triple's code, so a child process asks it first.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache

from irtool.core.diagnostics import DiagnosticError, suggest

OPT_LEVELS = range(4)
# The compiled runtime takes the thread count as a 32-bit integer.
MAX_THREADS = 2**31 - 1


@lru_cache(maxsize=None)
def initialize() -> None:
    """LLVM's native target, once per process."""
    import llvmlite.binding as llvm
    # `llvm.initialize()` raises in llvmlite 0.50; these two are what is needed.
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


class TargetError(DiagnosticError, ValueError):
    """A target option LLVM would reject (or abort the process on); `option` is the field of
    `TargetOptions` it concerns (`triple`, `cpu`, `features`, `opt_level`, `threads`), so that a tool can
    name its flag."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class TargetOptions:
    """`cpu` is `native` (the host) or an LLVM CPU name; `triple` None is the host's; `features`
    None means the host's when the CPU is native, none otherwise. `threads` > 1 runs `parallel`
    loops on that many threads (pthreads; codegen marks a safe loop of each kernel parallel);
    1 generates serial code without any threading runtime."""

    cpu: str = "native"
    triple: str | None = None
    features: str | None = None
    opt_level: int = 3
    fast_math: bool = False
    threads: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.threads <= MAX_THREADS:
            raise TargetError("threads", f"the thread count must be from 1 to {MAX_THREADS}, got {self.threads}")
        if self.opt_level not in OPT_LEVELS:
            raise TargetError("opt_level", f"the optimisation level must be 0, 1, 2 or 3, got {self.opt_level!r}")
        if self.cpu != "native" or self.features is not None or self.triple is not None:
            check_target(*self.resolved())

    def resolved(self) -> tuple[str, str, str]:
        """(triple, cpu name, feature string)."""
        import llvmlite.binding as llvm
        initialize()
        triple = self.triple or llvm.get_process_triple()
        if self.cpu == "native":
            host = triple == llvm.get_process_triple()
            cpu = llvm.get_host_cpu_name() if host else "generic"
            features = self.features if self.features is not None else \
                (llvm.get_host_cpu_features().flatten() if host else "")
        else:
            cpu, features = self.cpu, self.features or ""
        return triple, cpu, features

    def vector_bits(self) -> int:
        """The widest float vector register the target has: 512, 256 or 128 (0 without one)."""
        return _vector_bits(*self.resolved())

    def vnni_bits(self) -> int:
        """The widest vector (512, 256, or 0 for none) at which the target has the VNNI byte dot
        product `vpdpbusd` (AVX-512 VNNI; AVX-VNNI or AVX-512 VNNI with VL at 256 bits), which
        the int8 tiles' `dot_u8s8` compiles to; without it they use `pmaddwd`."""
        return _vnni_bits(*self.resolved())

    def function_attributes(self) -> str:
        _, cpu, features = self.resolved()
        attrs = ["nounwind", f'"target-cpu"="{cpu}"']
        if features:
            attrs.append(f'"target-features"="{features}"')
        if self.vector_bits() == 512:
            attrs.append('"prefer-vector-width"="512"')
        return " ".join(attrs)


_TARGET: ContextVar[TargetOptions | None] = ContextVar("irtool_target", default=None)


@contextmanager
def compiling_for(options: TargetOptions) -> Iterator[None]:
    """Within the block, `current_target()` is `options`: the schedules lowering picks and the
    layouts `alter-layout` packs are for that target."""
    token = _TARGET.set(options)
    try:
        yield
    finally:
        _TARGET.reset(token)


def current_target() -> TargetOptions:
    """The target being compiled for (`compiling_for`), else the host."""
    return _TARGET.get() or TargetOptions()


# A 16-lane float add, legal at any width ("min-legal-vector-width" lets LLVM use 512 bits where
# the CPU has them); the registers its assembly names give the width.
_WIDTH_PROBE = """define void @probe(ptr %p) #0 {
  %v = load <16 x float>, ptr %p, align 4
  %w = fadd <16 x float> %v, %v
  store <16 x float> %w, ptr %p, align 4
  ret void
}
attributes #0 = { nounwind "min-legal-vector-width"="512" "prefer-vector-width"="512" }
"""


@lru_cache(maxsize=None)
def _vector_bits(triple: str, cpu: str, features: str) -> int:
    import llvmlite.binding as llvm
    initialize()
    if not triple.startswith(("x86_64", "i386", "i686")):
        return 128   # the register names below are x86's; other targets keep 4-lane tiles
    machine = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features)
    asm = machine.emit_assembly(llvm.parse_assembly(_WIDTH_PROBE))
    for bits, register in ((512, "%zmm"), (256, "%ymm"), (128, "%xmm")):
        if register in asm:
            return bits
    return 0


# `vpdpbusd` at one width (`bits`): LLVM aborts the process when the CPU cannot select it, so
# a CPU given by name is asked in a child process.
_VNNI_PROBE = """
import sys
import llvmlite.binding as llvm
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
triple, cpu, features, bits = sys.argv[1:5]
lanes = int(bits) // 32
vec = f"<{lanes} x i32>"
text = (f"declare {vec} @llvm.x86.avx512.vpdpbusd.{bits}({vec}, {vec}, {vec})\\n"
        f"define {vec} @f({vec} %a, {vec} %b, {vec} %c) {{\\n"
        f"  %r = call {vec} @llvm.x86.avx512.vpdpbusd.{bits}({vec} %a, {vec} %b, {vec} %c)\\n"
        f"  ret {vec} %r\\n}}\\n")
machine = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features)
sys.stdout.write("ok" if "vpdpbusd" in machine.emit_assembly(llvm.parse_assembly(text)) else "no")
"""


@lru_cache(maxsize=None)
def _vnni_bits(triple: str, cpu: str, features: str) -> int:
    import llvmlite.binding as llvm
    if not triple.startswith("x86_64"):
        return 0
    flags = set(features.split(","))
    if triple == llvm.get_process_triple() and cpu == llvm.get_host_cpu_name() and \
            flags & {"+avx512vnni", "-avx512vnni"}:
        # The host's own feature list says it (no child process for the common case).
        wide = "+avx512vnni" in flags
        if wide and _vector_bits(triple, cpu, features) == 512:
            return 512
        return 256 if "+avxvnni" in flags or (wide and "+avx512vl" in flags) else 0
    for bits in (512, 256):
        probe = subprocess.run([sys.executable, "-c", _VNNI_PROBE, triple, cpu, features, str(bits)],
                               capture_output=True, text=True, timeout=120)
        if probe.returncode == 0 and probe.stdout == "ok" and (bits == 256 or _vector_bits(triple, cpu, features) == 512):
            return bits
    return 0


# Run in a child process: LLVM prints its CPU and feature lists for the CPU name `help` (once
# per process), warns about names it does not know, and aborts the process on some valid but
# unusable combinations (a 32-bit CPU for a 64-bit triple), which the parent must survive.
_PROBE = """
import sys
import llvmlite.binding as llvm
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
triple, cpu, features = sys.argv[1:4]
target = llvm.Target.from_triple(triple)
target.create_target_machine(cpu="help")
sys.stderr.write("\\n<end of lists>\\n")
sys.stderr.flush()
machine = target.create_target_machine(cpu=cpu, features=features)
machine.emit_object(llvm.parse_assembly("define void @f() {\\n  ret void\\n}"))
"""
_LISTED = re.compile(r"^  (\S+)\s+- ", re.M)


def _names(text: str, heading: str) -> set[str]:
    """The names LLVM's help lists under `Available <heading> for this target:`."""
    _, _, rest = text.partition(f"Available {heading} for this target:")
    section = rest.split("Available ", 1)[0].split("Use +feature", 1)[0]
    return set(_LISTED.findall(section))


def _unknown(kind: str, name: str, known: set[str], triple: str, prefix: str = "") -> str:
    close = suggest(name, known)
    if close:
        hint = f"did you mean '{prefix}{close}'?"
    else:
        hint = f"`llc -m{'cpu' if kind == 'CPU' else 'attr'}=help` lists the {len(known)} LLVM knows"
    return f"unknown {kind} '{prefix}{name}' for target {triple} ({hint})"


@lru_cache(maxsize=None)
def check_target(triple: str, cpu: str, features: str) -> None:
    """Refuses (`TargetError`) a triple, CPU or feature string LLVM does not know, or a
    combination it cannot generate code for, before LLVM sees it in this process."""
    import llvmlite.binding as llvm
    initialize()
    try:
        llvm.Target.from_triple(triple)
    except RuntimeError as exc:
        raise TargetError("triple", f"unknown target triple '{triple}': {exc}") from None
    flags = features.split(",") if features else []
    for flag in flags:
        if not re.fullmatch(r"[+-][A-Za-z0-9_.-]+", flag):
            raise TargetError("features", f"malformed feature list '{features}': each comma-separated item "
                              f"is +name or -name, got '{flag}'")
    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE, triple, cpu, features], capture_output=True,
                               text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise TargetError("cpu", f"LLVM did not answer within 120 s whether it can generate code for CPU "
                          f"'{cpu}' with features '{features}' on {triple}") from None
    lists, _, after = probe.stderr.partition("<end of lists>")
    cpus, known_features = _names(lists, "CPUs"), _names(lists, "features")
    if cpus and cpu not in cpus:
        raise TargetError("cpu", _unknown("CPU", cpu, cpus, triple))
    for flag in flags:
        if known_features and flag[1:] not in known_features:
            raise TargetError("features", _unknown("feature", flag[1:], known_features, triple, flag[0]))
    if probe.returncode != 0 or "not a recognized" in after:
        lines = [line.removeprefix("LLVM ERROR: ") for line in after.splitlines() if line.strip()]
        why = lines[-1] if lines else f"status {probe.returncode}"
        raise TargetError("cpu", f"LLVM cannot generate code for CPU '{cpu}' with features '{features}' "
                          f"on {triple}: {why}")
