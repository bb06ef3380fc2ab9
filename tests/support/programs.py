"""Small Relay programs that several test files read (liveness and memory planning)."""

# Five steps in a line; the concatenation reads one tensor twice and the slice reads half of its input.
CHAIN = """
def @main(%x: Tensor[(64), float32]) {
  %0 = exp(%x);
  %1 = concatenate((%0, %0));
  %2 = exp(%1);
  %3 = strided_slice(%2, begin=[0], end=[64]);
  exp(%3)
}
"""


# Programs with control flow that the native tests compile (docs/native-relay.md).
LIST_TYPE = "type List[A] { Cons(A, List[A]), Nil }\n"

NATIVE_CONTROL_FLOW = {
    # A list of 50 tensors built by a tail loop, summed by (non-tail) recursion.
    "fold": LIST_TYPE + """
def @build(%n: int32, %acc: List[Tensor[(2), float32]], %x: Tensor[(2), float32]) -> List[Tensor[(2), float32]] {
  if (%n == 0) { %acc } else { @build(%n - 1, Cons(add(%x, cast(%n, dtype="float32")), %acc), %x) }
}
def @sum(%l: List[Tensor[(2), float32]]) -> Tensor[(2), float32] {
  match (%l) { Cons(%h, %t) => add(%h, @sum(%t)), Nil => zeros(shape=[2], dtype="float32") }
}
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] { @sum(@build(50, Nil, %x)) }
""",
    # A closure over a tensor, and a curried closure calling it.
    "closures": """
def @main(%x: Tensor[(3), float32]) -> (Tensor[(3), float32], Tensor[(3), float32]) {
  let %y = exp(%x);
  let %f = fn (%a: Tensor[(3), float32]) -> Tensor[(3), float32] { add(%a, %y) };
  let %g = fn (%b: Tensor[(3), float32]) -> fn (Tensor[(3), float32]) -> Tensor[(3), float32] {
    fn (%c: Tensor[(3), float32]) -> Tensor[(3), float32] { multiply(%b, %f(%c)) }
  };
  (%f(%x), %g(%x)(%y))
}
""",
    # Reading a reference, then writing it: the value read stays the old one.
    "refs": """
def @bump(%r: ref(Tensor[(2), float32])) -> Tensor[(2), float32] {
  let %v = ref_read(%r);
  let %u = ref_write(%r, add(%v, 1f));
  %v
}
def @main(%x: Tensor[(2), float32]) -> (Tensor[(2), float32], Tensor[(2), float32], Tensor[(2), float32]) {
  let %r = ref(%x);
  let %a = @bump(%r);
  let %b = @bump(%r);
  (%a, %b, ref_read(%r))
}
""",
    # One polymorphic function at three types.
    "poly": """
def @id[T](%v: T) -> T { %v }
def @main(%x: Tensor[(2), float32], %n: int32) -> (Tensor[(2), float32], int32, (int32, Tensor[(2), float32])) {
  (@id(%x), @id(%n), @id((%n, %x)))
}
""",
    # A let-bound closure calling itself in tail position: x ** n.
    "rec_closure": """
def @main(%n: int32, %x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %f = fn (%i: int32, %acc: Tensor[(2), float32]) -> Tensor[(2), float32] {
    if (%i == 0) { %acc } else { %f(%i - 1, multiply(%acc, %x)) }
  };
  %f(%n, ones(shape=[2], dtype="float32"))
}
""",
    # A closure that updates a reference it captured: x + x + 2.
    "ref_closure": """
def @main(%x: float32) -> float32 {
  let %r = ref(0f);
  let %add = fn (%v: float32) { ref_write(%r, ref_read(%r) + %v) };
  %add(%x); %add(%x); %add(2f);
  ref_read(%r)
}
""",
    # A polymorphic map over a list with a global function as the value mapped.
    "map_global": LIST_TYPE + """
def @map[A, B](%f: fn (A) -> B, %xs: List[A]) -> List[B] {
  match (%xs) { Cons(%h, %t) => Cons(%f(%h), @map(%f, %t)), Nil => Nil }
}
def @double(%v: float32) -> float32 { %v * 2f }
def @head(%l: List[float32]) -> float32 { match (%l) { Cons(%h, _) => %h, Nil => -1f } }
def @main(%a: float32, %b: float32) -> float32 { @head(@map(@double, Cons(%a, Cons(%b, Nil)))) }
""",
}
