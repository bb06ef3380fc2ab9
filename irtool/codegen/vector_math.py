"""float32 `exp`, `sigmoid`, `tanh` and `erf` as inline LLVM IR, for any lane count.

LLVM has no vector math library on our targets: `llvm.exp.v16f32` becomes 16 `expf` calls. These
routines are straight-line IR instead, the same instructions for every lane count, so a vector
body and its scalar remainder give bit-identical results for the same element; `llvm.fma` keeps
them identical across hosts too (it is `vfmadd` with FMA, a correctly rounded `fmaf` call
without). No fast-math flags are attached: the rounding trick below must not be reassociated.

exp(x): x = n*ln2 + r with n = round(x / ln2) (an FMA against 1.5 * 2^23 rounds to an integer
in the low mantissa bits) and |r| <= ln2/2 (ln2 in hi + lo parts); exp(r) = 1 + r + r^2 q(r)
with q a degree-4 near-minimax fit (relative error 3e-9); then 2^n is applied in two halves
(2^(n>>1) and 2^(n - (n>>1)), both normal) so results down to the subnormals round once instead
of flushing to 0. x is clamped to [-104, 89] first: beyond, exp is 0 (it is below half the
least subnormal) or overflows to inf by itself. NaN passes through every step. Inside sigmoid,
tanh and erf, where a subnormal exp changes nothing, `exp_normal` applies 2^n at once (5
instructions fewer; EfficientNet's SiLU, 1x96x112x112, 1.45x -> 1.2x onnxruntime's time, znver5).

sigmoid(x): 1 / (1 + exp(-x)), as the interpreter computes it, within 3 ulp.

tanh(x): the sign of x on tanh(|x|), which is |x| + |x|^3 P(x^2) (degree 4) below 0.625 and
1 - 2 / (exp(2|x|) + 1) above, where the subtraction no longer cancels. Both stay within 2 ulp of the rounded
exact value (docs/codegen.md gives the measured errors).

erf(x): the sign of x on erf(|x|), which is |x| P(x^2) below 1 (P: the Taylor series of
erf(z) / z, degree 11 in z^2, truncation error below 1e-10) and 1 - erfc(|x|) above, with the
registry's Chebyshev fit erfc(a) = t exp(-a^2 + Q(t)), t = 1 / (1 + a/2) (relative error below
1.2e-7, `irtool.ops.definitions.elementwise`); there erf >= 0.84, so the subtraction keeps the
digits. Within 2 ulp, like the others. ONNX models exported with `Erf` (the legacy exporter's GELU) called `erff` per element.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from irtool.codegen.types import constant, intrinsic_suffix, value_type
from irtool.ir.tir import with_lanes
from irtool.ops.definitions.elementwise import _ERFC_COEFFS as _ERFC_Q  # the reference interpreter's fit

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693145751953125            # ln 2 to 16 bits: n * hi is exact for |n| < 2^8
_LN2_LO = 1.428606765330187e-06        # ln 2 - hi, rounded to float32
_ROUNDER = 12582912.0                   # 1.5 * 2^23: x * log2e + this has round(x * log2e) in its low bits
_ROUNDER_BITS = 0x4B400000
_EXP_LOW, _EXP_HIGH = -104.0, 89.0
_NORMAL_LOW = -87.3    # exp_normal: n >= -126 (exp(-87.3) = 1.2e-38 is still normal)
# q(r) ~ (exp(r) - 1 - r) / r^2 on |r| <= ln2/2, constant term first.
_EXP_Q = (0.4999999403953552, 0.1666652113199234, 0.041668083518743515, 0.008368700742721558,
          0.0013831555843353271)
_TANH_SMALL = 0.625
# P(s) ~ (tanh(x) - x) / x^3 with s = x^2 on |x| < 0.625, constant term first.
_TANH_P = (-0.3333328068256378, 0.13331428170204163, -0.053738683462142944, 0.02063615992665291,
           -0.005702075082808733)

_ERF_SMALL = 1.0
# erf(z) / z = 2/sqrt(pi) * sum_n (-1)^n z^(2n) / (n! (2n + 1)), in s = z^2, constant term first.
_ERF_P = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(12))


class Float32Math:
    """Emits the routines for one lane count through a function emitter's `emit` (which names
    each instruction) and the module's `declare`."""

    def __init__(self, emit: Callable[[str], str], declare: Callable[[str, str], str], lanes: int) -> None:
        self.emit = emit
        self.declare = declare
        self.float_dtype = with_lanes("float32", lanes)
        self.int_dtype = with_lanes("int32", lanes)
        self.fty = value_type(self.float_dtype)
        self.ity = value_type(self.int_dtype)
        self.bty = value_type(with_lanes("bool", lanes))

    def f(self, value: float) -> str:
        return constant(self.float_dtype, value)

    def i(self, value: int) -> str:
        return constant(self.int_dtype, value)

    def call(self, base: str, *args: str) -> str:
        """An overloaded float LLVM intrinsic (`llvm.fma.v16f32`)."""
        name = f"llvm.{base}.{intrinsic_suffix(self.float_dtype)}"
        self.declare(name, f"declare {self.fty} @{name}({', '.join([self.fty] * len(args))})")
        return self.emit(f"call {self.fty} @{name}({', '.join(f'{self.fty} {a}' for a in args)})")

    def fma(self, a: str, b: str, c: str) -> str:
        return self.call("fma", a, b, c)

    def binary(self, op: str, a: str, b: str) -> str:
        return self.emit(f"{op} {self.fty} {a}, {b}")

    def select(self, cond: str, a: str, b: str) -> str:
        return self.emit(f"select {self.bty} {cond}, {self.fty} {a}, {self.fty} {b}")

    def horner(self, coefficients: tuple[float, ...], x: str) -> str:
        acc = self.f(coefficients[-1])
        for c in reversed(coefficients[:-1]):
            acc = self.fma(acc, x, self.f(c))
        return acc

    def power_of_two(self, n: str) -> str:
        """2^n as a float, for n an i32 within the normal exponents."""
        biased = self.emit(f"add {self.ity} {n}, {self.i(127)}")
        return self.emit(f"bitcast {self.ity} {self.emit(f'shl {self.ity} {biased}, {self.i(23)}')} to {self.fty}")

    def reduced(self, x: str, low: float, high: float) -> tuple[str, str]:
        """(exp(r), t) for x clamped to [low, high] = n ln2 + r: t holds n in its low bits."""
        above = self.emit(f"fcmp ogt {self.fty} {x}, {self.f(high)}")   # false for NaN: it stays
        x = self.select(above, self.f(high), x)
        below = self.emit(f"fcmp olt {self.fty} {x}, {self.f(low)}")
        x = self.select(below, self.f(low), x)
        t = self.fma(x, self.f(_LOG2E), self.f(_ROUNDER))
        n = self.binary("fsub", t, self.f(_ROUNDER))
        minus_n = self.emit(f"fneg {self.fty} {n}")
        r = self.fma(minus_n, self.f(_LN2_HI), x)
        r = self.fma(minus_n, self.f(_LN2_LO), r)
        r2 = self.binary("fmul", r, r)
        return self.binary("fadd", self.fma(r2, self.horner(_EXP_Q, r), r), self.f(1.0)), t

    def exp(self, x: str) -> str:
        p, t = self.reduced(x, _EXP_LOW, _EXP_HIGH)
        bits = self.emit(f"bitcast {self.fty} {t} to {self.ity}")
        k = self.emit(f"sub {self.ity} {bits}, {self.i(_ROUNDER_BITS)}")      # n as an integer
        half = self.emit(f"ashr {self.ity} {k}, {self.i(1)}")
        rest = self.emit(f"sub {self.ity} {k}, {half}")
        return self.binary("fmul", self.binary("fmul", p, self.power_of_two(half)), self.power_of_two(rest))

    def exp_normal(self, x: str) -> str:
        """exp(x) where subnormal and huge results do not matter (inside sigmoid, tanh, erf): x
        clamped to [_NORMAL_LOW, 89], 2^n applied at once, 5 instructions fewer than `exp`. The
        same bits as `exp` from -87.3 to 88.37; inf from there (n = 128 is the infinity's
        exponent; exp overflows from 88.72), exp(-87.3) below -87.3."""
        p, t = self.reduced(x, _NORMAL_LOW, _EXP_HIGH)
        # 2^n's bits: (n + 127) << 23. t's low 9 bits are n's (the rounder's are zeros), and the
        # shift drops the rest.
        shifted = self.emit(f"shl {self.ity} {self.emit(f'bitcast {self.fty} {t} to {self.ity}')}, {self.i(23)}")
        scale = self.emit(f"add {self.ity} {shifted}, {self.i(127 << 23)}")
        return self.binary("fmul", p, self.emit(f"bitcast {self.ity} {scale} to {self.fty}"))

    def sigmoid(self, x: str) -> str:
        """1 / (1 + exp(-x)): 0 below -88.37, where it is a subnormal below 4e-39."""
        e = self.exp_normal(self.emit(f"fneg {self.fty} {x}"))
        return self.binary("fdiv", self.f(1.0), self.binary("fadd", self.f(1.0), e))

    def tanh(self, x: str) -> str:
        ax = self.call("fabs", x)
        s = self.binary("fmul", ax, ax)
        small = self.fma(self.binary("fmul", s, ax), self.horner(_TANH_P, s), ax)
        e = self.exp_normal(self.binary("fadd", ax, ax))
        large = self.binary("fsub", self.f(1.0),
                            self.binary("fdiv", self.f(2.0), self.binary("fadd", e, self.f(1.0))))
        is_small = self.emit(f"fcmp olt {self.fty} {ax}, {self.f(_TANH_SMALL)}")
        return self.with_sign_of(x, self.select(is_small, small, large))

    def erf(self, x: str) -> str:
        ax = self.call("fabs", x)
        small = self.binary("fmul", ax, self.horner(_ERF_P, self.binary("fmul", ax, ax)))
        t = self.binary("fdiv", self.f(1.0), self.fma(ax, self.f(0.5), self.f(1.0)))
        exponent = self.fma(self.emit(f"fneg {self.fty} {ax}"), ax, self.horner(_ERFC_Q, t))
        erfc = self.binary("fmul", t, self.exp_normal(exponent))
        large = self.binary("fsub", self.f(1.0), erfc)
        is_small = self.emit(f"fcmp olt {self.fty} {ax}, {self.f(_ERF_SMALL)}")
        return self.with_sign_of(x, self.select(is_small, small, large))

    def with_sign_of(self, x: str, magnitude: str) -> str:
        """`magnitude` (not negative) with the sign bit of `x`, so -0 stays -0."""
        bits = self.emit(f"bitcast {self.fty} {magnitude} to {self.ity}")
        sign = self.emit(f"and {self.ity} {self.emit(f'bitcast {self.fty} {x} to {self.ity}')}, "
                         f"{self.i(-0x80000000)}")
        return self.emit(f"bitcast {self.ity} {self.emit(f'or {self.ity} {bits}, {sign}')} to {self.fty}")
