"""LLVM functions written as text with structured control flow: counted loops, `while` loops and
conditionals whose variables live in `alloca`s (the optimiser makes them registers). The runtime
routines of irtool/codegen/data_dependent.py are built with it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from irtool.codegen.types import element_bytes, memory_type

MEMCPY = "llvm.memcpy.p0.p0.i64"


class Routine:
    """One internal LLVM function being written: its entry block's `alloca`s, then its body."""

    def __init__(self, symbol: str, ret: str, params: list[str]) -> None:
        self.head = [f"define internal {ret} @{symbol}({', '.join(params)}) #0 {{", "entry:"]
        self.lines: list[str] = []
        self.temps = 0
        self.labels = 0

    def v(self, text: str) -> str:
        self.temps += 1
        self.lines.append(f"  %t{self.temps} = {text}")
        return f"%t{self.temps}"

    def do(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def label(self, hint: str) -> str:
        self.labels += 1
        return f"{hint}{self.labels}"

    def start(self, label: str) -> None:
        self.lines.append(f"{label}:")

    def madd(self, a: str, b: str, c: str) -> str:
        """a * b + c (an index into a row-major array)."""
        return self.v(f"add nsw i64 {self.v(f'mul nsw i64 {a}, {b}')}, {c}")

    def var(self, init: str) -> str:
        """An i64 variable (a slot in the entry block) set to `init` here."""
        self.temps += 1
        slot = f"%s{self.temps}"
        self.head.append(f"  {slot} = alloca i64, align 8")
        self.do(f"store i64 {init}, ptr {slot}, align 8")
        return slot

    def get(self, slot: str) -> str:
        return self.v(f"load i64, ptr {slot}, align 8")

    def set(self, slot: str, value: str) -> None:
        self.do(f"store i64 {value}, ptr {slot}, align 8")

    def bump(self, slot: str, by: str = "1") -> None:
        self.set(slot, self.v(f"add nsw i64 {self.get(slot)}, {by}"))

    @contextmanager
    def loop(self, bound: str, also: Callable[[str], str] | None = None) -> Iterator[str]:
        """`for (i = 0; i < bound [&& also(i)]; i++)`, yielding `i`."""
        slot = self.var("0")
        head, body, done = self.label("head"), self.label("body"), self.label("done")
        self.do(f"br label %{head}")
        self.start(head)
        i = self.get(slot)
        more = self.v(f"icmp slt i64 {i}, {bound}")
        if also is not None:
            more = self.v(f"and i1 {more}, {also(i)}")
        self.do(f"br i1 {more}, label %{body}, label %{done}")
        self.start(body)
        yield i
        self.set(slot, self.v(f"add nsw i64 {i}, 1"))
        self.do(f"br label %{head}")
        self.start(done)

    @contextmanager
    def whilst(self, cond: Callable[[], str]) -> Iterator[None]:
        """`while (cond())`."""
        head, body, done = self.label("while"), self.label("body"), self.label("done")
        self.do(f"br label %{head}")
        self.start(head)
        self.do(f"br i1 {cond()}, label %{body}, label %{done}")
        self.start(body)
        yield
        self.do(f"br label %{head}")
        self.start(done)

    @contextmanager
    def when(self, cond: str) -> Iterator[None]:
        yes, end = self.label("then"), self.label("end")
        self.do(f"br i1 {cond}, label %{yes}, label %{end}")
        self.start(yes)
        yield
        self.do(f"br label %{end}")
        self.start(end)

    def at(self, base: str, index: str, dtype: str) -> str:
        return self.v(f"getelementptr inbounds {memory_type(dtype)}, ptr {base}, i64 {index}")

    def load(self, base: str, index: str, dtype: str) -> str:
        t = memory_type(dtype)
        return self.v(f"load {t}, ptr {self.at(base, index, dtype)}, align {element_bytes(dtype)}")

    def store(self, base: str, index: str, dtype: str, value: str) -> None:
        t = memory_type(dtype)
        self.do(f"store {t} {value}, ptr {self.at(base, index, dtype)}, align {element_bytes(dtype)}")

    def copy(self, dst: str, dst_offset: str, src: str, src_offset: str, size: str) -> None:
        """memcpy of `size` bytes between byte offsets."""
        d = self.v(f"getelementptr inbounds i8, ptr {dst}, i64 {dst_offset}")
        s = self.v(f"getelementptr inbounds i8, ptr {src}, i64 {src_offset}")
        self.do(f"call void @{MEMCPY}(ptr align 1 {d}, ptr align 1 {s}, i64 {size}, i1 false)")

    def text(self) -> str:
        return "\n".join([*self.head, *self.lines, "}", ""])
