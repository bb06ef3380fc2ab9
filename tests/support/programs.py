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
