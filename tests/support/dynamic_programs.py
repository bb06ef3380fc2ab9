"""Programs over a dynamic batch shared by the unit and C-link tests of native dynamic shapes
(docs/native-relay.md, "Dynamic shapes"): a dynamic-batch MLP and a recurrent cell unrolled by
tail recursion over `n` steps, in one module whose `main` returns both."""

from __future__ import annotations

MLP_AND_RNN = """#[version = "0.0.5"]
def @mlp(%x: Tensor[(?, 8), float32], %w1: Tensor[(16, 8), float32], %b1: Tensor[(16), float32],
         %w2: Tensor[(4, 16), float32]) -> Tensor[(?, 4), float32] {
  %0 = nn.dense(%x, %w1, units=16);
  %1 = nn.bias_add(%0, %b1);
  %2 = nn.relu(%1);
  nn.dense(%2, %w2, units=4)
}

def @rnn(%n: int32, %h: Tensor[(?, 16), float32], %x: Tensor[(?, 8), float32], %wx: Tensor[(16, 8), float32],
         %wh: Tensor[(16, 16), float32], %b: Tensor[(16), float32]) -> Tensor[(?, 16), float32] {
  if (%n <= 0) {
    %h
  } else {
    %3 = nn.dense(%x, %wx, units=16);
    %4 = nn.dense(%h, %wh, units=16);
    %5 = nn.bias_add(add(%3, %4), %b);
    @rnn(%n - 1, tanh(%5), %x, %wx, %wh, %b)
  }
}

def @main(%x: Tensor[(?, 8), float32], %h0: Tensor[(?, 16), float32], %w1: Tensor[(16, 8), float32],
          %b1: Tensor[(16), float32], %w2: Tensor[(4, 16), float32], %wh: Tensor[(16, 16), float32],
          %n: int32) -> (Tensor[(?, 4), float32], Tensor[(?, 16), float32]) {
  (@mlp(%x, %w1, %b1, %w2), @rnn(%n, %h0, %x, %w1, %wh, %b1))
}
"""

# A transformer-style feed-forward block over (batch, sequence) rows, both `?`: dense, bias, GELU
# (through erf), a layer norm written out (reductions over the last axis) and `nn.layer_norm`, a
# residual, softmax over the last axis, and a reshape merging the two `?`s into one.
TOKENS = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, ?, 64), float32], %w1: Tensor[(64, 64), float32], %b1: Tensor[(64), float32],
          %g: Tensor[(64), float32], %beta: Tensor[(64), float32], %w2: Tensor[(16, 64), float32])
          -> (Tensor[(?, ?, 16), float32], Tensor[(?, 16), float32], Tensor[(?, ?, 64), float32]) {
  %0 = nn.dense(%x, %w1, units=64);
  %1 = nn.bias_add(%0, %b1, axis=-1);
  %2 = multiply(multiply(%1, 0.5f), add(erf(multiply(%1, 0.707107f)), 1f));
  %3 = subtract(%2, mean(%2, axis=[-1], keepdims=True));
  %4 = mean(multiply(%3, %3), axis=[-1], keepdims=True);
  %5 = add(multiply(multiply(%3, rsqrt(add(%4, 1e-05f))), %g), %beta);
  %6 = nn.relu(add(%5, %x));
  %7 = nn.softmax(nn.dense(%6, %w2, units=16), axis=-1);
  (%7, reshape(%7, newshape=[-1, 16]), nn.layer_norm(%6, %g, %beta))
}
"""

# Two inputs with two `?`s each, paired by an add (their extents must agree), and a reshape
# merging the two into one: the C-link test's program.
TWO_AXES = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, ?, 8), float32], %y: Tensor[(?, ?, 8), float32], %w: Tensor[(4, 8), float32])
          -> (Tensor[(?, ?, 4), float32], Tensor[(?, 4), float32]) {
  %0 = nn.softmax(nn.dense(add(%x, %y), %w, units=4), axis=-1);
  (%0, reshape(%0, newshape=[-1, 4]))
}
"""
